"""The Grafana dashboard (plugins/plugin_utils/sglang_dashboard.build) pinned whole: every panel as provisioning JSON
(type, title, description, queries with their refIds, legends and formats, units, thresholds, grid place, row ids),
for a fleet that takes every branch and for a fleet that declares nothing. Each test builds its own board.
The SDK is pinned (requirements/constraints.txt), so the keys it adds by default (repeatDirection, transparent,
the bar gauge's options) are part of the pinned JSON. The fleets are synthetic."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_dashboard
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_alerts import (
    Policy,
    RouterTarget,
    Targets,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_dashboard import DashboardError, build, validate
from test_dashboard_panels_unit import BARE, DECODE, PREFILL, QUEUE_ONLY
from test_dashboard_panels_unit import ROUTER as BOTH

DS = {"type": "prometheus", "uid": "sglang-prometheus"}

# The panels test's synthetic engines and routers: a prefill engine with a predicted pool and a context length; a
# decode engine whose predicted max_running_requests (48) overrides the declared 64; a decode engine that declares
# and predicts nothing; routers with both limits (BOTH) and with queue_size only. Added here: max_concurrent_requests
# only.
CAP_ONLY = RouterTarget("r3", {"max_concurrent_requests": 32}, 3)


def q(ref: str, expr: str, legend: str, fmt: str | None = None) -> dict[str, Any]:
    """One Prometheus query as Grafana stores it; `format` only when the panel asks for one."""
    out: dict[str, Any] = {"expr": expr, "refId": ref}
    if fmt:
        out["format"] = fmt
    return {**out, "legendFormat": legend, "datasource": DS}


def row(title: str, y: int) -> dict[str, Any]:
    return {
        "type": "row",
        "collapsed": False,
        "id": 0,
        "panels": [],
        "title": title,
        "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
    }


def timeseries(
    title: str,
    targets: list[dict[str, Any]],
    description: str | None,
    grid: dict[str, int],
    defaults: dict[str, Any],
) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "timeseries", "targets": targets, "title": title}
    if description is not None:
        out["description"] = description
    return {
        **out,
        "transparent": False,
        "datasource": DS,
        "gridPos": grid,
        "repeatDirection": "h",
        "fieldConfig": {"defaults": defaults, "overrides": []},
    }


def per_call(context: str) -> dict[str, Any]:
    return {
        "type": "bargauge",
        "targets": [
            q(
                "A",
                'sum by (le) (increase(sglang:prompt_tokens_histogram_bucket{job="sglang_engine",engine_type="prefill"}'
                "[$__range]))",
                "{{le}}",
                "heatmap",
            )
        ],
        "title": "Per-call context (prompt length)",
        "description": "Prompts finished in the range by length bucket (sglang:prompt_tokens_histogram, upper bounds "
        f"in tokens). Longer prompts than the declared context_length ({context}) are refused; the buckets at and "
        "above it must stay empty.",
        "transparent": False,
        "datasource": DS,
        "gridPos": {"h": 8, "w": 8, "x": 16, "y": 1},
        "repeatDirection": "h",
        "options": {
            "displayMode": "gradient",
            "valueMode": "color",
            "namePlacement": "auto",
            "showUnfilled": True,
            "sizing": "auto",
            "minVizWidth": 8,
            "minVizHeight": 16,
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": False, "calcs": []},
            "reduceOptions": {"calcs": []},
            "maxVizHeight": 300,
            "orientation": "horizontal",
        },
        "fieldConfig": {"defaults": {"unit": "short"}, "overrides": []},
    }


ALERTS_TABLE = {
    "type": "table",
    "targets": [
        q("A", 'ALERTS{alertstate="firing"}', "{{alertname}} {{server}}", "table"),
        q("B", "sglang_envelope_drift > 0", "{{server}} {{key}} {{layer}}", "table"),
    ],
    "title": "Firing alerts and envelope drift",
    "description": "Alerts generated from the envelope that fire now, and the keys the drift exporter finds off the "
    "declaration (server, key, layer where the drift starts).",
    "transparent": False,
    "datasource": DS,
    "gridPos": {"h": 8, "w": 24, "x": 0, "y": 10},
    "repeatDirection": "h",
}


def ttft_description(window: str, slo: str) -> str:
    return (
        "p99 time to first token of the calls each decode engine serves (sglang:time_to_first_token_seconds over "
        f"{window}: from the call's arrival, which the router sends to the prefill and the decode together, to its "
        f"first token; the wait for the prefill and the KV transfer included){slo}. smg's smg_pd_ttft_seconds is not "
        "drawn: it times the decode leg's response start and misses the wait for the prefill."
    )


def ttft_p99(ref: str, server: str, window: str) -> dict[str, Any]:
    return q(
        ref,
        "histogram_quantile(0.99, sum by (le) (rate(sglang:time_to_first_token_seconds_bucket"
        f'{{job="sglang_engine",server="{server}"}}[{window}])))',
        f"p99 {server}",
    )


def failures(window: str) -> dict[str, Any]:
    def rate(metric: str, labels: str) -> str:
        return f"sum by (server) (rate({metric}{{{labels}}}[{window}]))"

    return timeseries(
        "Failures",
        [
            q(
                "A",
                rate("sglang:num_bootstrap_failed_reqs_total", 'job="sglang_engine"'),
                "bootstrap failures {{server}}",
            ),
            q("B", rate("sglang:num_retracted_requests_total", 'job="sglang_engine"'), "retractions {{server}}"),
            q("C", rate("sglang:num_aborted_requests_total", 'job="sglang_engine"'), "aborted {{server}}"),
            q("D", rate("smg_http_responses_total", 'job="sglang_router",status_code="429"'), "429 {{server}}"),
        ],
        None,
        {"h": 8, "w": 12, "x": 12, "y": 19},
        {"unit": "reqps"},
    )


ROW_LIMITS = row("What limits are we running with, and how close are we?", 0)
ROW_ALERTS = row("Alerts and drift", 9)
ROW_LATENCY = row("Latency and failures", 18)
PARALLEL = "Requests running on each decode engine against its effective max_running_requests, and the router's "
PARALLEL += "in-flight and queued requests against max_concurrent_requests and queue_size. Limits: "
TOTAL = "KV tokens in use against the live pool (sglang:max_total_num_tokens) and the pool the capacity model "
TOTAL += "predicts from the declared envelope ("

FULL_PANELS = [
    ROW_LIMITS,
    timeseries(
        "Parallel calls",
        [
            q("A", 'sum(sglang:num_running_reqs{job="sglang_engine",server="d1:decode"})', "running d1:decode"),
            q("B", "vector(48)", "max_running_requests d1:decode"),
            q("C", 'sum(sglang:num_running_reqs{job="sglang_engine",server="d2:decode"})', "running d2:decode"),
            q("D", 'max(smg_admission_inflight{job="sglang_router",server="r1:router"})', "in flight r1:router"),
            q("E", 'max(smg_admission_queue_depth{job="sglang_router",server="r1:router"})', "queued r1:router"),
            q("F", "vector(128)", "max_concurrent_requests r1:router"),
            q("G", "vector(256)", "queue_size r1:router"),
            q("H", 'max(smg_admission_inflight{job="sglang_router",server="r2:router"})', "in flight r2:router"),
            q("I", 'max(smg_admission_queue_depth{job="sglang_router",server="r2:router"})', "queued r2:router"),
            q("J", "vector(512)", "queue_size r2:router"),
            q("K", 'max(smg_admission_inflight{job="sglang_router",server="r3:router"})', "in flight r3:router"),
            q("L", 'max(smg_admission_queue_depth{job="sglang_router",server="r3:router"})', "queued r3:router"),
            q("M", "vector(32)", "max_concurrent_requests r3:router"),
        ],
        PARALLEL + "d1:decode: effective max_running_requests 48; "
        "r1:router: max_concurrent_requests 128, queue_size 256; "
        "r2:router: max_concurrent_requests None, queue_size 512; "
        "r3:router: max_concurrent_requests 32, queue_size None",
        {"h": 8, "w": 8, "x": 0, "y": 1},
        {"unit": "short"},
    ),
    timeseries(
        "Total context (KV tokens)",
        [
            q("A", 'sum(sglang:num_used_tokens{job="sglang_engine",server="p1:prefill"})', "used p1:prefill"),
            q("B", 'sum(sglang:max_total_num_tokens{job="sglang_engine",server="p1:prefill"})', "live pool p1:prefill"),
            q("C", "vector(1234567)", "predicted pool p1:prefill"),
            q("D", 'sum(sglang:num_used_tokens{job="sglang_engine",server="d1:decode"})', "used d1:decode"),
            q("E", 'sum(sglang:max_total_num_tokens{job="sglang_engine",server="d1:decode"})', "live pool d1:decode"),
            q("F", "vector(2000000)", "predicted pool d1:decode"),
            q("G", 'sum(sglang:num_used_tokens{job="sglang_engine",server="d2:decode"})', "used d2:decode"),
            q("H", 'sum(sglang:max_total_num_tokens{job="sglang_engine",server="d2:decode"})', "live pool d2:decode"),
        ],
        TOTAL + "p1:prefill 1,234,567; d1:decode 2,000,000). The gap between the two lines is drift.",
        {"h": 8, "w": 8, "x": 8, "y": 1},
        {"unit": "short"},
    ),
    per_call("65,536"),
    ROW_ALERTS,
    ALERTS_TABLE,
    ROW_LATENCY,
    timeseries(
        "TTFT p99 of the decode engines",
        [
            ttft_p99("A", "d1:decode", "2m"),
            ttft_p99("B", "d2:decode", "2m"),
            q("C", "vector(2.5)", "SLO sglang_monitoring_ttft_p99_slo_s"),
        ],
        ttft_description("2m", ", against the declared SLO of 2.5 s"),
        {"h": 8, "w": 12, "x": 0, "y": 19},
        {
            "unit": "s",
            "thresholds": {
                "mode": "absolute",
                "steps": [{"value": None, "color": "green"}, {"value": 2.5, "color": "red"}],
            },
        },
    ),
    failures("2m"),
]


def test_every_panel_of_a_fleet_that_takes_every_branch() -> None:
    """Decode engines with and without a running limit (the prefill engine is left out of parallel calls and TTFT),
    every engine's pool with the predicted ones drawn, routers with both, one or the other admission limit, and
    an SLO: the limit lines and the SLO threshold, with refIds A, B, C... in drawing order in each panel."""
    board = build(
        Targets([PREFILL, DECODE, BARE], [BOTH, QUEUE_ONLY, CAP_ONLY]), Policy(ttft_p99_slo_s=2.5, rate_window="2m")
    )
    assert board["panels"] == FULL_PANELS


def test_the_whole_board_of_a_fleet_that_declares_nothing() -> None:
    """One bare decode engine, no router, the default policy (5m window, no SLO): no limit line, no threshold, a
    context of 0, empty limit lists in the descriptions; the board's own settings around the panels."""
    board = build(Targets([BARE], []), Policy())
    assert board == {
        "schemaVersion": 41,
        "templating": {},
        "annotations": {},
        "uid": "sglang-dsv4-envelope",
        "title": "SGLang DeepSeek-V4: the envelope, live",
        "tags": ["sglang", "deepseek-v4", "envelope"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 0,
        "time": {"from": "now-1h", "to": "now"},
        "fiscalYearStartMonth": 0,
        "refresh": "30s",
        "panels": [
            ROW_LIMITS,
            timeseries(
                "Parallel calls",
                [q("A", 'sum(sglang:num_running_reqs{job="sglang_engine",server="d2:decode"})', "running d2:decode")],
                PARALLEL,
                {"h": 8, "w": 8, "x": 0, "y": 1},
                {"unit": "short"},
            ),
            timeseries(
                "Total context (KV tokens)",
                [
                    q("A", 'sum(sglang:num_used_tokens{job="sglang_engine",server="d2:decode"})', "used d2:decode"),
                    q(
                        "B",
                        'sum(sglang:max_total_num_tokens{job="sglang_engine",server="d2:decode"})',
                        "live pool d2:decode",
                    ),
                ],
                TOTAL + "). The gap between the two lines is drift.",
                {"h": 8, "w": 8, "x": 8, "y": 1},
                {"unit": "short"},
            ),
            per_call("0"),
            ROW_ALERTS,
            ALERTS_TABLE,
            ROW_LATENCY,
            timeseries(
                "TTFT p99 of the decode engines",
                [ttft_p99("A", "d2:decode", "5m")],
                ttft_description("5m", ""),
                {"h": 8, "w": 12, "x": 0, "y": 19},
                {"unit": "s"},
            ),
            failures("5m"),
        ],
    }


def test_a_prefill_only_fleet_has_no_ttft_query_and_no_running_query() -> None:
    """Without decode engines the TTFT panel holds no query, and parallel calls draws only the router."""
    panels = build(Targets([PREFILL], [CAP_ONLY]), Policy(ttft_p99_slo_s=1.0))["panels"]
    assert panels[1]["targets"] == [
        q("A", 'max(smg_admission_inflight{job="sglang_router",server="r3:router"})', "in flight r3:router"),
        q("B", 'max(smg_admission_queue_depth{job="sglang_router",server="r3:router"})', "queued r3:router"),
        q("C", "vector(32)", "max_concurrent_requests r3:router"),
    ]
    assert panels[7]["targets"] == [q("A", "vector(1.0)", "SLO sglang_monitoring_ttft_p99_slo_s")]
    assert panels[7]["fieldConfig"]["defaults"]["thresholds"]["steps"] == [
        {"value": None, "color": "green"},
        {"value": 1.0, "color": "red"},
    ]
    assert panels[7]["description"] == ttft_description("5m", ", against the declared SLO of 1.0 s")


def test_without_the_sdk_build_and_validate_name_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """A controller without grafana-foundation-sdk: the dashboard, and only the dashboard, fails with the reason."""
    monkeypatch.setattr(sglang_dashboard, "SDK_MISSING", ImportError("No module named 'grafana_foundation_sdk'"))
    message = (
        "the Grafana dashboard needs grafana-foundation-sdk on the controller: No module named 'grafana_foundation_sdk'"
    )
    with pytest.raises(DashboardError) as built:
        build(Targets([BARE], []), Policy())
    assert str(built.value) == message
    with pytest.raises(DashboardError) as checked:
        validate({})
    assert str(checked.value) == message
