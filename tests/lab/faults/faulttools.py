"""Helpers of the fault-injection suite: commands on the lab host, playbook runs that are interrupted at a phase of a
server's deploy, the three checks (serving, reports, recovery) and the table of outcomes."""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.stack.labtools import single_host_lab

REPO = Path(__file__).resolve().parents[3]
INVENTORY, HOST = single_host_lab()
KEY = "/var/lib/sglang-lab/id_ed25519"
SERVERS = {"prefill": 30000, "decode": 30001, "router": 8000}
UNITS = {role: f"sglang-dsv4-{role}" for role in SERVERS}
FILES = ("/opt/sglang/bin", "/etc/sglang", "/etc/systemd/system")
ENV = {
    "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_INVENTORY": str(INVENTORY), "ANSIBLE_NOCOLOR": "1",
    "ANSIBLE_FORCE_COLOR": "0",
}  # fmt: skip
RECAP = re.compile(r"^(?P<host>\S+)\s*:\s*ok=\d+\s+changed=(?P<changed>\d+)\s+unreachable=\d+\s+failed=(?P<failed>\d+)",
                   re.MULTILINE)  # fmt: skip


def sh(command: str, timeout: float = 60, check: bool = True) -> str:
    """Run a shell command on the lab host over ssh (through its network namespace, as the deploy does)."""
    argv = [
        "ssh", "-i", KEY, "-o", f"ProxyCommand=nsenter --net=/run/netns/{HOST} socat - TCP:127.0.0.1:22",
        "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "IdentitiesOnly=yes",
        "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", f"root@{HOST}", command,
    ]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"on {HOST}: {command}: exit {proc.returncode}: {proc.stdout}{proc.stderr}")
    return proc.stdout


@dataclass
class Run:
    args: tuple[str, ...]
    returncode: int
    output: str
    seconds: float
    interrupted_at: str | None = None

    def changed(self) -> int:
        m = {h["host"]: h for h in RECAP.finditer(self.output)}
        assert HOST in m, f"no recap for {HOST}:\n{self.output[-3000:]}"
        return int(m[HOST]["changed"])

    def tail(self) -> str:
        return self.output[-4000:]


def playbook(
    *args: str,
    stop_when: Callable[[str], bool] | None = None,
    fault: Callable[[subprocess.Popen[str]], None] | None = None,
    timeout: float = 420,
    env: dict[str, str] | None = None,
) -> Run:
    """ansible-playbook from the repository root. As soon as an output line satisfies `stop_when`, `fault` runs
    (default: SIGINT to the controller, then SIGKILL to its whole process group 2 s later, an operator's Ctrl-C
    and a kill); the run is then read to its end."""
    start = time.monotonic()
    if args[:1] == ("site.yml",):
        # The faults concern the servers' deploy; the monitoring play (its own lab test) is left out of these runs.
        args = (*args, "-e", "sglang_monitoring_enabled=false")
    proc = subprocess.Popen(
        ["ansible-playbook", *args], cwd=REPO, env={**os.environ, **ENV, **(env or {})}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None
    lines: list[str] = []
    hit: str | None = None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = start + timeout
    while time.monotonic() < deadline:
        if not sel.select(timeout=1):
            if proc.poll() is not None:
                break
            continue
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if stop_when is not None and hit is None and stop_when(line):
            hit = line.strip()
            (fault or interrupt)(proc)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    rest = proc.stdout.read() or ""
    return Run(tuple(args), proc.returncode, "".join(lines) + rest, time.monotonic() - start, hit)


def interrupt(proc: subprocess.Popen[str]) -> None:
    """SIGINT to the controller, SIGKILL to its process group 2 s later."""
    proc.send_signal(signal.SIGINT)
    time.sleep(2)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)


def after(task: str, server: str, then: str = r"^(ok|changed): \[") -> Callable[[str], bool]:
    """A stop condition: the result line of the first task matching `task` once `server`'s deploy began."""
    state = {"server": False, "task": False}

    def match(line: str) -> bool:
        if line.startswith("TASK [") and f"of {UNITS[server]}]" in line:
            state["server"] = True
        if state["server"] and line.startswith(("TASK [", "RUNNING HANDLER [")) and re.search(task, line):
            state["task"] = True
            return False
        return state["task"] and re.search(then, line) is not None

    return match


def health(port: int) -> int:
    out = sh(f"curl -s -o /dev/null -w '%{{http_code}}' --max-time 3 http://127.0.0.1:{port}/health", check=False)
    return int(out.strip() or 0)


def wait_serving(timeout: float = 60) -> dict[str, int]:
    """Every server's /health code, waiting up to `timeout` for all of them to answer 200 (a unit that systemd is
    restarting, or that the interrupted run restarted, comes up by itself)."""
    deadline = time.monotonic() + timeout
    codes: dict[str, int] = {}
    for _ in range(int(timeout) + 1):
        codes = {role: health(port) for role, port in SERVERS.items()}
        if set(codes.values()) == {200} or time.monotonic() > deadline:
            break
        time.sleep(2)
    return codes


def backups() -> list[str]:
    """Backup copies (<file>.<pid>.<date>~) left next to the servers' files."""
    return sorted(sh(f"find {' '.join(FILES)} -maxdepth 1 -name '*~'", check=False).split())


def facts() -> dict[str, Any]:
    return dict(json.loads(sh("cat /etc/ansible/facts.d/sglang.fact")))


def metadata() -> dict[str, str]:
    """owner:group mode of every server's script, env file and unit."""
    paths = [p for role in SERVERS for p in (f"/opt/sglang/bin/serve_dsv4_{role}.sh", f"/etc/sglang/dsv4-{role}.env",
                                               f"/etc/systemd/system/{UNITS[role]}.service")]  # fmt: skip
    out = sh("stat -c '%n %U:%G %a' " + " ".join(paths))
    return {line.split()[0]: " ".join(line.split()[1:]) for line in out.splitlines()}


@dataclass
class Outcome:
    fault: str
    serving: str = "-"
    reports: str = "-"
    recovery: str = "-"
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


OUTCOMES: list[Outcome] = []
