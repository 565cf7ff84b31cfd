"""Engines answer /health with 200; the router's /readiness lists every declared worker as healthy.

Queried from the host itself (the servers may listen on loopback only).
"""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_drift
from verify_expect import ENGINE_ROLES, HostPlan, Server


@pytest.mark.parametrize("role", ENGINE_ROLES)
def test_engine_health(server: Server, observed: dict[str, Any]) -> None:
    health = observed["health"]
    assert health.get("status") == 200, (
        f"GET {health['url']} on the host answered {health.get('status')} "
        f"{health.get('error') or health.get('body', '')!r} after {health.get('seconds')} s"
    )


@pytest.mark.parametrize("role", ["router"])
def test_router_readiness(plan: HostPlan, server: Server, observed: dict[str, Any]) -> None:
    health = observed["health"]
    assert health.get("status") == 200, (
        f"GET {health['url']} on the host answered {health.get('status')} {health.get('error') or health.get('body')!r}"
    )
    live = observed.get("live") or {}
    assert not observed.get("live_error"), observed.get("live_error")
    assert not live.get("errors"), "; ".join(live["errors"])
    router = live.get("router") or {}
    expected = len(plan.workers["prefill"]) + len(plan.workers["decode"])
    assert router.get("ready"), f"/readiness: {router.get('readiness')}"
    assert (router.get("healthy_workers"), router.get("total_workers")) == (expected, expected), (
        f"/readiness reports {router.get('healthy_workers')} healthy of {router.get('total_workers')} workers; "
        f"the inventory declares {expected}"
    )
    assert "workers" in router, "the router's /workers list could not be read"
    # Registered against declared: the audit's judgement (sglang_drift.worker_drift).
    problems = [d.explanation for d in sglang_drift.worker_drift(router["workers"], plan.workers)]
    if router.get("unhealthy_workers"):
        problems.append(f"unhealthy: {', '.join(router['unhealthy_workers'])}")
    assert not problems, "router workers: " + "; ".join(problems)
