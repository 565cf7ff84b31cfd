"""A StepSource from the live fleet: the time model's step times taken from what the audit measured on the engines
(sglang_latency.measure, kept in the audit's JSON report under fleet.measured_time) instead of AIConfigurator's data.

The figures, and what each assumes:
- prefill: tokens/s per prefill engine = the prefill engines' prompt tokens per finished request over their mean
  TTFT (on a prefill engine TTFT is its prefill, queueing included: under load this understates its speed);
- decode: ms per step = the decode engines' mean inter-token latency at their measured running requests per engine
  (the batch) and context (prompt + half the output); where they publish no ITL histogram, (mean E2E - mean TTFT) /
  (output tokens - 1) of the same engines.

Answering a query: with a `shape` source (AIConfigurator) every answer is that source's time for the query, scaled by
measured / its own time at the measured point (one factor for prefill, one for decode): the fleet's level, the
estimator's growth with batch, context and prefix. Without one, prefill time is proportional to the tokens a pass
computes and a decode step is the measured one at any batch and context. The live times already hold whatever index
keys the fleet runs, so no bf16 index-key term is added on top (attention_ms 0).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import (
    DecodeQuery,
    OneRoundSteps,
    PrefillQuery,
    StepSource,
    StepTime,
    ask,
)

ORIGIN = "live fleet"


class LiveFiguresMissing(ValueError):
    """The audit report holds no usable measurement of the live fleet."""


@dataclass(frozen=True)
class LiveFigures:
    """What the live fleet measured, as the step source uses it."""

    prefill_tokens_per_s: float  # per prefill engine
    prompt_tokens: float  # per request, on the prefill engines
    decode_step_ms: float
    batch: float  # running requests per decode engine
    context: int  # prompt + half the output, on the decode engines
    prefill_basis: str
    decode_basis: str
    source: str  # where the figures come from (Prometheus over a window, or /metrics since start)
    at: str  # when the audit measured them

    @classmethod
    def of(cls, measured: Mapping[str, Any]) -> LiveFigures:
        """From sglang_latency.measure's output; LiveFiguresMissing says what is missing."""
        roles = measured.get("roles") or {}
        prefill, decode = roles.get("prefill") or {}, roles.get("decode") or {}
        if not prefill.get("requests") or not (prefill.get("ttft") or {}).get("mean_s"):
            raise LiveFiguresMissing(
                "no finished request with a TTFT on the prefill engines: send traffic through the router, then rerun "
                "ansible-playbook audit.yml"
            )
        if not decode.get("requests"):
            raise LiveFiguresMissing(
                "no finished request on the decode engines: send traffic through the router, then rerun the audit"
            )
        prompt = float(prefill["prompt_tokens_per_request"])
        ttft = float(prefill["ttft"]["mean_s"])
        osl = float(decode.get("generation_tokens_per_request") or 1)
        isl = float(decode.get("prompt_tokens_per_request") or prompt)
        engines = max(1, len(decode.get("engines") or []))
        batch = max(1.0, float(decode.get("running") or 0) / engines)
        itl = (decode.get("itl") or {}).get("mean_s")
        if itl:
            step_ms = float(itl) * 1000
            basis = f"the ITL mean of {decode['itl']['count']:,} tokens"
        else:
            e2e, first = (decode.get("e2e") or {}).get("mean_s"), (decode.get("ttft") or {}).get("mean_s")
            if not e2e or first is None or osl <= 1:
                raise LiveFiguresMissing(
                    "the decode engines publish no inter-token latency, and their E2E and TTFT do not give one (a "
                    "request of more than one output token is needed)"
                )
            step_ms = (float(e2e) - float(first)) * 1000 / (osl - 1)
            requests = decode["requests"]
            basis = f"(E2E mean - TTFT mean) / {osl - 1:,.0f} tokens of {requests:,} requests (no ITL histogram)"
        sources = sorted({str(prefill.get("source")), str(decode.get("source"))})
        return cls(
            prefill_tokens_per_s=prompt / ttft,
            prompt_tokens=prompt,
            decode_step_ms=step_ms,
            batch=batch,
            context=max(1, round(isl + osl / 2)),
            prefill_basis=f"{prompt:,.0f} prompt tokens per request over a TTFT mean of {ttft:,.3f} s on the prefill "
            f"engines ({prefill['requests']:,} requests)",
            decode_basis=f"{basis} at batch {batch:g} and context {round(isl + osl / 2):,}",
            source="; ".join(sources),
            at=str(measured.get("at") or "?"),
        )


class LiveSteps(OneRoundSteps):
    """Per-step times from the live fleet's measured figures, shaped by `shape` when given (module docstring)."""

    def __init__(self, figures: LiveFigures, shape: StepSource | None = None) -> None:
        self.figures = figures
        self.shape = shape
        self.scale: dict[str, float] = {}  # measured / the shape source's time at the measured points, once asked

    def describe(self) -> str:
        f = self.figures
        how = (
            "scaled to the estimator's growth with batch, context and prefix"
            if self.shape is not None
            else "prefill time proportional to its tokens, the decode step the same at any batch and context"
        )
        return (
            f"{ORIGIN} (prefill {f.prefill_tokens_per_s:,.0f} tokens/s per engine: {f.prefill_basis}; decode "
            f"{f.decode_step_ms:,.2f} ms per step: {f.decode_basis}; {f.source}; measured {f.at}; {how})"
        )

    def _step(self, ms: float) -> StepTime:
        return StepTime(ms, ms, 0.0, 0.0, 0.0, f"{ORIGIN} (measured {self.figures.at})", "live")

    def both(
        self, prefills: Sequence[PrefillQuery], decodes: Sequence[DecodeQuery]
    ) -> tuple[list[StepTime], list[StepTime]]:
        f = self.figures
        if self.shape is None:
            rate = f.prefill_tokens_per_s / 1000.0  # tokens per ms
            return (
                [self._step(q.batch * max(1, q.isl - q.prefix) / rate) for q in prefills],
                [self._step(f.decode_step_ms) for _q in decodes],
            )
        first = prefills[0] if prefills else decodes[0] if decodes else None
        if first is None:
            return [], []
        # the measured points, asked of the shape source in the same round as the queries
        p_ref = PrefillQuery(first.model, first.tp, first.ep, max(1, round(f.prompt_tokens)), 0, 1)
        d_model = decodes[0] if decodes else first
        d_ref = DecodeQuery(d_model.model, d_model.tp, d_model.ep, f.context, max(1, round(f.batch)))
        p_all, d_all = [*prefills, p_ref], [*decodes, d_ref]
        p_times, d_times = ask(self.shape, p_all, d_all)
        measured_prefill_ms = f.prompt_tokens / f.prefill_tokens_per_s * 1000
        self.scale = {"prefill": measured_prefill_ms / p_times[-1].ms, "decode": f.decode_step_ms / d_times[-1].ms}
        return (
            [self._step(t.ms * self.scale["prefill"]) for t in p_times[:-1]],
            [self._step(t.ms * self.scale["decode"]) for t in d_times[:-1]],
        )


# ---------------------------------------------------------------- the audit's report


def measured_of(report: Path, engine_hosts: Sequence[str]) -> dict[str, Any]:
    """The measured latency of the audit report `report` (fleet.measured_time), checked to be this fleet's: every
    engine host it measured is one of `engine_hosts`."""
    data = json.loads(report.read_text())
    measured = (data.get("fleet") or {}).get("measured_time")
    if not isinstance(measured, dict) or not measured.get("roles"):
        raise LiveFiguresMissing(
            f"{report} holds no measured latency (an audit older than the latency figures, or no engine published "
            "/metrics); fix: rerun ansible-playbook audit.yml"
        )
    seen = {str(h) for role in measured["roles"].values() for h in role.get("engines") or []}
    foreign = sorted(seen - set(engine_hosts))
    if foreign:
        raise LiveFiguresMissing(
            f"{report} measured engines on {', '.join(foreign)}, which this inventory does not declare: it is another "
            "fleet's audit; fix: pass --from-live <this inventory's report folder>"
        )
    return dict(measured)


def live_steps(
    path: str | Path | None, reports_dir: Path, engine_hosts: Sequence[str], shape: StepSource | None = None
) -> LiveSteps:
    """LiveSteps from the audit report at `path` (a report folder or its audit.json), else from the newest
    reports_dir/audit-*/ that measured this fleet's engines (measured_of)."""
    if path:
        report = Path(path)
        report = report / "audit.json" if report.is_dir() else report
        if not report.is_file():
            raise LiveFiguresMissing(f"{path}: no audit report there (audit.json); fix: ansible-playbook audit.yml")
        return LiveSteps(LiveFigures.of(measured_of(report, engine_hosts)), shape)
    for report in sorted(reports_dir.glob("audit-*/audit.json"), reverse=True):
        try:
            measured = measured_of(report, engine_hosts)
        except (LiveFiguresMissing, ValueError):
            continue
        return LiveSteps(LiveFigures.of(measured), shape)
    raise LiveFiguresMissing(
        f"no audit report under {reports_dir} measured this fleet's engines ({', '.join(engine_hosts)}); fix: "
        "ansible-playbook audit.yml -i <inventory> with traffic on the fleet, or pass --from-live <report folder>"
    )
