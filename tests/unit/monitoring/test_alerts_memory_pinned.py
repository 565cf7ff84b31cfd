"""The fleet answer the alert rules and the dashboard take (plugin_utils/sglang_alerts.py: Targets.memory), written out
whole from the predicted limits: running slots and KV pool per attention-DP rank, page size, routers' admission."""

from __future__ import annotations

from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_alerts import EngineTarget, RouterTarget, Targets
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_fleet import EngineCalls, Memory

DECODE = EngineTarget(
    "d1",
    "decode",
    "http://d1:30001",
    {"context_length": 1000},
    {"max_total_tokens": 10000, "max_running_requests": 9, "page_size": 64, "attn_dp_size": 2},
)
PREFILL = EngineTarget("p1", "prefill", "http://p1:30000", {"context_length": 2000}, {"max_total_tokens": 5000,
                       "max_running_requests": 3})  # fmt: skip
NO_POOL = EngineTarget("d2", "decode", "http://d2:30001", {"context_length": 1000}, {"max_running_requests": 4})
NO_CONTEXT = EngineTarget("d3", "decode", "http://d3:30001", {}, {"max_total_tokens": 100})
ROUTER = RouterTarget("r1", {"max_concurrent_requests": 6}, 2)


def test_each_rank_gets_its_share_of_the_running_slots_and_the_router_binds() -> None:
    """d1: 2 ranks of 9 // 2 = 4 slots; 998-token calls take 1,024 tokens of 64-token pages, 9 to a 10,000-token
    pool; p1: 5 calls of 998 in its pool, 3 slots. 8 decode calls, the router admits 6."""
    assert Targets([PREFILL, DECODE, NO_POOL, NO_CONTEXT], [ROUTER]).memory() == Memory(
        tokens=998,
        parallel=6,
        binding="router max_concurrent_requests",
        bindings=("router max_concurrent_requests",),
        decode=(EngineCalls("d1", "decode", 2, 9, 4, 4, "max_running_requests"),),
        prefill=(EngineCalls("p1", "prefill", 1, 5, 3, 3, "max_running_requests"),),
        decode_calls=8,
        decode_pool_fit=18,
        decode_running=8,
        total_context=20000,
        per_call_context=1000,
        served_tokens=998,
        router_admits=6,
    )


def test_an_engine_without_running_slots_or_page_size_runs_one_call_on_pages_of_one_token() -> None:
    """999-token calls on one-token pages: 10 fit a 9,990-token pool (on two-token pages only 9); one slot."""
    decode = EngineTarget("d1", "decode", "http://d1:30001", {"context_length": 1001}, {"max_total_tokens": 9990})
    assert Targets([decode], []).memory() == Memory(
        tokens=999,
        parallel=1,
        binding="decode max_running_requests",
        bindings=("decode max_running_requests",),
        decode=(EngineCalls("d1", "decode", 1, 10, 1, 1, "max_running_requests"),),
        prefill=(),
        decode_calls=1,
        decode_pool_fit=10,
        decode_running=1,
        total_context=9990,
        per_call_context=1001,
        served_tokens=999,
        router_admits=None,
    )


def test_without_an_engine_with_a_pool_and_a_context_there_is_no_answer() -> None:
    assert Targets([NO_POOL, NO_CONTEXT], [ROUTER]).memory() is None
    assert Targets([], []).memory() is None
