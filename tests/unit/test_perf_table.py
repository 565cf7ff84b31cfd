"""The step table (plugin_utils/sglang_perf_table.py): the committed simulator table answers its grid points exactly
and interpolates between them (linear in each coordinate, monotone in batch, within its neighbours in context);
build_table, save and load over a hand-made source; and the step-time functions the simulator shares with predict()
(sglang_perf.prefill_pass_ms, decode_step_ms, transfer_ms) compose exactly as predict() does."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from pathlib import Path

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_perf as perf
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import DecodeQuery, PrefillQuery, StepTime
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_table import (
    FIELDS,
    Grid,
    StepTable,
    TableSteps,
    build_table,
    load,
    save,
    table_name,
)
from modeltools import REPO, load_model

MODEL = "deepseek-ai/DeepSeek-V4-Flash"
COMMITTED = REPO / "sim" / "sglang_sim" / "step_tables" / table_name(MODEL, 4)
DSV4 = load_model("deepseek-v4-flash")


@pytest.fixture
def steps() -> TableSteps:
    return TableSteps.load(COMMITTED)


def values(step: StepTime) -> tuple[float, ...]:
    return tuple(getattr(step, name) for name in FIELDS)


def ms(steps: TableSteps, *, isl: int = 0, prefix: int = 0, batch: int = 1, context: int = 0) -> float:
    if context:
        return steps.decode([DecodeQuery(MODEL, 4, 4, context, batch)])[0].ms
    return steps.prefill([PrefillQuery(MODEL, 4, 4, isl, prefix, batch)])[0].ms


def test_the_committed_table_is_the_production_grid(steps: TableSteps) -> None:
    table = steps.table
    assert table.grid == Grid(MODEL, 4, 4, chunk=8192, max_batch=256, max_context=524_288)
    assert table_name(MODEL, 4) == "deepseek-ai--deepseek-v4-flash-tp4.json"
    assert set(table.prefill) == {(q.isl, q.prefix, q.batch) for q in table.grid.prefill_queries()}
    assert set(table.decode) == {(q.context, q.batch) for q in table.grid.decode_queries()}
    assert (8192, 0, 1) in table.prefill and (524_288, 516_096, 1) in table.prefill  # the first and last chunk
    assert (256, 256) in table.decode and (524_288, 1) in table.decode
    assert "AIConfigurator 0.12.0" in table.origin


def test_grid_points_are_answered_exactly(steps: TableSteps) -> None:
    table = steps.table
    pq = [PrefillQuery(MODEL, 4, 4, *key) for key in table.prefill]
    dq = [DecodeQuery(MODEL, 4, 4, *key) for key in table.decode]
    assert [values(s) for s in steps.prefill(pq)] == list(table.prefill.values())
    assert [values(s) for s in steps.decode(dq)] == list(table.decode.values())
    assert {(s.origin, s.data_version) for s in steps.decode(dq)} == {(table.origin, table.data_version)}


def test_decode_is_linear_between_grid_points(steps: TableSteps) -> None:
    # batch 12 halfway between 8 and 16; context 2560 halfway between 1024 and 4096
    assert ms(steps, context=1024, batch=12) == pytest.approx(
        (ms(steps, context=1024, batch=8) + ms(steps, context=1024, batch=16)) / 2, rel=1e-12
    )
    assert ms(steps, context=2560, batch=8) == pytest.approx(
        (ms(steps, context=1024, batch=8) + ms(steps, context=4096, batch=8)) / 2, rel=1e-12
    )


def test_decode_is_monotone_in_batch_and_bounded_in_context(steps: TableSteps) -> None:
    contexts = sorted({c for c, _b in steps.table.decode})
    for context in [300, 1016, 3000, 50_000, 200_500, 524_288]:
        times = [ms(steps, context=context, batch=b) for b in range(1, 300)]
        assert all(a <= b for a, b in itertools.pairwise(times)), context
    # between two priced contexts the answer stays within their two answers (the estimator's own data is not
    # monotone in context everywhere: at batch 8, 64k answers more than 128k)
    for lo, hi in itertools.pairwise(contexts):
        for batch in (1, 8, 48, 256):
            ends = sorted([ms(steps, context=lo, batch=batch), ms(steps, context=hi, batch=batch)])
            for k in range(1, 8):
                assert ends[0] <= ms(steps, context=lo + (hi - lo) * k // 8, batch=batch) <= ends[1]
    # beyond the grid: more batch and more context cost more, along the last segment
    assert ms(steps, context=1024, batch=300) > ms(steps, context=1024, batch=256)
    assert ms(steps, context=1_000_000, batch=4) > ms(steps, context=524_288, batch=4)


def test_short_prefill_is_monotone_in_isl_and_batch(steps: TableSteps) -> None:
    by_isl = [ms(steps, isl=isl) for isl in range(1, 8193, 37)]
    assert all(a <= b for a, b in itertools.pairwise(by_isl))
    for isl in (128, 300, 1000, 2000):
        by_batch = [ms(steps, isl=isl, batch=b) for b in range(1, 8192 // isl + 1)]
        assert all(a <= b for a, b in itertools.pairwise(by_batch)), isl
    # 1,000-token prompts, 8 a pass: between the priced 512 x 8 and 1,024 x 8, closer to the latter
    lo, hi, mid = ms(steps, isl=512, batch=8), ms(steps, isl=1024, batch=8), ms(steps, isl=1000, batch=8)
    assert mid == pytest.approx(lo + (hi - lo) * (1000 - 512) / 512, rel=1e-12)
    # a prompt below the smallest priced isl counts as fewer prompts of it: 64 prompts of 64 tokens = 32 of 128
    assert ms(steps, isl=64, batch=64) == ms(steps, isl=128, batch=32)
    assert ms(steps, isl=10) == ms(steps, isl=128)


def test_chunks_grow_with_the_prefix(steps: TableSteps) -> None:
    chunk = 8192
    full = [ms(steps, isl=p + chunk, prefix=p) for p in range(0, 524_288 - chunk + 1, chunk)]
    assert all(a < b for a, b in itertools.pairwise(full))
    # chunk 3 (prefix 24,576) lies between the priced prefixes 16,384 and 32,768, linearly
    assert ms(steps, isl=32_768, prefix=24_576) == pytest.approx(
        (ms(steps, isl=24_576, prefix=16_384) + ms(steps, isl=40_960, prefix=32_768)) / 2, rel=1e-12
    )
    # a partial last chunk: its short pass plus the full chunk's growth on that prefix, in proportion
    short, first, grown = ms(steps, isl=2392), ms(steps, isl=chunk), ms(steps, isl=196_608 + chunk, prefix=196_608)
    partial = ms(steps, isl=196_608 + 2392, prefix=196_608)
    assert partial == pytest.approx(short + (grown - first) * 2392 / chunk, rel=1e-12)
    assert short < partial < grown


def test_another_model_or_tp_is_refused(steps: TableSteps) -> None:
    with pytest.raises(ValueError, match=r"holds deepseek-ai/DeepSeek-V4-Flash at tp 4, ep 4; asked for .* tp 8"):
        steps.decode([DecodeQuery(MODEL, 8, 8, 1024, 1)])
    with pytest.raises(ValueError, match="not a prefill pass"):
        steps.prefill([PrefillQuery(MODEL, 4, 4, 100, 100, 1)])


class Linear:
    """A hand-made source: prefill 1 ms per token plus 1e-4 ms per token and cached token; decode 5 ms plus
    0.5 ms per sequence plus 1e-5 ms per sequence and context token. Attention is a tenth of it."""

    def __init__(self) -> None:
        self.asked = 0

    def prefill(self, queries: Sequence[PrefillQuery]) -> list[StepTime]:
        self.asked += len(queries)
        return [self._step(q.batch * (q.isl - q.prefix) * (1.0 + 1e-4 * q.prefix)) for q in queries]

    def decode(self, queries: Sequence[DecodeQuery]) -> list[StepTime]:
        self.asked += len(queries)
        return [self._step(5.0 + q.batch * (0.5 + 1e-5 * q.context)) for q in queries]

    @staticmethod
    def _step(value: float) -> StepTime:
        return StepTime(value, value, 0.0, 0.0, value / 10, "hand-made", "0")


def test_build_save_load_round_trip(tmp_path: Path) -> None:
    grid = Grid("m", 2, 2, chunk=1024, max_batch=16, max_context=8192)
    source = Linear()
    table = build_table(source, grid)
    assert source.asked == len(grid.prefill_queries()) + len(grid.decode_queries())
    assert grid.short_points() == [(128, 1), (128, 2), (128, 4), (128, 8), (256, 1), (256, 2), (256, 4),
                                   (512, 1), (512, 2), (1024, 1)]  # fmt: skip
    assert grid.chunk_prefixes() == [0, 1024, 2048, 4096, 7168]
    path = tmp_path / "t.json"
    save(table, path)
    assert load(path) == table
    data = json.loads(path.read_text())
    assert (data["format"], data["fields"], data["origin"]) == (1, list(FIELDS), "hand-made")
    assert len(path.read_text().splitlines()) == 1 + 2 + len(table.prefill) + 2 + len(table.decode) + 1
    with pytest.raises(ValueError, match="not a step table"):
        StepTable.from_json({**data, "format": 2})


def test_a_linear_source_is_answered_exactly_off_the_grid() -> None:
    """Where the source is linear in each coordinate, the table is exact between grid points too."""
    grid = Grid("m", 2, 2, chunk=1024, max_batch=16, max_context=8192)
    source, steps = Linear(), TableSteps(build_table(Linear(), grid))
    decode = [DecodeQuery("m", 2, 2, c, b) for c in (256, 300, 1000, 5000, 8192) for b in (1, 3, 9, 16)]
    assert [s.ms for s in steps.decode(decode)] == pytest.approx([s.ms for s in source.decode(decode)], rel=1e-9)
    # full chunks: 1e-4 ms per cached token times 1,024 tokens, linear in the prefix
    chunks = [PrefillQuery("m", 2, 2, p + 1024, p, 1) for p in (1024, 1500, 3000, 6000)]
    assert [s.ms for s in steps.prefill(chunks)] == pytest.approx([s.ms for s in source.prefill(chunks)], rel=1e-9)


# ---------------------------------------------------------------- the step-time functions predict() uses


@pytest.fixture
def fleet(steps: TableSteps) -> perf.FleetShape:
    return perf.fleet_shape(DSV4, MODEL, tp=4, bf16_index_k=True, transfer_backend="mooncake")


def test_one_call_is_one_pass_a_transfer_and_decode_steps(steps: TableSteps, fleet: perf.FleetShape) -> None:
    for isl, osl in [(1000, 32), (200_000, 1000)]:
        pred = perf.predict(fleet, perf.Workload(isl, osl, concurrency=1), steps)
        pass_ms = perf.prefill_pass_ms(fleet, isl, 1, steps)
        assert pred.ttft_p50.ms == pass_ms + perf.transfer_ms(fleet, isl)
        assert pred.itl_p50.ms == perf.decode_step_ms(fleet, isl + osl // 2, 1, steps)
        assert pred.terms[0].ms + pred.terms[1].ms == pytest.approx(pass_ms, rel=1e-12)


def test_the_step_functions_carry_the_bf16_term(steps: TableSteps, fleet: perf.FleetShape) -> None:
    fp8 = perf.fleet_shape(DSV4, MODEL, tp=4, bf16_index_k=False)
    assert fleet.key_ratio > 1.0 and fp8.key_ratio == 1.0
    # decode: the table's step plus the bf16 index keys' share of the attention growth over one page of context
    step = steps.decode([DecodeQuery(MODEL, 4, 4, 131_072, 64)])[0]
    ref = steps.decode([DecodeQuery(MODEL, 4, 4, 256, 64)])[0]
    extra = (step.attention_ms - ref.attention_ms) * fleet.index_share * (fleet.key_ratio - 1.0)
    assert perf.decode_step_ms(fp8, 131_072, 64, steps) == step.ms
    assert perf.decode_step_ms(fleet, 131_072, 64, steps) == pytest.approx(step.ms + extra, rel=1e-12) and extra > 0
    # a long prompt: 25 chunks (5 priced, the rest interpolated), each with its bf16 term
    long_fp8 = perf.prefill_pass(fp8, 200_000, 1, steps)
    long_bf16 = perf.prefill_pass(fleet, 200_000, 1, steps)
    assert (long_fp8.chunks, len(long_fp8.steps), long_fp8.ours_ms) == (25, 5, 0.0)
    assert long_bf16.estimated_ms == long_fp8.estimated_ms and long_bf16.ours_ms > 0
    assert perf.prefill_pass_ms(fleet, 200_000, 2, steps) == pytest.approx(2 * long_bf16.ms, rel=1e-12)
    # short prompts: one pass of the batch, as asked
    assert perf.prefill_pass_ms(fp8, 1000, 8, steps) == steps.prefill([PrefillQuery(MODEL, 4, 4, 1000, 0, 8)])[0].ms
    assert perf.transfer_ms(fleet, 200_000) == pytest.approx(200_000 * fleet.kv_bytes_per_token / 20e9 * 1000)
    assert perf.transfer_ms(perf.fleet_shape(DSV4, MODEL, transfer_backend="fake"), 200_000) == 0.0
    with pytest.raises(ValueError, match="needs isl > 0 and batch > 0"):
        perf.prefill_pass_ms(fleet, 0, 1, steps)
    assert math.isfinite(perf.decode_step_ms(fleet, 1, 1, steps))


def test_a_burst_decodes_beside_its_pass(steps: TableSteps, fleet: perf.FleetShape) -> None:
    """16 calls of 1,000 tokens arriving together: two passes of 8, each group decoding its 32 tokens before the next
    arrives. A call decodes in a batch of 8 (its pass), not the time-average 3.5 that Little's law gives."""
    pred = perf.predict(fleet, perf.Workload(1000, 32, concurrency=16), steps)
    assert pred.decode_batch == pytest.approx(8.0, rel=1e-6)
    ladder = {b: perf.decode_step_ms(fleet, 1016, b, steps) for b in (1, 4, 16)}
    assert pred.itl_p50.ms == pytest.approx(ladder[4] + (ladder[16] - ladder[4]) * 4 / 12, rel=1e-6)
    # arrivals at a rate are not grouped: a slow rate decodes alone
    slow = perf.predict(fleet, perf.Workload(1000, 32, rate_per_s=0.1), steps)
    assert slow.decode_batch == pytest.approx(1.0, rel=1e-5)
