"""Fixtures for tests against the lab: systemd-nspawn hosts booted by roles/sglang_lab.

`lab` boots the lab once per session (idempotent: about 4 s when it is already up, about
70 s the first time on a machine, when debootstrap builds the rootfs) and leaves it running.
Helpers for lab tests live in labtools.py.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import testinfra.host
from labtools import LAB_GROUP, LAB_INVENTORY, run_playbook
from testinfra.utils.ansible_runner import AnsibleRunner

CONTROLLER_TOOLS = ("debootstrap", "systemd-nspawn", "nsenter", "socat", "ssh", "ssh-keygen")


def _require_controller() -> None:
    problems = []
    if os.geteuid() != 0:
        problems.append("not running as root")
    missing = [tool for tool in CONTROLLER_TOOLS if shutil.which(tool) is None]
    if missing:
        problems.append(f"missing tools: {', '.join(missing)} (make apt installs them)")
    if problems:
        pytest.fail(f"the lab cannot run here: {'; '.join(problems)}; deselect with -m 'not lab'", pytrace=False)


@pytest.fixture(scope="session")
def lab() -> Path:
    """Boot the lab hosts (playbooks/lab.yml) if needed; return the lab inventory path.

    The lab stays up after the session, as after `make lab`.
    """
    _require_controller()
    run_playbook("playbooks/lab.yml").check()
    return LAB_INVENTORY


@pytest.fixture(scope="session")
def lab_hosts(lab: Path) -> dict[str, testinfra.host.Host]:
    """testinfra hosts of inventory group sglang_lab_hosts, reached over SSH as the deploy does."""
    runner = AnsibleRunner(str(lab))
    names = runner.get_hosts(LAB_GROUP)
    assert names, f"inventory {lab} has no host in group {LAB_GROUP}"
    hosts = {}
    for name in names:
        host = runner.get_host(name)
        assert host is not None, f"testinfra cannot map the connection of {name}"
        hosts[name] = host
    return hosts
