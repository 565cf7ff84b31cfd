"""The Grafana dashboard, generated from the same fleet and policy as the alert rules (sglang_alerts).

Built with grafana-foundation-sdk (Grafana's own typed schema and builders); `validate` reads the JSON back
through the SDK's typed model, which keeps only what Grafana's dashboard schema defines, and compares.
Its first row answers "what limits are we running with, and how close are we?" live: parallel calls, total
context and per-call context, each against its declared or predicted limit. Controller-side only.
"""

from __future__ import annotations

import json
from typing import Any

from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_alerts import (
    DRIFT_METRIC,
    ENGINE_JOB,
    ROUTER_JOB,
    TTFT_METRIC,
    Policy,
    Targets,
)

# The SDK is a controller requirement (requirements/dev.txt); without it the rest of the collection still loads
# and only a dashboard asked for fails, naming the package.
try:
    from grafana_foundation_sdk.builders import bargauge, prometheus, table, timeseries
    from grafana_foundation_sdk.builders.dashboard import Dashboard, Row, ThresholdsConfig
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models import dashboard as model
    from grafana_foundation_sdk.models.common import BarGaugeDisplayMode, VizOrientation
    from grafana_foundation_sdk.models.prometheus import PromQueryFormat
except ImportError as missing:
    SDK_MISSING: ImportError | None = missing
else:
    SDK_MISSING = None

DASHBOARD_UID = "sglang-dsv4-envelope"
DATASOURCE_UID = "sglang-prometheus"  # the Prometheus datasource the provisioning declares
TTFT_TITLE = "TTFT p99 of the decode engines"


class DashboardError(RuntimeError):
    """The dashboard cannot be built here."""


def _sdk() -> None:
    if SDK_MISSING is not None:
        raise DashboardError(f"the Grafana dashboard needs grafana-foundation-sdk on the controller: {SDK_MISSING}")


def _datasource() -> model.DataSourceRef:
    return model.DataSourceRef(type_val="prometheus", uid=DATASOURCE_UID)


def _query(expr: str, legend: str, ref: str, fmt: PromQueryFormat | None = None) -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(_datasource())
    return q.format(fmt) if fmt else q


def _refs() -> Any:
    return iter("ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _limit_line(value: float, label: str, ref: str) -> prometheus.Dataquery:
    """A declared or predicted limit drawn as a flat line."""
    return _query(f"vector({value})", label, ref)


def _thresholds(red_at: float) -> ThresholdsConfig:
    return (
        ThresholdsConfig()
        .mode(model.ThresholdsMode.ABSOLUTE)
        .steps([model.Threshold(value=None, color="green"), model.Threshold(value=red_at, color="red")])
    )


def parallel_calls(fl: Targets) -> timeseries.Panel:
    refs = _refs()
    p = timeseries.Panel().title("Parallel calls").unit("short").datasource(_datasource()).span(8).height(8)
    limits = []
    for e in fl.engines:
        if e.role != "decode":
            continue
        sel = f'{{job="{ENGINE_JOB}",server="{e.server}"}}'
        p = p.with_target(_query(f"sum(sglang:num_running_reqs{sel})", f"running {e.server}", next(refs)))
        if e.max_running:
            p = p.with_target(_limit_line(e.max_running, f"max_running_requests {e.server}", next(refs)))
            limits.append(f"{e.server}: effective max_running_requests {e.max_running}")
    for r in fl.routers:
        sel = f'{{job="{ROUTER_JOB}",server="{r.server}"}}'
        mcr, qs = r.declared.get("max_concurrent_requests"), r.declared.get("queue_size")
        p = p.with_target(_query(f"max(smg_admission_inflight{sel})", f"in flight {r.server}", next(refs)))
        p = p.with_target(_query(f"max(smg_admission_queue_depth{sel})", f"queued {r.server}", next(refs)))
        if mcr:
            p = p.with_target(_limit_line(mcr, f"max_concurrent_requests {r.server}", next(refs)))
        if qs:
            p = p.with_target(_limit_line(qs, f"queue_size {r.server}", next(refs)))
        limits.append(f"{r.server}: max_concurrent_requests {mcr}, queue_size {qs}")
    return p.description(
        "Requests running on each decode engine against its effective max_running_requests, and the router's "
        "in-flight and queued requests against max_concurrent_requests and queue_size. Limits: " + "; ".join(limits)
    )


def total_context(fl: Targets) -> timeseries.Panel:
    refs = _refs()
    p = timeseries.Panel().title("Total context (KV tokens)").unit("short").datasource(_datasource()).span(8).height(8)
    pools = []
    for e in fl.engines:
        sel = f'{{job="{ENGINE_JOB}",server="{e.server}"}}'
        p = p.with_target(_query(f"sum(sglang:num_used_tokens{sel})", f"used {e.server}", next(refs)))
        p = p.with_target(_query(f"sum(sglang:max_total_num_tokens{sel})", f"live pool {e.server}", next(refs)))
        if e.pool:
            p = p.with_target(_limit_line(e.pool, f"predicted pool {e.server}", next(refs)))
            pools.append(f"{e.server} {e.pool:,}")
    return p.description(
        "KV tokens in use against the live pool (sglang:max_total_num_tokens) and the pool the capacity model "
        "predicts from the declared envelope (" + "; ".join(pools) + "). The gap between the two lines is drift."
    )


def per_call_context(fl: Targets) -> bargauge.Panel:
    memory = fl.memory()
    ctx = memory.per_call_context if memory else 0
    expr = (
        f'sum by (le) (increase(sglang:prompt_tokens_histogram_bucket{{job="{ENGINE_JOB}",engine_type="prefill"}}'
        "[$__range]))"
    )
    return (
        bargauge.Panel()
        .title("Per-call context (prompt length)")
        .datasource(_datasource())
        .span(8)
        .height(8)
        .with_target(_query(expr, "{{le}}", "A", PromQueryFormat.HEATMAP))
        .display_mode(BarGaugeDisplayMode.GRADIENT)
        .orientation(VizOrientation.HORIZONTAL)
        .unit("short")
        .description(
            "Prompts finished in the range by length bucket (sglang:prompt_tokens_histogram, upper bounds in "
            f"tokens). Longer prompts than the declared context_length ({ctx:,}) are refused; the buckets at "
            "and above it must stay empty."
        )
    )


def alerts_and_drift() -> table.Panel:
    return (
        table.Panel()
        .title("Firing alerts and envelope drift")
        .datasource(_datasource())
        .span(24)
        .height(8)
        .with_target(_query('ALERTS{alertstate="firing"}', "{{alertname}} {{server}}", "A", PromQueryFormat.TABLE))
        .with_target(_query(f"{DRIFT_METRIC} > 0", "{{server}} {{key}} {{layer}}", "B", PromQueryFormat.TABLE))
        .description(
            "Alerts generated from the envelope that fire now, and the keys the drift exporter finds off the "
            "declaration (server, key, layer where the drift starts)."
        )
    )


def latency_and_failures(fl: Targets, policy: Policy) -> list[timeseries.Panel]:
    refs = _refs()
    ttft = timeseries.Panel().title(TTFT_TITLE).unit("s").datasource(_datasource()).span(12).height(8)
    for e in fl.engines:
        if e.role != "decode":
            continue
        sel = f'{{job="{ENGINE_JOB}",server="{e.server}"}}'
        expr = f"histogram_quantile(0.99, sum by (le) (rate({TTFT_METRIC}_bucket{sel}[{policy.rate_window}])))"
        ttft = ttft.with_target(_query(expr, f"p99 {e.server}", next(refs)))
    slo = ""
    if policy.ttft_p99_slo_s:
        ttft = ttft.with_target(_limit_line(policy.ttft_p99_slo_s, "SLO sglang_monitoring_ttft_p99_slo_s", next(refs)))
        ttft = ttft.thresholds(_thresholds(policy.ttft_p99_slo_s))
        slo = f", against the declared SLO of {policy.ttft_p99_slo_s} s"
    ttft = ttft.description(
        f"p99 time to first token of the calls each decode engine serves ({TTFT_METRIC} over "
        f"{policy.rate_window}: from the call's arrival, which the router sends to the prefill and the decode "
        f"together, to its first token; the wait for the prefill and the KV transfer included){slo}. smg's "
        "smg_pd_ttft_seconds is not drawn: it times the decode leg's response start and misses the wait for the "
        "prefill."
    )
    refs = _refs()
    fails = timeseries.Panel().title("Failures").unit("reqps").datasource(_datasource()).span(12).height(8)
    for metric, what in (
        ("sglang:num_bootstrap_failed_reqs_total", "bootstrap failures"),
        ("sglang:num_retracted_requests_total", "retractions"),
        ("sglang:num_aborted_requests_total", "aborted"),
    ):
        expr = f'sum by (server) (rate({metric}{{job="{ENGINE_JOB}"}}[{policy.rate_window}]))'
        fails = fails.with_target(_query(expr, f"{what} {{{{server}}}}", next(refs)))
    sel = f'{{job="{ROUTER_JOB}",status_code="429"}}'
    expr = f"sum by (server) (rate(smg_http_responses_total{sel}[{policy.rate_window}]))"
    fails = fails.with_target(_query(expr, "429 {{server}}", next(refs)))
    return [ttft, fails]


def build(fl: Targets, policy: Policy) -> dict[str, Any]:
    """The dashboard as Grafana's provisioning JSON."""
    _sdk()
    board = (
        Dashboard("SGLang DeepSeek-V4: the envelope, live")
        .uid(DASHBOARD_UID)
        .tags(["sglang", "deepseek-v4", "envelope"])
        .refresh("30s")
        .time("now-1h", "now")
        .with_row(Row("What limits are we running with, and how close are we?"))
        .with_panel(parallel_calls(fl))
        .with_panel(total_context(fl))
        .with_panel(per_call_context(fl))
        .with_row(Row("Alerts and drift"))
        .with_panel(alerts_and_drift())
        .with_row(Row("Latency and failures"))
    )
    for panel in latency_and_failures(fl, policy):
        board = board.with_panel(panel)
    return dict(json.loads(json.dumps(board.build(), cls=JSONEncoder)))


def validate(data: dict[str, Any]) -> list[str]:
    """Differences between the JSON and what Grafana's typed dashboard schema (the SDK's model) reads back."""
    _sdk()
    parsed = model.Dashboard.from_json(data)
    back = json.loads(json.dumps(parsed, cls=JSONEncoder))
    return _diff(data, back, "")


def _diff(a: Any, b: Any, where: str) -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{where}.{k}: not in Grafana's schema" for k in a if k not in b]
        return out + [d for k in a if k in b for d in _diff(a[k], b[k], f"{where}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} items, {len(b)} read back"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _diff(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {a!r} read back as {b!r}"]
