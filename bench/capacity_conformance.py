"""Print the capacity model beside SGLang 0.5.23's own pool sizing, cell by cell, with the deviation.

Run: .venv/bin/python bench/capacity_conformance.py   (needs the parser venv: make parser-venv)
The same grid as tests/component/conformance, which asserts agreement within 0.5 % on tokens and exact running requests.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "component" / "conformance"))

from pool_grid import FRACTIONS, budget, compare, grid, ours, sglang


def main() -> None:
    cells = grid()
    budgets = [[budget(cell, fraction) for fraction in FRACTIONS] for cell in cells]
    start = time.perf_counter()
    results = sglang(cells, budgets)
    elapsed = time.perf_counter() - start
    header = f"{'cell':<92} {'mfs':>4} {'model tokens':>13} {'SGLang tokens':>13} {'dev':>7} {'mrr':>9} verdict"
    print(header)
    print("-" * len(header))
    worst, failures = 0.0, 0
    for cell, cell_budgets, cell_results in zip(cells, budgets, results, strict=True):
        for fraction, available, theirs in zip(FRACTIONS, cell_budgets, cell_results, strict=True):
            row = ours(cell, available)
            problems = compare(row, theirs)
            failures += bool(problems)
            if "error" in theirs:
                print(f"{cell.name():<92} {fraction:>4} {row['max_total_num_tokens']:>13,} {'refused':>13}")
                continue
            want = theirs["max_total_num_tokens"]
            deviation = (row["max_total_num_tokens"] - want) / want
            worst = max(worst, abs(deviation))
            running = f"{row['max_running_requests']}/{theirs['max_running_requests']}"
            verdict = "; ".join(problems) or "ok"
            print(
                f"{cell.name():<92} {fraction:>4} {row['max_total_num_tokens']:>13,} {want:>13,} "
                f"{deviation:>+7.3%} {running:>9} {verdict}"
            )
    rows = len(cells) * len(FRACTIONS)
    print(f"\ncells={len(cells)} rows={rows} disagreeing={failures} worst_token_deviation={worst:.4%}")
    print(f"SGLang sizing on CPU (imports included): {elapsed:.1f} s")


if __name__ == "__main__":
    main()
