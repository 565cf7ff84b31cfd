"""Fixtures of the inventory-driven verify suite.

    pytest verify --hosts=ansible://all --ansible-inventory=inventories/<name> [--probes | --no-probes]
        [--recall-probe]

The declared side comes from the inventory the hosts come from (testinfra's ansible backend, the same one
molecule's testinfra verifier passes), layered over the role defaults (verify_expect.py). The observed side
comes from one program run on each host (verify_remote.py). Tests are parametrized by server role
(`role`) and skip the roles a host does not serve. README.md says what each check covers.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from verify_expect import REPO, HostPlan, Server
from verify_session import inventory_runner, plan_of, snapshot_of


def pytest_configure(config: pytest.Config) -> None:
    # ansible-inventory (called by testinfra's ansible backend) comes from this interpreter's venv and reads the
    # project's ansible.cfg from any cwd.
    venv_bin = str(Path(sys.executable).parent)
    if venv_bin not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join([venv_bin, os.environ.get("PATH", "")])
    os.environ.setdefault("ANSIBLE_CONFIG", str(REPO / "ansible.cfg"))


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sglang verify")
    group.addoption(
        "--probes",
        action="store_true",
        default=None,
        help="send the envelope probes through the router (default: the inventory's sglang_verify_probes)",
    )
    group.addoption("--no-probes", action="store_false", dest="probes", help="never send the envelope probes")
    group.addoption(
        "--recall-probe",
        action="store_true",
        default=None,
        help="send the long-context recall probe through the router (default: sglang_verify_recall_probe, off)",
    )


@pytest.fixture(scope="module")
def runner(host: Any) -> Any:
    return inventory_runner(host)


@pytest.fixture(scope="module")
def plan(host: Any, runner: Any) -> HostPlan:
    return plan_of(runner, host.backend.host)


@pytest.fixture(scope="module")
def snapshot(host: Any, runner: Any) -> dict[str, Any]:
    return snapshot_of(runner, host.backend.host)


@pytest.fixture
def server(plan: HostPlan, role: str) -> Server:
    """The server of `role` (tests parametrize `role`); skipped on hosts that do not serve it."""
    if role not in plan.servers:
        pytest.skip(f"{plan.name} does not serve {role} (not in group sglang_{role})")
    return plan.servers[role]


@pytest.fixture
def observed(snapshot: dict[str, Any], server: Server) -> dict[str, Any]:
    """What the snapshot saw of this server."""
    seen: dict[str, Any] = snapshot["servers"][server.role]
    return seen
