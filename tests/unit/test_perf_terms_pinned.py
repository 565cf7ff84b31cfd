"""The time model's own terms (plugin_utils/sglang_perf_terms.py) on small hand-made inputs: chunk spans, the chunk
positions priced, the interpolation between them, and the M/D/1 waiting quantile. Every expected value is worked
out by hand from the docstrings' formulas in the comment beside it."""

from __future__ import annotations

import math
import re

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_perf_terms as terms

# ---------------------------------------------------------------- chunk spans


def test_chunk_spans_cover_the_prompt_from_token_zero() -> None:
    # 10 tokens in chunks of 4: [0, 4), [4, 8), [8, 10)
    assert terms.chunk_spans(10, 4) == [(0, 4), (4, 8), (8, 10)]
    # the smallest prompt and chunk: one span of one token
    assert terms.chunk_spans(1, 1) == [(0, 1)]
    assert terms.chunk_spans(3, 1) == [(0, 1), (1, 2), (2, 3)]


@pytest.mark.parametrize(("isl", "chunk"), [(0, 5), (-1, 5), (5, 0), (5, -2), (0, 0)])
def test_chunk_spans_refuse_an_empty_prompt_or_chunk(isl: int, chunk: int) -> None:
    message = f"isl and chunk must be > 0 (isl={isl}, chunk={chunk})"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        terms.chunk_spans(isl, chunk)


# ---------------------------------------------------------------- chunk positions priced


@pytest.mark.parametrize(
    ("n_chunks", "samples", "picked"),
    [
        (1, 5, [0]),
        (5, 5, [0, 1, 2, 3, 4]),  # as many chunks as samples: all
        (2, 2, [0, 1]),  # two samples, two chunks: both, no spacing to compute
        # 6 chunks, 5 samples: full chunks 0..4, picks round(i * 4 / 3) for i 0..3 = 0, 1, 3, 4; plus the last (5)
        (6, 5, [0, 1, 3, 4, 5]),
        # 10 chunks: full 0..8, picks round(i * 8 / 3) = 0, 3 (2.67), 5 (5.33), 8; plus 9
        (10, 5, [0, 3, 5, 8, 9]),
        # 10 chunks, 3 samples: picks round(i * 8 / 1) for i 0..1 = 0, 8; plus 9
        (10, 3, [0, 8, 9]),
    ],
)
def test_sampled_chunks_spread_over_the_full_chunks_plus_the_last(
    n_chunks: int, samples: int, picked: list[int]
) -> None:
    assert terms.sampled_chunks(n_chunks, samples) == picked


def test_sampled_chunks_default_to_five_samples() -> None:
    assert terms.CHUNK_SAMPLES == 5
    assert terms.sampled_chunks(10) == [0, 3, 5, 8, 9]


# ---------------------------------------------------------------- interpolation over the chunks


def test_interpolate_chunks_only_the_last_priced() -> None:
    assert terms.interpolate_chunks(1, {0: 5.0}) == 5.0
    assert terms.interpolate_chunks(3, {2: 7.0}) == 7.0  # no full chunk priced: the last alone


def test_interpolate_chunks_linear_between_priced_full_chunks() -> None:
    # 6 chunks, priced 0 (10), 3 (40) and the last 5 (7). Full chunks 0..4:
    # 0: 10; 1: 10 + 30 * 1/3 = 20; 2: 10 + 30 * 2/3 = 30; 3: 40; 4: beyond the last priced full chunk, 40.
    # Sum 10 + 20 + 30 + 40 + 40 = 140, plus the last 7 = 147.
    assert terms.interpolate_chunks(6, {0: 10.0, 3: 40.0, 5: 7.0}) == pytest.approx(147.0)


def test_interpolate_chunks_before_the_first_and_after_the_last_priced() -> None:
    # 7 chunks, priced 1 (20), 3 (40), 4 (70) and the last 6 (5). Full chunks 0..5:
    # 0: before the first priced, 20; 1: 20; 2: 20 + 20 * 1/2 = 30; 3: 40; 4: 70; 5: after the last priced, 70.
    # Sum 20 + 20 + 30 + 40 + 70 + 70 = 250, plus 5 = 255.
    assert terms.interpolate_chunks(7, {1: 20.0, 3: 40.0, 4: 70.0, 6: 5.0}) == pytest.approx(255.0)


# ---------------------------------------------------------------- M/D/1 waiting


def test_md1_wait_quantile_from_the_pollaczek_khinchine_mean() -> None:
    # rate 0.008 / ms, service 100 ms: rho = 0.8; mean wait rho * S / (2 (1 - rho)) = 80 / 0.4 = 200 ms.
    # t_q = (Wq / rho) * ln(rho / (1 - q)) = 250 * ln(0.8 / 0.1) = 250 ln 8 at q = 0.9; 250 ln 1.6 at q = 0.5
    assert terms.md1_wait_quantile(0.008, 100.0, 0.9) == pytest.approx(250 * math.log(8))
    assert terms.md1_wait_quantile(0.008, 100.0, 0.5) == pytest.approx(250 * math.log(1.6))
    # rate 0.0025 / ms, service 200 ms: rho = 0.5, Wq = 100 ms, t_0.9 = 200 ln 5
    assert terms.md1_wait_quantile(0.0025, 200.0, 0.9) == pytest.approx(200 * math.log(5))


def test_md1_wait_quantile_is_zero_below_the_atom() -> None:
    # rho = 0.05 <= 1 - 0.9: the p90 call does not wait
    assert terms.md1_wait_quantile(0.0005, 100.0, 0.9) == 0.0
    # rho = 0.4 <= 1 - 0.5
    assert terms.md1_wait_quantile(0.004, 100.0, 0.5) == 0.0
    # no arrivals
    assert terms.md1_wait_quantile(0.0, 100.0, 0.9) == 0.0


@pytest.mark.parametrize(("rate", "service"), [(0.01, 100.0), (0.015, 100.0), (0.05, 100.0)])
def test_md1_wait_quantile_unbounded_at_or_over_capacity(rate: float, service: float) -> None:
    # rho = 1, 1.5, 5: the queue grows without bound
    assert terms.md1_wait_quantile(rate, service, 0.9) == math.inf
    assert terms.md1_wait_quantile(rate, service, 0.5) == math.inf


# ---------------------------------------------------------------- order statistics, transfer, keys, batches


def test_quantile_numpys_linear_rule() -> None:
    # 4 values: q 0.5 at rank 1.5 = 2.5; q 0.9 at rank 2.7 = 3.7; the ends are the extremes
    assert terms.quantile([4.0, 1.0, 3.0, 2.0], 0.5) == pytest.approx(2.5)
    assert terms.quantile([4.0, 1.0, 3.0, 2.0], 0.9) == pytest.approx(3.7)
    assert terms.quantile([4.0, 1.0, 3.0, 2.0], 0.0) == 1.0
    assert terms.quantile([4.0, 1.0, 3.0, 2.0], 1.0) == 4.0
    assert terms.quantile([5.0], 0.9) == 5.0
    with pytest.raises(ValueError, match=r"^no values$"):
        terms.quantile([], 0.5)


def test_fifo_finish_times_round_robin_over_the_engines() -> None:
    # 5 calls on 2 engines, 2 a pass of 100 ms: engine 0 takes 3 (100, 100, 200), engine 1 takes 2 (100, 100)
    assert terms.fifo_finish_times(5, 2, 2, 100.0) == [100.0, 100.0, 200.0, 100.0, 100.0]
    assert terms.fifo_finish_times(3, 1, 1, 10.0) == [10.0, 20.0, 30.0]
    assert terms.fifo_finish_times(1, 3, 1, 10.0) == [10.0]
    assert terms.fifo_finish_times(0, 2, 2, 100.0) == []


def test_transfer_ms_over_the_declared_bandwidth() -> None:
    # 1,000 tokens x 2 bytes over 1 MB/s = 2 ms; free transfer: 0
    assert terms.transfer_ms(1000, 2.0, 1e6) == pytest.approx(2.0)
    # below one byte a second is still a bandwidth: 2 tokens x 1 byte over 0.5 B/s = 4 s
    assert terms.transfer_ms(2, 1.0, 0.5) == pytest.approx(4000.0)
    assert terms.transfer_ms(1000, 2.0, math.inf) == 0.0
    for bandwidth in (0.0, -1.0):
        with pytest.raises(ValueError, match=r"^transfer bandwidth must be > 0$"):
            terms.transfer_ms(1000, 2.0, bandwidth)
    assert terms.TRANSFER_BYTES_PER_S == {
        "mooncake": 20e9,
        "nixl": 20e9,
        "mori": 20e9,
        "mooncake_tcp": 2.5e9,
        "fake": math.inf,
    }


def test_bf16_index_extra_ms_on_the_attention_growth() -> None:
    # growth 30 - 10 = 20 ms, half of it index keys, read twice as wide: 20 x 0.5 x (2 - 1) = 10 ms
    assert terms.bf16_index_extra_ms(30.0, 10.0, 0.5, 2.0) == pytest.approx(10.0)
    assert terms.bf16_index_extra_ms(5.0, 10.0, 0.5, 2.0) == 0.0  # no growth below the reference
    assert terms.bf16_index_extra_ms(30.0, 10.0, 0.5, 1.0) == 0.0  # fp8 keys: nothing extra


@pytest.mark.parametrize(
    ("max_batch", "ladder"),
    [
        (0, [1]),
        (1, [1]),
        (4, [1, 4]),
        (5, [1, 4, 5]),
        (64, [1, 4, 16, 64]),
        (65, [1, 4, 16, 64, 65]),
        (300, [1, 4, 16, 64, 256, 300]),
    ],
)
def test_batch_ladder_powers_of_four_below_the_limit(max_batch: int, ladder: list[int]) -> None:
    assert terms.batch_ladder(max_batch) == ladder


@pytest.mark.parametrize(
    ("batch", "ms"),
    [(0.5, 10.0), (1.0, 10.0), (2.0, 12.0), (4.0, 16.0), (10.0, 28.0), (16.0, 40.0), (20.0, 40.0)],
)
def test_interpolate_batch_linear_and_clamped(batch: float, ms: float) -> None:
    # 1: 10 ms, 4: 16 ms, 16: 40 ms; 2 is a third of the way from 1 to 4: 12; 10 is half way from 4 to 16: 28
    assert terms.interpolate_batch({16: 40.0, 1: 10.0, 4: 16.0}, batch) == pytest.approx(ms)
