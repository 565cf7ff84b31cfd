#!/bin/bash
# Download a requirement and all its dependencies as wheels on the controller
# (pip download), for hosts without network. DEST appears only when complete.
# Usage: download_wheelhouse.sh DEST PYTHON REQUIREMENT [PIP ARGS...]
#   e.g. PIP ARGS = --platform manylinux2014_x86_64 --python-version 3.11 --only-binary=:all:
set -euo pipefail
[[ $# -ge 3 ]] || { echo "usage: $0 DEST PYTHON REQUIREMENT [PIP ARGS...]" >&2; exit 2; }
dest=$1
python=$2
requirement=$3
shift 3
mkdir -p "$(dirname "$dest")"
# Deploys to several hosts or labs from one checkout may download at once: the others wait and use the first's.
exec 9>"$(dirname "$dest")/.download.lock"
flock 9
if [[ -d $dest ]]; then
  exit 0
fi
work=$(mktemp -d "$(dirname "$dest")/.download.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$python" -m pip download --disable-pip-version-check --quiet --dest "$work/wheels" "$@" "$requirement"
mv "$work/wheels" "$dest"
