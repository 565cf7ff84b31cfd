"""The kill rate and the survivors of the last `make mutation` run (mutmut's results under mutants/).

Counts per module: killed (a test failed, the mutant timed out, or mypy refuses it: `make lint` runs mypy, so
such a mutant cannot land), survived (every covering test passed), no tests (no fast unit test runs that
function). The kill rate is killed / (killed + survived + equivalent + no tests) over the mutants that were run;
mutants left unchecked are counted apart. Survivors listed in bench/mutation_equivalent.yml, each with the
reason no test can tell it from the original, are marked equivalent; every other survivor is a gap, printed by
name.

`--forget-unkilled` clears the results of the survivors and untested mutants, so that the next `mutmut run`
evaluates them again with the tests as they are now (make mutation-recheck).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import yaml
from mutmut.__main__ import status_by_exit_code

REPO = Path(__file__).resolve().parents[1]
EQUIVALENT = Path(__file__).with_name("mutation_equivalent.yml")
DETECTED = {"killed", "timeout", "caught by type check", "segfault"}
UNKILLED = ("survived", "no tests")


def results(root: Path) -> dict[str, str]:
    """{mutant name: status} for every mutant mutmut generated."""
    out = {}
    for meta in sorted(root.rglob("*.py.meta")):
        for name, code in json.loads(meta.read_text()).get("exit_code_by_key", {}).items():
            out[name] = status_by_exit_code[code]
    return out


def forget_unkilled(root: Path) -> int:
    """Mark every survivor and untested mutant as not checked (mutmut's meta files); returns how many."""
    cleared = 0
    for meta in sorted(root.rglob("*.py.meta")):
        data = json.loads(meta.read_text())
        codes = data.get("exit_code_by_key", {})
        for name, code in codes.items():
            if status_by_exit_code[code] in UNKILLED:
                codes[name] = None
                cleared += 1
        meta.write_text(json.dumps(data, indent=4))
    return cleared


def module_of(name: str) -> str:
    return name.split(".x_")[0].split(".xǁ")[0]


def equivalents() -> dict[str, str]:
    """{mutant name: reason} of the survivors judged equivalent."""
    listed = yaml.safe_load(EQUIVALENT.read_text()) if EQUIVALENT.exists() else None
    return {str(k): str(v) for k, v in (listed or {}).items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--forget-unkilled", action="store_true", help="clear the survivors' and untested results")
    args = parser.parse_args()
    if args.forget_unkilled:
        print(f"{forget_unkilled(REPO / 'mutants')} results of survivors and untested mutants cleared")
        return 0
    ran = results(REPO / "mutants")
    if not ran:
        print("no mutant was run: make mutation first")
        return 1
    same = equivalents()
    by_module: dict[str, Counter[str]] = {}
    for name, status in ran.items():
        kind = "killed" if status in DETECTED else status
        if kind == "survived" and name in same:
            kind = "equivalent"
        by_module.setdefault(module_of(name), Counter())[kind] += 1
    total: Counter[str] = Counter()
    print(
        f"{'module':34} {'killed':>7} {'survived':>9} {'equiv.':>7} {'no tests':>9} {'unchecked':>10} {'kill rate':>10}"
    )
    for module, counts in sorted(by_module.items()):
        total.update(counts)
        print(_line(module, counts))
    print(_line("all", total))
    gaps = sorted(n for n, s in ran.items() if s in UNKILLED and n not in same)
    stale = sorted(n for n in same if ran.get(n) != "survived")
    print(f"\n{len(gaps)} survivors or untested mutants not listed as equivalent (mutmut show NAME for the diff):")
    for name in gaps:
        print(f"  {ran[name]:9} {name}")
    if stale:
        print(f"\n{len(stale)} entries of {EQUIVALENT.name} that are no longer survivors (remove them):")
        for name in stale:
            print(f"  {ran.get(name, 'absent'):9} {name}")
    return 0


def _line(module: str, counts: Counter[str]) -> str:
    run = sum(counts[k] for k in ("killed", "equivalent", *UNKILLED))
    rate = f"{counts['killed'] / run:10.1%}" if run else f"{'-':>10}"
    return (
        f"{module:34} {counts['killed']:7} {counts['survived']:9} {counts['equivalent']:7} {counts['no tests']:9} "
        f"{counts['not checked']:10} {rate}"
    )


if __name__ == "__main__":
    sys.exit(main())
