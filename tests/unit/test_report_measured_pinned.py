"""The report's measured-time lines (plugin_utils/sglang_report.py: measured_lines) written out whole: each engine
role's measured latency, the notes, then the measured TTFT / ITL beside the model's prediction at the measured load.
The figures and predictions are set by hand."""

from __future__ import annotations

from typing import Any

from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_report import measured_lines

DECODE = {
    "engines": ["lab1", "lab2"],
    "source": "S",
    "requests": 10,
    "ttft": {"count": 10, "mean_s": 0.2, "p50_s": 0.2, "p90_s": 0.3},
    "itl": {"count": 100, "mean_s": 0.01, "p50_s": 0.01, "p90_s": 0.02},
}
DECODE_LINES = [
    "measured time, decode engines (lab1, lab2; S): 10 requests finished",
    "  TTFT (10 requests) mean 200.0 ms, p50 200.0 ms, p90 300.0 ms; ITL (100 tokens) mean 10.0 ms, p50 10.0 ms, "
    "p90 20.0 ms",
]
PREFILL = {"engines": ["lab3"], "source": "P", "requests": 4, "ttft": {"count": 4, "mean_s": 2, "p50_s": 2, "p90_s": 3}}
PREFILL_LINES = [
    "measured time, prefill engines (lab3; P): 4 requests finished",
    "  TTFT (4 requests) mean 2.00 s, p50 2.00 s, p90 3.00 s; ITL not published (sglang:inter_token_latency_seconds)",
]


def predicted(ms: float, text: str) -> dict[str, Any]:
    return {"ms": ms, "text": text}


AT_LOAD = {
    "workload": {"isl": 1500, "osl": 32, "concurrency": 12},
    "ttft_p50": predicted(100.0, "0.10 s (hand)"),
    "ttft_p90": predicted(0.0, "0 (hand)"),
    "itl_p50": predicted(1.0, "1.00 ms (hand)"),
    "itl_p90": predicted(40.0, "40.0 ms (hand)"),
}


def test_decode_then_prefill_then_the_notes_then_the_comparison() -> None:
    measured = {"roles": {"prefill": PREFILL, "decode": DECODE}, "notes": ["n1", "n2"], "at_load": AT_LOAD}
    assert measured_lines(measured) == [
        *DECODE_LINES,
        *PREFILL_LINES,
        "  note: n1",
        "  note: n2",
        "measured vs the model at the measured load (12 call(s) of 1,500 in + 32 out, to two figures):",
        "  TTFT p50: measured 200.0 ms (S), model 0.10 s (hand): ratio 2.00",
        "  TTFT p90: measured 300.0 ms (S), model 0 (hand): ratio inf",
        "  ITL p50: measured 10.0 ms (S), model 1.00 ms (hand): ratio 10.00",
        "  ITL p90: measured 20.0 ms (S), model 40.0 ms (hand): ratio 0.50",
    ]


def test_a_large_ratio_keeps_two_decimals() -> None:
    decode = {**DECODE, "ttft": {"count": 1, "p50_s": 10.0, "p90_s": 20.0}}
    at_load = {**AT_LOAD, "ttft_p50": predicted(1000.0, "1.00 s (hand)"), "ttft_p90": predicted(3000.0, "3.00 s")}
    lines = measured_lines({"roles": {"decode": decode}, "at_load": at_load})
    assert lines[3:5] == [
        "  TTFT p50: measured 10.00 s (S), model 1.00 s (hand): ratio 10.00",
        "  TTFT p90: measured 20.00 s (S), model 3.00 s: ratio 6.67",
    ]


def test_a_figure_not_published_or_not_observed_says_which_and_the_next_is_still_compared() -> None:
    decode = {**DECODE, "ttft": {"count": 0}}
    del decode["itl"]
    at_load = {**AT_LOAD, "workload": {"concurrency": 3}}
    assert measured_lines({"roles": {"decode": decode}, "at_load": at_load}) == [
        "measured time, decode engines (lab1, lab2; S): 10 requests finished",
        "  ITL not published (sglang:inter_token_latency_seconds)",
        "measured vs the model at the measured load (3 call(s) of 0 in + 0 out, to two figures):",
        "  TTFT p50: measured no observation; model 0.10 s (hand)",
        "  TTFT p90: measured no observation; model 0 (hand)",
        "  ITL p50: measured not published (sglang:inter_token_latency_seconds); model 1.00 ms (hand)",
        "  ITL p90: measured not published (sglang:inter_token_latency_seconds); model 40.0 ms (hand)",
    ]


def test_only_the_itl_measured_is_compared_after_a_missing_ttft() -> None:
    decode = {k: v for k, v in DECODE.items() if k != "ttft"}
    lines = measured_lines({"roles": {"decode": decode}, "at_load": AT_LOAD})
    assert lines[-4:] == [
        "  TTFT p50: measured not published (sglang:time_to_first_token_seconds); model 0.10 s (hand)",
        "  TTFT p90: measured not published (sglang:time_to_first_token_seconds); model 0 (hand)",
        "  ITL p50: measured 10.0 ms (S), model 1.00 ms (hand): ratio 10.00",
        "  ITL p90: measured 20.0 ms (S), model 40.0 ms (hand): ratio 0.50",
    ]


def test_without_a_decode_engine_the_prefill_lines_and_notes_stand_alone() -> None:
    measured = {"roles": {"prefill": PREFILL}, "notes": ["Prometheus did not answer"], "at_load": AT_LOAD}
    assert measured_lines(measured) == [*PREFILL_LINES, "  note: Prometheus did not answer"]


def test_without_any_engine_the_report_says_no_decode_engine_published() -> None:
    expected = ["measured time: no decode engine published its latency (/metrics)"]
    assert measured_lines({}) == expected
    assert measured_lines({"roles": {"decode": {}, "prefill": None}, "notes": None}) == expected


def test_a_decode_engine_without_a_prediction_says_why() -> None:
    measured = {"roles": {"decode": DECODE}, "at_load": {"unavailable": "time: not predicted (make perf-venv)"}}
    assert measured_lines(measured) == [
        *DECODE_LINES,
        "the model at the measured load: not predicted (make perf-venv)",
    ]


def test_a_decode_engine_without_a_finished_request_has_no_prediction() -> None:
    assert measured_lines({"roles": {"decode": DECODE}, "at_load": {"workload": {"isl": 1}}}) == [
        *DECODE_LINES,
        "the model at the measured load: not predicted (no finished request on the decode engines)",
    ]
    assert measured_lines({"roles": {"decode": DECODE}}) == [
        *DECODE_LINES,
        "the model at the measured load: not predicted (no finished request on the decode engines)",
    ]
