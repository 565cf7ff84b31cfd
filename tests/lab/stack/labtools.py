"""Helpers for tests against the lab (systemd-nspawn hosts booted by roles/sglang_lab)."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
LAB_INVENTORY = REPO / "inventories" / "lab" / "hosts.yml"
LAB_GROUP = "sglang_lab_hosts"
# The suites that break or restart the whole single-host stack (tests/lab/faults, the single-host rollout test) run on
# the lab SGLANG_LAB_INVENTORY names, inventories/lab unless set: `make test` gives them a lab of their own
# (inventories/lab2, lab3) so that they run beside the other lab tests.
SINGLE_HOST_LAB = REPO / os.environ.get("SGLANG_LAB_INVENTORY", "inventories/lab/hosts.yml")

_RECAP = re.compile(
    r"^(?P<host>\S+)\s*:\s*ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
    r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)",
    re.MULTILINE,
)


@dataclass(frozen=True)
class PlaybookRun:
    """Outcome of one ansible-playbook run."""

    args: tuple[str, ...]
    returncode: int
    output: str

    def recap(self) -> dict[str, dict[str, int]]:
        """PLAY RECAP counters per host: ok, changed, unreachable, failed."""
        return {
            m["host"]: {k: int(m[k]) for k in ("ok", "changed", "unreachable", "failed")}
            for m in _RECAP.finditer(self.output)
        }

    def check(self) -> PlaybookRun:
        """Fail the test, with the end of the output, unless the run succeeded."""
        if self.returncode != 0:
            pytest.fail(
                f"ansible-playbook {' '.join(self.args)} exited {self.returncode}:\n{self.output[-4000:]}",
                pytrace=False,
            )
        return self


def run_playbook(*args: str, timeout: float = 900, env: dict[str, str] | None = None) -> PlaybookRun:
    """Run ansible-playbook from the repository root with the project's ansible.cfg."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1", **(env or {})}
    proc = subprocess.run(
        ["ansible-playbook", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return PlaybookRun(args, proc.returncode, proc.stdout + proc.stderr)


def nspawn_pids(machine: str) -> list[int]:
    """PIDs of live systemd-nspawn processes serving `machine` on this controller."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and Path(argv[0].decode()).name == "systemd-nspawn" and f"--machine={machine}".encode() in argv:
            pids.append(int(proc.name))
    return pids


def single_host_lab() -> tuple[Path, str]:
    """The inventory SINGLE_HOST_LAB and its one lab host (which runs prefill, decode and router)."""
    hosts = list(yaml.safe_load(SINGLE_HOST_LAB.read_text())["all"]["children"][LAB_GROUP]["hosts"])
    assert len(hosts) == 1, f"{SINGLE_HOST_LAB}: expected one lab host, found {hosts}"
    return SINGLE_HOST_LAB, hosts[0]
