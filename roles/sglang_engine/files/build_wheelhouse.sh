#!/bin/bash
# Build the wheelhouse of one release on the controller: the project wheel (with
# its extras) and every dependency, from a clean copy of the given sources, so
# nothing is written into the checkout. DEST appears only when complete.
# Usage: build_wheelhouse.sh PROJECT_DIR DEST PYTHON EXTRAS PATH...
set -euo pipefail
[[ $# -ge 5 ]] || { echo "usage: $0 PROJECT_DIR DEST PYTHON EXTRAS PATH..." >&2; exit 2; }
project=$1
dest=$2
python=$3
extras=$4
shift 4
mkdir -p "$(dirname "$dest")"
# Two deploys from one checkout (two labs) may build the same release at once: the second waits and uses the first's.
exec 9>"$(dirname "$dest")/.build.lock"
flock 9
if [[ -d $dest ]]; then
  exit 0
fi
work=$(mktemp -d "$(dirname "$dest")/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir "$work/src"
tar -C "$project" --exclude=__pycache__ --exclude='*.pyc' --exclude='*.egg-info' -cf - "$@" | tar -C "$work/src" -xf -
spec=$work/src
if [[ -n $extras ]]; then
  spec="${spec}[${extras}]"
fi
# A fixed SOURCE_DATE_EPOCH makes the project wheel byte-identical for identical sources.
SOURCE_DATE_EPOCH=315532800 "$python" -m pip wheel --disable-pip-version-check --quiet \
  --wheel-dir "$work/wheels" "$spec"
mv "$work/wheels" "$dest"
