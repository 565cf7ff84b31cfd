"""Per-session caches: one plan and one snapshot per (inventory, host), shared by every test module."""

from __future__ import annotations

from typing import Any

import pytest
from verify_expect import HostPlan, build_plan
from verify_remote import take_snapshot

_PLANS: dict[tuple[str | None, str], HostPlan] = {}
_SNAPSHOTS: dict[tuple[str | None, str], dict[str, Any]] = {}


def inventory_runner(host: Any) -> Any:
    runner = getattr(host.backend, "ansible_runner", None)
    if runner is None:
        pytest.fail(
            "the verify suite reads the declared envelope from an Ansible inventory: run it with "
            "--hosts=ansible://all --ansible-inventory=inventories/<name> (or through molecule)",
            pytrace=False,
        )
    return runner


def plan_of(runner: Any, name: str) -> HostPlan:
    key = (runner.inventory_file, name)
    if key not in _PLANS:
        all_raw = {h: runner.get_variables(h) for h in runner.get_hosts("all")}
        _PLANS[key] = build_plan(name, all_raw[name], all_raw)
    return _PLANS[key]


def snapshot_of(runner: Any, name: str) -> dict[str, Any]:
    """The host's snapshot, taken once per session (any test module of any host may ask for it)."""
    key = (runner.inventory_file, name)
    if key not in _SNAPSHOTS:
        host = runner.get_host(name)
        if host is None:
            pytest.fail(f"testinfra cannot reach {name} with its inventory connection", pytrace=False)
        _SNAPSHOTS[key] = take_snapshot(host, plan_of(runner, name))
    return _SNAPSHOTS[key]
