"""Each risk fires on the one envelope that has it and stays silent on one that does not; fixes pass validation."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_plan import Fleet, fleet_from_inventory
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_risks import (
    EngineState,
    FleetState,
    declared_state,
    render,
    risks,
)
from sglang_envelope_cli.commands import model_config_for
from shipped import shipped_inventory

REPO = Path(__file__).resolve().parents[2]
DECODE_ENV = {"mem_fraction_static": 0.83, "tp_size": 4, "cuda_graph_max_bs_decode": 64, "bf16_index_k": True,
              "watchdog_timeout": 600, "chunked_prefill_size": 8192}  # fmt: skip
PREFILL_ENV = {**DECODE_ENV, "mem_fraction_static": 0.78, "cuda_graph_max_bs_decode": None}


def engine(role: str, host: str = "h1", **env: Any) -> EngineState:
    base = DECODE_ENV if role == "decode" else PREFILL_ENV
    pool = 11_159_040 if role == "decode" else 9_927_680
    running = 64 if role == "decode" else 256
    return EngineState(host, role, {**base, **env}, pool, running, 524_288, 256, 141.0)


def quiet() -> FleetState:
    """Two decode engines holding what the router admits at full context, generous timeouts, bf16 keys."""
    router = {"max_concurrent_requests": 42, "queue_size": 100, "queue_timeout_secs": 60, "request_timeout_secs": 1800}
    workload = {"p90_context_tokens": 32_000, "prefill_tokens_per_sec": 20_000, "requests_per_sec": 10,
                "model_load_secs": 300}  # fmt: skip
    return FleetState([engine("prefill"), engine("decode", "h1"), engine("decode", "h2")], [router], workload)


def with_engine(state: FleetState, index: int, **changes: Any) -> FleetState:
    engines = list(state.engines)
    target = engines[index]
    env = {**target.envelope, **changes.pop("envelope", {})}
    engines[index] = replace(target, envelope=env, **changes)
    return replace(state, engines=engines)


def with_router(state: FleetState, **changes: Any) -> FleetState:
    return replace(state, routers=[{**state.routers[0], **changes}])


CASES = {
    "router_admits_beyond_full_context": lambda s: with_router(s, max_concurrent_requests=64),
    "router_admits_beyond_p90_context": lambda s: replace(
        with_router(s, max_concurrent_requests=128), workload={**s.workload, "p90_context_tokens": 200_000}
    ),
    "prefill_pool_below_prompt_plus_chunk": lambda s: with_engine(s, 0, pool_tokens=500_000),
    "headroom_outside_static_pool": lambda s: with_engine(s, 1, envelope={"mem_fraction_static": 0.95}),
    "cuda_graph_batch_sizes": lambda s: with_engine(s, 1, envelope={"cuda_graph_max_bs_decode": 32}),
    "request_timeout_below_full_prefill": lambda s: with_router(s, request_timeout_secs=20),
    "watchdog_below_model_load": lambda s: replace(s, workload={**s.workload, "model_load_secs": 900}),
    "fp8_index_keys": lambda s: with_engine(s, 1, envelope={"bf16_index_k": False}),
    "single_decode_engine": lambda s: with_router(replace(s, engines=s.engines[:2]), max_concurrent_requests=21),
    "router_queue_outlasts_timeout": lambda s: with_router(s, queue_size=2000),
}


def test_a_quiet_envelope_has_no_risk() -> None:
    assert risks(quiet()) == []


@pytest.mark.parametrize("finding", sorted(CASES))
def test_each_risk_fires_on_its_envelope_alone(finding: str) -> None:
    found = risks(CASES[finding](quiet()))
    ids = {f.id for f in found}
    assert finding in ids, [f.summary for f in found]
    # One change, one finding; a router above the fleet at the p90 context is above it at the full context too.
    implied = {"router_admits_beyond_p90_context": {"router_admits_beyond_full_context"}}.get(finding, set())
    assert ids == {finding} | implied, ids
    item = next(f for f in found if f.id == finding)
    assert item.numbers and item.servers and item.severity in ("info", "warn", "critical")


def test_risks_that_need_measurements_stay_silent_without_them() -> None:
    bare = replace(with_router(quiet(), request_timeout_secs=20, queue_size=2000), workload={})
    assert {f.id for f in risks(bare)} == set()


def test_over_provisioned_cuda_graphs_are_information() -> None:
    found = risks(with_engine(quiet(), 1, envelope={"cuda_graph_max_bs_decode": 256}))
    assert [(f.id, f.severity) for f in found] == [("cuda_graph_batch_sizes", "info")]


@pytest.fixture
def production() -> tuple[Fleet, dict[str, Any]]:
    hostvars, groups = shipped_inventory("production")
    fleet = fleet_from_inventory(hostvars, groups)
    return fleet, model_config_for(hostvars[fleet.hosts("decode")[0]])


def test_production_risks_come_with_fixes_that_pass_validation(production: tuple[Fleet, dict[str, Any]]) -> None:
    fleet, config = production
    found = risks(declared_state(fleet, config), fleet, config)
    ids = [f.id for f in found]
    assert ids == ["router_admits_beyond_full_context", "single_decode_engine"], ids
    admission = found[0]
    # The longest call a context_length of 524,288 serves is 524,286 tokens: 2,048 pages of 256 plus the 512-token
    # PD decode reserve each; 11,159,040 // 524,800 = 21.
    assert admission.numbers == {"router_max_concurrent_requests": 64, "decode_holds": 21, "tokens_per_call": 524286}
    for finding in found:
        assert finding.fixes and all(fix["valid"] and fix["diff"] for fix in finding.fixes), finding.fixes
    assert ["sglang_router.max_concurrent_requests: 64 -> 21"] in [fix["diff"] for fix in admission.fixes]
    text = "\n".join(render([f.as_dict() for f in found]))
    assert "passes validation" in text and "warn: single_decode_engine" in text


def test_a_fix_the_validation_refuses_is_marked(production: tuple[Fleet, dict[str, Any]]) -> None:
    """The fix of a fleet whose validation fails carries the refusal, never a silent 'valid'."""
    fleet, config = production
    broken = fleet.copy()
    for host in broken.hosts("decode"):
        broken.hostvars[host]["sglang_decode"] = {**broken.hostvars[host]["sglang_decode"], "port": 30000}
    found = risks(declared_state(fleet, config), broken, config)
    assert any(not fix["valid"] and fix["refused"] for f in found for fix in f.fixes)
