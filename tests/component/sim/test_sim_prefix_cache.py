"""The time model's prefix cache (SGLang's radix cache, by pages): a prompt prefilled again on the same engine pays
only for what its cached whole pages leave, as sglang_perf.prefill_pass_ms prices it with that prefix; another
prompt gets no hit; the cache holds no more pages than the KV pool."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_perf as perf
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_table import TableSteps
from sglang_sim.metrics import Stats
from sglang_sim.scheduler import Scheduler, SimRequest
from sglang_sim.timing import BUILTIN, table_path
from simtools import MODEL_CONFIG, Launcher
from test_sim_timed_scheduler import clock, finish

SPEED = 0.5  # the cached pass lasts ~0.14 s: far above the loop's and HTTP's delays
TOLERANCE = 0.15
ISL = 32_768
PAGE = 256
CHUNK = 8192


def generate(url: str, ids: list[int]) -> dict[str, float]:
    """One non-streamed /generate of one token: its meta_info (e2e_latency is its TTFT on the engine)."""
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 1}}
    r = httpx.post(url + "/generate", json=body, timeout=120)
    assert r.status_code == 200, r.text
    meta: dict[str, float] = r.json()["meta_info"]
    return meta


def test_a_prompt_sent_again_pays_only_its_uncached_pages(launcher: Launcher) -> None:
    env = {"SGLANG_SIM_STEP_TABLE": BUILTIN, "SGLANG_SIM_SPEED_FACTOR": str(SPEED), "SGLANG_DSV4_BF16_INDEX_K": "1"}
    args = ["--context-length", "65536", "--chunked-prefill-size", str(CHUNK), "--enable-cache-report"]
    sim = launcher.sim(args, env)
    prompt = [7] * ISL
    cold, warm = generate(sim.url, prompt), generate(sim.url, prompt)
    other = generate(sim.url, [8] * ISL)  # another prompt: no page in common
    prefix = (ISL - 1) // PAGE * PAGE  # whole pages, never the last token
    assert (cold["cached_tokens"], warm["cached_tokens"], other["cached_tokens"]) == (0, prefix, 0)

    steps = TableSteps.load(table_path(BUILTIN, 4))
    fleet = perf.fleet_shape(
        json.loads(MODEL_CONFIG.read_text()),
        steps.table.grid.model,
        tp=4,
        chunked_prefill_size=CHUNK,
        decode_max_running=1,
        bf16_index_k=True,
        kv_cache_dtype="fp8_e4m3",
        transfer_backend="mooncake",
    )
    full_ms = perf.prefill_pass_ms(fleet, ISL, 1, steps)
    cached_ms = perf.prefill_pass_ms(fleet, ISL, 1, steps, prefix)
    assert cached_ms < full_ms / 10
    model = cached_ms / full_ms
    measured = warm["e2e_latency"] / cold["e2e_latency"]
    assert measured == pytest.approx(model, rel=TOLERANCE), (measured, model, cold, warm)
    assert other["e2e_latency"] == pytest.approx(cold["e2e_latency"], rel=TOLERANCE)


def request(rid: str, first: int, n: int) -> SimRequest:
    return SimRequest(rid=rid, input_ids=[first] + [0] * (n - 1), max_new_tokens=1)


def test_the_cache_holds_at_most_the_pool_s_pages() -> None:
    async def body() -> None:
        pool = 8 * PAGE
        s = Scheduler(
            dp_rank=0,
            max_total_num_tokens=pool,
            max_running_requests=8,
            page_size=PAGE,
            mode="prefill",
            max_queued_requests=None,
            ttft_s=0.0,
            tokens_per_sec=100.0,
            prefill_tokens_per_sec=0.0,
            step_s=0.002,
            clip_max_new_tokens=1,
            stats=Stats(),
            clock=clock(),
        )
        s.start()
        a = request("a", 1, 6 * PAGE)
        s.submit(a)
        await finish(a)
        a2 = request("a2", 1, 6 * PAGE)  # a again: 5 whole pages cached (the last token is computed)
        s.submit(a2)
        await finish(a2)
        assert a2.cached_tokens == 5 * PAGE
        b = request("b", 2, 6 * PAGE)  # another prompt: no hit; its 6 pages push out a's deepest 4
        s.submit(b)
        await finish(b)
        assert b.cached_tokens == 0
        assert s.prefix_cache_pages == 8 and len(s._prefix_cache) == 8
        a3 = request("a3", 1, 6 * PAGE + 1)  # a's first 2 pages are left
        s.submit(a3)
        await finish(a3)
        assert a3.cached_tokens == 2 * PAGE
        assert len(s._prefix_cache) == 8
        await s.stop()

    asyncio.run(asyncio.wait_for(body(), 20))
