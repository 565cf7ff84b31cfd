"""The scheduler: running cap, KV pool, FIFO admission, queue cap by mode, retraction, abort."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from sglang_sim.metrics import Stats
from sglang_sim.scheduler import QUEUE_FULL, Phase, RequestError, Scheduler, SimRequest


def make(**kw: Any) -> Scheduler:
    opts: dict[str, Any] = {
        "dp_rank": 0,
        "max_total_num_tokens": 4096,
        "max_running_requests": 4,
        "page_size": 256,
        "mode": "null",
        "max_queued_requests": None,
        "ttft_s": 0.0,
        "tokens_per_sec": 200.0,
        "prefill_tokens_per_sec": 0.0,
        "step_s": 0.005,
        "clip_max_new_tokens": 4096,
        "stats": Stats(),
    }
    opts.update(kw)
    return Scheduler(**opts)


def req(n_in: int, n_out: int, rid: str = "r") -> SimRequest:
    return SimRequest(rid=rid, input_ids=[0] * n_in, max_new_tokens=n_out)


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(body(), 20))


async def finish(*reqs: SimRequest) -> None:
    for r in reqs:
        while not r.finished:
            await r.changed.wait()
            r.changed.clear()


def test_running_cap_and_fifo() -> None:
    async def body() -> None:
        s = make(max_running_requests=2)
        s.start()
        reqs = [req(10, 10, f"r{i}") for i in range(5)]
        peak = 0
        for r in reqs:
            s.submit(r)
        while not all(r.finished for r in reqs):
            peak = max(peak, len(s.active))
            assert len(s.active) <= 2
            await asyncio.sleep(0.002)
        await s.stop()
        assert peak == 2
        admitted = sorted(reqs, key=lambda r: r.admitted_at or 0)
        assert [r.rid for r in admitted] == [f"r{i}" for i in range(5)]
        assert all(r.generated == 10 and r.error is None for r in reqs)
        assert s.used == 0 and s.stats.non_streaming.requests == 5
        assert s.stats.non_streaming.generation_tokens == 50 and s.stats.non_streaming.prompt_tokens == 50

    run(body)


def test_kv_pool_limits_admission() -> None:
    async def body() -> None:
        # Each request reserves 600 + 100 tokens -> 768 (3 pages); a 2048-token pool holds two at once.
        s = make(max_total_num_tokens=2048, max_running_requests=10, tokens_per_sec=1000.0)
        s.start()
        reqs = [req(600, 100, f"r{i}") for i in range(4)]
        for r in reqs:
            s.submit(r)
        await asyncio.sleep(0.01)
        assert len(s.active) == 2 and s.num_waiting == 2 and s.used == 2 * 768
        await finish(*reqs)
        await s.stop()
        assert s.used == 0

    run(body)


def test_head_of_line_blocks() -> None:
    async def body() -> None:
        s = make(max_total_num_tokens=2048, max_running_requests=10, tokens_per_sec=1000.0)
        s.start()
        big1, big2, small = req(1000, 200, "big1"), req(1000, 200, "big2"), req(10, 10, "small")
        for r in (big1, big2, small):
            s.submit(r)
        await asyncio.sleep(0.01)
        assert big1.phase is Phase.RUNNING and big2.phase is Phase.WAITING and small.phase is Phase.WAITING
        await finish(big1, big2, small)
        await s.stop()
        assert (small.admitted_at or 0) >= (big2.admitted_at or 0)

    run(body)


def test_queue_cap_only_without_disaggregation() -> None:
    async def body() -> None:
        s = make(max_running_requests=1, max_queued_requests=1, tokens_per_sec=20.0)
        s.start()
        first, second = req(10, 50), req(10, 50)
        s.submit(first)
        await asyncio.sleep(0.01)  # first is running, the queue is empty
        s.submit(second)
        with pytest.raises(RequestError) as exc:
            s.submit(req(10, 50))
        assert (exc.value.status, exc.value.message) == (503, QUEUE_FULL)
        await s.stop()
        for mode in ("prefill", "decode"):
            p = make(max_running_requests=1, max_queued_requests=1, mode=mode, tokens_per_sec=20.0)
            for _ in range(5):
                p.submit(req(10, 50))  # ignored in PD mode, as in SGLang 0.5.23
            assert p.num_waiting == 5

    run(body)


def test_retraction_when_the_pool_cannot_grow() -> None:
    async def body() -> None:
        # Reservations are clipped to 64 new tokens, but each request really generates 700.
        s = make(max_total_num_tokens=2048, max_running_requests=4, clip_max_new_tokens=64, tokens_per_sec=4000.0)
        s.start()
        reqs = [req(200, 700, f"r{i}") for i in range(3)]
        for r in reqs:
            s.submit(r)
        await finish(*reqs)
        await s.stop()
        assert all(r.generated == 700 and r.error is None for r in reqs)
        assert s.stats.retracted > 0 and sum(r.retractions for r in reqs) == s.stats.retracted
        assert s.used == 0

    run(body)


def test_prefill_mode_finishes_after_first_token() -> None:
    async def body() -> None:
        done: list[str] = []
        s = make(mode="prefill", on_prefill_done=lambda r: done.append(r.rid))
        s.start()
        r = req(300, 50, "p")
        s.submit(r)
        await finish(r)
        await s.stop()
        assert r.generated == 1 and done == ["p"] and r.reserve == 512

    run(body)


def test_abort_frees_kv_and_closed_scheduler_refuses() -> None:
    async def body() -> None:
        s = make(tokens_per_sec=10.0)
        s.start()
        r = req(100, 100)
        s.submit(r)
        await asyncio.sleep(0.01)
        assert s.used > 0
        s.abort(r)
        assert r.finished and r.error is not None and s.used == 0 and not s.active
        s.closed = True
        with pytest.raises(RequestError) as exc:
            s.submit(req(1, 1))
        assert exc.value.status == 503
        await s.stop()

    run(body)


def test_decode_waits_for_transfer() -> None:
    async def body() -> None:
        gate = asyncio.Event()

        async def transfer(r: SimRequest) -> None:
            await gate.wait()

        async def failing(r: SimRequest) -> None:
            raise RequestError(500, "prefill gone")

        s = make(mode="decode", transfer=transfer)
        s.start()
        r = req(10, 5)
        r.bootstrap = ("127.0.0.1", 1, 7)
        s.submit(r)
        await asyncio.sleep(0.05)
        assert r.phase is Phase.TRANSFER and r.generated == 0 and s.num_transfer == 1
        gate.set()
        await finish(r)
        assert r.generated == 5 and r.error is None
        f = make(mode="decode", transfer=failing)
        f.start()
        bad = req(10, 5)
        bad.bootstrap = ("127.0.0.1", 1, 8)
        f.submit(bad)
        await finish(bad)
        assert bad.error is not None and bad.error.status == 500 and f.used == 0
        await s.stop()
        await f.stop()

    run(body)
