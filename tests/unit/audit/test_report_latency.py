"""The audit report's latency lines: each engine's figures from its /metrics (read by sglang_live_info from the
simulator's captured page), the fleet's measured TTFT / ITL beside the model's prediction at the measured load with
the ratio and both sources, and the measured_time_off_model risk. Predictions here are hand-set, not the model's."""

from __future__ import annotations

from typing import Any

import pytest
import test_sglang_report as base
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_latency import measure
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_report import build, fleet_lines, render_text
from audit_helpers import fixture_body, load_library

SIM = "/metrics, since each engine started"


@pytest.fixture
def record(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The decode fixture's audit record with the simulator's captured /metrics page."""
    monkeypatch.setitem(base.HTTP, "/metrics", {"fixture": "metrics_sim_decode.txt"})
    return base.decode_record()


def figure(ms: float, text: str) -> dict[str, Any]:
    return {"ms": ms, "low_ms": ms / 2, "high_ms": ms * 1.5, "source": "hand", "text": text}


AT_LOAD = {
    "workload": {"isl": 1500, "osl": 32, "concurrency": 12},  # the measured 1,542 to two figures
    "ttft_p50": figure(250.0, "0.25 s (hand)"),
    "ttft_p90": figure(400.0, "0.40 s (hand)"),
    "itl_p50": figure(5.0, "5.00 ms (hand)"),
    "itl_p90": figure(6.0, "6.00 ms (hand)"),
}


def measured(record: dict[str, Any], at_load: dict[str, Any] | None = None) -> dict[str, Any]:
    live = record["live"]
    engines = [{"host": "lab1", "role": "decode", "latency": live["latency"], "running": live["load"]["running"]}]
    return measure(engines, at="2026-12-03T08:40:00Z") | {"at_load": at_load if at_load is not None else AT_LOAD}


def test_the_live_reader_returns_the_histograms_of_its_one_metrics_read(record: dict[str, Any]) -> None:
    latency = record["live"]["latency"]
    assert sorted(latency) == ["e2e", "generation_tokens", "itl", "prompt_tokens", "requests", "ttft"]
    assert (latency["ttft"]["count"], latency["itl"]["count"], latency["requests"]) == (24.0, 744.0, 24.0)


def test_each_engine_prints_its_latency(record: dict[str, Any]) -> None:
    text = render_text(build([record]))
    assert (
        "  latency (/metrics, since the engine started): 24 requests finished; 1,542 prompt + 32 generated tokens "
        "per request\n"
        "    TTFT (24 requests) mean 216.4 ms, p50 188.9 ms, p90 372.0 ms; ITL (744 tokens) mean 10.1 ms, p50 11.5 ms, "
        "p90 14.4 ms; E2E (24 requests) mean 529.4 ms, p50 520.0 ms, p90 680.0 ms\n"
    ) in text


def test_measured_beside_the_model_with_ratio_and_sources(record: dict[str, Any]) -> None:
    # ratios: 188.9 / 250 = 0.76, 372.0 / 400 = 0.93, 11.55 / 5 = 2.31, 14.38 / 6 = 2.40
    assert fleet_lines({"measured_time": measured(record)}) == [
        f"measured time, decode engines (lab1; {SIM}): 24 requests finished; 1,542 prompt + 32 generated tokens per "
        "request; 12 running",
        "  TTFT (24 requests) mean 216.4 ms, p50 188.9 ms, p90 372.0 ms; ITL (744 tokens) mean 10.1 ms, p50 11.5 ms, "
        "p90 14.4 ms; E2E (24 requests) mean 529.4 ms, p50 520.0 ms, p90 680.0 ms",
        "measured vs the model at the measured load (12 call(s) of 1,500 in + 32 out, to two figures):",
        f"  TTFT p50: measured 188.9 ms ({SIM}), model 0.25 s (hand): ratio 0.76",
        f"  TTFT p90: measured 372.0 ms ({SIM}), model 0.40 s (hand): ratio 0.93",
        f"  ITL p50: measured 11.5 ms ({SIM}), model 5.00 ms (hand): ratio 2.31",
        f"  ITL p90: measured 14.4 ms ({SIM}), model 6.00 ms (hand): ratio 2.40",
    ]


def test_a_figure_the_engines_do_not_publish_says_so(record: dict[str, Any]) -> None:
    del record["live"]["latency"]["itl"]
    lines = fleet_lines({"measured_time": measured(record)})
    assert "  ITL p50: measured not published (sglang:inter_token_latency_seconds); model 5.00 ms (hand)" in lines


def test_without_a_prediction_the_report_says_why(record: dict[str, Any]) -> None:
    unavailable = {"unavailable": "time: not predicted (make perf-venv)"}
    lines = fleet_lines({"measured_time": measured(record, unavailable)})
    assert lines[-1] == "the model at the measured load: not predicted (make perf-venv)"


def test_a_measured_time_far_from_the_model_is_a_risk_not_an_error(record: dict[str, Any]) -> None:
    report = build([record], measured_time=measured(record), time_tolerance=0.5, time_min_requests=20)
    found = [r for r in report.risks if r["id"] == "measured_time_off_model"]
    # TTFT p50 ratio 0.76 is inside +-50 %; ITL p50 ratio 2.31 is not
    assert [r["numbers"]["figure"] for r in found] == ["ITL p50"]
    assert report.summary["failed"] is False
    assert "warn: measured_time_off_model: measured ITL p50 11.5 ms" in render_text(report)
    assert report.as_dict()["fleet"]["measured_time"]["roles"]["decode"]["requests"] == 24


def _filters() -> Any:
    return load_library("sglang", "filter")


def test_the_audit_measures_from_its_records_and_the_prometheus_answer(record: dict[str, Any]) -> None:
    """The filter over the playbook's records and its registered uri result: skipped, unreachable, answered."""
    measured_latency = _filters().measured_latency
    router = base.router_record()
    skipped = measured_latency([record, router], {"skipped": True}, "5m", "t", "")
    assert (skipped["roles"]["decode"]["source"], skipped["notes"]) == (SIM, [])
    down = {"unreachable": True, "msg": "Failed to connect to the host via ssh"}
    found = measured_latency([record, router], down, "5m", "t", "lab1")
    assert found["notes"] == [
        "Prometheus on lab1 did not answer (Failed to connect to the host via ssh): the engines' /metrics instead"
    ]
    answered = measured_latency([record], {"status": 200, "json": fixture_body("prometheus_latency.json")}, "1m")
    assert answered["roles"]["decode"]["source"] == "Prometheus, the last 1m"
    assert "prefill" in answered["roles"]  # Prometheus saw the prefill engine too; its /metrics was not read here


def test_the_audit_says_why_it_predicted_no_time(record: dict[str, Any]) -> None:
    """Without a model config, or with the prediction turned off, the times say why, beside the measured latency."""
    audit_times = _filters().audit_times
    off = audit_times({}, {}, {"architectures": ["X"]}, [record], {"skipped": True}, "5m", "t", "", False)
    assert off["predicted"] == []
    assert off["measured"]["at_load"] == {"unavailable": "time: not predicted (sglang_audit_predict_time is false)"}
    assert off["measured"]["roles"]["decode"]["source"] == SIM
    bare = audit_times({}, {}, {}, [record], {"skipped": True}, "5m", "t", "", True)
    assert bare["measured"]["at_load"] == {"unavailable": "time: not predicted (no model config.json)"}
