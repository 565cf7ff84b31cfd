"""Time the verify suite against the deployed lab, probes included, and print the figures beside its target.

    .venv/bin/python bench/verify_suite.py [--repeat 3] [--inventory inventories/lab/hosts.yml]

Target: a whole run within 60 s on the lab, so that operators run it after every change. Prints figures only;
tests/lab/verify_breaks checks that the suite passes on the intact lab and fails on each break.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_S = 60.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs (default 3); the median is shown")
    parser.add_argument("--inventory", default="inventories/lab/hosts.yml")
    args = parser.parse_args()
    argv = [sys.executable, "-m", "pytest", "verify", "--hosts=ansible://all",
            f"--ansible-inventory={args.inventory}", "-q", "-p", "no:cacheprovider"]  # fmt: skip
    samples = []
    for i in range(args.repeat):
        start = time.monotonic()
        run = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
        samples.append(time.monotonic() - start)
        last = (run.stdout.strip().splitlines() or ["(no output)"])[-1]
        print(f"run {i + 1}: {samples[-1]:.1f} s, exit {run.returncode}: {last}")
    print(f"verify suite: median {statistics.median(samples):.1f} s over {len(samples)} runs (target {TARGET_S:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
