"""Exact results of the risk rules on small synthetic fleets: boundaries on both sides, numbers, messages, fixes.

Every fleet here is synthetic (made-up hosts and sizes); expected values are worked out by hand from the rules.
Fixes are captured through a judge whose `change` records the settings instead of running the planner.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_fleet import router_admission
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_risks import (
    EngineState,
    Finding,
    FleetState,
    _admission,
    _cuda_graphs,
    _headroom,
    _index_keys,
    _Judge,
    _prefill_pool,
    _queue,
    _timeouts,
    render,
)


class _Option:
    """Stands in for a planner option: the title and the settings, shown one per diff line."""

    def __init__(self, title: str, settings: list[tuple[str, str, Any]], add_decode_hosts: int) -> None:
        self.title, self.settings, self.add_decode_hosts = title, settings, add_decode_hosts
        self.refused: list[str] = []

    def diff_lines(self) -> list[str]:
        return [f"{role}.{key} = {value!r}" for role, key, value in self.settings]


class _Recorder(_Judge):
    def __init__(self, state: FleetState) -> None:
        super().__init__(state, None, None)
        self.planned_calls: list[tuple[int, int]] = []

    def change(self, title: str, settings: list[tuple[str, str, Any]], add_decode_hosts: int = 0) -> Any:
        return _Option(title, settings, add_decode_hosts)

    def planned(self, calls: int, tokens: int) -> Any:
        self.planned_calls.append((calls, tokens))
        return None


def eng(
    role: str,
    host: str = "s1",
    *,
    pool: int = 1_000_000,
    running: int = 64,
    context: int = 10_000,
    page: int = 256,
    gib: float = 0.0,
    **env: Any,
) -> EngineState:
    """A synthetic engine; gib 0 keeps the headroom rule out of the picture."""
    return EngineState(host, role, dict(env), pool, running, context, page, gib)


def fleet(
    *engines: EngineState, routers: list[Mapping[str, Any]] | None = None, workload: Mapping[str, Any] | None = None
) -> FleetState:
    return FleetState(list(engines), list(routers or []), dict(workload or {}))


def judged(rule: Any, state: FleetState) -> list[dict[str, Any]]:
    judge = _Recorder(state)
    rule(judge)
    return [f.as_dict() for f in judge.findings]


def fix(title: str, *lines: str) -> dict[str, Any]:
    return {"title": title, "diff": list(lines), "valid": True, "refused": []}


# --- router cap ---


def test_router_cap_sums_positive_caps() -> None:
    state = fleet(routers=[{"max_concurrent_requests": 1}, {"max_concurrent_requests": "2"}])
    assert router_admission(state.routers) == 3


def test_router_cap_is_unknown_when_any_router_has_none_or_zero() -> None:
    assert router_admission(fleet(routers=[{"max_concurrent_requests": 10}, {}]).routers) is None
    assert (
        router_admission(fleet(routers=[{"max_concurrent_requests": 10}, {"max_concurrent_requests": 0}]).routers)
        is None
    )
    assert router_admission(fleet(routers=[{"max_concurrent_requests": 0}]).routers) is None
    assert router_admission(fleet(routers=[]).routers) is None


# --- admission ---


def test_admission_with_a_decode_fleet_that_holds_nothing_fixes_to_one() -> None:
    # 100 tokens of pool, 1,000-token calls round to 1,024: zero fit.
    state = fleet(eng("decode", pool=100), routers=[{"max_concurrent_requests": 5}])
    judge = _Recorder(state)
    _admission(judge, 1000, "full_context")
    [found] = [f.as_dict() for f in judge.findings]
    assert found["numbers"] == {"router_max_concurrent_requests": 5, "decode_holds": 0, "tokens_per_call": 1000}
    assert found["summary"].startswith("the router admits 5 parallel calls, but the decode fleet holds 0 at 1,000")
    assert "(full context)" in found["summary"]
    assert found["fixes"] == [
        fix("admit only what the decode fleet holds at 1,000 tokens", "router.max_concurrent_requests = 1")
    ]
    assert judge.planned_calls == [(5, 1000)]


def test_admission_fix_keeps_what_the_fleet_holds() -> None:
    # 2,048 tokens of pool, 1,024 per call: two fit, running caps at 64.
    state = fleet(eng("decode", pool=2048), routers=[{"max_concurrent_requests": 3}])
    judge = _Recorder(state)
    _admission(judge, 1000, "p90_context")
    [found] = judge.findings
    assert found.id == "router_admits_beyond_p90_context"
    assert found.fixes[0]["diff"] == ["router.max_concurrent_requests = 2"]


def test_admission_fix_splits_what_the_fleet_holds_over_the_routers() -> None:
    # 8,192 tokens of pool, 1,024 per call: eight fit; two routers of 5 admit 10, and each admits its own cap, so
    # each gets 8 // 2 = 4 (together the 8 the decode engine holds).
    state = fleet(eng("decode", pool=8192), routers=[{"max_concurrent_requests": 5}, {"max_concurrent_requests": 5}])
    judge = _Recorder(state)
    _admission(judge, 1000, "p90_context")
    [found] = judge.findings
    assert found.numbers == {"router_max_concurrent_requests": 10, "decode_holds": 8, "tokens_per_call": 1000}
    assert found.fixes[0]["diff"] == ["router.max_concurrent_requests = 4"]


# --- prefill pool ---


def test_prefill_pool_below_prompt_plus_chunk_exact_finding() -> None:
    # need 10,000 + 1,000 = 11,000 > 10,500; lowered (10,500 - 1,000) // 256 * 256 = 37 * 256 = 9,472.
    state = fleet(eng("prefill", pool=10_500, chunked_prefill_size=1000))
    assert judged(_prefill_pool, state) == [
        {
            "id": "prefill_pool_below_prompt_plus_chunk",
            "severity": "critical",
            "summary": "s1 prefill holds 10,500 KV tokens, less than one maximal prompt (10,000) plus a chunk "
            "(1,000): a full-length prompt cannot be prefilled",
            "numbers": {"pool_tokens": 10_500, "context_length": 10_000, "chunk": 1000},
            "servers": ["s1 prefill"],
            "fixes": [
                fix(
                    "lower the per-call context to what the prefill pool holds",
                    "prefill.context_length = 9472",
                    "decode.context_length = 9472",
                )
            ],
        }
    ]


def test_prefill_pool_exactly_prompt_plus_chunk_is_enough() -> None:
    assert judged(_prefill_pool, fleet(eng("prefill", pool=11_000, chunked_prefill_size=1000))) == []
    assert judged(_prefill_pool, fleet(eng("prefill", pool=10_999, chunked_prefill_size=1000)))


def test_prefill_pool_without_a_chunk_needs_only_the_context() -> None:
    assert judged(_prefill_pool, fleet(eng("prefill", pool=10_000))) == []
    assert judged(_prefill_pool, fleet(eng("prefill", pool=10_000, chunked_prefill_size=0))) == []


def test_prefill_pool_without_a_chunk_lowers_to_the_whole_pool() -> None:
    [found] = judged(_prefill_pool, fleet(eng("prefill", pool=8960)))
    assert found["numbers"] == {"pool_tokens": 8960, "context_length": 10_000, "chunk": 0}
    assert found["fixes"][0]["diff"] == ["prefill.context_length = 8960", "decode.context_length = 8960"]


def test_prefill_pool_checks_every_prefill_engine() -> None:
    state = fleet(eng("prefill", "s1", pool=20_000), eng("decode", "s2", pool=1), eng("prefill", "s3", pool=5000))
    assert [f["servers"] for f in judged(_prefill_pool, state)] == [["s3 prefill"]]


# --- headroom ---


def _headroom_engine(**changes: Any) -> EngineState:
    """Decode, 41 GiB, tp 8, 4,000 running: reserve 512 + 6,000 + 1,024 MiB of 41,984 -> SGLang picks 0.821."""
    env = {"mem_fraction_static": 0.8333, "tp_size": 8, "chunked_prefill_size": 8192}
    env.update(changes.pop("env", {}))
    base: dict[str, Any] = {"role": "decode", "host": "s1", "running": 4000, "gib": 41.0}
    base.update(changes)
    return eng(base.pop("role"), base.pop("host"), running=base["running"], gib=base["gib"], **env)


def test_headroom_warn_exact_finding() -> None:
    # outside 41 * (1 - 0.8333) = 6.8347; needed 41 * (1 - 0.821) = 7.339; 6.83 >= 7.339 / 2: warn.
    assert judged(_headroom, fleet(_headroom_engine())) == [
        {
            "id": "headroom_outside_static_pool",
            "severity": "warn",
            "summary": "s1 decode: mem_fraction_static 0.8333 leaves 6.8 GiB per GPU for cuda graphs and "
            "activations; SGLang itself reserves 7.3 GiB for this envelope (4000 activation tokens): an OOM at "
            "startup or under the first long prefill",
            "numbers": {"outside_gib": 6.83, "sglang_reserve_gib": 7.34, "fraction": 0.8333},
            "servers": ["s1 decode"],
            "fixes": [fix("SGLang's own memory fraction", "decode.mem_fraction_static = 0.821")],
        }
    ]


def test_headroom_critical_below_half_the_reserve() -> None:
    # outside 41 * 0.08 = 3.28 < 7.339 / 2 = 3.67 (and above 7.339 / 3): critical.
    [found] = judged(_headroom, fleet(_headroom_engine(env={"mem_fraction_static": 0.92})))
    assert (found["severity"], found["numbers"]["outside_gib"]) == ("critical", 3.28)


def test_headroom_exactly_half_the_reserve_is_a_warning() -> None:
    # 40 GiB, tp 4, 6,144 running: reserve 512 + 9,216 + 512 = 10,240 of 40,960 MiB -> 0.75; needed 10, outside 5.
    engine = _headroom_engine(gib=40.0, running=6144, env={"tp_size": 4, "mem_fraction_static": 0.875})
    [found] = judged(_headroom, fleet(engine))
    assert found["severity"] == "warn"
    assert found["numbers"] == {"outside_gib": 5.0, "sglang_reserve_gib": 10.0, "fraction": 0.875}
    assert found["fixes"][0]["diff"] == ["decode.mem_fraction_static = 0.75"]


def test_headroom_at_sglangs_own_fraction_is_quiet() -> None:
    assert judged(_headroom, fleet(_headroom_engine(env={"mem_fraction_static": 0.821}))) == []
    assert judged(_headroom, fleet(_headroom_engine(env={"mem_fraction_static": 0.822})))


def test_headroom_tp_defaults_to_one() -> None:
    # tp 1: reserve 512 + 6,000 + 128 = 6,640 of 41,984 MiB -> 0.842.
    engine = _headroom_engine(env={"tp_size": None, "mem_fraction_static": 0.9})
    [found] = judged(_headroom, fleet(engine))
    assert found["fixes"][0]["diff"] == ["decode.mem_fraction_static = 0.842"]
    assert judged(_headroom, fleet(_headroom_engine(env={"tp_size": None, "mem_fraction_static": 0.842}))) == []


def test_headroom_decode_activation_is_the_running_batch() -> None:
    # decode: 4,000 running (not the 8,192 chunk, nor the 2,048 floor).
    [found] = judged(_headroom, fleet(_headroom_engine(env={"mem_fraction_static": 0.95})))
    assert "(4000 activation tokens)" in found["summary"]


def test_headroom_prefill_activation_is_the_chunk() -> None:
    # prefill, chunk 4,096: reserve 512 + 6,144 + 1,024 = 7,680 of 41,984 MiB -> 0.817.
    engine = _headroom_engine(role="prefill", env={"chunked_prefill_size": 4096, "mem_fraction_static": 0.95})
    [found] = judged(_headroom, fleet(engine))
    assert "(4096 activation tokens)" in found["summary"]
    assert found["servers"] == ["s1 prefill"]
    assert found["fixes"][0]["diff"] == ["prefill.mem_fraction_static = 0.817"]


def test_headroom_needs_a_fraction_and_known_memory() -> None:
    unknown = _headroom_engine(host="s0", env={"mem_fraction_static": None})
    state = fleet(unknown, _headroom_engine(host="s2", gib=0.0), _headroom_engine(host="s3"))
    assert [f["servers"] for f in judged(_headroom, state)] == [["s3 decode"]]


def test_headroom_on_a_one_gib_gpu() -> None:
    # 1 GiB: reserve 512 + 6,000 + 1,024 MiB of 1,024 -> -6.359; fraction 0.5 is above it.
    [found] = judged(_headroom, fleet(_headroom_engine(gib=1.0, env={"mem_fraction_static": 0.5})))
    assert found["numbers"]["outside_gib"] == 0.5


# --- cuda graphs ---


def test_cuda_graphs_below_the_running_batch_exact_finding() -> None:
    engine = eng("decode", running=16, cuda_graph_bs_decode=[1, 2, 4, 8, 8])
    assert judged(_cuda_graphs, fleet(engine)) == [
        {
            "id": "cuda_graph_batch_sizes",
            "severity": "warn",
            "summary": "s1 decode runs up to 16 requests, its largest cuda graph is for 8: batches above 8 decode "
            "without a graph (slower steps at full load)",
            "numbers": {"max_running_requests": 16, "cuda_graph_max_bs_decode": 8, "sizes": [1, 2, 4, 8, 8]},
            "servers": ["s1 decode"],
            "fixes": [
                fix(
                    "capture graphs up to the running batch",
                    "decode.cuda_graph_max_bs_decode = 16",
                    "decode.cuda_graph_bs_decode = [1, 2, 4, 8, 16]",
                )
            ],
        }
    ]


def test_cuda_graphs_above_the_running_batch_is_information() -> None:
    [found] = judged(_cuda_graphs, fleet(eng("decode", running=16, cuda_graph_max_bs_decode=32)))
    assert found["severity"] == "info"
    assert found["summary"] == (
        "s1 decode runs up to 16 requests, its largest cuda graph is for 32: graphs above 16 are captured and "
        "never replayed (memory for nothing)"
    )
    assert found["numbers"] == {"max_running_requests": 16, "cuda_graph_max_bs_decode": 32, "sizes": []}
    assert found["fixes"][0]["diff"] == ["decode.cuda_graph_max_bs_decode = 16"]


def test_cuda_graphs_checks_every_decode_engine() -> None:
    state = fleet(
        eng("decode", "s1", running=16, cuda_graph_max_bs_decode=16),
        eng("decode", "s2", running=16),
        eng("decode", "s3", running=16, cuda_graph_max_bs_decode=8),
    )
    assert [(f["servers"], f["severity"]) for f in judged(_cuda_graphs, state)] == [(["s3 decode"], "warn")]


# --- timeouts ---


def test_request_timeout_below_full_prefill_exact_finding() -> None:
    # 1,000 tokens at 300 tokens/s: 3.33 s; fix ceil(3.33 * 1.5) = 5.
    state = fleet(
        eng("prefill", context=1000),
        eng("decode", context=100_000),
        routers=[{"request_timeout_secs": 2}],
        workload={"prefill_tokens_per_sec": 300},
    )
    assert judged(_timeouts, state) == [
        {
            "id": "request_timeout_below_full_prefill",
            "severity": "warn",
            "summary": "a full-context prefill (1,000 tokens at 300 tokens/s) takes 3 s, the router's "
            "request_timeout_secs is 2: the longest calls time out before their first token",
            "numbers": {"prefill_secs": 3.3, "request_timeout_secs": 2},
            "servers": ["router"],
            "fixes": [fix("a timeout above one full prefill", "router.request_timeout_secs = 5")],
        }
    ]


def test_request_timeout_on_a_decode_only_fleet_uses_the_decode_context() -> None:
    state = fleet(
        eng("decode", context=3000),
        routers=[{"request_timeout_secs": 5}, {"request_timeout_secs": 1}],
        workload={"prefill_tokens_per_sec": 1000},
    )
    [found] = judged(_timeouts, state)
    assert found["numbers"] == {"prefill_secs": 3.0, "request_timeout_secs": 1}
    assert found["fixes"][0]["diff"] == ["router.request_timeout_secs = 5"]


def test_request_timeout_equal_to_the_prefill_is_enough() -> None:
    state = fleet(
        eng("decode", context=3000), routers=[{"request_timeout_secs": 3}], workload={"prefill_tokens_per_sec": 1000}
    )
    assert judged(_timeouts, state) == []


def test_both_timeout_findings_come_together() -> None:
    state = fleet(
        eng("prefill", "s1", watchdog_timeout=60),
        eng("decode", "s2", watchdog_timeout=100),
        eng("decode", "s3", watchdog_timeout=90),
        routers=[{"request_timeout_secs": 1}, {"request_timeout_secs": 1}],
        workload={"prefill_tokens_per_sec": 1000, "model_load_secs": 100},
    )
    found = judged(_timeouts, state)
    assert [f["id"] for f in found] == [
        "request_timeout_below_full_prefill",
        "watchdog_below_model_load",
        "watchdog_below_model_load",
    ]
    decode, prefill = found[1], found[2]
    assert decode == {
        "id": "watchdog_below_model_load",
        "severity": "warn",
        "summary": "decode engines load in 100 s, their watchdog_timeout is 90 s: the watchdog can kill an engine "
        "that is only slow to come up",
        "numbers": {"model_load_secs": 100, "watchdog_timeout": 90},
        "servers": ["s3 decode"],
        "fixes": [fix("a watchdog above the load time", "decode.watchdog_timeout = 150")],
    }
    assert prefill["servers"] == ["s1 prefill"]
    assert prefill["numbers"] == {"model_load_secs": 100, "watchdog_timeout": 60}
    assert prefill["fixes"][0]["diff"] == ["prefill.watchdog_timeout = 150"]


# --- index keys ---


def test_fp8_index_keys_exact_finding() -> None:
    state = fleet(eng("prefill", "s1"), eng("decode", "s2", bf16_index_k=True), eng("decode", "s3"))
    assert judged(_index_keys, state) == [
        {
            "id": "fp8_index_keys",
            "severity": "warn",
            "summary": "fp8 index keys: DeepSeek-V4's sparse attention misses needles beyond about 2,000 tokens "
            "(the long-context recall bug); bf16 keys fix it for about 8 % of the KV pool",
            "numbers": {"engines_with_fp8_keys": 2},
            "servers": ["s1 prefill", "s3 decode"],
            "fixes": [fix("bf16 index keys", "decode.bf16_index_k = True", "prefill.bf16_index_k = True")],
        }
    ]


# --- router queue ---


def test_router_queue_outlasts_timeout_exact_finding() -> None:
    # first router has no queue, second drains in exactly its timeout, third in 20 s against 10.
    routers = [{"queue_timeout_secs": 10}, {"queue_size": 100, "queue_timeout_secs": 10},
               {"queue_size": 200, "queue_timeout_secs": 10}]  # fmt: skip
    state = fleet(routers=routers, workload={"requests_per_sec": 10})
    assert judged(_queue, state) == [
        {
            "id": "router_queue_outlasts_timeout",
            "severity": "warn",
            "summary": "a full router queue of 200 drains in 20 s at 10 requests/s, but queue_timeout_secs is 10: "
            "the back of the queue times out instead of being served",
            "numbers": {"queue_size": 200, "drain_secs": 20.0, "queue_timeout_secs": 10},
            "servers": ["router"],
            "fixes": [fix("a queue that drains within its timeout", "router.queue_size = 100")],
        }
    ]


# --- render ---


def test_render_a_refused_fix_names_the_first_refusal() -> None:
    finding = Finding("x", "warn", "synthetic", {"a": 1}, ["s1 decode"])
    refused = {"title": "t", "diff": ["d"], "valid": False, "refused": ["first", "second"]}
    finding.fixes = [refused, fix("u", "e")]
    assert render([finding.as_dict()]) == [
        "warn: x: synthetic [a=1]",
        "  fix (t, refused by validation: first):",
        "    d",
        "  fix (u, passes validation):",
        "    e",
    ]


def test_the_ladder_keeps_the_sizes_below_the_top_and_ends_at_it() -> None:
    from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_risks import _ladder

    assert _ladder([64, 8, 32, 16, 8], 32) == [8, 16, 32]
    assert _ladder([], 4) == [4]


def test_the_declared_fleet_state_says_so(dsv4: dict[str, Any]) -> None:
    """The findings of a declared fleet are judged on the declaration (live ones say "live")."""
    from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_plan import fleet_from_inventory
    from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_risks import declared_state
    from shipped import shipped_inventory

    assert declared_state(fleet_from_inventory(*shipped_inventory("production")), dsv4).source == "declared"
