"""Where the composed model adds nothing (one prefill pass, one decode step, no queueing, no transfer, fp8 index
keys), it equals AIConfigurator within 2 %, over 32 cells: DeepSeek-V3.2 and V4-Flash (MXFP4, HYBRID: experts
extrapolated) and V4-Flash-FP8 (fully measured) on H200, ISL 4k-128k, batch 1-128, tp 4 and 8. The expected values
come from AIConfigurator run by the test's own script (aic_direct.py), never from the project's code."""

from __future__ import annotations

import math
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import (
    FleetShape,
    Prediction,
    Workload,
    predict_many,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_aic import AicSteps
from perftools import finish_direct, start_direct

V32, V4, V4FP8 = "deepseek-ai/DeepSeek-V3.2", "deepseek-ai/DeepSeek-V4-Flash", "sgl-project/DeepSeek-V4-Flash-FP8"
# (model, tp, isl, decode batches, prefill batches)
GROUPS = [
    (V32, 8, 4096, (1, 16, 128), (1, 4)),
    (V32, 8, 32768, (1, 64), (1,)),
    (V4, 4, 4096, (1, 4, 16, 64, 128), (1, 4)),
    (V4, 4, 131072, (1, 16, 64), ()),
    (V4, 8, 131072, (), (1,)),
    (V4FP8, 4, 32768, (1, 4, 16, 64), (1,)),
    (V4, 8, 16384, (1, 16, 128), (1, 2)),
    (V4FP8, 8, 65536, (1, 32), (1,)),
]
CELLS = [
    (kind, model, tp, isl, batch)
    for model, tp, isl, decodes, prefills in GROUPS
    for kind, batches in (("static_gen", decodes), ("static_ctx", prefills))
    for batch in batches
]


def plain(model: str, tp: int, isl: int, batch: int) -> tuple[FleetShape, Workload]:
    """A fleet that adds nothing: one engine each side, a chunk that holds every prompt in one pass, no transfer
    time, fp8 index keys; `batch` calls of `isl` tokens and one output token (decode context = isl)."""
    fleet = FleetShape(
        model=model,
        prefill_tp=tp,
        decode_tp=tp,
        prefill_ep=tp,
        decode_ep=tp,
        chunked_prefill_size=isl * batch,
        decode_max_running=batch,
    )
    return fleet, Workload(isl=isl, osl=1, concurrency=batch)


@pytest.fixture(scope="module")
def table(aic: AicSteps) -> list[tuple[tuple[str, str, int, int, int], float, Prediction]]:
    direct = start_direct([{"mode": k, "model": m, "tp": tp, "isl": isl, "batch": b} for k, m, tp, isl, b in CELLS])
    ours = predict_many([plain(m, tp, isl, b) for _, m, tp, isl, b in CELLS], aic)
    theirs = finish_direct(direct)
    return [(cell, answer["ms"], pred) for cell, answer, pred in zip(CELLS, theirs, ours, strict=True)]


def test_grid_covers_the_asked_range() -> None:
    assert len(CELLS) >= 30
    assert {c[1] for c in CELLS} == {V32, V4, V4FP8} and {c[2] for c in CELLS} == {4, 8}
    assert min(c[3] for c in CELLS) == 4096 and max(c[3] for c in CELLS) == 131072
    assert {c[4] for c in CELLS} >= {1, 128} and {c[0] for c in CELLS} == {"static_ctx", "static_gen"}


def test_plain_cells_equal_the_estimator(table: list[Any]) -> None:
    failures = []
    for (kind, model, tp, isl, batch), expected, pred in table:
        ours = pred.ttft_p50.ms if kind == "static_ctx" else pred.itl_full.ms
        if not math.isclose(ours, expected, rel_tol=0.02):
            failures.append(f"{kind} {model} tp{tp} isl={isl} batch={batch}: ours {ours:.3f} ms, AIC {expected:.3f} ms")
    assert not failures, "\n".join(failures)


def test_plain_cells_name_their_source_and_band(table: list[Any]) -> None:
    for (kind, model, *_), _, pred in table:
        figure = pred.ttft_p50 if kind == "static_ctx" else pred.itl_full
        assert "AIConfigurator 0.12.0" in figure.source and "measured" in figure.source
        assert figure.mape == (0.51 if kind == "static_ctx" else 0.31)
        assert math.isclose(figure.high - figure.ms, figure.mape * figure.ms, rel_tol=1e-6)
        if model == V4 and kind == "static_gen":
            assert "extrapolated" in figure.source  # the MXFP4 experts
        assert any("759 measured" in n for n in pred.notes) and any("0.5.23" in n for n in pred.notes)
