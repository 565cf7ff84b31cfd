"""systemd units: enabled, active, and every process of the unit running as the service user."""

from __future__ import annotations

from typing import Any

import pytest
from verify_expect import SERVER_ROLES, HostPlan, Server


@pytest.mark.parametrize("role", SERVER_ROLES)
def test_unit_active(server: Server, observed: dict[str, Any]) -> None:
    unit = observed["unit"]
    state = f"{unit.get('ActiveState')}/{unit.get('SubState')}"
    assert state == "active/running", (
        f"{server.unit} is {state} (restarts: {unit.get('NRestarts')}); see journalctl -u {server.unit}"
    )
    assert int(unit.get("MainPID") or 0) > 0, f"{server.unit} has no main process"


@pytest.mark.parametrize("role", SERVER_ROLES)
def test_unit_enabled(server: Server, observed: dict[str, Any]) -> None:
    enabled = observed["unit"].get("is_enabled")
    assert enabled == "enabled", f"{server.unit} is {enabled!r}, not enabled (it would not start at boot)"


@pytest.mark.parametrize("role", SERVER_ROLES)
def test_unit_runs_as_service_user(plan: HostPlan, server: Server, observed: dict[str, Any]) -> None:
    procs = observed["processes"]
    assert procs, f"{server.unit} has no process"
    wrong = [
        f"pid {p['pid']} ({p.get('comm')}) runs as {p.get('user')}:{p.get('group')}"
        for p in procs
        if (p.get("user"), p.get("real_user"), p.get("group")) != (plan.user, plan.user, plan.group)
    ]
    assert not wrong, f"{server.unit}: expected {plan.user}:{plan.group}; " + "; ".join(wrong)
