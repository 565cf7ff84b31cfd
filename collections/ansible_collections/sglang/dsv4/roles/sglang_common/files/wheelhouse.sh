#!/usr/bin/env bash
# Make a wheelhouse on the controller, for hosts without network. DEST appears
# only when complete; deploys that want the same DEST at once (several hosts or
# labs from one checkout) wait for the first and use what it made.
# Usage: wheelhouse.sh build DEST PYTHON PROJECT_DIR EXTRAS PATH...
#          the project wheel (with its extras) and every dependency, from a
#          clean copy of PATH... under PROJECT_DIR (nothing is written there)
#        wheelhouse.sh download DEST PYTHON REQUIREMENT [PIP ARGS...]
#          a requirement and all its dependencies (pip download), e.g. PIP ARGS =
#          --platform manylinux2014_x86_64 --python-version 3.11 --only-binary=:all:
set -euo pipefail
usage() {
  echo "usage: $0 build DEST PYTHON PROJECT_DIR EXTRAS PATH... | download DEST PYTHON REQUIREMENT [PIP ARGS...]" >&2
  exit 2
}
[[ $# -ge 4 ]] || usage
mode=$1
dest=$2
python=$3
shift 3
mkdir -p "$(dirname "$dest")"
exec 9>"$(dirname "$dest")/.wheelhouse.lock"
flock 9
if [[ -d $dest ]]; then
  exit 0
fi
work=$(mktemp -d "$(dirname "$dest")/.wheelhouse.XXXXXX")
trap 'rm -rf "$work"' EXIT
case $mode in
  build)
    [[ $# -ge 3 ]] || usage
    project=$1
    extras=$2
    shift 2
    mkdir "$work/src"
    tar -C "$project" --exclude=__pycache__ --exclude='*.pyc' --exclude='*.egg-info' -cf - "$@" | tar -C "$work/src" -xf -
    spec=$work/src
    if [[ -n $extras ]]; then
      spec="${spec}[${extras}]"
    fi
    # A fixed SOURCE_DATE_EPOCH makes the project wheel byte-identical for identical sources.
    SOURCE_DATE_EPOCH=315532800 "$python" -m pip wheel --disable-pip-version-check --quiet \
      --wheel-dir "$work/wheels" "$spec"
    ;;
  download)
    requirement=$1
    shift
    "$python" -m pip download --disable-pip-version-check --quiet --dest "$work/wheels" "$@" "$requirement"
    ;;
  *)
    usage
    ;;
esac
mv "$work/wheels" "$dest"
