"""The kill rate and the survivors of the last `make mutation` run (mutmut's results under mutants/).

Counts per module: killed (a test failed, or the mutant timed out), survived (every covering test passed), no
tests (no fast unit test runs that function). The kill rate is killed / (killed + survived + no tests) over the
mutants that were run; mutants left unchecked (outside MUTATE) are not counted.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from mutmut.__main__ import status_by_exit_code

REPO = Path(__file__).resolve().parents[1]
DETECTED = {"killed", "timeout", "caught by type check", "segfault"}


def results(root: Path) -> dict[str, str]:
    """{mutant name: status} for every mutant mutmut ran."""
    out = {}
    for meta in sorted(root.rglob("*.py.meta")):
        for name, code in json.loads(meta.read_text()).get("exit_code_by_key", {}).items():
            status = status_by_exit_code[code]
            if status != "not checked":
                out[name] = status
    return out


def main() -> int:
    ran = results(REPO / "mutants")
    if not ran:
        print("no mutant was run: make mutation first")
        return 1
    by_module: dict[str, Counter[str]] = {}
    for name, status in ran.items():
        module = name.split(".x_")[0].split(".xǁ")[0]
        by_module.setdefault(module, Counter())["killed" if status in DETECTED else status] += 1
    total: Counter[str] = Counter()
    print(f"{'module':34} {'killed':>7} {'survived':>9} {'no tests':>9} {'kill rate':>10}")
    for module, counts in sorted(by_module.items()):
        total.update(counts)
        n = counts["killed"] + counts["survived"] + counts["no tests"]
        print(f"{module:34} {counts['killed']:7} {counts['survived']:9} {counts['no tests']:9} "
              f"{counts['killed'] / n:10.1%}")  # fmt: skip
    n = total["killed"] + total["survived"] + total["no tests"]
    print(f"{'all':34} {total['killed']:7} {total['survived']:9} {total['no tests']:9} {total['killed'] / n:10.1%}")
    print("\nsurvivors (mutmut show NAME for the diff):")
    for name, status in sorted(ran.items()):
        if status not in DETECTED:
            print(f"  {status:9} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
