"""The fleet answer (plugins/plugin_utils/sglang_fleet.py) on synthetic engines, every expected value worked out by
hand in the table or its comment from SGLang 0.5.23's rules:

- PD decode admission keeps --num-reserved-decode-tokens (512) free per active request
  (disaggregation/decode.py: allocatable = available - 512 x active; required = pages + 512), so the k-th call of
  P page-rounded tokens is admitted while pool >= k x (P + 512);
- a context_length of X serves a call of at most X - 2 tokens (max_req_len = X - 1, and the scheduler caps
  max_new_tokens at max_req_len - input - 1);
- chunked_prefill_size unset follows the GPU's memory (arg_groups/memory_hook.py handle_gpu_memory_settings).
"""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_capacity import default_chunked_prefill_size
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_fleet import (
    CONTEXT,
    KV_POOL,
    PREFILL,
    ROUTER,
    RUNNING,
    Engine,
    RouterQueue,
    answer,
    per_call_context,
    router_admission,
    router_queue,
)

PAGE = 256


def decode(pool: int, running: int = 256, context: int = 524_288, ranks: int = 1, host: str = "d") -> Engine:
    return Engine(host, "decode", pool, running, context, PAGE, ranks, 512)


def prefill(pool: int = 10_000_000, context: int = 524_288) -> Engine:
    return Engine("p", "prefill", pool, 256, context, PAGE)


@pytest.mark.parametrize(
    ("pool", "calls"),
    [
        # 200,000 tokens are 782 pages = 200,192 tokens; with the reserve 200,704 a call.
        (100 * 200_704, 100),
        (100 * 200_704 - 1, 99),
        # Without the reserve 100 x 200,192 = 20,019,200 would hold 100; SGLang admits 99.
        (20_019_200, 99),
    ],
)
def test_the_pd_decode_reserve_is_counted_per_call(pool: int, calls: int) -> None:
    memory = answer([prefill(), decode(pool)], [], 200_000).memory
    assert (memory.parallel, memory.binding) == (calls, KV_POOL)


@pytest.mark.parametrize(
    ("context", "parallel", "binding"),
    [(200_002, 10, KV_POOL), (200_001, 0, CONTEXT), (200_000, 0, CONTEXT)],
)
def test_a_context_length_serves_two_tokens_less(context: int, parallel: int, binding: str) -> None:
    memory = answer([decode(10 * 200_704, context=context)], [], 200_000).memory
    assert (memory.parallel, memory.binding, memory.served_tokens) == (parallel, binding, context - 2)


def test_units_per_rank_per_engine_per_fleet() -> None:
    """Two ranks of 10 slots (a pool each of 100 short calls) and a one-rank engine of 16 slots: 20 + 16."""
    memory = answer([decode(100 * 768, running=10, ranks=2, host="a"), decode(100 * 768, 16, host="b")], [], 1).memory
    a, b = memory.decode
    assert (a.per_rank, a.per_engine, b.per_engine) == (10, 20, 16)
    assert (memory.decode_running, memory.decode_calls, memory.parallel, memory.binding) == (36, 36, 36, RUNNING)
    assert memory.total_context == 3 * 100 * 768


def test_per_call_context_is_the_smallest_of_any_engine() -> None:
    memory = answer([prefill(context=131_072), decode(10**8, context=524_288)], [], None).memory
    assert (memory.per_call_context, memory.served_tokens, memory.tokens) == (131_072, 131_070, 131_070)


def test_the_router_and_the_prefill_pool_bind() -> None:
    routers = [{"max_concurrent_requests": 5}, {"max_concurrent_requests": 3}]
    memory = answer([prefill(), decode(10**8)], routers, 1000).memory
    assert (memory.parallel, memory.binding, memory.router_admits) == (8, ROUTER, 8)
    short_prefill = answer([prefill(pool=999), decode(10**8)], routers, 1000).memory
    assert (short_prefill.parallel, short_prefill.binding) == (0, PREFILL)


@pytest.mark.parametrize(
    ("routers", "admits"),
    [([], None), ([{"max_concurrent_requests": 4}, {}], None), ([{"max_concurrent_requests": 0}], None),
     ([{"max_concurrent_requests": 4}, {"max_concurrent_requests": "6"}], 10)],
)  # fmt: skip
def test_router_admission_is_unbounded_when_one_router_is(routers: list[dict[str, object]], admits: int | None) -> None:
    assert router_admission(routers) == admits


@pytest.mark.parametrize(
    ("gib", "chunk"),
    # memory_hook: below 20 GiB 2048; below 60 GiB 4096; below 160 GiB (H100 80 GiB, H200 141 GiB) 8192; else
    # (B200 192 GiB) 16384.
    [(16, 2048), (24, 4096), (48, 4096), (80, 8192), (141, 8192), (159.9, 8192), (160, 16384), (192, 16384)],
)
def test_the_chunk_size_default_follows_the_gpu_memory(gib: float, chunk: int) -> None:
    assert default_chunked_prefill_size(gib) == chunk


LIVE = {"max_total_tokens": 1_000_000, "max_running_requests": 64, "context_length": 131_072, "page_size": 256}


@pytest.mark.parametrize(
    ("live", "ranks", "running", "reserve"),
    [
        (LIVE, None, 64, 512),  # a decode engine in PD (the role's mode): SGLang's 512-token admission reserve
        ({**LIVE, "disaggregation_mode": "null"}, None, 64, 0),  # the engine says it runs outside PD: no reserve
        ({**LIVE, "disaggregation_mode": "decode", "num_reserved_decode_tokens": 128}, None, 64, 128),
        (LIVE, 4, 16, 512),  # /server_info's 64 running slots are the whole engine's: 16 per attention-DP rank
    ],
    ids=["pd-decode", "not-pd", "declared-reserve", "four-ranks"],
)
def test_an_engine_from_its_live_values(live: dict[str, Any], ranks: int | None, running: int, reserve: int) -> None:
    engine = Engine.from_live("d1", "decode", live) if ranks is None else Engine.from_live("d1", "decode", live, ranks)
    assert engine == Engine("d1", "decode", 1_000_000, running, 131_072, 256, ranks or 1, reserve)


def test_the_per_call_context_is_the_shortest_engines() -> None:
    """A call crosses a prefill and a decode engine: the fleet serves the shorter context (none without engines)."""
    engines = [Engine("p1", "prefill", 10**6, 64, 131_072), Engine("d1", "decode", 10**6, 64, 65_536)]
    assert per_call_context(engines) == 65_536
    assert per_call_context([]) is None


def test_the_routers_queue_sums_the_slots_and_counts_smg_s_default_where_none_is_declared() -> None:
    """One router declares 5 queued for 7 s; the other declares neither, so smg's own defaults hold there
    (--queue-size 100, --queue-timeout-secs 60): 105 queued, refused from 7 s on at the first, after 60 s at the
    latest."""
    assert router_queue([]) is None
    assert router_queue([{"queue_size": 5, "queue_timeout_secs": 7}, {}]) == RouterQueue(105, 7, 60)
    assert router_queue([{"queue_size": 0, "queue_timeout_secs": 30}]) == RouterQueue(0, 30, 30)
