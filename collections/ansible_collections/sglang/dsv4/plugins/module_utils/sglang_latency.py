"""Measured latency of the engines: SGLang 0.5.23's latency histograms and request counters, reduced to count, mean,
p50 and p90 per figure, per engine and per role of the fleet.

Two sources: the engines' /metrics (cumulative since each engine started; sglang_engine_live.parse_latency reads it
on the host, in the audit's one /metrics fetch), or Prometheus over a window (the sglang_monitoring role's, one
query through its HTTP API, prometheus_query / from_prometheus). Every summary says which.

Quantiles follow Prometheus' histogram_quantile: the bucket that holds rank q x count, linear interpolation inside
it, the first bucket starting at 0, a rank in the +Inf bucket answered by the highest finite bound.

TTFT is the engine's own: on a decode engine it runs from the request's arrival to its first token (the caller's
TTFT, prefill and KV transfer included), on a prefill engine it is the prefill (queueing included). ITL is per
generated token (SGLang observes each step's interval divided by its new tokens); E2E per finished request.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

HISTOGRAMS = {
    "ttft": "sglang:time_to_first_token_seconds",
    "itl": "sglang:inter_token_latency_seconds",
    "e2e": "sglang:e2e_request_latency_seconds",
}
COUNTERS = {
    "prompt_tokens": "sglang:prompt_tokens_total",
    "generation_tokens": "sglang:generation_tokens_total",
    "requests": "sglang:num_requests_total",
}
RUNNING = "sglang:num_running_reqs"
QUANTILES = {"p50": 0.5, "p90": 0.9}
ROLES = ("prefill", "decode")
METRICS_SOURCE = "/metrics, since each engine started"


def histogram_quantile(q: float, bounds: Sequence[float], cumulative: Sequence[float], count: float) -> float | None:
    """Prometheus' histogram_quantile over finite bucket bounds (ascending), their cumulative counts and the total
    count (the +Inf bucket); None where Prometheus answers NaN (no observation)."""
    if count <= 0 or not bounds:
        return None
    rank = q * count
    counts = [*cumulative, count]
    index = next(i for i, c in enumerate(counts) if c >= rank)
    if index == len(bounds):  # in the +Inf bucket
        return float(bounds[-1])
    if index == 0 and bounds[0] <= 0:
        return float(bounds[0])
    start, end, inside = 0.0, float(bounds[index]), counts[index]
    if index > 0:
        start = float(bounds[index - 1])
        inside -= counts[index - 1]
        rank -= counts[index - 1]
    return start + (end - start) * (rank / inside) if inside > 0 else end


@dataclass(frozen=True)
class Histogram:
    """A cumulative histogram: finite upper bounds, the cumulative count at each, the total count and sum."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    count: float
    total: float

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Histogram:
        """From sglang_engine_live.parse_latency's plain form: {buckets: [[le, cumulative], ...], count, sum}."""
        buckets = sorted((float(le), float(n)) for le, n in data.get("buckets") or [])
        return cls(
            tuple(b for b, _n in buckets),
            tuple(n for _b, n in buckets),
            float(data.get("count") or 0),
            float(data.get("sum") or 0),
        )

    def merged(self, other: Histogram) -> Histogram:
        """The bucket-wise sum (Prometheus' sum by (le)); bounds missing on one side count as its nearest below."""
        bounds = sorted(set(self.bounds) | set(other.bounds))
        return Histogram(
            tuple(bounds),
            tuple(self._at(b) + other._at(b) for b in bounds),
            self.count + other.count,
            self.total + other.total,
        )

    def _at(self, bound: float) -> float:
        below = [n for b, n in zip(self.bounds, self.cumulative, strict=True) if b <= bound]
        return below[-1] if below else 0.0

    def quantile(self, q: float) -> float | None:
        return histogram_quantile(q, self.bounds, self.cumulative, self.count)

    def summary(self) -> dict[str, Any]:
        """{count, mean_s, p50_s, p90_s} (None where nothing was observed)."""
        out: dict[str, Any] = {"count": int(self.count), "mean_s": self.total / self.count if self.count else None}
        for name, q in QUANTILES.items():
            out[f"{name}_s"] = self.quantile(q)
        return out


def engine_summary(latency: Mapping[str, Any], running: float | None = None) -> dict[str, Any]:
    """One engine's figures from sglang_engine_live.parse_latency's output: each histogram's summary, finished
    requests, prompt and generated tokens per finished request, and the running requests when given."""
    hists = {name: Histogram.of(latency[name]) for name in HISTOGRAMS if isinstance(latency.get(name), Mapping)}
    counters = {name: float(latency.get(name) or 0) for name in COUNTERS}
    return _summary(hists, counters, running)


def _summary(hists: Mapping[str, Histogram], counters: Mapping[str, float], running: float | None) -> dict[str, Any]:
    requests = counters["requests"]  # every caller counts each of COUNTERS, 0 where the page lacks it
    out: dict[str, Any] = {"requests": int(requests)}
    if requests:
        out["prompt_tokens_per_request"] = counters["prompt_tokens"] / requests
        out["generation_tokens_per_request"] = counters["generation_tokens"] / requests
    if running is not None:
        out["running"] = running
    out.update({name: hist.summary() for name, hist in hists.items()})
    return out


# ---------------------------------------------------------------- the fleet


def _role_from_metrics(engines: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    hists: dict[str, Histogram] = {}
    counters = dict.fromkeys(COUNTERS, 0.0)
    running = 0.0
    for engine in engines:
        latency = engine["latency"]
        for name in HISTOGRAMS:
            if isinstance(latency.get(name), Mapping):
                hist = Histogram.of(latency[name])
                hists[name] = hists[name].merged(hist) if name in hists else hist
        for name in COUNTERS:
            counters[name] += float(latency.get(name) or 0)
        running += float(engine.get("running") or 0)
    return {"source": METRICS_SOURCE} | _summary(hists, counters, running)


def measure(
    engines: Sequence[Mapping[str, Any]],
    prometheus: Mapping[str, Any] | None = None,
    window: str = "",
    at: str = "",
    notes: Sequence[str] = (),
) -> dict[str, Any]:
    """The fleet's measured latency per engine role. `engines`: {host, role, latency (parse_latency's output),
    running}. A role Prometheus answered for, with requests in the window, takes its figures from there
    (from_prometheus); the others sum their engines' /metrics histograms and counters (since each engine started).
    {at, window, roles: {role: {source, engines, requests, running, prompt_tokens_per_request,
    generation_tokens_per_request, ttft, itl, e2e}}, notes}."""
    windowed = from_prometheus(prometheus) if prometheus else {}
    roles: dict[str, Any] = {}
    for role in ROLES:
        mine = [e for e in engines if e.get("role") == role and isinstance(e.get("latency"), Mapping)]
        hosts = sorted({str(e["host"]) for e in mine})
        found = windowed.get(role) or {}
        if found.get("requests"):
            roles[role] = {"source": f"Prometheus, the last {window}"} | found | {"engines": hosts}
        elif mine:
            roles[role] = _role_from_metrics(mine) | {"engines": hosts}
    extra = list(notes)
    if prometheus and prometheus.get("status") != "success":
        refusal = f"{prometheus.get('errorType') or 'error'}: {prometheus.get('error') or 'no reason given'}"
        extra.append(f"Prometheus refused the latency query ({refusal}): the engines' {METRICS_SOURCE}")
    elif prometheus and not windowed:
        extra.append(f"Prometheus saw no engine request in the last {window}: the engines' {METRICS_SOURCE}")
    return {"at": at, "window": window, "roles": roles, "notes": extra}


def measured_load(measured: Mapping[str, Any]) -> tuple[int, int, int] | None:
    """(prompt tokens, output tokens, concurrency) of the measured traffic: the decode engines' tokens per finished
    request and their running requests (at least 1); None without a finished request on them."""
    decode = (measured.get("roles") or {}).get("decode") or {}
    if not decode.get("requests") or not decode.get("prompt_tokens_per_request"):
        return None
    isl = max(1, round(float(decode["prompt_tokens_per_request"])))
    osl = max(1, round(float(decode.get("generation_tokens_per_request") or 1)))
    return isl, osl, max(1, round(float(decode.get("running") or 0)))


# ---------------------------------------------------------------- Prometheus


def _tagged(expr: str, **labels: str) -> str:
    for name, value in labels.items():
        expr = f'label_replace({expr}, "{name}", "{value}", "", "")'
    return expr


def prometheus_query(window: str, job: str, role_label: str = "role") -> str:
    """One PromQL query for every figure of every engine role over `window`: each histogram's p50 and p90
    (histogram_quantile over sum by (le, role) of the bucket rates), its count and sum (increase), the counters'
    increases and the mean running requests, each series tagged with labels figure and stat."""
    sel = f'{{job="{job}"}}'
    by = f"sum by ({role_label})"
    parts = []
    for figure, metric in HISTOGRAMS.items():
        for stat, q in QUANTILES.items():
            rate = f"sum by (le, {role_label}) (rate({metric}_bucket{sel}[{window}]))"
            parts.append(_tagged(f"histogram_quantile({q}, {rate})", figure=figure, stat=stat))
        parts.append(_tagged(f"{by} (increase({metric}_count{sel}[{window}]))", figure=figure, stat="count"))
        parts.append(_tagged(f"{by} (increase({metric}_sum{sel}[{window}]))", figure=figure, stat="sum"))
    for name, metric in COUNTERS.items():
        parts.append(_tagged(f"{by} (increase({metric}{sel}[{window}]))", figure=name, stat="increase"))
    parts.append(_tagged(f"{by} (avg_over_time({RUNNING}{sel}[{window}]))", figure="running", stat="mean"))
    return " or ".join(parts)


def _value(item: Mapping[str, Any]) -> float | None:
    try:
        value = float(item["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return None if math.isnan(value) or math.isinf(value) else value


def from_prometheus(answer: Mapping[str, Any], role_label: str = "role") -> dict[str, dict[str, Any]]:
    """The figures per role from Prometheus' answer to prometheus_query ({status, data: {result: [...]}}), in
    engine_summary's form; roles without a request in the window are left out."""
    data = answer.get("data") if answer.get("status") == "success" else None
    found: dict[str, dict[tuple[str, str], float]] = {}
    for item in (data or {}).get("result") or []:
        metric = item.get("metric") or {}
        value = _value(item)
        role = metric.get(role_label)
        if role in ROLES and value is not None:
            found.setdefault(role, {})[(str(metric.get("figure")), str(metric.get("stat")))] = value
    out: dict[str, dict[str, Any]] = {}
    for role, values in found.items():
        requests = values.get(("requests", "increase"), 0.0)
        summary: dict[str, Any] = {"requests": round(requests)}
        if requests:
            summary["prompt_tokens_per_request"] = values.get(("prompt_tokens", "increase"), 0.0) / requests
            summary["generation_tokens_per_request"] = values.get(("generation_tokens", "increase"), 0.0) / requests
        if ("running", "mean") in values:
            summary["running"] = values[("running", "mean")]
        for figure in HISTOGRAMS:
            count = values.get((figure, "count"), 0.0)
            if not count:
                continue
            summary[figure] = {
                "count": round(count),
                "mean_s": values.get((figure, "sum"), 0.0) / count,
                **{f"{stat}_s": values.get((figure, stat)) for stat in QUANTILES},
            }
        if summary["requests"]:
            out[role] = summary
    return out


# ---------------------------------------------------------------- text


def seconds(value: float | None) -> str:
    """A latency in s, or in ms below one second."""
    if value is None:
        return "-"
    return f"{value:,.2f} s" if value >= 1 else f"{value * 1000:,.1f} ms"


def figure_text(name: str, figure: Mapping[str, Any], unit: str = "requests") -> str:
    mean, p50, p90 = (seconds(figure.get(k)) for k in ("mean_s", "p50_s", "p90_s"))
    return f"{name} ({figure['count']:,} {unit}) mean {mean}, p50 {p50}, p90 {p90}"


def summary_lines(summary: Mapping[str, Any]) -> list[str]:
    """One engine's (or role's) figures in words."""
    if not summary.get("requests") and not any(k in summary for k in HISTOGRAMS):
        return ["no finished request yet"]
    parts = [f"{summary.get('requests', 0):,} requests finished"]
    if summary.get("prompt_tokens_per_request") is not None:
        parts.append(
            f"{summary['prompt_tokens_per_request']:,.0f} prompt + {summary['generation_tokens_per_request']:,.0f} "
            "generated tokens per request"
        )
    if summary.get("running") is not None:
        parts.append(f"{float(summary['running']):g} running")
    lines = ["; ".join(parts)]
    units = {"ttft": "requests", "itl": "tokens", "e2e": "requests"}
    names = {"ttft": "TTFT", "itl": "ITL", "e2e": "E2E"}
    found = [
        figure_text(names[k], summary[k], units[k])
        for k in HISTOGRAMS
        if isinstance(summary.get(k), Mapping) and summary[k].get("count")
    ]
    if "itl" not in summary:
        found.append(f"ITL not published ({HISTOGRAMS['itl']})")
    return [*lines, "; ".join(found)]
