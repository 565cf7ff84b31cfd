"""The calibration (plugin_utils/sglang_perf_calibration.py) on a stub source whose every answer is known by hand: a
prefill pass 1,000 ms, a decode step 10 ms, whatever the shape, no KV transfer (backend `fake`). One call of 16,384
in + 1,000 out is then predicted at ITL 10 ms and TTFT 2,000 ms (two chunks of 8,192)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import (
    DecodeQuery,
    FleetShape,
    PrefillQuery,
    StepTime,
    Workload,
    predict,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_calibration import (
    CALIBRATED_FLOOR,
    CalibratedSteps,
    MeasuredPoint,
    MeasuredPointError,
    as_declared,
    calibrated,
    fit,
    live_points,
    parse_points,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_live import LiveFigures
from sglang_envelope_cli.calibrate import declaring_file, write_points
from test_validate_rules_exact import MEASURED_POINT


class Stub:
    def prefill(self, queries: Sequence[PrefillQuery]) -> list[StepTime]:
        return [StepTime(1000.0, 1000.0, 0.0, 0.0, 0.0, "stub", "0.5.14") for _ in queries]

    def decode(self, queries: Sequence[DecodeQuery]) -> list[StepTime]:
        return [StepTime(10.0, 10.0, 0.0, 0.0, 0.0, "stub", "0.5.14") for _ in queries]


SHAPE = FleetShape(model="m", decode_max_running=64, transfer_backend="fake")
TODAY = dt.date(2026, 12, 6)


def point(figure: str, value: float, unit: str, **shape: int) -> MeasuredPoint:
    return MeasuredPoint(figure, value, unit, "2026-11-30", "test", **shape)


ITL_64 = MeasuredPoint(
    "output_tokens_per_s",
    64,
    "tokens/s",
    "2026-11-30",
    "the deployment",
    calls=1,
    input_tokens=16_384,
    output_tokens=1000,
)


def test_one_decode_point_scales_decode_by_measured_over_predicted() -> None:
    """64 tokens/s is 15.625 ms; the stub predicts 10 ms: decode x1.5625, residual 0; prefill keeps no factor."""
    cal = fit([ITL_64], lambda _tokens: SHAPE, Stub(), TODAY)
    assert cal.factors == {"decode": pytest.approx(1.5625)}
    assert cal.residual(cal.fitted[0]) == pytest.approx(0.0, abs=1e-12)
    assert cal.age_days("decode") == 6 and cal.age_days("prefill") is None


def test_the_factor_is_the_geometric_mean_and_residuals_are_what_it_leaves() -> None:
    """Two decode steps measured 20 ms and 5 ms against 10 ms predicted: ratios 2 and 0.5, geometric mean 1; the
    residuals +100 % and -50 %. A TTFT of 3,000 ms against 2,000 predicted (no transfer): prefill x1.5."""
    steps = [
        point("decode_step", 20.0, "ms", batch=1, context=1000),
        point("decode_step", 5.0, "ms", batch=8, context=1000),
    ]
    ttft = point("ttft_p50", 3.0, "s", calls=1, input_tokens=16_384, output_tokens=1000)
    cal = fit([*steps, ttft], lambda _tokens: SHAPE, Stub(), TODAY)
    assert cal.factors == {"decode": pytest.approx(1.0), "prefill": pytest.approx(1.5)}
    assert [round(cal.residual(f), 6) for f in cal.fitted] == [1.0, -0.5, 0.0]


def test_calibrated_steps_scale_each_stage_and_predict_the_measured_figure() -> None:
    steps = calibrated(Stub(), [ITL_64], lambda _tokens: SHAPE)
    assert isinstance(steps, CalibratedSteps)
    pred = predict(SHAPE, Workload(16_384, 1000, concurrency=1), steps)
    assert pred.itl_p50.ms == pytest.approx(15.625)
    assert pred.ttft_p50.ms == pytest.approx(2000.0)  # prefill has no point: as the stub
    assert calibrated(Stub(), [], lambda _tokens: SHAPE).__class__ is Stub


def test_the_band_is_the_floor_at_the_point_and_widens_with_doublings_to_the_published_error() -> None:
    """At the point (context 16,884, batch 1): the 10 % floor. Two doublings of context away: + 31 % x 2/4. Four or
    more doublings of batch: + the whole 31 %. Prefill, without a point: the published 51 %, not a bound."""
    cal = fit([ITL_64], lambda _tokens: SHAPE, Stub(), TODAY)
    at = cal.band("decode", 16_884, 1)
    assert (at.rel, at.bound) == (pytest.approx(CALIBRATED_FLOOR), True)
    assert cal.band("decode", 4 * 16_884, 1).rel == pytest.approx(0.10 + 0.31 * 0.5)
    assert cal.band("decode", 16_884, 64).rel == pytest.approx(0.10 + 0.31)
    assert (cal.band("prefill", 16_384, 1).rel, cal.band("prefill", 16_384, 1).bound) == (0.51, False)
    assert "a bound" in cal.band("prefill", 16_384, 1).why


def test_the_description_says_each_stage_its_factor_residuals_and_age() -> None:
    cal = fit([ITL_64], lambda _tokens: SHAPE, Stub(), TODAY)
    assert cal.describe() == (
        "calibrated to this fleet: prefill uncalibrated (no point; AIConfigurator's published mean error, not a bound "
        "(51% on TTFT)); decode x1.56 from 1 point(s) (residuals +0%; newest 2026-11-30, 6 days old)"
    )


DECLARED = MEASURED_POINT  # as the production inventory declares it


def test_a_declared_point_parses_and_declares_back_the_same() -> None:
    (p,) = parse_points([DECLARED])
    assert p == ITL_64
    assert as_declared(p) == DECLARED
    step = {"figure": "decode_step", "value": 15.6, "unit": "ms", "batch": 4, "context": 17_000}
    assert as_declared(parse_points([step | {"date": "2026-12-01", "source": "s"}])[0]) == step | {
        "date": "2026-12-01",
        "source": "s",
    }


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            [DECLARED | {"calls": 0}],
            "sglang_perf_measured[0].calls=0: must be a whole number >= 1; fix: the calls measured at",
        ),
        (
            [DECLARED | {"value": True}],
            "sglang_perf_measured[0].value=True: must be a number > 0 (tokens/s); fix: the measured figure",
        ),
        ("x", "sglang_perf_measured='x': must be a list of measured points; fix: see docs/time.md"),
    ],
)
def test_a_bad_point_names_the_variable_the_value_the_rule_and_a_fix(raw: Any, message: str) -> None:
    with pytest.raises(MeasuredPointError) as caught:
        parse_points(raw)
    assert str(caught.value) == message


def test_the_audits_live_measurement_becomes_a_decode_step_and_a_prefill_pass() -> None:
    figures = LiveFigures(4000.0, 2000.0, 12.5, 3.4, 2100, "pb", "db", "/metrics", "2026-12-05T10:00:00Z")
    step, pass_ = live_points(figures)
    assert (step.figure, step.value, step.batch, step.context, step.date) == (
        "decode_step",
        12.5,
        3,
        2100,
        "2026-12-05",
    )
    assert (pass_.figure, pass_.value, pass_.input_tokens) == ("prefill_pass", 500.0, 2000)
    assert "db" in step.source and "pb" in pass_.source


def test_live_points_are_appended_to_the_file_that_declares_the_list(tmp_path: Path) -> None:
    folder = tmp_path / "group_vars" / "all"
    folder.mkdir(parents=True)
    (folder / "a.yml").write_text("---\nother: 1\n")
    declared = folder / "perf.yml"
    declared.write_text("---\n# kept\nsglang_interconnect: pcie\nsglang_perf_measured:\n  - figure: itl_p50\n")
    assert declaring_file(tmp_path) == declared
    write_points(declared, [ITL_64])
    text = declared.read_text()
    assert "# kept" in text and text.count("figure:") == 2 and "output_tokens_per_s" in text
    (tmp_path / "elsewhere").mkdir()
    assert declaring_file(tmp_path / "elsewhere") == tmp_path / "elsewhere" / "group_vars" / "all" / "perf.yml"
