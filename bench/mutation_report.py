"""The kill rate and the survivors of the last `make mutation` run, written to docs/mutation_summary.md.

Each mutant's result comes from mutmut's files under .cache/mutation/mutants; the tests judge every mutant. Per
folder of source_paths (plugins/module_utils, plugins/modules, plugins/action, ...) and per module it counts:
- killed: a test failed or the mutant timed out;
- survived: every unit test that reaches the function passed;
- equivalent: a survivor listed in bench/mutation_equivalent.yml with the reason no test can tell it apart;
- no tests: no unit test reaches the function;
- mypy: of the survivors and untested, those mypy refuses (`make lint` runs mypy, so they cannot land).

Two kill rates, both over every evaluated mutant (equivalents included):
- tests alone: killed / evaluated;
- with mypy: (killed + mypy) / evaluated.

A listed equivalent is matched by its function and its diff (the lines it removes and adds), not by mutmut's
number, which shifts when a function changes. An entry that matches no survivor, once every mutant of its function
is evaluated, is stale and fails the run.

`--forget-unkilled` clears the results of the survivors and untested mutants, so that the next `mutmut run`
evaluates them again with the tests as they are now (make mutation-recheck).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml
from mutation_tree import COLLECTION
from mutation_tree import SOURCES as TREE_SOURCES
from mutmut.mutation.diff_apply import get_diff_for_mutant
from mutmut.stats import status_by_exit_code
from mutmut.utils.format_utils import get_mutant_name, mangled_name_from_mutant_name

REPO = Path(__file__).resolve().parents[1]
WORK = REPO / ".cache" / "mutation"
EQUIVALENT = Path(__file__).with_name("mutation_equivalent.yml")
SUMMARY = REPO / "docs" / "mutation_summary.md"
SOURCES = [str(at) for at in TREE_SOURCES]  # under WORK, as mutmut names them
# mypy as `make lint` runs it, without the repository's mypy_path (in mutants/ that leads to the same files by a
# second path): each source is checked at its import path
MYPY = [
    sys.executable, "-m", "mypy", "--config-file=", "--python-version", "3.11", "--explicit-package-bases",
    "--ignore-missing-imports", "--cache-dir", str(WORK / "mypy_cache"), "-O", "json", *SOURCES,
]  # fmt: skip
KIND = {
    "killed": "killed",
    "timeout": "killed",
    "segfault": "killed",
    "survived": "survived",
    "no tests": "no tests",
    "not checked": "not checked",
    # what the tests did not judge: mutmut's other outcomes, and a type-check pre-filter of an older configuration
    "suspicious": "not checked",
    "skipped": "not checked",
    "check was interrupted by user": "not checked",
    "caught by type check": "not checked",
}
COLUMNS = ("killed", "survived", "equivalent", "no tests", "not checked", "mypy")
UNKILLED = ("survived", "no tests")
PREFIX = "ansible_collections.sglang.dsv4.plugins."  # shortened in the tables


@dataclass(frozen=True)
class Mutant:
    name: str
    source: Path  # relative to WORK
    status: str

    @property
    def function(self) -> str:
        return mangled_name_from_mutant_name(self.name)

    @property
    def module(self) -> str:
        return self.function.rpartition(".")[0].removeprefix(PREFIX)

    @property
    def folder(self) -> str:
        """The entry of source_paths that holds the mutant's file, the collection's path left out."""
        source = self.source.as_posix()
        at = max((s for s in SOURCES if source == s or source.startswith(s + "/")), key=len, default=source)
        return at.removeprefix(f"{COLLECTION.as_posix()}/")


@contextmanager
def in_work() -> Iterator[None]:
    cwd = Path.cwd()
    os.chdir(WORK)
    try:
        yield
    finally:
        os.chdir(cwd)


def mutants() -> list[Mutant]:
    """Every mutant mutmut generated, with its source file and status."""
    out = []
    for meta in metas():
        source = meta.relative_to(WORK / "mutants").with_suffix("")
        for name, code in json.loads(meta.read_text()).get("exit_code_by_key", {}).items():
            out.append(Mutant(name, source, status_by_exit_code[code]))
    return out


def metas() -> list[Path]:
    """mutmut's result file of each mutated source (walked without following links: mutants/ links the repository)."""
    found = []
    for source in SOURCES:
        path = WORK / "mutants" / source
        if path.is_file():
            found.append(path.with_name(path.name + ".meta"))
            continue
        for root, _, files in os.walk(path):
            found += [Path(root) / f for f in files if f.endswith(".py.meta")]
    return sorted(f for f in found if f.exists())


def changed_lines(mutant: Mutant) -> str:
    """The lines the mutant removes and adds (its diff without headers and context)."""
    with in_work():
        diff = get_diff_for_mutant(mutant.name, path=mutant.source)
    return "\n".join(line.rstrip() for line in diff.splitlines()[2:] if line[:1] in "+-")


def refused_by_mypy() -> set[str]:
    """The mutants mypy refuses: each error's line falls in one generated function of mutmut's line index."""
    proc = subprocess.run(MYPY, cwd=WORK / "mutants", capture_output=True, text=True, check=False)
    spans: dict[str, dict[str, list[int]]] = {}
    refused = set()
    for line in proc.stdout.splitlines():
        try:
            error = json.loads(line)
        except ValueError:
            continue
        if error.get("severity") != "error":
            continue
        file = str(error["file"])
        if file not in spans:
            index = WORK / "mutants" / (file + ".spans")
            spans[file] = json.loads(index.read_text())["spans"] if index.exists() else {}
        for name, (start, end) in spans[file].items():
            if start <= int(error["line"]) <= end and not name.endswith("__mutmut_orig"):
                refused.add(get_mutant_name(Path(file), name))
    return refused


def equivalents() -> list[dict[str, str]]:
    """The listed equivalent survivors: each a function, the diff's changed lines and the reason."""
    listed = yaml.safe_load(EQUIVALENT.read_text()) if EQUIVALENT.exists() else None
    return [{k: str(v).rstrip("\n") for k, v in entry.items()} for entry in listed or []]


def forget_unkilled() -> int:
    """Mark every survivor and untested mutant as not checked (mutmut's meta files); returns how many."""
    cleared = 0
    for meta in metas():
        data = json.loads(meta.read_text())
        codes = data.get("exit_code_by_key", {})
        for name, code in codes.items():
            if status_by_exit_code[code] in UNKILLED:
                codes[name] = None
                cleared += 1
        meta.write_text(json.dumps(data, indent=4))
    return cleared


def rates(counts: Counter[str]) -> tuple[str, str]:
    """(tests alone, with mypy) as percentages, '-' where nothing was evaluated."""
    evaluated = sum(counts[k] for k in ("killed", "survived", "equivalent", "no tests"))
    if not evaluated:
        return "-", "-"
    return f"{counts['killed'] / evaluated:.1%}", f"{(counts['killed'] + counts['mypy']) / evaluated:.1%}"


def table(by_module: dict[str, Counter[str]], first: str = "module") -> list[str]:
    head = [first, *COLUMNS, "tests alone", "with mypy"]
    rows = [head, ["---"] + ["---:"] * (len(head) - 1)]
    total: Counter[str] = Counter()
    for module, counts in sorted(by_module.items()):
        total.update(counts)
        rows.append([module, *(str(counts[k]) for k in COLUMNS), *rates(counts)])
    rows.append(["**all**", *(f"**{total[k]}**" for k in COLUMNS), *(f"**{r}**" for r in rates(total))])
    return ["| " + " | ".join(row) + " |" for row in rows]


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--forget-unkilled", action="store_true", help="clear the survivors' and untested results")
    args = parser.parse_args()
    if args.forget_unkilled:
        print(f"{forget_unkilled()} results of survivors and untested mutants cleared")
        return 0
    found = mutants()
    if not found:
        print("no mutant was run: make mutation first")
        return 1
    refused = refused_by_mypy()
    listed = equivalents()
    used: set[int] = set()
    by_module: dict[str, Counter[str]] = {}
    by_folder: dict[str, Counter[str]] = {}
    gaps: list[tuple[Mutant, str]] = []
    for mutant in found:
        kind = KIND[mutant.status]
        counted: Counter[str] = Counter()
        if kind in UNKILLED:
            change = changed_lines(mutant)
            hits = [i for i, e in enumerate(listed) if e["function"] == mutant.function and e["diff"] == change]
            if kind == "survived" and hits:
                kind = "equivalent"
                used.update(hits)
            else:
                gaps.append((mutant, change))
            counted["mypy"] += mutant.name in refused
        counted[kind] += 1
        by_module.setdefault(mutant.module, Counter()).update(counted)
        by_folder.setdefault(mutant.folder, Counter()).update(counted)
    # an unmatched entry is stale once every mutant of its function is evaluated; until then it waits for them
    unchecked = {m.function for m in found if KIND[m.status] == "not checked"}
    stale = [e for i, e in enumerate(listed) if i not in used and e["function"] not in unchecked]
    waiting = sum(1 for i, e in enumerate(listed) if i not in used and e["function"] in unchecked)
    dirty = git("status", "--porcelain", "--", *(str(path) for path in TREE_SOURCES.values()))
    lines = [
        "# Mutation summary",
        "",
        "Written by `make mutation` (bench/mutation_report.py); docs/mutation.md explains the columns.",
        "",
        f"- Commit: `{git('rev-parse', '--short', 'HEAD')}`" + (" (with uncommitted changes)" if dirty else ""),
        f"- Mutants: {len(found)}; judged by: `tests/unit`; equivalent entries used: {len(used)} of {len(listed)}"
        + (f" ({waiting} wait for their function's mutants to be evaluated)" if waiting else ""),
        "",
        "## Per folder",
        "",
        *table(by_folder, "folder"),
        "",
        "## Per module",
        "",
        *table(by_module),
        "",
        f"## Survivors and untested mutants not listed as equivalent ({len(gaps)})",
        "",
    ]
    for mutant, diff in gaps:
        note = ", mypy refuses it" if mutant.name in refused else ""
        lines += [f"- {mutant.status}{note}: `{mutant.name}`", "", "  ```diff", *(f"  {d}" for d in diff.splitlines())]
        lines += ["  ```", ""]
    if stale:
        lines += [f"## Stale entries of bench/mutation_equivalent.yml ({len(stale)})", ""]
        lines += [f"- `{e['function']}`: `{e['diff'].splitlines()}`" for e in stale]
    SUMMARY.write_text("\n".join(lines).rstrip("\n") + "\n")
    print("\n".join(table(by_folder, "folder")))
    print(f"\n{len(gaps)} survivors or untested mutants not listed as equivalent: {SUMMARY.relative_to(REPO)}")
    # mutants/ links the repository, so a mutant that turns a path around can write into it: say what is new there
    status = git("status", "--porcelain", "--untracked-files=all").splitlines()
    strays = [line[3:] for line in status if line.startswith("??") and line[3:] != str(SUMMARY.relative_to(REPO))]
    if strays:
        print(f"files the work tree did not track before (a mutant may have written them): {', '.join(strays)}")
    if stale:
        print(f"{len(stale)} stale entries in {EQUIVALENT.name} (they match no survivor): remove them", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
