"""Helpers of the break tests: the lab host and its plan, host actions, and the verify suite as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from testinfra.utils.ansible_runner import AnsibleRunner
from verify_expect import HostPlan, build_plan  # verify/, put on sys.path by conftest.py

REPO = Path(__file__).resolve().parents[3]
LAB_INVENTORY = REPO / "inventories" / "lab" / "hosts.yml"
# Only a hang guard: the suite's time is a figure (bench/verify_suite.py, target 60 s on an idle lab), and on a machine
# loaded by the other passes of make test one run with probes can take a few times that.
SUITE_TIMEOUT_S = 600


@dataclass(frozen=True)
class SuiteRun:
    returncode: int
    output: str
    seconds: float

    def failed(self) -> list[str]:
        """Node ids of the failed tests, from the short summary (FAILED <nodeid> - <message>)."""
        out = []
        for line in self.output.splitlines():
            if line.startswith(("FAILED ", "ERROR ")):
                out.append(line.split(" ", 1)[1].split(" - ", 1)[0])
        return out


def run_suite(*extra: str, paths: tuple[str, ...] = ("verify",)) -> SuiteRun:
    """pytest `paths` (the verify suite) against the lab inventory, in a subprocess, from the repository root."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    argv = [
        sys.executable,
        "-m",
        "pytest",
        *paths,
        "--hosts=ansible://all",
        f"--ansible-inventory={LAB_INVENTORY}",
        "-p",
        "no:cacheprovider",
        "-q",
        "-rfEs",
        *extra,
    ]
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=SUITE_TIMEOUT_S, check=False)
    return SuiteRun(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start)


class Lab:
    """The lab host and its declared plan, with the few actions the break tests need."""

    def __init__(self) -> None:
        runner = AnsibleRunner(str(LAB_INVENTORY))
        names = runner.get_hosts("sglang_router")
        if not names:
            pytest.fail(f"{LAB_INVENTORY} has no router host", pytrace=False)
        self.name = names[0]
        all_raw = {h: runner.get_variables(h) for h in runner.get_hosts("all")}
        self.plan: HostPlan = build_plan(self.name, all_raw[self.name], all_raw)
        host = runner.get_host(self.name)
        assert host is not None
        self.host: Any = host

    def sh(self, command: str) -> str:
        result = self.host.run(command)
        assert result.rc == 0, f"{command!r} on {self.name} exited {result.rc}: {result.stderr.strip()}"
        return str(result.stdout)

    def http_status(self, url: str) -> int:
        out = self.host.run(f"curl -s -o /dev/null -w '%{{http_code}}' --max-time 3 {url}")
        return int(out.stdout.strip() or 0)

    def readiness(self) -> str:
        router = self.plan.servers["router"]
        return str(self.host.run(f"curl -s --max-time 3 {router.health_url}").stdout)

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Every engine answers /health and the router reports every declared worker healthy."""
        expected = len(self.plan.workers["prefill"]) + len(self.plan.workers["decode"])
        want = f'"healthy_workers":{expected},"total_workers":{expected}'
        end = time.monotonic() + timeout
        engines = [s for r, s in self.plan.servers.items() if r != "router"]
        while time.monotonic() < end:
            if all(self.http_status(s.health_url) == 200 for s in engines) and want in self.readiness():
                return
            time.sleep(1)
        pytest.fail(f"the lab did not become ready in {timeout:.0f} s: {self.readiness()!r}", pytrace=False)

    def restart(self, role: str) -> None:
        self.sh(f"systemctl restart {self.plan.servers[role].unit}.service")

    def restart_router_when_stuck(self) -> None:
        """After an engine restart smg may wait for its next health check; a router restart re-registers at once."""
        try:
            self.wait_ready(20)
        except pytest.fail.Exception:
            self.restart("router")
            self.wait_ready()


def keep_file(lab: Lab, path: str) -> str:
    """Copy `path` aside on the host (same owner and mode); returns the copy's path."""
    saved = f"{path}.verify-breaks"
    lab.sh(f"cp -p {path} {saved}")
    return saved


def put_back(lab: Lab, path: str, saved: str) -> None:
    lab.sh(f"mv -f {saved} {path}")
