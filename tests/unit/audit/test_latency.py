"""Measured latency (module_utils/sglang_latency.py, sglang_engine_live.parse_latency): the simulator's real /metrics
pages and Prometheus' real answer to the audit's query (fixtures/capture_latency.py), reduced to count, mean, p50 and
p90. Every expected figure is computed by hand from the fixture's buckets in the comment beside it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_engine_live import parse_latency
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_latency import (
    Histogram,
    engine_summary,
    from_prometheus,
    histogram_quantile,
    measure,
    measured_load,
    prometheus_query,
    summary_lines,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_alerts import ENGINE_JOB
from audit_helpers import FIXTURES, fixture_body


def decode() -> dict[str, Any]:
    """The simulator's decode /metrics page, parsed in the test that reads it."""
    return parse_latency(fixture_body("metrics_sim_decode.txt"))


def prefill() -> dict[str, Any]:
    return parse_latency(fixture_body("metrics_sim_prefill.txt"))


ANSWER = fixture_body("prometheus_latency.json")

# decode TTFT, summed over is_streaming: 4 <= 0.1 s, 13 <= 0.2, 23 <= 0.4, 24 <= 0.6; sum 5.193352692996996 s
TTFT_P50 = 0.1 + 0.1 * (12 - 4) / 9  # rank 12 of 24 in (0.1, 0.2], 4 below, 9 inside
TTFT_P90 = 0.2 + 0.2 * (21.6 - 13) / 10  # rank 21.6 in (0.2, 0.4], 13 below, 10 inside
# decode ITL, per token: 209 <= 10 ms, 735 <= 15 ms, 744 <= 20 ms; sum 7.5116932909950265 s
ITL_P50 = 0.010 + 0.005 * (372 - 209) / 526  # rank 372 of 744 in (10, 15] ms, 209 below, 526 inside
ITL_P90 = 0.010 + 0.005 * (669.6 - 209) / 526


def test_the_decode_engines_page_gives_hand_computed_figures() -> None:
    assert decode()["ttft"]["buckets"][:4] == [[0.1, 4.0], [0.2, 13.0], [0.4, 23.0], [0.6, 24.0]]
    assert (decode()["requests"], decode()["prompt_tokens"], decode()["generation_tokens"]) == (24.0, 37000.0, 768.0)
    found = engine_summary(decode(), running=3)
    assert found == {
        "requests": 24,
        "prompt_tokens_per_request": pytest.approx(37000 / 24),
        "generation_tokens_per_request": 32.0,
        "running": 3,
        "ttft": {"count": 24, "mean_s": pytest.approx(5.193352692996996 / 24), "p50_s": pytest.approx(TTFT_P50),
                 "p90_s": pytest.approx(TTFT_P90)},
        "itl": {"count": 744, "mean_s": pytest.approx(7.5116932909950265 / 744), "p50_s": pytest.approx(ITL_P50),
                "p90_s": pytest.approx(ITL_P90)},
        # E2E: none <= 0.4 s, 20 <= 0.6, 24 <= 0.8: rank 12 in (0.4, 0.6], rank 21.6 in (0.6, 0.8], 20 below
        "e2e": {"count": 24, "mean_s": pytest.approx(12.705045983992022 / 24), "p50_s": pytest.approx(0.52),
                "p90_s": pytest.approx(0.6 + 0.2 * 1.6 / 4)},
    }  # fmt: skip


def test_the_prefill_engine_generates_one_token_and_times_its_prefill() -> None:
    found = engine_summary(prefill())
    assert (found["requests"], found["generation_tokens_per_request"], found["itl"]["count"]) == (24, 1.0, 0)
    # 5 <= 0.1 s, 15 <= 0.2, 23 <= 0.4: rank 12 in (0.1, 0.2], 5 below, 10 inside
    assert found["ttft"]["p50_s"] == pytest.approx(0.1 + 0.1 * 7 / 10)
    assert found["ttft"]["mean_s"] == pytest.approx(5.147261219992288 / 24)
    assert "running" not in found


def test_our_quantiles_are_prometheus_own_on_the_same_requests() -> None:
    """Prometheus computed histogram_quantile over the window that holds all 24 requests: the same quantiles."""
    windowed = from_prometheus(ANSWER)["decode"]
    mine = engine_summary(decode())
    for figure in ("ttft", "itl", "e2e"):
        for stat in ("p50_s", "p90_s"):
            assert windowed[figure][stat] == pytest.approx(mine[figure][stat], rel=1e-12), (figure, stat)


def test_prometheus_answer_per_role() -> None:
    found = from_prometheus(ANSWER)
    assert sorted(found) == ["decode", "prefill"]
    decode = found["decode"]
    # increase() extrapolates to the window's edges: 25 requests and 777 tokens where the counters rose by 24 and 744
    assert (decode["requests"], decode["itl"]["count"], decode["ttft"]["count"]) == (25, 777, 25)
    assert decode["prompt_tokens_per_request"] == pytest.approx(37000 / 24)
    assert decode["generation_tokens_per_request"] == pytest.approx(32.0)
    assert decode["running"] == pytest.approx(0.6363636363636364)  # avg_over_time of num_running_reqs
    assert "itl" not in found["prefill"]  # no token observed there: count 0, left out


def test_the_fixture_answers_the_query_the_audit_asks() -> None:
    asked = json.loads((FIXTURES / "prometheus_latency.json").read_text())["_provenance"]["query"]
    assert asked == prometheus_query("1m", ENGINE_JOB)
    assert (
        "label_replace(label_replace(histogram_quantile(0.5, sum by (le, role) (rate(sglang:time_to_first_token"
        '_seconds_bucket{job="sglang_engine"}[1m]))), "figure", "ttft", "", ""), "stat", "p50", "", "")'
    ) in asked


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        (0.5, 1.0 + 1.0 * (5 - 4) / 4),  # rank 5 in (1, 2]: 4 below, 4 inside
        (0.25, 0.0 + 1.0 * 2.5 / 4),  # rank 2.5 in the first bucket, from 0
        (0.95, 2.0),  # rank 9.5 in +Inf: the highest finite bound
        (1.0, 2.0),
    ],
)
def test_histogram_quantile_follows_prometheus(q: float, expected: float) -> None:
    assert histogram_quantile(q, (1.0, 2.0), (4.0, 8.0), 10.0) == pytest.approx(expected)


def test_no_observation_is_no_quantile() -> None:
    assert histogram_quantile(0.5, (1.0, 2.0), (0.0, 0.0), 0.0) is None
    assert Histogram.of({"buckets": [], "count": 0, "sum": 0}).summary() == {
        "count": 0, "mean_s": None, "p50_s": None, "p90_s": None,
    }  # fmt: skip


def test_histograms_add_bucket_by_bucket() -> None:
    a = Histogram.of({"buckets": [[0.1, 1], [0.2, 3]], "count": 4, "sum": 0.5})
    b = Histogram.of({"buckets": [[0.1, 2], [0.2, 2]], "count": 2, "sum": 0.2})
    both = a.merged(b)
    assert (both.bounds, both.cumulative, both.count, both.total) == ((0.1, 0.2), (3.0, 5.0), 6.0, 0.7)


def engines(running: float = 2) -> list[dict[str, Any]]:
    return [
        {"host": "lab1", "role": "prefill", "latency": prefill(), "running": 0},
        {"host": "lab1", "role": "decode", "latency": decode(), "running": running},
    ]


def test_measure_from_metrics_since_start() -> None:
    found = measure(engines(), at="2026-12-03T08:40:00Z")
    decode = found["roles"]["decode"]
    assert (decode["source"], decode["engines"], decode["running"]) == (
        "/metrics, since each engine started",
        ["lab1"],
        2,
    )
    assert decode["ttft"]["p50_s"] == pytest.approx(TTFT_P50)
    assert (found["at"], found["notes"]) == ("2026-12-03T08:40:00Z", [])
    assert measured_load(found) == (1542, 32, 2)  # 37,000 / 24 prompt tokens, 768 / 24 generated, 2 running


def test_measure_prefers_the_prometheus_window() -> None:
    found = measure(engines(), ANSWER, "1m")
    assert found["roles"]["decode"]["source"] == "Prometheus, the last 1m"
    assert found["roles"]["decode"]["requests"] == 25
    assert measured_load(found) == (1542, 32, 1)  # 0.64 running on average: at least 1


def test_an_idle_window_falls_back_to_metrics_and_says_so() -> None:
    idle = {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"role": "decode", "figure": "requests", "stat": "increase"}, "value": [0, "0"]},
        {"metric": {"role": "decode", "figure": "ttft", "stat": "p50"}, "value": [0, "NaN"]},
    ]}}  # fmt: skip
    found = measure(engines(), idle, "5m")
    assert found["roles"]["decode"]["source"] == "/metrics, since each engine started"
    assert found["notes"] == [
        "Prometheus saw no engine request in the last 5m: the engines' /metrics, since each engine started"
    ]


def test_no_finished_request_is_no_load() -> None:
    assert measured_load(measure([])) is None
    assert summary_lines({"requests": 0}) == ["no finished request yet"]


def test_summary_lines() -> None:
    assert summary_lines(engine_summary(decode(), running=2)) == [
        "24 requests finished; 1,542 prompt + 32 generated tokens per request; 2 running",
        "TTFT (24 requests) mean 216.4 ms, p50 188.9 ms, p90 372.0 ms; ITL (744 tokens) mean 10.1 ms, p50 11.5 ms, "
        "p90 14.4 ms; E2E (24 requests) mean 529.4 ms, p50 520.0 ms, p90 680.0 ms",
    ]
    without_itl = {k: v for k, v in decode().items() if k != "itl"}
    assert summary_lines(engine_summary(without_itl))[1].endswith(
        "; ITL not published (sglang:inter_token_latency_seconds)"
    )


def test_a_refused_query_falls_back_to_metrics_and_says_why() -> None:
    # Prometheus 2.42's answer (HTTP 400) to the query with the window "5 minutes"
    error = 'invalid parameter "query": 1:140: parse error: missing unit character in duration'
    refused = {"status": "error", "errorType": "bad_data", "error": error}
    found = measure(engines(), refused, "5 minutes")
    assert found["roles"]["decode"]["source"] == "/metrics, since each engine started"
    assert found["notes"] == [
        'Prometheus refused the latency query (bad_data: invalid parameter "query": 1:140: parse error: missing unit '
        "character in duration): the engines' /metrics, since each engine started"
    ]
