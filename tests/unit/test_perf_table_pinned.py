"""The step table (plugin_utils/sglang_perf_table.py) on small hand-made grids and tables: the grid points, the saved
text, the checks on what it is asked, and every interpolation rule, each answer worked out by hand in the comment
beside it.

The hand table `SMALL`: model m at tp 2, ep 3, chunk 512, decode batches up to 4, contexts up to 2,048. Its source
prices a prefill pass at batch x (isl - prefix) / 128 + isl / 256 ms and a decode step at 1 + batch / 2 +
context / 1024 ms; the other fields of a step are ms / 2 (measured), ms / 4 (extrapolated), 0 (SOL) and ms / 8
(attention). Priced, in ms:
- short passes (isl, batch): (128, 1) 1.5, (128, 2) 2.5, (128, 4) 4.5, (256, 1) 3, (256, 2) 5, (512, 1) 6;
- full chunks (isl, prefix): (512, 0) 6, (1024, 512) 8, (1536, 1024) 10, (2048, 1536) 12;
- decode (context, batch): 256: 1.75, 2.25, 3.25; 1024: 2.5, 3, 4; 2048: 3.5, 4, 5 (batches 1, 2, 4).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import DecodeQuery, PrefillQuery, StepTime
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_table import (
    Grid,
    StepTable,
    TableSteps,
    build_table,
    load,
    save,
)

GRID = Grid("m", 2, 3, chunk=512, max_batch=4, max_context=2048)


def fields(ms: float) -> tuple[float, float, float, float, float]:
    """The hand source's fields of a step of `ms`."""
    return (ms, ms / 2, ms / 4, 0.0, ms / 8)


def step(ms: float, origin: str = "hand", version: str = "v1") -> StepTime:
    return StepTime(*fields(ms), origin, version)


class Hand:
    """The plain hand source (prefill and decode asked apart); counts its calls."""

    def __init__(self, origin: str = "hand") -> None:
        self.origin = origin
        self.calls: list[str] = []

    def prefill(self, queries: Sequence[PrefillQuery]) -> list[StepTime]:
        self.calls.append("prefill")
        return [step(q.batch * (q.isl - q.prefix) / 128 + q.isl / 256, self.origin) for q in queries]

    def decode(self, queries: Sequence[DecodeQuery]) -> list[StepTime]:
        self.calls.append("decode")
        return [step(1 + q.batch / 2 + q.context / 1024, self.origin) for q in queries]


class Batched:
    """The hand source answering in one round: prefill and decode alone are refused."""

    def __init__(self) -> None:
        self.asked: list[tuple[list[PrefillQuery], list[DecodeQuery]]] = []

    def both(
        self, prefills: Sequence[PrefillQuery], decodes: Sequence[DecodeQuery]
    ) -> tuple[list[StepTime], list[StepTime]]:
        self.asked.append((list(prefills), list(decodes)))
        return Hand().prefill(prefills), Hand().decode(decodes)

    def prefill(self, queries: Sequence[PrefillQuery]) -> list[StepTime]:
        raise AssertionError("asked apart")

    def decode(self, queries: Sequence[DecodeQuery]) -> list[StepTime]:
        raise AssertionError("asked apart")


SMALL_PREFILL = {
    (128, 0, 1): fields(1.5),
    (128, 0, 2): fields(2.5),
    (128, 0, 4): fields(4.5),
    (256, 0, 1): fields(3.0),
    (256, 0, 2): fields(5.0),
    (512, 0, 1): fields(6.0),
    (1024, 512, 1): fields(8.0),
    (1536, 1024, 1): fields(10.0),
    (2048, 1536, 1): fields(12.0),
}
SMALL_DECODE = {
    (256, 1): fields(1.75),
    (256, 2): fields(2.25),
    (256, 4): fields(3.25),
    (1024, 1): fields(2.5),
    (1024, 2): fields(3.0),
    (1024, 4): fields(4.0),
    (2048, 1): fields(3.5),
    (2048, 2): fields(4.0),
    (2048, 4): fields(5.0),
}
SMALL = StepTable(GRID, "hand", "v1", SMALL_PREFILL, SMALL_DECODE)


@pytest.fixture
def steps() -> TableSteps:
    return TableSteps(SMALL)


def prefill(steps: TableSteps, isl: int, prefix: int = 0, batch: int = 1) -> StepTime:
    return steps.prefill([PrefillQuery("m", 2, 3, isl, prefix, batch)])[0]


def decode(steps: TableSteps, context: int, batch: int = 1) -> StepTime:
    return steps.decode([DecodeQuery("m", 2, 3, context, batch)])[0]


# ---------------------------------------------------------------- the grid


def test_the_small_grid_points() -> None:
    assert GRID.short_points() == [(128, 1), (128, 2), (128, 4), (256, 1), (256, 2), (512, 1)]
    assert GRID.chunk_prefixes() == [0, 512, 1024, 1536]  # the last chunk holds token 2,047: index 3
    assert GRID.decode_points() == [(c, b) for c in (256, 1024, 2048) for b in (1, 2, 4)]
    assert GRID.prefill_queries() == [
        PrefillQuery("m", 2, 3, 128, 0, 1),
        PrefillQuery("m", 2, 3, 128, 0, 2),
        PrefillQuery("m", 2, 3, 128, 0, 4),
        PrefillQuery("m", 2, 3, 256, 0, 1),
        PrefillQuery("m", 2, 3, 256, 0, 2),
        PrefillQuery("m", 2, 3, 512, 0, 1),
        PrefillQuery("m", 2, 3, 1024, 512, 1),
        PrefillQuery("m", 2, 3, 1536, 1024, 1),
        PrefillQuery("m", 2, 3, 2048, 1536, 1),
    ]
    assert GRID.decode_queries() == [DecodeQuery("m", 2, 3, c, b) for c in (256, 1024, 2048) for b in (1, 2, 4)]


def test_the_grid_defaults() -> None:
    grid = Grid("m", 4, 4)
    assert (grid.chunk, grid.max_batch, grid.max_context) == (8192, 256, 524_288)


@pytest.mark.parametrize(
    ("chunk", "max_context", "prefixes"),
    [
        (512, 1, [0]),
        (512, 512, [0]),  # one chunk holds the whole context: no prefix beyond 0
        (512, 513, [0, 1]),  # token 512 starts chunk 1
        (512, 1024, [0, 1]),
        (512, 1025, [0, 1, 2]),
        (1, 5, [0, 1, 2, 4]),  # last chunk 4: 0, 1, 2, 4 and 4 itself
        (1, 6, [0, 1, 2, 4, 5]),
        (1, 17, [0, 1, 2, 4, 8, 16]),  # 16 is the last: range(16, 16, 8) is empty
        (1, 40, [0, 1, 2, 4, 8, 16, 24, 32, 39]),
        (1, 41, [0, 1, 2, 4, 8, 16, 24, 32, 40]),  # 40 both a multiple of 8 and the last
    ],
)
def test_chunk_prefixes(chunk: int, max_context: int, prefixes: list[int]) -> None:
    assert Grid("m", 1, 1, chunk=chunk, max_batch=1, max_context=max_context).chunk_prefixes() == [
        p * chunk for p in prefixes
    ]


def test_a_one_token_chunk_prices_every_prefix_from_one() -> None:
    grid = Grid("m", 1, 1, chunk=1, max_batch=1, max_context=3)
    assert grid.short_points() == [(1, 1)]
    assert grid.prefill_queries() == [
        PrefillQuery("m", 1, 1, 1, 0, 1),
        PrefillQuery("m", 1, 1, 2, 1, 1),
        PrefillQuery("m", 1, 1, 3, 2, 1),
    ]
    assert grid.decode_queries() == [DecodeQuery("m", 1, 1, 3, 1)]


@pytest.mark.parametrize(
    ("max_context", "max_batch", "contexts", "batches"),
    [
        (2048, 4, [256, 1024, 2048], [1, 2, 4]),
        (3000, 6, [256, 1024, 3000], [1, 2, 4, 6]),  # 4,096 beyond the context is left out
        (20_000, 1, [256, 1024, 4096, 16_384, 20_000], [1]),
        (65_536, 2, [256, 1024, 4096, 16_384, 32_768, 65_536], [1, 2]),
    ],
)
def test_decode_points(max_context: int, max_batch: int, contexts: list[int], batches: list[int]) -> None:
    grid = Grid("m", 1, 1, chunk=512, max_batch=max_batch, max_context=max_context)
    assert grid.decode_points() == [(c, b) for c in contexts for b in batches]


def test_short_points_up_to_a_chunk_not_a_power_of_two() -> None:
    grid = Grid("m", 1, 1, chunk=600, max_batch=1, max_context=600)
    # isl 128, 256, 512 and the chunk itself; batches while isl x batch fits 600
    assert grid.short_points() == [(128, 1), (128, 2), (128, 4), (256, 1), (256, 2), (512, 1), (600, 1)]


# ---------------------------------------------------------------- building, saving, loading


def test_build_table_asks_a_plain_source_apart() -> None:
    source = Hand()
    assert build_table(source, GRID) == SMALL
    assert source.calls == ["prefill", "decode"]


def test_build_table_asks_a_batched_source_in_one_round() -> None:
    source = Batched()
    assert build_table(source, GRID) == SMALL
    assert source.asked == [(GRID.prefill_queries(), GRID.decode_queries())]


def test_build_table_refuses_several_origins() -> None:
    class TwoOrigins(Hand):
        def decode(self, queries: Sequence[DecodeQuery]) -> list[StepTime]:
            return [step(1.0, "other", "v1") for _q in queries]

    with pytest.raises(ValueError) as caught:
        build_table(TwoOrigins(), GRID)
    assert str(caught.value) == "the step source answered from several origins: [('hand', 'v1'), ('other', 'v1')]"


def test_build_table_refuses_a_source_that_answers_fewer_steps() -> None:
    class ShortPrefill(Hand):
        def prefill(self, queries: Sequence[PrefillQuery]) -> list[StepTime]:
            return super().prefill(queries)[:-1]

    class ShortDecode(Hand):
        def decode(self, queries: Sequence[DecodeQuery]) -> list[StepTime]:
            return super().decode(queries)[:-1]

    for source in (ShortPrefill(), ShortDecode()):
        with pytest.raises(ValueError, match="shorter"):
            build_table(source, GRID)


TINY = StepTable(
    Grid("m", 1, 1, chunk=128, max_batch=2, max_context=128),
    "hand",
    "v1",
    {(128, 0, 1): fields(1.5)},
    {(128, 1): fields(1.625), (128, 2): fields(2.125)},
)
TINY_TEXT = (
    '{"format": 1, "model": "m", "tp": 1, "ep": 1, "chunk": 128, "max_batch": 2, "max_context": 128, '
    '"origin": "hand", "data_version": "v1", '
    '"fields": ["ms", "measured_ms", "extrapolated_ms", "sol_ms", "attention_ms"],\n'
    ' "prefill": [\n'
    "  [128, 0, 1, 1.5, 0.75, 0.375, 0.0, 0.1875]\n"
    " ],\n"
    ' "decode": [\n'
    "  [128, 1, 1.625, 0.8125, 0.40625, 0.0, 0.203125],\n"
    "  [128, 2, 2.125, 1.0625, 0.53125, 0.0, 0.265625]\n"
    " ]\n"
    "}\n"
)


def test_the_tiny_grid_is_one_pass_and_two_steps() -> None:
    grid = TINY.grid
    assert grid.prefill_queries() == [PrefillQuery("m", 1, 1, 128, 0, 1)]
    assert grid.decode_queries() == [DecodeQuery("m", 1, 1, 128, 1), DecodeQuery("m", 1, 1, 128, 2)]
    assert build_table(Hand(), grid) == StepTable(
        grid, "hand", "v1", {(128, 0, 1): fields(1.5)}, {(128, 1): fields(1.625), (128, 2): fields(2.125)}
    )


def test_save_writes_one_grid_point_a_line(tmp_path: Path) -> None:
    path = tmp_path / "not" / "yet" / "there.json"
    save(TINY, path)
    assert path.read_text() == TINY_TEXT
    assert load(path) == TINY
    assert TableSteps.load(path).table == TINY


def test_as_json() -> None:
    assert TINY.as_json() == {
        "format": 1,
        "model": "m",
        "tp": 1,
        "ep": 1,
        "chunk": 128,
        "max_batch": 2,
        "max_context": 128,
        "origin": "hand",
        "data_version": "v1",
        "fields": ["ms", "measured_ms", "extrapolated_ms", "sol_ms", "attention_ms"],
        "prefill": [[128, 0, 1, 1.5, 0.75, 0.375, 0.0, 0.1875]],
        "decode": [[128, 1, 1.625, 0.8125, 0.40625, 0.0, 0.203125], [128, 2, 2.125, 1.0625, 0.53125, 0.0, 0.265625]],
    }


def test_from_json_reads_the_fields_it_knows_and_ignores_more_columns() -> None:
    data = json.loads(TINY_TEXT)
    data["prefill"] = [[*row, 99.0] for row in data["prefill"]]
    data["decode"] = [[*row, 99.0] for row in data["decode"]]
    assert StepTable.from_json(data) == TINY


@pytest.mark.parametrize(
    "change",
    [{"format": 2}, {"format": None}, {"fields": ["ms", "measured_ms", "extrapolated_ms", "sol_ms"]}],
)
def test_from_json_refuses_another_format(change: dict[str, object]) -> None:
    with pytest.raises(ValueError) as caught:
        StepTable.from_json({**json.loads(TINY_TEXT), **change})
    assert str(caught.value) == (
        "not a step table of format 1 with fields ['ms', 'measured_ms', 'extrapolated_ms', 'sol_ms', 'attention_ms']"
    )


# ---------------------------------------------------------------- what the table is asked


def test_another_model_tp_or_ep_is_refused(steps: TableSteps) -> None:
    for model, tp, ep in [("n", 2, 3), ("m", 4, 3), ("m", 2, 4)]:
        expected = f"the step table holds m at tp 2, ep 3; asked for {model} at tp {tp}, ep {ep}"
        with pytest.raises(ValueError) as caught:
            steps.prefill([PrefillQuery(model, tp, ep, 128, 0, 1)])
        assert str(caught.value) == expected
        with pytest.raises(ValueError) as caught:
            steps.decode([DecodeQuery(model, tp, ep, 256, 1)])
        assert str(caught.value) == expected


@pytest.mark.parametrize(("isl", "prefix", "batch"), [(100, 100, 1), (100, 101, 1), (100, -1, 1), (100, 0, 0)])
def test_not_a_prefill_pass(steps: TableSteps, isl: int, prefix: int, batch: int) -> None:
    with pytest.raises(ValueError) as caught:
        prefill(steps, isl, prefix, batch)
    assert str(caught.value) == (
        f"not a prefill pass: PrefillQuery(model='m', tp=2, ep=3, isl={isl}, prefix={prefix}, "
        f"batch={batch}, interconnect='nvlink')"
    )


def test_not_a_decode_step(steps: TableSteps) -> None:
    with pytest.raises(ValueError) as caught:
        decode(steps, 256, 0)
    assert (
        str(caught.value)
        == "not a decode step: DecodeQuery(model='m', tp=2, ep=3, context=256, batch=0, interconnect='nvlink', "
        "attn_dp=1)"
    )


def test_every_grid_point_is_answered_as_priced_with_the_tables_origin(steps: TableSteps) -> None:
    assert [prefill(steps, isl, p, b) for isl, p, b in SMALL_PREFILL] == [step(v[0]) for v in SMALL_PREFILL.values()]
    assert [decode(steps, c, b) for c, b in SMALL_DECODE] == [step(v[0]) for v in SMALL_DECODE.values()]


# ---------------------------------------------------------------- short passes


@pytest.mark.parametrize(
    ("isl", "batch", "ms"),
    [
        (192, 1, 2.25),  # halfway between 128 x 1 (1.5) and 256 x 1 (3)
        (128, 3, 3.5),  # halfway between 128 x 2 (2.5) and 128 x 4 (4.5)
        (128, 8, 8.5),  # beyond batch 4 along the last segment: 2.5 + 2 x (8 - 2) / 2
        (64, 2, 1.5),  # 2 prompts of 64 tokens = 1 prompt of 128
        (32, 1, 1.5),  # less than one prompt of 128 counts as one
        (64, 6, 3.5),  # 6 of 64 = 3 of 128
        (512, 3, 18.0),  # the chunk is priced at batch 1 only: 3 of them take 3 x 6
        (384, 2, 8.5),  # halfway between 256 x 2 (5) and 512 x 2 (2 x 6)
        (1024, 1, 12.0),  # beyond the chunk along the last segment: 3 + (6 - 3) x (1024 - 256) / 256
    ],
)
def test_short_passes_between_the_priced_ones(steps: TableSteps, isl: int, batch: int, ms: float) -> None:
    assert prefill(steps, isl, 0, batch) == step(ms)


def test_a_length_priced_at_one_batch_only_scales_from_that_batch() -> None:
    # 512-token prompts priced only 2 at a time (8 ms): 3 of them take 8 x 3 / 2, one of them is clamped to the 2
    table = StepTable(
        Grid("m", 1, 1, chunk=128, max_batch=1, max_context=128),
        "hand",
        "v1",
        {(128, 0, 1): fields(1.0), (512, 0, 2): fields(8.0)},
        {(128, 1): fields(1.0)},
    )
    steps = TableSteps(table)
    assert steps.prefill([PrefillQuery("m", 1, 1, 512, 0, 3)]) == [step(12.0)]
    assert steps.prefill([PrefillQuery("m", 1, 1, 512, 0, 1)]) == [step(8.0)]
    # 320 tokens, batch 3: halfway between 128 (priced at 1: 3 x 1) and 512 (8 x 3 / 2)
    assert steps.prefill([PrefillQuery("m", 1, 1, 320, 0, 3)]) == [step(7.5)]


# ---------------------------------------------------------------- chunks on a prefix


def test_a_full_chunk_between_priced_prefixes(steps: TableSteps) -> None:
    assert prefill(steps, 1280, 768) == step(9.0)  # halfway between 8 (prefix 512) and 10 (prefix 1,024)
    assert prefill(steps, 2560, 2048) == step(14.0)  # beyond prefix 1,536: 10 + 2 x (2048 - 1024) / 512


def test_a_full_chunk_of_several_prompts_on_a_prefix(steps: TableSteps) -> None:
    # two chunks on prefix 768: the short pass of 2 x 512 (2 x 6 = 12) plus the growth (9 - 6) twice
    assert prefill(steps, 1280, 768, 2) == step(18.0)


def test_a_partial_chunk_on_a_prefix(steps: TableSteps) -> None:
    # 100 tokens on prefix 512: one prompt of 128's short pass (1.5) plus the growth (8 - 6) x 100 / 512
    assert prefill(steps, 612, 512) == step(1.5 + 2 * 100 / 512)
    # on prefix 2,048 (a full chunk there: 14, see above): 1.5 + (14 - 6) x 100 / 512
    assert prefill(steps, 2148, 2048) == step(1.5 + 8 * 100 / 512)


def test_one_cached_token_already_grows_the_pass(steps: TableSteps) -> None:
    # 100 tokens on 1 cached: the chunk grows by (8 - 6) / 512 per cached token, 100 / 512 of it for this pass
    growth = 2 / 512 * 100 / 512
    assert prefill(steps, 101, 1) == StepTime(
        1.5 + growth, 0.75 + growth / 2, 0.375 + growth / 4, 0.0, 0.1875 + growth / 8, "hand", "v1"
    )


# ---------------------------------------------------------------- decode


@pytest.mark.parametrize(
    ("context", "batch", "ms"),
    [
        (640, 3, 3.125),  # halfway in both: (2.75 + 3.5) / 2
        (640, 1, 2.125),  # halfway between 1.75 and 2.5
        (1024, 3, 3.5),  # a priced context, halfway between batches 2 and 4
        (100, 1, 1.75),  # below the first context: clamped
        (100, 3, 2.75),  # clamped in context, interpolated in batch
        (4096, 8, 9.0),  # beyond both: 1 + 8 / 2 + 4096 / 1024 along the last segments
    ],
)
def test_decode_steps_between_the_priced_ones(steps: TableSteps, context: int, batch: int, ms: float) -> None:
    assert decode(steps, context, batch) == step(ms)


def test_a_table_of_one_decode_point_answers_it_everywhere() -> None:
    table = StepTable(TINY.grid, "hand", "v1", TINY.prefill, {(128, 1): fields(1.625)})
    steps = TableSteps(table)
    answers = steps.decode([DecodeQuery("m", 1, 1, c, b) for c, b in [(64, 1), (512, 1), (512, 4), (128, 3)]])
    assert answers == [step(1.625)] * 4


def test_a_point_is_answered_as_stored_and_an_interpolation_never_below_zero() -> None:
    below = (-1.0, -1.0, -1.0, -1.0, -1.0)
    table = StepTable(
        TINY.grid,
        "hand",
        "v1",
        TINY.prefill,
        {(256, 1): below, (256, 2): (-2.0,) * 5, (1024, 1): (3.0,) * 5, (1024, 2): (3.0,) * 5},
    )
    steps = TableSteps(table)
    queries = [(100, 1), (100, 2), (256, 2), (352, 1), (640, 1), (640, 2)]
    answers = steps.decode([DecodeQuery("m", 1, 1, c, b) for c, b in queries])
    assert [a.ms for a in answers] == [
        -1.0,  # clamped below the first context: the point as stored
        -2.0,
        -2.0,
        0.0,  # -1 + 4 x 96 / 768 = -0.5, not below zero
        1.0,  # -1 + 4 / 2
        0.5,  # -2 + 5 / 2
    ]


def test_a_pass_the_table_holds_off_the_grid_is_answered_as_held() -> None:
    table = StepTable(GRID, "hand", "v1", {**SMALL_PREFILL, (700, 300, 1): fields(99.0)}, SMALL_DECODE)
    assert prefill(TableSteps(table), 700, 300) == step(99.0)


def test_values_of_unequal_width_are_refused_not_cut() -> None:
    wide = (*fields(2.5), 7.0)
    uneven_decode = StepTable(GRID, "hand", "v1", SMALL_PREFILL, {**SMALL_DECODE, (1024, 1): wide})
    with pytest.raises(ValueError):
        decode(TableSteps(uneven_decode), 640, 1)
    uneven_chunk = StepTable(GRID, "hand", "v1", {**SMALL_PREFILL, (512, 0, 1): (*fields(6.0), 7.0)}, SMALL_DECODE)
    with pytest.raises(ValueError):
        prefill(TableSteps(uneven_chunk), 612, 512)
