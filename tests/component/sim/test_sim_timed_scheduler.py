"""The scheduler's time model (a StepClock) in-process, over a hand-made step source: prefill passes first in, first
out, filling the chunk; decode steps at the batch's size and mean context; the KV transfer; and the virtual schedule,
on which a late event loop catches up instead of drifting. Times are compared on the schedule (first_token_at,
last_token_at, the inter-token histogram), which the loop's own delays do not move."""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import (
    DecodeQuery,
    FleetShape,
    PrefillQuery,
    StepTime,
)
from sglang_sim.metrics import Stats
from sglang_sim.scheduler import Scheduler, SimRequest
from sglang_sim.timing import StepClock


class Steps:
    """A prefill pass: 10 ms per prompt plus 1 ms per thousand tokens already cached; a decode step: 5 ms plus 1 ms
    per sequence plus 1 ms per thousand tokens of context."""

    def prefill(self, queries: Sequence[PrefillQuery]) -> list[StepTime]:
        return [self._step(10.0 * q.batch + q.prefix / 1000) for q in queries]

    def decode(self, queries: Sequence[DecodeQuery]) -> list[StepTime]:
        return [self._step(5.0 + q.batch + q.context / 1000) for q in queries]

    @staticmethod
    def _step(ms: float) -> StepTime:
        return StepTime(ms, ms, 0.0, 0.0, 0.0, "hand-made")


def clock(**fleet: Any) -> StepClock:
    return StepClock(FleetShape("m", chunked_prefill_size=8192, **fleet), Steps(), 1.0, "hand-made")


def make(mode: str = "null", **kw: Any) -> Scheduler:
    opts: dict[str, Any] = {
        "dp_rank": 0,
        "max_total_num_tokens": 1 << 20,
        "max_running_requests": 64,
        "page_size": 256,
        "mode": mode,
        "max_queued_requests": None,
        "ttft_s": 0.0,
        "tokens_per_sec": 100.0,
        "prefill_tokens_per_sec": 0.0,
        "step_s": 0.002,
        "clip_max_new_tokens": 4096,
        "stats": Stats(),
        "clock": clock(),
    }
    opts.update(kw)
    return Scheduler(**opts)


def req(n_in: int, n_out: int, rid: str = "r") -> SimRequest:
    """A prompt of its own (its first token is its id's): no page in another's prefix cache."""
    return SimRequest(rid=rid, input_ids=[zlib.crc32(rid.encode())] + [0] * (n_in - 1), max_new_tokens=n_out)


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(body(), 20))


async def finish(*reqs: SimRequest) -> None:
    for r in reqs:
        while not r.finished:
            await r.changed.wait()
            r.changed.clear()


def first(r: SimRequest) -> float:
    assert r.first_token_at is not None
    return r.first_token_at


def test_prefill_passes_are_fifo_and_fill_the_chunk() -> None:
    async def body() -> None:
        s = make("prefill")
        reqs = [req(1000, 8, f"r{i}") for i in range(20)] + [req(20_000, 8, "long"), req(1000, 8, "after")]
        for r in reqs:
            s.submit(r)
        s.start()
        await finish(*reqs)
        await s.stop()
        start = reqs[0].admitted_at
        assert start is not None and all(r.admitted_at == start for r in reqs)
        # 8 prompts of 1,000 a pass (80 ms), then 8, then the 4 left (40 ms); the long prompt alone in its 3 chunks
        # (10 + 18.192 + 26.384 ms: each on the prefix before it); the last one after it
        ends = [start + 0.08, start + 0.16, start + 0.2, start + 0.2 + 0.054576, start + 0.264576]
        got = [first(r) for r in reqs]
        assert got[:8] == pytest.approx([ends[0]] * 8, abs=1e-9)
        assert got[8:16] == pytest.approx([ends[1]] * 8, abs=1e-9)
        assert got[16:20] == pytest.approx([ends[2]] * 4, abs=1e-9)
        assert got[20:] == pytest.approx(ends[3:], abs=1e-9)
        assert all(r.generated == 1 and r.finished_at == r.first_token_at for r in reqs)  # prefill: one token
        assert s.stats.itl.count == 0 and s.stats.non_streaming.ttft.count == 22

    run(body)


def test_decode_steps_take_the_batch_and_its_mean_context() -> None:
    async def body() -> None:
        s = make("null")
        a, b = req(1000, 3, "a"), req(3000, 2, "b")
        s.submit(a)
        s.submit(b)
        s.start()
        await finish(a, b)
        await s.stop()
        # one pass of both (4,000 tokens fit the chunk): 20 ms; then a step of 2 at mean context (1001 + 3001) / 2,
        # which ends b, and one of a alone at 1002
        assert a.admitted_at is not None and first(a) == first(b) == pytest.approx(a.admitted_at + 0.02, abs=1e-9)
        step2, step1 = (5 + 2 + 2.001) / 1000, (5 + 1 + 1.002) / 1000
        assert b.last_token_at == pytest.approx(first(b) + step2, abs=1e-9)
        assert a.last_token_at == pytest.approx(first(a) + step2 + step1, abs=1e-9)
        assert s.stats.itl.count == 3 and s.stats.itl.sum == pytest.approx(2 * step2 + step1, abs=1e-9)

    run(body)


def test_a_late_loop_catches_up_on_the_schedule() -> None:
    async def body() -> None:
        s = make("null")
        r = req(100, 40)
        s.submit(r)
        s.start()
        while r.generated < 5:
            await asyncio.sleep(0.001)
        time.sleep(0.15)  # the event loop is held: about 25 steps fall due meanwhile
        await finish(r)
        await s.stop()
        # 39 steps of batch 1 at contexts 101 .. 139: no time lost to the held loop
        steps = sum((5 + 1 + (100 + k) / 1000) / 1000 for k in range(1, 40))
        assert r.last_token_at == pytest.approx(first(r) + steps, abs=1e-9)
        assert s.stats.itl.count == 39 and s.stats.itl.sum == pytest.approx(steps, abs=1e-9)
        assert r.finished_at == r.last_token_at

    run(body)


def test_decode_waits_for_the_kv_transfer() -> None:
    async def body() -> None:
        arrived: list[float] = []

        async def transfer(_req: SimRequest) -> None:
            await asyncio.sleep(0.01)
            arrived.append(time.monotonic())

        # 1,000 tokens of 1,000 bytes at 10 MB/s: 100 ms
        s = make("decode", transfer=transfer, clock=clock(kv_bytes_per_token=1000.0, transfer_bytes_per_s=1e7))
        r = req(1000, 3)
        r.bootstrap = ("127.0.0.1", 1, 7)
        s.submit(r)
        s.start()
        await finish(r)
        await s.stop()
        assert first(r) - arrived[0] == pytest.approx(0.1, abs=0.02)
        assert r.last_token_at == pytest.approx(first(r) + (7.001 + 7.002) / 1000, abs=1e-9)

    run(body)


def test_the_fixed_pace_observes_the_inter_token_latency() -> None:
    async def body() -> None:
        s = make("null", clock=None, tokens_per_sec=500.0)
        r = req(10, 12)
        s.submit(r)
        s.start()
        await finish(r)
        await s.stop()
        assert s.stats.itl.count == 11
        assert r.last_token_at is not None and s.stats.itl.sum == pytest.approx(r.last_token_at - first(r), abs=1e-9)

    run(body)
