"""Time a full converge of the lab and an idempotent re-run of site.yml, and print the figures.

    .venv/bin/python bench/converge.py [--fresh] [--cold-cache] [--top N]

--fresh       first stop and remove everything the deploy put on the lab host (units, scripts, env files,
              releases, smg venv, facts), so the first run is a converge from a bare host;
--cold-cache  also remove the controller's wheelhouses (.cache/wheelhouse), so the first run builds and
              downloads every wheel.
The re-runs pin the release the first run installed (sglang_engine_release_id), so edits of the sources
during the benchmark do not count as changes. Needs the lab (make lab / playbooks/lab.yml).
Per-task times come from the ansible.builtin.junit callback.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
HOST = "lab1"
RECAP = re.compile(r"^(?P<host>\S+)\s*:\s*ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+.*failed=(?P<failed>\d+)", re.M)
WIPE = (
    "systemctl stop sglang-dsv4-router sglang-dsv4-decode sglang-dsv4-prefill 2>/dev/null; "
    "systemctl disable sglang-dsv4-router sglang-dsv4-decode sglang-dsv4-prefill 2>/dev/null; "
    "rm -rf /etc/systemd/system/sglang-dsv4-*.service* /opt/sglang /opt/smg /etc/sglang "
    "/etc/ansible/facts.d/sglang.fact /models/DeepSeek-V4-Flash; systemctl daemon-reload"
)


@dataclass(frozen=True)
class Result:
    label: str
    seconds: float
    changed: int
    ok: int
    tasks: list[tuple[float, str]]


def _env(junit_dir: str) -> dict[str, str]:
    return {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_CALLBACKS_ENABLED": "ansible.builtin.junit,sglang.dsv4.preload",
        "JUNIT_OUTPUT_DIR": junit_dir,
        "JUNIT_TASK_CLASS": "yes",
    }


def run(label: str, *args: str, playbook: str = "site.yml") -> Result:
    with tempfile.TemporaryDirectory() as junit_dir:
        start = time.monotonic()
        proc = subprocess.run(
            [str(BIN / "ansible-playbook"), playbook, *args],
            cwd=REPO,
            env=_env(junit_dir),
            capture_output=True,
            text=True,
            check=False,
        )
        seconds = time.monotonic() - start
        if proc.returncode != 0:
            sys.exit(f"{label}: ansible-playbook exited {proc.returncode}\n{(proc.stdout + proc.stderr)[-4000:]}")
        tasks = [
            (float(case.get("time", 0)), str(case.get("name")))
            for report in Path(junit_dir).glob("*.xml")
            for case in ET.parse(report).getroot().iter("testcase")
        ]
    recap = {m["host"]: m for m in RECAP.finditer(proc.stdout)}
    host = recap[HOST]
    return Result(label, seconds, int(host["changed"]), int(host["ok"]), sorted(tasks, reverse=True))


def per_play(tasks: list[tuple[float, str]]) -> dict[str, tuple[int, float]]:
    """Task results and their seconds per play (the junit callback names a task "[host] play: task")."""
    out: dict[str, tuple[int, float]] = {}
    for seconds, name in tasks:
        play = name.split("] ", 1)[-1].split(":", 1)[0]
        count, total = out.get(play, (0, 0.0))
        out[play] = (count + 1, total + seconds)
    return out


def on_lab(command: str) -> str:
    proc = subprocess.run(
        [str(BIN / "ansible"), HOST, "-m", "ansible.builtin.shell", "-a", command],
        cwd=REPO,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")},
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        sys.exit(f"{HOST}: {command!r} failed (is the lab up? make lab)\n{proc.stdout}{proc.stderr}")
    return proc.stdout.split(">>", 1)[-1].strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fresh", action="store_true", help="wipe the deployed stack from the lab host first")
    parser.add_argument("--cold-cache", action="store_true", help="remove the controller wheelhouses first")
    parser.add_argument("--reruns", type=int, default=2, help="idempotent re-runs to time (default 2)")
    parser.add_argument("--top", type=int, default=8, help="slowest tasks to list per run (default 8)")
    opts = parser.parse_args()

    if opts.cold_cache:
        shutil.rmtree(REPO / ".cache" / "wheelhouse", ignore_errors=True)
    if opts.fresh:
        on_lab(WIPE)

    results = [run("converge" + (" (fresh host)" if opts.fresh else ""))]
    facts = json.loads(on_lab("cat /etc/ansible/facts.d/sglang.fact"))
    release = facts["prefill"]["release"]
    for i in range(opts.reruns):
        results.append(run(f"re-run {i + 1}", "-e", f"sglang_engine_release_id={release}"))
    results.append(run("check --diff", "-e", f"sglang_engine_release_id={release}", "--check", "--diff"))

    load = os.getloadavg()[0]
    print(f"site.yml on the lab ({HOST}); release {release}; controller load average {load:.1f}, {os.cpu_count()} CPUs")
    print(f"{'run':<24}{'wall s':>9}{'tasks ok':>10}{'changed':>9}")
    for r in results:
        print(f"{r.label:<24}{r.seconds:>9.1f}{r.ok:>10}{r.changed:>9}")
    for r in results[1:]:
        print(f"\nper play, {r.label} (task results, seconds):")
        for play, (count, seconds) in per_play(r.tasks).items():
            print(f"  {count:4d} {seconds:7.2f}  {play}")
    for r in results:
        print(f"\nslowest tasks, {r.label}:")
        for seconds, name in r.tasks[: opts.top]:
            print(f"  {seconds:7.2f}  {name[:110]}")
    if any(r.changed for r in results[1:]):
        sys.exit("a re-run reported changes: the deploy is not idempotent")


if __name__ == "__main__":
    main()
