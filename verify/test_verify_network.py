"""Each server listens on exactly its declared addresses and ports (TCP listeners of the unit's processes)."""

from __future__ import annotations

import fnmatch
import ipaddress
from typing import Any

import pytest
from verify_expect import SERVER_ROLES, HostPlan, Server


def _norm(address: str) -> str:
    try:
        return str(ipaddress.ip_address(address.strip("[]")))
    except ValueError:
        return address


def _matches(declared: str, seen: str, resolved: dict[str, list[str]]) -> bool:
    if declared == "*":
        return True
    candidates = {_norm(a) for a in resolved.get(declared, [])} or {_norm(declared)}
    return _norm(seen) in candidates


@pytest.mark.parametrize("role", SERVER_ROLES)
def test_listeners(plan: HostPlan, server: Server, snapshot: dict[str, Any], observed: dict[str, Any]) -> None:
    seen = [(x["address"], int(x["port"])) for x in observed["listeners"]]
    resolved = snapshot.get("resolved", {})
    missing = [
        f"{a}:{p}" for a, p in server.listeners if not any(sp == p and _matches(a, sa, resolved) for sa, sp in seen)
    ]
    allowed = [str(x) for x in plan.settings["sglang_verify_extra_listeners"]]
    extra = [
        f"{sa}:{sp}"
        for sa, sp in seen
        if not any(p == sp and _matches(a, sa, resolved) for a, p in server.listeners)
        and not any(fnmatch.fnmatch(f"{sa}:{sp}", pattern) for pattern in allowed)
    ]
    declared = ", ".join(f"{a}:{p}" for a, p in server.listeners)
    assert not missing, f"{server.unit} does not listen on {', '.join(missing)} (declared {declared})"
    assert not extra, (
        f"{server.unit} listens on {', '.join(extra)} besides its declared {declared} "
        "(list intended ones in sglang_verify_extra_listeners)"
    )
