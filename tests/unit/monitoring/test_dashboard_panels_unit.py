"""The Grafana dashboard, panel by panel: the queries, legends, limit lines, units, thresholds and grid places
that build() derives from the fleet's declared and predicted limits, and validate()'s read-back through
Grafana's typed schema. Small synthetic fleets pin each branch; the shared envelope pins the real figures."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_alerts import (
    EngineTarget,
    Policy,
    RouterTarget,
    Targets,
    fleet,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_dashboard import _diff, build, validate

REPO = Path(__file__).resolve().parents[3]
DATASOURCE = {"type": "prometheus", "uid": "sglang-prometheus"}
ROW_1 = "What limits are we running with, and how close are we?"

# Synthetic fleet. The prefill engine comes first and declares a max_running_requests that the "Parallel calls"
# panel must leave out (it draws decode engines only); d2 declares nothing, so it gets no limit lines.
PREFILL = EngineTarget(
    "p1",
    "prefill",
    "http://p1:30000",
    {"context_length": 65536, "max_running_requests": 99},
    {"max_total_tokens": 1234567},
)
DECODE = EngineTarget(
    "d1",
    "decode",
    "http://d1:30001",
    {"context_length": 131072, "max_running_requests": 64},
    {"max_total_tokens": 2000000, "max_running_requests": 48},
)
BARE = EngineTarget("d2", "decode", "http://d2:30001", {}, {})
ROUTER = RouterTarget("r1", {"max_concurrent_requests": 128, "queue_size": 256}, 3)
QUEUE_ONLY = RouterTarget("r2", {"queue_size": 512}, 3)
FLEET = Targets([PREFILL, DECODE, BARE], [ROUTER])
SLO = Policy(ttft_p99_slo_s=2.5, rate_window="2m")


def _engine(metric: str, server: str) -> str:
    return f'sum({metric}{{job="sglang_engine",server="{server}"}})'


def _router(metric: str, server: str) -> str:
    return f'max({metric}{{job="sglang_router",server="{server}"}})'


def _panels(board: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["title"]: p for p in board["panels"]}


def _targets(panel: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(refId, expr, legend) of each query, after checking every query reads the provisioned datasource."""
    for t in panel["targets"]:
        assert t["datasource"] == DATASOURCE, t
    return [(t["refId"], t["expr"], t["legendFormat"]) for t in panel["targets"]]


@pytest.fixture
def board() -> dict[str, Any]:
    return build(FLEET, SLO)


def test_dashboard_identity_and_time_range(board: dict[str, Any]) -> None:
    """The provisioned board keeps its uid (links and alerts point at it), title, tags, refresh and range."""
    assert board["uid"] == "sglang-dsv4-envelope"
    assert board["title"] == "SGLang DeepSeek-V4: the envelope, live"
    assert board["tags"] == ["sglang", "deepseek-v4", "envelope"]
    assert board["refresh"] == "30s"
    assert board["time"] == {"from": "now-1h", "to": "now"}


def test_rows_and_panels_in_order_on_the_grid(board: dict[str, Any]) -> None:
    """Three rows; the limits row holds three 8-wide panels side by side, then a full-width table, then two
    12-wide panels, each 8 high."""
    layout = [(p["type"], p["title"], p["gridPos"]) for p in board["panels"]]
    assert layout == [
        ("row", ROW_1, {"h": 1, "w": 24, "x": 0, "y": 0}),
        ("timeseries", "Parallel calls", {"h": 8, "w": 8, "x": 0, "y": 1}),
        ("timeseries", "Total context (KV tokens)", {"h": 8, "w": 8, "x": 8, "y": 1}),
        ("bargauge", "Per-call context (prompt length)", {"h": 8, "w": 8, "x": 16, "y": 1}),
        ("row", "Alerts and drift", {"h": 1, "w": 24, "x": 0, "y": 9}),
        ("table", "Firing alerts and envelope drift", {"h": 8, "w": 24, "x": 0, "y": 10}),
        ("row", "Latency and failures", {"h": 1, "w": 24, "x": 0, "y": 18}),
        ("timeseries", "TTFT p99 of the decode engines", {"h": 8, "w": 12, "x": 0, "y": 19}),
        ("timeseries", "Failures", {"h": 8, "w": 12, "x": 12, "y": 19}),
    ]


@pytest.mark.parametrize(
    ("title", "unit"),
    [
        ("Parallel calls", "short"),
        ("Total context (KV tokens)", "short"),
        ("Per-call context (prompt length)", "short"),
        ("TTFT p99 of the decode engines", "s"),
        ("Failures", "reqps"),
    ],
)
def test_panel_units_and_datasource(board: dict[str, Any], title: str, unit: str) -> None:
    """Counts are plain numbers, latency is seconds, failures are requests per second; all read Prometheus."""
    panel = _panels(board)[title]
    assert panel["fieldConfig"]["defaults"]["unit"] == unit
    assert panel["datasource"] == DATASOURCE


def test_parallel_calls_draws_decode_engines_and_routers_against_their_limits(board: dict[str, Any]) -> None:
    """Running requests per decode engine with its effective (predicted before declared) max_running_requests,
    then each router's in-flight and queued requests with max_concurrent_requests and queue_size."""
    panel = _panels(board)["Parallel calls"]
    assert _targets(panel) == [
        ("A", _engine("sglang:num_running_reqs", "d1:decode"), "running d1:decode"),
        ("B", "vector(48)", "max_running_requests d1:decode"),
        ("C", _engine("sglang:num_running_reqs", "d2:decode"), "running d2:decode"),
        ("D", _router("smg_admission_inflight", "r1:router"), "in flight r1:router"),
        ("E", _router("smg_admission_queue_depth", "r1:router"), "queued r1:router"),
        ("F", "vector(128)", "max_concurrent_requests r1:router"),
        ("G", "vector(256)", "queue_size r1:router"),
    ]
    assert all("format" not in t for t in panel["targets"])
    assert panel["description"] == (
        "Requests running on each decode engine against its effective max_running_requests, and the router's "
        "in-flight and queued requests against max_concurrent_requests and queue_size. Limits: "
        "d1:decode: effective max_running_requests 48; r1:router: max_concurrent_requests 128, queue_size 256"
    )


def test_parallel_calls_draws_only_the_router_limits_declared() -> None:
    """A router without max_concurrent_requests gets its queue_size line only."""
    panel = _panels(build(Targets([DECODE], [QUEUE_ONLY]), Policy()))["Parallel calls"]
    assert _targets(panel)[2:] == [
        ("C", _router("smg_admission_inflight", "r2:router"), "in flight r2:router"),
        ("D", _router("smg_admission_queue_depth", "r2:router"), "queued r2:router"),
        ("E", "vector(512)", "queue_size r2:router"),
    ]


def test_total_context_draws_used_live_and_predicted_pool_per_engine(board: dict[str, Any]) -> None:
    """Every engine (prefill too) shows tokens used and the live pool; the capacity model's pool is drawn and
    named in the description for the engines that have one."""
    panel = _panels(board)["Total context (KV tokens)"]
    assert _targets(panel) == [
        ("A", _engine("sglang:num_used_tokens", "p1:prefill"), "used p1:prefill"),
        ("B", _engine("sglang:max_total_num_tokens", "p1:prefill"), "live pool p1:prefill"),
        ("C", "vector(1234567)", "predicted pool p1:prefill"),
        ("D", _engine("sglang:num_used_tokens", "d1:decode"), "used d1:decode"),
        ("E", _engine("sglang:max_total_num_tokens", "d1:decode"), "live pool d1:decode"),
        ("F", "vector(2000000)", "predicted pool d1:decode"),
        ("G", _engine("sglang:num_used_tokens", "d2:decode"), "used d2:decode"),
        ("H", _engine("sglang:max_total_num_tokens", "d2:decode"), "live pool d2:decode"),
    ]
    assert panel["description"] == (
        "KV tokens in use against the live pool (sglang:max_total_num_tokens) and the pool the capacity model "
        "predicts from the declared envelope (p1:prefill 1,234,567; d1:decode 2,000,000). "
        "The gap between the two lines is drift."
    )


def _per_call_description(context: str) -> str:
    return (
        "Prompts finished in the range by length bucket (sglang:prompt_tokens_histogram, upper bounds in "
        f"tokens). Longer prompts than the declared context_length ({context}) are refused; the buckets at "
        "and above it must stay empty."
    )


def test_per_call_context_is_a_prompt_length_histogram_against_the_smallest_context(board: dict[str, Any]) -> None:
    """One heatmap-format query over the prefill engines' prompt-length buckets for the dashboard's range,
    drawn as horizontal gradient bars; the description names the smallest declared context_length."""
    panel = _panels(board)["Per-call context (prompt length)"]
    assert panel["targets"] == [
        {
            "expr": 'sum by (le) (increase(sglang:prompt_tokens_histogram_bucket{job="sglang_engine",'
            'engine_type="prefill"}[$__range]))',
            "refId": "A",
            "format": "heatmap",
            "legendFormat": "{{le}}",
            "datasource": DATASOURCE,
        }
    ]
    assert panel["options"]["displayMode"] == "gradient"
    assert panel["options"]["orientation"] == "horizontal"
    assert panel["description"] == _per_call_description("65,536")


def test_per_call_context_without_any_declared_context_says_zero() -> None:
    """No engine declares or predicts a context_length: the description falls back to 0."""
    panel = _panels(build(Targets([BARE], []), Policy()))["Per-call context (prompt length)"]
    assert panel["description"] == _per_call_description("0")


def test_alerts_and_drift_table(board: dict[str, Any]) -> None:
    """Firing alerts and the drift exporter's non-zero keys, both as table-format queries."""
    panel = _panels(board)["Firing alerts and envelope drift"]
    assert panel["datasource"] == DATASOURCE
    assert [(t["refId"], t["expr"], t["legendFormat"], t["format"]) for t in panel["targets"]] == [
        ("A", 'ALERTS{alertstate="firing"}', "{{alertname}} {{server}}", "table"),
        ("B", "sglang_envelope_drift > 0", "{{server}} {{key}} {{layer}}", "table"),
    ]
    assert all(t["datasource"] == DATASOURCE for t in panel["targets"])
    assert panel["description"] == (
        "Alerts generated from the envelope that fire now, and the keys the drift exporter finds off the "
        "declaration (server, key, layer where the drift starts)."
    )


def _ttft(server: str, window: str) -> str:
    return (
        "histogram_quantile(0.99, sum by (le) (rate(sglang:time_to_first_token_seconds_bucket"
        f'{{job="sglang_engine",server="{server}"}}[{window}])))'
    )


def test_ttft_p99_per_decode_engine_against_the_slo(board: dict[str, Any]) -> None:
    """p99 TTFT of each decode engine (the call's TTFT; the prefill engine's is left out) over the policy's rate
    window, the SLO as a flat line and as the red threshold; smg's TTFT family is not drawn."""
    panel = _panels(board)["TTFT p99 of the decode engines"]
    assert _targets(panel) == [
        ("A", _ttft("d1:decode", "2m"), "p99 d1:decode"),
        ("B", _ttft("d2:decode", "2m"), "p99 d2:decode"),
        ("C", "vector(2.5)", "SLO sglang_monitoring_ttft_p99_slo_s"),
    ]
    assert panel["fieldConfig"]["defaults"]["thresholds"] == {
        "mode": "absolute",
        "steps": [{"value": None, "color": "green"}, {"value": 2.5, "color": "red"}],
    }
    assert panel["description"] == (
        "p99 time to first token of the calls each decode engine serves (sglang:time_to_first_token_seconds over "
        "2m: from the call's arrival, which the router sends to the prefill and the decode together, to its first "
        "token; the wait for the prefill and the KV transfer included), against the declared SLO of 2.5 s. smg's "
        "smg_pd_ttft_seconds is not drawn: it times the decode leg's response start and misses the wait for the "
        "prefill."
    )


def test_ttft_without_an_slo_has_no_line_and_no_threshold() -> None:
    """With no sglang_monitoring_ttft_p99_slo_s the panel draws the decode engines' p99 only (default 5m window),
    whatever routers there are."""
    panel = _panels(build(Targets([PREFILL, DECODE], [ROUTER, QUEUE_ONLY]), Policy()))["TTFT p99 of the decode engines"]
    assert _targets(panel) == [("A", _ttft("d1:decode", "5m"), "p99 d1:decode")]
    assert "thresholds" not in panel["fieldConfig"]["defaults"]
    assert "declared SLO" not in panel["description"] and "over 5m:" in panel["description"]


def test_failures_are_engine_failure_rates_and_router_429s(board: dict[str, Any]) -> None:
    """Bootstrap failures, retractions and aborts per engine, and 429s per router, as rates over the window."""
    panel = _panels(board)["Failures"]

    def rate(metric: str, labels: str) -> str:
        return f"sum by (server) (rate({metric}{{{labels}}}[2m]))"

    assert _targets(panel) == [
        ("A", rate("sglang:num_bootstrap_failed_reqs_total", 'job="sglang_engine"'), "bootstrap failures {{server}}"),
        ("B", rate("sglang:num_retracted_requests_total", 'job="sglang_engine"'), "retractions {{server}}"),
        ("C", rate("sglang:num_aborted_requests_total", 'job="sglang_engine"'), "aborted {{server}}"),
        ("D", rate("smg_http_responses_total", 'job="sglang_router",status_code="429"'), "429 {{server}}"),
    ]
    assert "thresholds" not in panel["fieldConfig"]["defaults"]


def test_shared_envelope_limits_are_the_lines_drawn() -> None:
    """The envelope every inventory shares (group_vars/all/envelope.yml) on one 8-GPU host, as production:
    decode max_running_requests 64, router 64 concurrent and 256 queued, SGLang's pools (tests/unit/
    test_capacity.py) 9,927,680 prefill and 11,159,040 decode tokens, context_length 524,288."""
    envelope = yaml.safe_load((REPO / "group_vars/all/envelope.yml").read_text())
    host = "gpu-node-01"
    groups = {"sglang_prefill": [host], "sglang_decode": [host], "sglang_router": [host]}
    config = json.loads((REPO / "models/deepseek-v4-flash/config.json").read_text())
    panels = _panels(build(fleet({host: envelope}, groups, config), Policy()))
    limits = [(e, legend) for _, e, legend in _targets(panels["Parallel calls"]) if e.startswith("vector(")]
    assert limits == [
        ("vector(64)", "max_running_requests gpu-node-01:decode"),
        ("vector(64)", "max_concurrent_requests gpu-node-01:router"),
        ("vector(256)", "queue_size gpu-node-01:router"),
    ]
    assert panels["Parallel calls"]["description"].endswith(
        "Limits: gpu-node-01:decode: effective max_running_requests 64; "
        "gpu-node-01:router: max_concurrent_requests 64, queue_size 256"
    )
    pools = [(e, legend) for _, e, legend in _targets(panels["Total context (KV tokens)"]) if e.startswith("vector(")]
    assert pools == [
        ("vector(9927680)", "predicted pool gpu-node-01:prefill"),
        ("vector(11159040)", "predicted pool gpu-node-01:decode"),
    ]
    assert panels["Per-call context (prompt length)"]["description"] == _per_call_description("524,288")


def test_the_built_json_reads_back_unchanged(board: dict[str, Any]) -> None:
    """What build() writes is exactly what Grafana's typed schema holds."""
    assert validate(board) == []
    assert validate(build(Targets([BARE], []), Policy())) == []


def test_validate_names_what_the_schema_drops_or_changes(board: dict[str, Any]) -> None:
    """A key the schema does not define and a value it reads back differently are each reported with their path."""
    broken = copy.deepcopy(board)
    broken["graphTooltip"] = None
    broken["panels"][1]["gridPosition"] = {"h": 1}
    broken["owner"] = "ops"
    assert validate(broken) == [
        ".owner: not in Grafana's schema",
        ".graphTooltip: None read back as 0",
        ".panels[1].gridPosition: not in Grafana's schema",
    ]


@pytest.mark.parametrize(
    ("a", "b", "where", "expected"),
    [
        (1, 1, "", []),
        ("x", "y", ".k", [".k: 'x' read back as 'y'"]),
        ({"a": 1, "z": 0}, {"a": 1}, "", [".z: not in Grafana's schema"]),
        ({"z": 0, "b": {"c": 2}}, {"b": {"c": 3}}, "", [".z: not in Grafana's schema", ".b.c: 2 read back as 3"]),
        ({"x": 1}, 5, "w", ["w: {'x': 1} read back as 5"]),
        (5, {"x": 1}, "w", ["w: 5 read back as {'x': 1}"]),
        ([1, 2], [1, 3], "l", ["l[1]: 2 read back as 3"]),
        ([{"a": 1}], [{}], "l", ["l[0].a: not in Grafana's schema"]),
        ([1, 2], [1], "l", ["l: 2 items, 1 read back"]),
        ([1], 1, "l", ["l: [1] read back as 1"]),
        (1, [1], "l", ["l: 1 read back as [1]"]),
    ],
)
def test_diff_paths_and_messages(a: Any, b: Any, where: str, expected: list[str]) -> None:
    """The comparison walks dicts by key and lists by index, and reports a type change as a changed value."""
    assert _diff(a, b, where) == expected
