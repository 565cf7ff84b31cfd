"""The folder `make mutation` runs mutmut in: .cache/mutation, with each mutated source at its import path.

mutmut names a mutant after its file's path under the current folder and switches it on by the module's import
name, so the two must agree: `ansible_collections/sglang/dsv4/plugins/plugin_utils/sglang_plan.py` is the module
`ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_plan`. The run folder therefore holds each source at
its import path (SOURCES, links to the repository) beside links to the repository's top-level entries. mutmut
copies the sources and the tests into `mutants/`; this script first lays out the rest of `mutants/` by links, so
that the code and the tests, which find their files from their own paths, read the repository's files and import
the mutated copies:

- `mutants/ansible_collections` mirrors the collection by links, except the Python folders of plugins/
  (module_utils, plugin_utils, modules, action, filter, callback, lookup: mutmut's copies) and the drift exporter
  (a link to its mutated copy); `mutants/collections` and `mutants/cli` lead there;
- every other top-level entry of `mutants/` and of the run folder is a link to the repository's.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORK = REPO / ".cache" / "mutation"
MUTANTS = WORK / "mutants"
COLLECTION = Path("ansible_collections/sglang/dsv4")

# import path under WORK -> the repository's path
SOURCES: dict[Path, Path] = {
    COLLECTION / "plugins/module_utils": Path("collections") / COLLECTION / "plugins/module_utils",
    COLLECTION / "plugins/plugin_utils": Path("collections") / COLLECTION / "plugins/plugin_utils",
    COLLECTION / "plugins/modules": Path("collections") / COLLECTION / "plugins/modules",
    COLLECTION / "plugins/action": Path("collections") / COLLECTION / "plugins/action",
    COLLECTION / "plugins/filter": Path("collections") / COLLECTION / "plugins/filter",
    COLLECTION / "plugins/callback": Path("collections") / COLLECTION / "plugins/callback",
    COLLECTION / "plugins/lookup": Path("collections") / COLLECTION / "plugins/lookup",
    Path("sglang_envelope_cli"): Path("cli/sglang_envelope_cli"),
    Path("sglang_drift_export.py"): Path("collections")
    / COLLECTION
    / "roles/sglang_monitoring/files/sglang_drift_export.py",
}
# mutmut copies tests/ and pyproject.toml itself; the collection and the CLI are laid out below
OWN = {".git", "mutants"}
LAID_OUT = {"tests", "pyproject.toml", "collections", "cli"}


def link(path: Path, target: Path) -> None:
    """`path` becomes a link to `target` (an existing link is replaced; a real file or folder is an error)."""
    if path.is_symlink():
        if path.readlink() == target:
            return
        path.unlink()
    elif path.exists():
        raise SystemExit(f"{path} exists and is not a link: remove {WORK} and run make mutation again")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


def mirror(src: Path, dst: Path, redirect: dict[Path, Path | None]) -> None:
    """`dst` mirrors the folder `src` by links, except the paths in `redirect` (relative to `dst`): each leads to
    its own target, or is left to mutmut where the target is None; the folders on the way are real folders."""
    dst.mkdir(parents=True, exist_ok=True)
    for entry in sorted(src.iterdir()):
        if entry.name == "__pycache__":
            continue
        rel = Path(entry.name)
        inner = {p.relative_to(rel): t for p, t in redirect.items() if p != rel and p.is_relative_to(rel)}
        if rel in redirect:
            target = redirect[rel]
            if target is not None:
                link(dst / rel, target)
        elif inner:
            mirror(entry, dst / rel, inner)
        else:
            link(dst / rel, entry)


def build() -> None:
    listed = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mutmut"]["source_paths"]
    if sorted(listed) != sorted(str(at) for at in SOURCES):
        raise SystemExit(
            f"pyproject.toml [tool.mutmut] source_paths {listed} differ from SOURCES here: make them agree"
        )
    tops = [entry for entry in sorted(REPO.iterdir()) if entry.name not in OWN]
    for entry in tops:
        link(WORK / entry.name, entry)
        if entry.name not in LAID_OUT:
            link(MUTANTS / entry.name, entry)
    for at, source in SOURCES.items():
        link(WORK / at, REPO / source)
    in_collection = Path("collections") / COLLECTION
    redirect: dict[Path, Path | None] = {
        source.relative_to(in_collection): None if source.suffix != ".py" else MUTANTS / at
        for at, source in SOURCES.items()
        if source.is_relative_to(in_collection)
    }
    mirror(REPO / in_collection, MUTANTS / COLLECTION, redirect)
    mirror(REPO / "collections", MUTANTS / "collections", {Path("ansible_collections"): Path("../ansible_collections")})
    mirror(REPO / "cli", MUTANTS / "cli", {Path("sglang_envelope_cli"): Path("../sglang_envelope_cli")})


if __name__ == "__main__":
    build()
    sys.exit(0)
