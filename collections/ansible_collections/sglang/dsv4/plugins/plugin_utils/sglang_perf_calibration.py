"""This fleet's time: the step times of any StepSource corrected by what the fleet itself measured.

An inventory declares its measurements as `sglang_perf_measured`, a list of points (MeasuredPoint): a figure
(FIGURES), its value and unit, the shape it was measured at, when, and where it comes from. `sglang-envelope
calibrate` lists them with the fit and can add the audit's live measurement to them.

The fit is one factor per stage, printed with its residuals: for each point, its figure predicted by the base source
on the declared fleet; the factor of a stage is the geometric mean of measured / predicted over the stage's points,
each taken over the part the step source prices (a TTFT less its KV transfer). CalibratedSteps then answers every
prefill pass or decode step as the base source times its stage's factor.

The band of a calibrated stage comes from its points: the largest residual, at least CALIBRATED_FLOOR, widened by the
base source's published error in proportion to how far the asked step lies from the nearest point (doublings of
context or batch, up to FAR_DOUBLINGS: beyond that the point says nothing and the published error is added whole).
A stage without a point keeps the published error, said to be a mean and not a bound.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import (
    PUBLISHED_BANDS,
    Band,
    DecodeQuery,
    FleetShape,
    OneRoundSteps,
    PrefillQuery,
    StepSource,
    StepTime,
    Workload,
    ask,
    decode_step_ms,
    predict_many,
    prefill_pass_ms,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_corrections import source_text
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_live import LiveFigures

VARIABLE = "sglang_perf_measured"
# figure -> (stage, unit it may be declared in)
FIGURES = {
    "ttft_p50": ("prefill", ("s", "ms")),
    "ttft_p90": ("prefill", ("s", "ms")),
    "prefill_pass": ("prefill", ("s", "ms")),  # one prompt of input_tokens alone on a prefill engine
    "itl_p50": ("decode", ("ms", "s")),
    "itl_p90": ("decode", ("ms", "s")),
    "output_tokens_per_s": ("decode", ("tokens/s",)),  # per call, 1000 / ITL p50 in ms
    "decode_step": ("decode", ("ms", "s")),  # one decode step at `batch` calls and `context` tokens
}
STEP_FIGURES = ("prefill_pass", "decode_step")
CALIBRATED_FLOOR = 0.10  # one measured figure's run-to-run spread; our assumption
FAR_DOUBLINGS = 4.0


class MeasuredPointError(ValueError):
    """A declared point validation refuses: the variable, its value, the rule and a fix (sglang_rules.Finding's
    parts, so that the host rule host.perf_measured_valid reports it as any rule does)."""

    def __init__(self, var: str, value: Any, rule: str, fix: str) -> None:
        super().__init__(f"{var}={value!r}: {rule}; fix: {fix}")
        self.var, self.value, self.rule, self.fix = var, value, rule, fix


@dataclass(frozen=True)
class MeasuredPoint:
    """One measurement of this fleet. Call figures are of `calls` calls of `input_tokens` + `output_tokens` arriving
    at once; decode_step is one step at `batch` and `context`; prefill_pass one prompt of `input_tokens`."""

    figure: str
    value: float
    unit: str
    date: str
    source: str
    calls: int = 1
    input_tokens: int = 0
    output_tokens: int = 0
    batch: int = 0
    context: int = 0

    @property
    def stage(self) -> str:
        return FIGURES[self.figure][0]

    @property
    def ms(self) -> float:
        """The value as ms (a time per token for output_tokens_per_s)."""
        if self.unit == "tokens/s":
            return 1000.0 / self.value
        return self.value * (1000.0 if self.unit == "s" else 1.0)

    @property
    def at(self) -> tuple[int, float]:
        """(context, batch) of the step the point measures, for the band's distance."""
        if self.figure == "decode_step":
            return self.context, float(self.batch)
        if self.stage == "decode":
            return self.input_tokens + self.output_tokens // 2, float(self.calls)
        return self.input_tokens, 1.0

    def shape(self) -> str:
        if self.figure == "decode_step":
            return f"a decode step at batch {self.batch} and context {self.context:,}"
        if self.figure == "prefill_pass":
            return f"one prompt of {self.input_tokens:,} tokens"
        return f"{self.calls} call(s) of {self.input_tokens:,} in + {self.output_tokens:,} out at once"

    def text(self) -> str:
        return f"{self.figure} {self.value:g} {self.unit} at {self.shape()} (measured {self.date}; {self.source})"


def _int(raw: Mapping[str, Any], key: str, where: str, minimum: int) -> int:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise MeasuredPointError(
            f"{where}.{key}", value, f"must be a whole number >= {minimum}", f"the {key.replace('_', ' ')} measured at"
        )
    return value


def parse_points(raw: Any, variable: str = VARIABLE) -> list[MeasuredPoint]:
    """The declared points, checked: MeasuredPointError names the variable, the value, the rule and a fix."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise MeasuredPointError(variable, raw, "must be a list of measured points", "see docs/time.md")
    points = []
    for i, item in enumerate(raw):
        where = f"{variable}[{i}]"
        if not isinstance(item, Mapping):
            raise MeasuredPointError(
                where, item, "must be a mapping", "declare figure, value, unit, its shape, date and source"
            )
        figure = item.get("figure")
        if figure not in FIGURES:
            raise MeasuredPointError(
                f"{where}.figure", figure, f"must be one of {', '.join(FIGURES)}", "name what was measured"
            )
        units = FIGURES[str(figure)][1]
        unit = item.get("unit", units[0])
        if unit not in units:
            raise MeasuredPointError(f"{where}.unit", unit, f"{figure} is in {' or '.join(units)}", f"unit: {units[0]}")
        value = item.get("value")
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0 or math.isinf(value):
            raise MeasuredPointError(f"{where}.value", value, f"must be a number > 0 ({unit})", "the measured figure")
        date = str(item.get("date") or "")
        try:
            dt.date.fromisoformat(date)
        except ValueError:
            raise MeasuredPointError(
                f"{where}.date", item.get("date"), "must be the day it was measured", "date: YYYY-MM-DD"
            ) from None
        source = str(item.get("source") or "").strip()
        if not source:
            raise MeasuredPointError(
                f"{where}.source",
                item.get("source"),
                "must say where the figure comes from",
                "source: <how it was measured>",
            )
        if figure == "decode_step":
            shape: dict[str, int] = {
                "batch": _int(item, "batch", where, 1),
                "context": _int(item, "context", where, 1),
            }
        elif figure == "prefill_pass":
            shape = {"input_tokens": _int(item, "input_tokens", where, 1)}
        else:
            shape = {
                "calls": _int(item, "calls", where, 1) if "calls" in item else 1,
                "input_tokens": _int(item, "input_tokens", where, 1),
                "output_tokens": _int(item, "output_tokens", where, 2 if figure != "ttft_p50" else 1),
            }
        points.append(MeasuredPoint(str(figure), float(value), str(unit), date, source, **shape))
    return points


# ---------------------------------------------------------------- the fit


@dataclass(frozen=True)
class Fitted:
    """A point beside the base source's prediction of it: `fixed_ms` is the part no stage factor scales (the KV
    transfer of a TTFT)."""

    point: MeasuredPoint
    predicted_ms: float
    fixed_ms: float

    def ratio(self) -> float:
        return (self.point.ms - self.fixed_ms) / max(1e-9, self.predicted_ms - self.fixed_ms)

    def calibrated_ms(self, factor: float) -> float:
        return self.fixed_ms + factor * (self.predicted_ms - self.fixed_ms)


@dataclass(frozen=True)
class Calibration:
    """One factor per stage fitted on the points, and each point's residual after it."""

    factors: dict[str, float]
    fitted: tuple[Fitted, ...]
    today: dt.date

    def residual(self, f: Fitted) -> float:
        return f.point.ms / f.calibrated_ms(self.factors[f.point.stage]) - 1

    def stage_points(self, stage: str) -> list[Fitted]:
        return [f for f in self.fitted if f.point.stage == stage]

    def band(self, stage: str, context: int, batch: float) -> Band:
        """The band of a `stage` step at (context, batch): module docstring."""
        mine = self.stage_points(stage)
        if not mine:
            return PUBLISHED_BANDS[stage]
        spread = max([CALIBRATED_FLOOR, *(abs(self.residual(f)) for f in mine)])
        far = min(_doublings((context, batch), f.point.at) for f in mine)
        widen = PUBLISHED_BANDS[stage].rel * min(1.0, far / FAR_DOUBLINGS)
        why = (
            f"{stage} band +-{spread + widen:.0%}: the largest residual of {len(mine)} point(s), at least "
            f"{CALIBRATED_FLOOR:.0%}, {spread:.0%}"
            + (f", + {widen:.0%} for {far:.1f} doublings of context or batch from them" if widen > 0.005 else "")
        )
        return Band(spread + widen, why, bound=True)

    def age_days(self, stage: str) -> int | None:
        dates = [dt.date.fromisoformat(f.point.date) for f in self.stage_points(stage)]
        return (self.today - max(dates)).days if dates else None

    def describe(self) -> str:
        """One line: what each stage is calibrated to, and how old its points are."""
        parts = []
        for stage in ("prefill", "decode"):
            mine = self.stage_points(stage)
            if not mine:
                parts.append(f"{stage} uncalibrated (no point; {PUBLISHED_BANDS[stage].why})")
                continue
            residuals = ", ".join(f"{self.residual(f):+.0%}" for f in mine)
            newest = max(f.point.date for f in mine)
            parts.append(
                f"{stage} x{self.factors[stage]:.2f} from {len(mine)} point(s) (residuals {residuals}; newest "
                f"{newest}, {self.age_days(stage)} days old)"
            )
        return "calibrated to this fleet: " + "; ".join(parts)


def _doublings(a: tuple[int, float], b: tuple[int, float]) -> float:
    """How many doublings of context or of batch lie between two steps (the larger of the two)."""
    return max(abs(math.log2(max(1, a[0]) / max(1, b[0]))), abs(math.log2(max(1.0, a[1]) / max(1.0, b[1]))))


def fit(
    points: Sequence[MeasuredPoint],
    shape_for: Callable[[int], FleetShape],
    base: StepSource,
    today: dt.date | None = None,
) -> Calibration:
    """The factors that make `base`'s predictions of `points` on the fleet (`shape_for(tokens per call)`) the
    measured figures, per stage (module docstring)."""
    calls = [p for p in points if p.figure not in STEP_FIGURES]
    shapes = [shape_for(p.input_tokens + p.output_tokens) for p in calls]
    work = [Workload(p.input_tokens, p.output_tokens, concurrency=p.calls) for p in calls]
    preds = dict(zip(calls, predict_many(list(zip(shapes, work, strict=True)), base), strict=True))
    fitted = []
    for p in points:
        if p.figure == "decode_step":
            fitted.append(Fitted(p, decode_step_ms(shape_for(p.context), p.context, p.batch, base), 0.0))
        elif p.figure == "prefill_pass":
            fitted.append(Fitted(p, prefill_pass_ms(shape_for(p.input_tokens), p.input_tokens, 1, base), 0.0))
        else:
            pred = preds[p]
            name = "itl_p50" if p.figure == "output_tokens_per_s" else p.figure
            fixed = next(t.ms for t in pred.terms if t.name == "KV transfer") if p.stage == "prefill" else 0.0
            fitted.append(Fitted(p, getattr(pred, name).ms, fixed))
    factors = {}
    for stage in ("prefill", "decode"):
        ratios = [f.ratio() for f in fitted if f.point.stage == stage]
        if ratios:
            factors[stage] = math.exp(sum(math.log(max(1e-9, r)) for r in ratios) / len(ratios))
    return Calibration(factors, tuple(fitted), today or dt.datetime.now(dt.UTC).date())


class CalibratedSteps(OneRoundSteps):
    """`base`'s step times times the factor of their stage fitted on `points` (fit, on first use: a fleet whose time
    is never asked is never fitted), with the calibration's bands."""

    def __init__(
        self, base: StepSource, points: Sequence[MeasuredPoint], shape_for: Callable[[int], FleetShape]
    ) -> None:
        self.base, self.points, self.shape_for = base, list(points), shape_for
        self._fitted: Calibration | None = None

    @property
    def calibration(self) -> Calibration:
        if self._fitted is None:
            self._fitted = fit(self.points, self.shape_for, self.base)
        return self._fitted

    def describe(self) -> str:
        fitted = self.calibration.describe()  # first: the fit asks the base source, which then knows its corrections
        return f"{source_text(self.base)}; {fitted}"

    def band(self, stage: str, context: int, batch: float) -> Band:
        return self.calibration.band(stage, context, batch)

    def _scaled(self, stage: str, times: list[StepTime]) -> list[StepTime]:
        factor = self.calibration.factors.get(stage)
        if factor is None:
            return times
        count = len(self.calibration.stage_points(stage))
        return [t.scaled(factor, f"x{factor:.2f} calibrated to {count} point(s) of this fleet") for t in times]

    def both(
        self, prefills: Sequence[PrefillQuery], decodes: Sequence[DecodeQuery]
    ) -> tuple[list[StepTime], list[StepTime]]:
        p_times, d_times = ask(self.base, prefills, decodes)
        return self._scaled("prefill", p_times), self._scaled("decode", d_times)


def calibrated(base: StepSource, points: Sequence[MeasuredPoint], shape_for: Callable[[int], FleetShape]) -> StepSource:
    """`base` calibrated to `points` (CalibratedSteps), or `base` itself when there is none."""
    return CalibratedSteps(base, points, shape_for) if points else base


SHAPE_KEYS = {"decode_step": ("batch", "context"), "prefill_pass": ("input_tokens",)}
CALL_KEYS = ("calls", "input_tokens", "output_tokens")


def as_declared(point: MeasuredPoint) -> dict[str, Any]:
    """A point as the inventory declares it: the figure, value, unit, its shape's keys, date and source."""
    head = {"figure": point.figure, "value": round(point.value, 3), "unit": point.unit}
    shape = {k: getattr(point, k) for k in SHAPE_KEYS.get(point.figure, CALL_KEYS)}
    return head | shape | {"date": point.date, "source": point.source}


def live_points(figures: LiveFigures) -> list[MeasuredPoint]:
    """The audit's live measurement (sglang_perf_live.LiveFigures) as points: one decode step at the measured batch
    and context, and one prefill pass of the measured prompt (its TTFT on the prefill engines, queueing included:
    under load it makes prefill look slower than it is)."""
    date = figures.at[:10]
    where = f"the audit's live measurement ({figures.source}; measured {figures.at})"
    return [
        MeasuredPoint(
            "decode_step",
            figures.decode_step_ms,
            "ms",
            date,
            f"{where}: {figures.decode_basis}",
            batch=max(1, round(figures.batch)),
            context=figures.context,
        ),
        MeasuredPoint(
            "prefill_pass",
            figures.prompt_tokens / figures.prefill_tokens_per_s * 1000,
            "ms",
            date,
            f"{where}: {figures.prefill_basis}",
            input_tokens=max(1, round(figures.prompt_tokens)),
        ),
    ]
