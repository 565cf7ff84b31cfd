"""Each term of our model alone, against values computed by hand here (no estimator: a fake step source)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_perf_terms as terms
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import (
    DecodeQuery,
    FleetShape,
    PrefillQuery,
    StepTime,
    Workload,
    index_facts,
    predict,
)
from perftools import model_config


class Linear:
    """Prefill pass = 100 ms + 0.01 ms/token computed + 0.001 ms/token of prefix (attention: the prefix part);
    decode step = 5 ms + 0.5 ms per sequence + 1e-5 ms per token of context per sequence (attention: the last)."""

    def prefill(self, queries: Sequence[PrefillQuery]) -> list[StepTime]:
        out = []
        for q in queries:
            attention = 0.001 * q.prefix * q.batch
            ms = 100 + 0.01 * (q.isl - q.prefix) * q.batch + attention
            out.append(StepTime(ms, ms, 0.0, 0.0, attention, "fake", "0.5.14"))
        return out

    def decode(self, queries: Sequence[DecodeQuery]) -> list[StepTime]:
        out = []
        for q in queries:
            attention = 1e-5 * q.context * q.batch
            ms = 5 + 0.5 * q.batch + attention
            out.append(StepTime(ms, ms, 0.0, 0.0, attention, "fake", "0.5.14"))
        return out


FLEET = FleetShape(model="m", chunked_prefill_size=8192, decode_max_running=64)


def test_chunked_prefill_sums_chunk_passes_with_growing_prefix() -> None:
    # 20,000 tokens in chunks of 8192: passes (0, 8192), (8192, 16384), (16384, 20000)
    assert terms.chunk_spans(20000, 8192) == [(0, 8192), (8192, 16384), (16384, 20000)]
    expected = (100 + 81.92) + (100 + 81.92 + 8.192) + (100 + 36.16 + 16.384)
    pred = predict(FLEET, Workload(isl=20000, osl=10, concurrency=1), Linear())
    assert pred.terms[0].ms == pytest.approx(expected)
    assert pred.ttft_p50.ms == pytest.approx(expected)  # one call, no transfer declared


def test_sampled_chunks_interpolate_exactly_when_linear() -> None:
    # 200,000 tokens: 25 chunks, 5 priced (4 full + the partial last); a linear per-chunk cost is summed exactly
    spans = terms.chunk_spans(200000, 8192)
    assert len(spans) == 25 and terms.sampled_chunks(25) == [0, 8, 15, 23, 24]
    exact = sum(100 + 0.01 * (end - start) + 0.001 * start for start, end in spans)
    pred = predict(FLEET, Workload(isl=200000, osl=10, concurrency=1), Linear())
    assert pred.terms[0].ms == pytest.approx(exact)
    assert "25 chunks" in pred.ttft_p50.source


def test_fifo_queueing_order_statistics() -> None:
    # 10 prompts of 8192 tokens (one a pass: 181.92 ms) on one engine: the k-th first token at k passes; read as
    # numpy.percentile reads ten values (bench_serving's rule), p50 at rank 5.5 and p90 at rank 9.1
    one = 100 + 81.92
    pred = predict(FLEET, Workload(isl=8192, osl=10, concurrency=10), Linear())
    assert pred.ttft_p50.ms == pytest.approx(5.5 * one) and pred.ttft_p90.ms == pytest.approx(9.1 * one)
    # two prefill engines halve the queue: passes 1..5 twice each, p50 = 3 passes, p90 = 5
    two = predict(FleetShape(model="m", prefill_engines=2), Workload(isl=8192, osl=10, concurrency=10), Linear())
    assert two.ttft_p50.ms == pytest.approx(3 * one) and two.ttft_p90.ms == pytest.approx(5 * one)
    assert pred.binding == "prefill engine"
    # short prompts share a pass: 4 of 2048 tokens per 8192-token pass
    assert terms.fifo_finish_times(10, 1, 4, 50.0) == [50, 50, 50, 50, 100, 100, 100, 100, 150, 150]


def test_md1_waiting_quantiles() -> None:
    # rho = 0.5, S = 100 ms: mean wait 50 ms; P(W > t) = 0.5 exp(-t/100): p50 0, p90 100 ln 5
    assert terms.md1_wait_quantile(0.005, 100, 0.5) == 0.0
    assert terms.md1_wait_quantile(0.005, 100, 0.9) == pytest.approx(100 * math.log(5))
    assert terms.md1_wait_quantile(0.01, 100, 0.9) == math.inf


def test_kv_transfer_over_the_declared_bandwidth() -> None:
    cfg = model_config("deepseek-v4-flash")
    from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_capacity import kv_cost

    per_token = kv_cost(cfg, "fp8_e4m3", True).per_token
    # 200,000 tokens at 20 GB/s
    assert terms.transfer_ms(200000, per_token, 20e9) == pytest.approx(200000 * per_token / 20e9 * 1000)
    assert terms.transfer_ms(200000, per_token, math.inf) == 0.0
    fleet = FleetShape(model="m", kv_bytes_per_token=5000.0, transfer_bytes_per_s=1e9)
    pred = predict(fleet, Workload(isl=4096, osl=10, concurrency=1), Linear())
    assert pred.terms[2].ms == pytest.approx(4096 * 5000 / 1e9 * 1000)
    assert pred.ttft_p50.ms == pytest.approx(100 + 40.96 + 20.48)
    assert "our model" in pred.terms[2].source


def test_router_admission_queues_and_rejects() -> None:
    fleet = FleetShape(model="m", router_max_concurrent=4, router_queue_size=2, router_queue_timeout_s=60)
    pred = predict(fleet, Workload(isl=8192, osl=10, concurrency=8), Linear())
    # 4 admitted, 2 queued, 2 refused by a full queue
    assert pred.rejected == 2 and any("HTTP 429" in n for n in pred.notes)
    one = 100 + 81.92
    # the queued two enter when the first two finish, and queue behind the engine's backlog of four prefills:
    # first tokens at 1..6 passes; read as numpy.percentile (bench_serving's rule) reads six values, p90 lies half
    # way between the fifth and the sixth, p50 half way between the third and the fourth
    assert pred.ttft_p90.ms == pytest.approx(5.5 * one) and pred.ttft_p50.ms == pytest.approx(3.5 * one)


def test_bf16_index_keys_scale_the_indexer_share() -> None:
    share, ratio = index_facts(model_config("deepseek-v4-flash"), True)
    # fp8 keys 132 B, bf16 256 B; c4 layers add a quarter key each, c128 layers 1/128 of a slot: a 256-token page
    # holds 2 slots of 584 B, padded to 3 x 576 B, so 864 B a slot
    assert ratio == pytest.approx(256 / 132)
    cfg = model_config("deepseek-v4-flash")
    c4 = sum(1 for r in cfg["compress_ratios"] if r == 4)
    c128 = sum(1 for r in cfg["compress_ratios"] if r == 128)
    index = c4 * 132 / 4
    assert share == pytest.approx(index / (index + c128 * 864 / 128))
    assert index_facts(model_config("deepseek-v3.2"), True) == (0.0, 1.0)
    # the extra decode time: the attention's growth over its value at one page, times share, times (ratio - 1)
    assert terms.bf16_index_extra_ms(3.0, 1.0, 0.8, 2.0) == pytest.approx(1.6)
    fleet = FleetShape(model="m", index_share=0.5, key_ratio=2.0, decode_max_running=1)
    pred = predict(fleet, Workload(isl=100000, osl=2, concurrency=1), Linear())
    attention, attention_ref = 1e-5 * 100001, 1e-5 * 256
    assert pred.terms[4].ms == pytest.approx((attention - attention_ref) * 0.5)
    assert pred.terms[4].source == "our model"


def test_decode_batch_follows_prefill_supply() -> None:
    # prompts of 200,000 tokens take seconds to prefill; 10 output tokens take milliseconds: one call decodes at a time
    pred = predict(FLEET, Workload(isl=200000, osl=10, concurrency=32), Linear())
    assert pred.decode_batch == pytest.approx(1.0) and pred.binding == "prefill engine"
    # short prompts, long outputs: the decode engine fills to its running limit
    busy = predict(FleetShape(model="m", decode_max_running=8), Workload(isl=512, osl=4000, concurrency=32), Linear())
    assert busy.decode_batch == pytest.approx(8.0) and busy.binding == "decode engine"
    assert busy.itl_full.ms == pytest.approx(5 + 0.5 * 8 + 1e-5 * (512 + 3600) * 8)
