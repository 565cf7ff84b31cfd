"""Print the wall time of each pass of `make test` (or `make test-stress`) from the stamps the recipe wrote.

The file has one line per stamp, `NAME EPOCH_SECONDS EXIT_STATUS`: `start`, `lint-sanity` and `labs-up` mark
moments; the passes (`without-lab`, `lab1`, `molecule` on lab2, then `lab2` after it, `lab3`, then `verify` once
they are done) mark their end. The tests without the lab and verify count from the recipe's start, the lab passes
and molecule from the labs' boot, and the lab2 pass from the end of molecule.
"""

from __future__ import annotations

import sys
from pathlib import Path

STARTS_WITH_THE_LABS = {"lab1", "molecule", "lab3"}
LABELS = {
    "lint-sanity": "lint and ansible-test sanity",
    "labs-up": "labs booted",
    "without-lab": "tests without the lab (2 workers)",
    "lab1": "lab1: lab tests",
    "molecule": "lab2: molecule test (boots and converges it)",
    "lab2": "then lab2: fault suite 1/2, single-host rollout",
    "lab3": "lab3: fault suite 2/2, multi-host rollout",
    "verify": "then verify on lab1, the other passes done",
}


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"


def main(path: str) -> int:
    stamps: dict[str, tuple[int, int]] = {}
    for line in Path(path).read_text().splitlines():
        name, at, rc = line.split()
        stamps[name] = (int(at), int(rc))
    if "start" not in stamps:
        print(f"{path}: no start stamp")
        return 1
    start = stamps["start"][0]
    labs_up = stamps.get("labs-up", (start, 0))[0]
    print("== wall time of each pass ==")
    for name, label in LABELS.items():
        if name not in stamps:
            continue
        at, rc = stamps[name]
        began = (
            stamps["molecule"][0]
            if name == "lab2" and "molecule" in stamps
            else labs_up
            if name in STARTS_WITH_THE_LABS
            else start
        )
        status = "" if rc == 0 else f"  (exit {rc})"
        print(f"  {label:<54} {minutes(at - began):>14}   ends at {minutes(at - start)}{status}")
    if "end" in stamps:
        print(f"  {'make test, in all':<54} {minutes(stamps['end'][0] - start):>14}")
    print("  slowest tests: each pass's log lists them ('slowest 15 durations'); .cache/test-*.log keep them")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ".cache/test-walls.txt"))
