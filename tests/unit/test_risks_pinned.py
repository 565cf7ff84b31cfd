"""The risks that come from the operator's measurements (sglang_workload), pinned on the multinode inventory to
figures worked out by hand from its declaration: the router's queue_size 512, queue_timeout_secs 60 and
request_timeout_secs 1800, every engine's context_length 524,288 and watchdog_timeout 600 (group_vars/all/envelope.yml,
inventories/multinode)."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_plan import Fleet
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_risks import declared_state, risks
from sglang_envelope_cli.commands import model_config_for
from shipped import shipped_inventory

WORKLOAD_IDS = ("request_timeout_below_full_prefill", "watchdog_below_model_load", "router_queue_outlasts_timeout")
PREFILL = ["prefill-01 prefill", "prefill-02 prefill"]
DECODE = ["decode-01 decode", "decode-02 decode", "decode-03 decode"]
# Each role's finding fixes that role alone: the shared dict holds the key, so the fix goes into the role's own dict.
WATCHDOG_FIX = {
    role: ("a watchdog above the load time", [f"sglang_{role}.watchdog_timeout: 600.0 -> 1350"], True)
    for role in ("prefill", "decode")
}


def findings(workload: dict[str, Any], **router: Any) -> list[dict[str, Any]]:
    """The workload findings of the multinode fleet with `workload` declared (and `router` keys overridden): id,
    severity, numbers, servers and each fix's title, diff and verdict."""
    hostvars, groups = shipped_inventory("multinode")
    for hv in hostvars.values():
        hv["sglang_workload"] = workload
        hv["sglang_router"] = {**hv["sglang_router"], **router}
    fleet = Fleet({h: dict(v) for h, v in hostvars.items()}, groups)
    config = model_config_for(hostvars[fleet.hosts("decode")[0]])
    return [
        {
            "id": f.id,
            "severity": f.severity,
            "numbers": f.numbers,
            "servers": f.servers,
            "fixes": [(x["title"], x["diff"], x["valid"]) for x in f.fixes],
        }
        for f in risks(declared_state(fleet, config), fleet, config)
        if f.id in WORKLOAD_IDS
    ]


def test_slow_prefill_slow_load_and_a_slow_drain_are_each_a_finding_with_a_fix() -> None:
    assert findings({"prefill_tokens_per_sec": 200, "model_load_secs": 900, "requests_per_sec": 4}) == [
        {
            # 524,288 tokens / 200 tokens/s = 2,621.44 s > 1,800 s; the fix: ceil(2,621.44 x 1.5) = ceil(3,932.16).
            "id": "request_timeout_below_full_prefill",
            "severity": "warn",
            "numbers": {"prefill_secs": 2621.4, "request_timeout_secs": 1800},
            "servers": ["router"],
            "fixes": [("a timeout above one full prefill", ["sglang_router.request_timeout_secs: 1800 -> 3933"], True)],
        },
        {
            # 600 s < 900 s on each role; the fix: 900 x 1.5 = 1,350, in the role's own dict (the shared one keeps
            # 600 for the other role; watchdog_timeout is a float key, so the declared 600 reads 600.0).
            "id": "watchdog_below_model_load",
            "severity": "warn",
            "numbers": {"model_load_secs": 900, "watchdog_timeout": 600},
            "servers": DECODE,
            "fixes": [WATCHDOG_FIX["decode"]],
        },
        {
            "id": "watchdog_below_model_load",
            "severity": "warn",
            "numbers": {"model_load_secs": 900, "watchdog_timeout": 600},
            "servers": PREFILL,
            "fixes": [WATCHDOG_FIX["prefill"]],
        },
        {
            # 512 queued / 4 per second = 128 s > 60 s; the fix: the queue 4 x 60 = 240 drains in 60 s.
            "id": "router_queue_outlasts_timeout",
            "severity": "warn",
            "numbers": {"queue_size": 512, "drain_secs": 128.0, "queue_timeout_secs": 60},
            "servers": ["router"],
            "fixes": [("a queue that drains within its timeout", ["sglang_router.queue_size: 512 -> 240"], True)],
        },
    ]


@pytest.mark.parametrize(
    "workload",
    [
        {"prefill_tokens_per_sec": 1000},  # 524,288 / 1,000 = 524.3 s, within 1,800 s
        {"model_load_secs": 600},  # a load as long as the watchdog is not longer than it
        {"requests_per_sec": 9},  # 512 / 9 = 56.9 s, within 60 s
    ],
    ids=["prefill-within-the-timeout", "load-at-the-watchdog", "queue-drains-in-time"],
)
def test_measurements_within_the_limits_are_no_finding(workload: dict[str, Any]) -> None:
    assert findings(workload) == []


def test_a_queue_that_drains_exactly_at_its_timeout_is_no_finding() -> None:
    # 512 queued / 8 per second = 64 s: with queue_timeout_secs 64 the back of the queue is served in time; 63 is not.
    assert findings({"requests_per_sec": 8}, queue_timeout_secs=64) == []
    assert [f["numbers"] for f in findings({"requests_per_sec": 8}, queue_timeout_secs=63)] == [
        {"queue_size": 512, "drain_secs": 64.0, "queue_timeout_secs": 63}
    ]


def test_the_full_prefill_is_the_fleets_per_call_context() -> None:
    """One prefill engine at context_length 8,192 shortens every call the fleet serves (smg pairs any prefill with any
    decode engine; the fleet answer's per-call context is the smallest of any engine): a full prefill is 8,192 tokens
    at 200 tokens/s, 40.96 s, within the router's 1,800 s. The 524,288 tokens the other engine would take (2,621.4 s)
    are no call of this fleet's envelope; check_fleet's timeout rule times the same served context."""
    hostvars, groups = shipped_inventory("multinode")
    for hv in hostvars.values():
        hv["sglang_workload"] = {"prefill_tokens_per_sec": 200}
    hostvars["prefill-01"]["sglang_prefill"] = {**hostvars["prefill-01"]["sglang_prefill"], "context_length": 8192}
    fleet = Fleet({h: dict(v) for h, v in hostvars.items()}, groups)
    config = model_config_for(hostvars["decode-01"])
    found = [f.numbers for f in risks(declared_state(fleet, config), fleet, config)
             if f.id == "request_timeout_below_full_prefill"]  # fmt: skip
    assert found == []
    assert declared_state(fleet, config).memory().per_call_context == 8192


def test_the_declared_state_of_the_multinode_fleet() -> None:
    """SGLang's max_req_len is context_length - 1 (524,287) on every engine; the model is DeepSeek-V4; each engine
    is counted by the fleet answer under its own host, with that request limit."""
    hostvars, groups = shipped_inventory("multinode")
    fleet = Fleet({h: dict(v) for h, v in hostvars.items()}, groups)
    state = declared_state(fleet, model_config_for(hostvars["decode-01"]))
    assert (state.dsv4, state.source) == (True, "declared")
    hosts = ["prefill-01", "prefill-02", "decode-01", "decode-02", "decode-03"]
    assert [(e.host, e.max_req_len) for e in state.engines] == [(h, 524_287) for h in hosts]
    engine = state.engines[2].engine()
    assert (engine.host, engine.role, engine.context_len, engine.max_req_len) == (
        "decode-01",
        "decode",
        524_288,
        524_287,
    )
