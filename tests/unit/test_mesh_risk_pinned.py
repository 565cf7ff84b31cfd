"""The risk of smg's mesh (plugin_utils sglang_risks.mesh_risks): routers that sglang_router_mesh joins keep cores
busy at rest; a warning unless the cache-aware policy uses what the mesh shares. The policy a router runs when it
declares none is smg 1.13.0's own default, read from smg's parser table (cache_aware)."""

from __future__ import annotations

from typing import Any

from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_risks import MESH_AT_REST, mesh_risks

GROUPS = {"sglang_router": ["r1", "r2", "r3"], "sglang_prefill": ["p1"], "sglang_decode": ["d1"]}


def _router(policy: str | None, mesh: Any) -> dict[str, Any]:
    envelope = {"port": 8000} if policy is None else {"port": 8000, "policy": policy}
    return {"sglang_router": envelope, "sglang_router_mesh": mesh}


def test_no_mesh_by_default_is_no_risk() -> None:
    hostvars = {name: {"sglang_router": {"policy": "round_robin"}} for name in GROUPS["sglang_router"]}
    assert mesh_risks(hostvars, GROUPS) == []


def test_one_router_asking_for_the_mesh_is_no_mesh_and_no_risk() -> None:
    hostvars = {"r1": _router("round_robin", True), "r2": _router("round_robin", False), "r3": _router(None, False)}
    assert mesh_risks(hostvars, GROUPS) == []


def test_a_mesh_under_round_robin_is_a_warning_naming_the_routers_in_it_and_the_fix() -> None:
    # r3 does not ask: it is outside the mesh and the finding does not name it.
    hostvars = {"r1": _router("round_robin", True), "r2": _router("round_robin", "true"), "r3": _router(None, False)}
    (finding,) = mesh_risks(hostvars, GROUPS)
    assert finding.as_dict() == {
        "id": "router_mesh_busy_at_rest",
        "severity": "warn",
        "summary": f"smg's mesh joins the routers r1, r2 (sglang_router_mesh: true): {MESH_AT_REST}; under policy "
        "round_robin it shares nothing the routers use: set sglang_router_mesh: false",
        "numbers": {"routers": 2, "policy": "round_robin"},
        "servers": ["r1 router", "r2 router"],
        "fixes": [],
    }


def test_a_mesh_under_smg_default_policy_cache_aware_is_a_note() -> None:
    # No policy declared: smg 1.13.0's parser default, cache_aware, whose tree the mesh shares.
    hostvars = {"r1": _router(None, True), "r2": _router("cache_aware", True), "r3": _router(None, True)}
    (finding,) = mesh_risks(hostvars, GROUPS)
    assert (finding.severity, finding.numbers) == ("info", {"routers": 3, "policy": "cache_aware"})
    assert finding.summary.endswith("; the cache-aware policy shares its tree over it")


def test_a_mesh_with_mixed_policies_is_a_warning_listing_them() -> None:
    hostvars = {"r1": _router("cache_aware", True), "r2": _router("power_of_two", True), "r3": _router(None, False)}
    (finding,) = mesh_risks(hostvars, GROUPS)
    assert (finding.severity, finding.numbers["policy"]) == ("warn", "cache_aware,power_of_two")
    assert "under policy cache_aware, power_of_two it shares nothing" in finding.summary
