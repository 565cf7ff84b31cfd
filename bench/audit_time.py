"""Time the audit against the Ansible floor on the same lab host, and print where the audit's time goes.

    .venv/bin/python bench/audit_time.py [--repeat 5] [--top 8]

The floor is `ansible <host> -m ping` (start ansible, reach the host over SSH, run one module there); the audit is
`ansible-playbook audit.yml --check`. Each is run --repeat times, a ping before each audit; the medians, the median of
each audit's ratio to the ping before it, and the ratio of the medians are printed, then the
slowest tasks of the median audit run (the ansible.builtin.junit callback). Needs the lab (make lab). Prints figures
only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from converge import BIN, HOST, REPO, Result, run


def ping() -> float:
    start = time.monotonic()
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    proc = subprocess.run([str(BIN / "ansible"), HOST, "-m", "ansible.builtin.ping"], cwd=REPO, capture_output=True,
                          text=True, check=False, env=env)  # fmt: skip
    if proc.returncode != 0:
        sys.exit(f"ansible {HOST} -m ping failed (is the lab up? make lab)\n{proc.stdout}{proc.stderr}")
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--top", type=int, default=8)
    args = parser.parse_args()
    run("warm-up", "--check", playbook="audit.yml")  # the estimator's cache and the SSH connection
    # Interleaved, so that a ping and the audit after it see the same machine; the ratio is the median of the pairs'.
    floors: list[float] = []
    runs: list[Result] = []
    for _ in range(args.repeat):
        floors.append(ping())
        runs.append(run("audit", "--check", playbook="audit.yml"))
    ratios = sorted(a.seconds / f for a, f in zip(runs, floors, strict=True))
    audits = sorted(runs, key=lambda r: r.seconds)
    floor, median = statistics.median(floors), audits[len(audits) // 2]
    load = os.getloadavg()[0]
    print(f"audit.yml --check on the lab ({HOST}); {args.repeat} runs each; load {load:.1f}, {os.cpu_count()} CPUs")
    print(f"ansible ping (floor)   median {floor:5.2f} s   (min {min(floors):.2f}, max {max(floors):.2f})")
    seconds = [a.seconds for a in audits]
    print(f"audit                  median {median.seconds:5.2f} s   (min {min(seconds):.2f}, max {max(seconds):.2f})")
    print(
        f"ratio                  {statistics.median(ratios):.2f} x the floor (median of each run against the ping "
        f"before it; {min(ratios):.2f}-{max(ratios):.2f}); {median.seconds / floor:.2f} x as medians"
    )
    print(f"\nslowest tasks of the median audit (sum of all tasks {sum(t for t, _ in median.tasks):.2f} s):")
    for took, name in median.tasks[: args.top]:
        print(f"  {took:6.2f}  {name[:110]}")


if __name__ == "__main__":
    main()
