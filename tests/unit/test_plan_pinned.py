"""The planner's answers on the multinode inventory (2 prefill, 3 decode, 1 router host), pinned to figures worked out
by hand from the declaration, each case one where a single rule decides the answer.

The declaration (group_vars/all/envelope.yml, inventories/multinode): every decode engine runs max_running_requests
64, the router admits max_concurrent_requests 192 = 3 x 64. The calls are short (4,000 tokens), so the KV pools
never bind: a decode engine holds 11,159,040 KV tokens (the capacity model's figure, held to SGLang by
tests/component/conformance), and a call of 4,000 tokens takes 16 pages of 256 = 4,096 tokens (4,608 with a PD decode
admission reserve of 512 per call), so a pool admits about 2,400 such calls, against 64 to 102 running slots. Every
figure below is therefore a count of running slots and router admissions.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_plan import (
    Fleet,
    Shape,
    change,
    fleet_fit,
    plan,
)
from sglang_envelope_cli.commands import model_config_for
from shipped import shipped_inventory

CALL = 4000  # tokens per call (prompt + output)


def multinode() -> tuple[Fleet, dict[str, Any]]:
    hostvars, groups = shipped_inventory("multinode")
    fleet = Fleet({h: dict(v) for h, v in hostvars.items()}, groups)
    return fleet, model_config_for(hostvars[fleet.hosts("decode")[0]])


def answers(fleet: Fleet, config: dict[str, Any], calls: int) -> list[Any]:
    """The options that serve the shape as asked (calls of the full length), best first."""
    return [o for o in plan(fleet, config, Shape(calls, CALL)).options if o.exact]


def test_today_the_running_slots_and_the_router_admit_192() -> None:
    fleet, config = multinode()
    today = fleet_fit(fleet, config, CALL)
    assert today.per_engine == (64, 64, 64)
    assert (today.parallel, today.router_cap, today.decode_running) == (192, 192, 192)
    assert today.binding == "decode max_running_requests"  # a tie with the router (192 = 192) names the engines


# ---------------------------------------------------------------- rounding per decode engine


@pytest.mark.parametrize(
    ("calls", "per_engine", "router"),
    [
        (300, 100, 300),  # 300 / 3 = 100 exactly
        (301, 101, 301),  # 301 / 3 = 100.33: 100 per engine runs 300, one short; 101 runs 303
        (302, 101, 302),  # 302 / 3 = 100.67 -> 101
        (303, 101, 303),  # 303 / 3 = 101 exactly
        (304, 102, 304),  # 304 / 3 = 101.33 -> 102
    ],
    ids=["300-calls", "301-calls", "302-calls", "303-calls", "304-calls"],
)
def test_running_slots_are_raised_to_the_calls_rounded_up_per_decode_engine(
    calls: int, per_engine: int, router: int
) -> None:
    """No host is added: raising max_running_requests on the three engines to ceil(calls / 3) admits every call,
    and the router's cap goes to min(calls, 3 x that) = the calls."""
    fleet, config = multinode()
    assert math.ceil(calls / 3) == per_engine and 3 * per_engine >= calls > 3 * (per_engine - 1)
    first = answers(fleet, config, calls)[0]
    assert first.title == "admit more calls"
    assert first.added_hosts == []
    assert first.caveats == []
    assert first.changes == [
        ("sglang_decode.max_running_requests", 64, per_engine),
        ("sglang_router.max_concurrent_requests", 192, router),
    ]
    assert first.after is not None
    assert (first.after.parallel, first.after.decode_running, first.after.router_cap) == (calls, 3 * per_engine, router)


# ---------------------------------------------------------------- dominance


def test_an_answer_no_cheaper_on_any_lever_than_a_kept_one_is_dropped() -> None:
    """301 calls: admitting them (no host, no recall cost) is the one answer. Raising decode mem_fraction_static to
    SGLang's own choice also serves them with no host and no recall cost, and fp8 index keys do with no host but a
    recall cost: both are no cheaper on any lever, so neither is listed."""
    fleet, config = multinode()
    assert [o.title for o in answers(fleet, config, 301)] == ["admit more calls"]
    # The dropped ones do serve the shape and pass validation: only the dominance rule removes them.
    # SGLang's own fraction on a 141 GiB GPU at tp 4: reserve max(512 + 1.5 x 2048 + 4/8 x 1024, 10240) = 10,240
    # MiB of 141 x 1024 = 144,384 MiB, so (144384 - 10240) / 144384 = 0.929.
    admit = [("decode", "max_running_requests", 101), ("router", "max_concurrent_requests", 301)]
    for levers in ([("decode", "mem_fraction_static", 0.929)], [("decode", "bf16_index_k", False),
                                                               ("prefill", "bf16_index_k", False)]):  # fmt: skip
        dropped = change(fleet, config, "dropped", levers + admit)
        assert dropped.refused == [], dropped.refused
        assert fleet_fit(dropped.changed_fleet(), config, CALL).parallel >= 301


# ---------------------------------------------------------------- router caps across routers


def two_routers(first: int | None, second: int | None) -> Fleet:
    """The multinode fleet with a second router; None: that router declares no max_concurrent_requests."""
    fleet, _config = multinode()
    fleet.hostvars["router-02"] = {**fleet.hostvars["router-01"], "inventory_hostname": "router-02"}
    fleet.groups["sglang_router"] = ["router-01", "router-02"]
    for host, cap in (("router-01", first), ("router-02", second)):
        router = {k: v for k, v in fleet.hostvars[host]["sglang_router"].items() if k != "max_concurrent_requests"}
        if cap is not None:
            router["max_concurrent_requests"] = cap
        fleet.hostvars[host] = {**fleet.hostvars[host], "sglang_router": router}
    return fleet


@pytest.mark.parametrize(
    ("caps", "admits", "parallel"),
    [
        ((50, 60), 110, 110),  # both capped: 50 + 60 = 110 admitted, below the engines' 192
        ((50, None), None, 192),  # the second router admits without bound: the engines' 3 x 64 bind
        ((None, 50), None, 192),
        ((50, 0), None, 192),  # 0: no cap (smg's max_concurrent_requests <= 0 disables its limiter)
        ((0, 50), None, 192),
        ((None, None), None, 192),
    ],
    ids=["both-capped", "second-uncapped", "first-uncapped", "second-cap-0", "first-cap-0", "none-capped"],
)
def test_the_routers_admit_the_sum_of_their_caps_only_when_every_router_has_one(
    caps: tuple[int | None, int | None], admits: int | None, parallel: int
) -> None:
    fleet = two_routers(*caps)
    _fleet, config = multinode()
    fit = fleet_fit(fleet, config, CALL)
    assert (fit.router_cap, fit.parallel) == (admits, parallel)
    # 100 calls: they fit today unless both routers are capped (110 still admits them; 50 + 60 is not 50).
    assert plan(fleet, config, Shape(100, CALL)).fits_today


def test_two_capped_routers_below_the_calls_do_not_fit() -> None:
    fleet = two_routers(50, 40)
    _fleet, config = multinode()
    result = plan(fleet, config, Shape(100, CALL))
    assert (result.today.parallel, result.today.router_cap) == (90, 90)  # 50 + 40
    assert not result.fits_today


# ---------------------------------------------------------------- the boundary of "fits"


@pytest.mark.parametrize(("calls", "fits"), [(191, True), (192, True), (193, False)], ids=["191", "192", "193"])
def test_a_shape_the_fleet_runs_exactly_fits_today(calls: int, fits: bool) -> None:
    """3 x 64 = 192 running slots and a router cap of 192: 192 calls fit with nothing to change, 193 do not."""
    fleet, config = multinode()
    result = plan(fleet, config, Shape(calls, CALL))
    assert result.fits_today is fits
    assert (result.options == []) is fits


# ---------------------------------------------------------------- the per-call context


def test_the_per_call_context_is_the_smallest_context_length_of_any_engine() -> None:
    """smg pairs any prefill with any decode engine: one prefill engine declared at context_length 8,192 makes it
    the fleet's per-call context. Calls of 4,000 tokens still run 192 at once; calls of 16,000 run none."""
    fleet, config = multinode()
    host = fleet.hostvars["prefill-01"]
    fleet.hostvars["prefill-01"] = {**host, "sglang_prefill": {**host["sglang_prefill"], "context_length": 8192}}
    short = fleet_fit(fleet, config, CALL)
    assert (short.context_length, short.parallel) == (8192, 192)
    long = fleet_fit(fleet, config, 16_000)
    assert (long.context_length, long.parallel, long.binding) == (8192, 0, "per-call context_length")
