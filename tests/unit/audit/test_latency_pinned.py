"""Measured latency (module_utils/sglang_latency.py) on small hand-made histograms, engines and Prometheus answers:
Prometheus' quantile rule at its edges, bucket-wise merging of unlike bounds, the defaults of missing counters and
series, the measured load, and the exact words of every line. Each expected figure is worked out beside it."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_latency import (
    Histogram,
    engine_summary,
    figure_text,
    from_prometheus,
    histogram_quantile,
    measure,
    measured_load,
    prometheus_query,
    seconds,
    summary_lines,
)

METRICS = "/metrics, since each engine started"


# ---------------------------------------------------------------- histogram_quantile


@pytest.mark.parametrize(
    ("q", "bounds", "cumulative", "count", "expected"),
    [
        (0.5, (1.0, 2.0, 3.0), (5.0, 5.0, 10.0), 10.0, 1.0),  # rank 5 is reached at the first bucket's top
        (0.5, (-1.0, 1.0), (4.0, 8.0), 8.0, -1.0),  # the first bucket ends at or below 0: its bound
        (0.5, (0.0, 1.0), (4.0, 8.0), 8.0, 0.0),
        (0.5, (-1.0, 1.0), (2.0, 8.0), 8.0, -1.0 + 2.0 * 2 / 6),  # rank 4 in (-1, 1]: 2 below, 6 inside
        (0.0, (1.0, 2.0), (0.0, 4.0), 4.0, 1.0),  # rank 0 in an empty first bucket: its upper bound
        (0.9, (0.5,), (10.0,), 10.0, 0.45),  # rank 9 of 10 in (0, 0.5]
        (0.5, (1.0, 2.0), (1.0, 2.0), 10.0, 2.0),  # rank 5 in +Inf: the highest finite bound
        (0.5, (1.0, 2.0, 4.0), (0.0, 0.0, 0.0), 5.0, 4.0),  # all in +Inf: the highest of three bounds
        (0.5, (1.0, 2.0), (0.0, 1.0), 1.0, 1.5),  # a single observation, in (1, 2]: rank 0.5 of 1 inside
    ],
)
def test_histogram_quantile_edges(
    q: float, bounds: tuple[float, ...], cumulative: tuple[float, ...], count: float, expected: float
) -> None:
    assert histogram_quantile(q, bounds, cumulative, count) == pytest.approx(expected, abs=1e-12)


def test_no_bucket_or_no_count_is_no_quantile() -> None:
    assert histogram_quantile(0.5, (), (), 10.0) is None
    assert histogram_quantile(0.5, (1.0,), (1.0,), -1.0) is None
    assert histogram_quantile(0.5, (1.0,), (0.0,), 0.0) is None


# ---------------------------------------------------------------- Histogram


def test_a_histogram_of_the_plain_form_sorts_its_buckets() -> None:
    assert Histogram.of({"buckets": [[0.2, 3], [0.1, 1]], "count": 4, "sum": 0.5}) == Histogram(
        (0.1, 0.2), (1.0, 3.0), 4.0, 0.5
    )
    assert Histogram.of({}) == Histogram((), (), 0.0, 0.0)
    assert Histogram.of({"buckets": None, "count": None, "sum": None}) == Histogram((), (), 0.0, 0.0)


def test_merging_unlike_bounds_counts_a_missing_bound_as_the_nearest_below() -> None:
    a = Histogram.of({"buckets": [[0.1, 1], [0.2, 3]], "count": 4, "sum": 0.5})
    b = Histogram.of({"buckets": [[0.05, 1], [0.3, 5]], "count": 6, "sum": 1.0})
    # a: 0 at 0.05 (nothing below), 1, 3, 3; b: 1, 1 (0.05's), 1, 5
    assert a.merged(b) == Histogram((0.05, 0.1, 0.2, 0.3), (1.0, 2.0, 4.0, 8.0), 10.0, 1.5)
    assert b.merged(a) == a.merged(b)


def test_a_histogram_with_fewer_counts_than_bounds_is_refused() -> None:
    broken = Histogram((0.1, 0.2), (1.0,), 1.0, 0.1)
    with pytest.raises(ValueError):
        broken.merged(Histogram((0.1,), (1.0,), 1.0, 0.1))


def test_a_histograms_summary() -> None:
    found = Histogram((0.1, 0.2), (1.0, 3.0), 4.0, 0.5).summary()
    # p50: rank 2 in (0.1, 0.2], 1 below, 2 inside; p90: rank 3.6 in +Inf
    assert found == {"count": 4, "mean_s": 0.125, "p50_s": pytest.approx(0.15), "p90_s": 0.2}


# ---------------------------------------------------------------- one engine


def test_missing_counters_count_as_zero() -> None:
    assert engine_summary({"requests": 4}) == {
        "requests": 4,
        "prompt_tokens_per_request": 0.0,
        "generation_tokens_per_request": 0.0,
    }
    assert engine_summary({}) == {"requests": 0}
    assert engine_summary({"requests": None, "prompt_tokens": 10}) == {"requests": 0}


def test_an_engines_figures() -> None:
    latency = {
        "requests": 2,
        "prompt_tokens": 300,
        "generation_tokens": 50,
        "ttft": {"buckets": [[1.0, 2]], "count": 2, "sum": 1.0},
        "itl": "not published",
    }
    # TTFT: rank 1 and 1.8 of 2 in (0, 1]
    assert engine_summary(latency, running=0) == {
        "requests": 2,
        "prompt_tokens_per_request": 150.0,
        "generation_tokens_per_request": 25.0,
        "running": 0,
        "ttft": {"count": 2, "mean_s": 0.5, "p50_s": 0.5, "p90_s": 0.9},
    }


# ---------------------------------------------------------------- the fleet


def hand_engines() -> list[dict[str, Any]]:
    return [
        {
            "host": "h2",
            "role": "decode",
            "latency": {
                "requests": 3,
                "prompt_tokens": 300,
                "generation_tokens": 30,
                "ttft": {"buckets": [[0.1, 1], [0.2, 3]], "count": 3, "sum": 0.375},
            },
            "running": 2,
        },
        {
            "host": "h1",
            "role": "decode",
            "latency": {
                "requests": 1,
                "prompt_tokens": 100,
                "generation_tokens": 10,
                "ttft": {"buckets": [[0.1, 1]], "count": 1, "sum": 0.125},
            },
        },
        {"host": "h2", "role": "decode", "latency": None, "running": 5},  # no page read: left out
        {"host": "h1", "role": "prefill", "latency": "unreadable"},
        {"host": "h3", "role": "router", "latency": {"requests": 9}},
    ]


DECODE_FROM_METRICS = {
    "source": METRICS,
    "requests": 4,
    "prompt_tokens_per_request": 100.0,
    "generation_tokens_per_request": 10.0,
    "running": 2.0,
    # merged TTFT: 2 <= 0.1 s, 4 <= 0.2; p50 rank 2 at 0.1's top, p90 rank 3.6 in (0.1, 0.2]: 2 below, 2 inside
    "ttft": {"count": 4, "mean_s": 0.125, "p50_s": 0.1, "p90_s": pytest.approx(0.1 + 0.1 * 1.6 / 2)},
    "engines": ["h1", "h2"],
}


def test_a_counter_one_engine_s_page_lacks_counts_as_zero_in_its_role() -> None:
    # two decode engines: 3 + 1 finished requests, 30 + 10 generated tokens, prompt tokens on the first only (12)
    engines = [
        {"host": "d1", "role": "decode", "latency": {"requests": 3, "prompt_tokens": 12, "generation_tokens": 30}},
        {"host": "d2", "role": "decode", "latency": {"requests": 1, "generation_tokens": 10}, "running": 2},
    ]
    assert measure(engines)["roles"] == {
        "decode": {
            "source": METRICS,
            "requests": 4,
            "prompt_tokens_per_request": 3.0,
            "generation_tokens_per_request": 10.0,
            "running": 2.0,
            "engines": ["d1", "d2"],
        }
    }


def test_a_role_sums_its_engines_pages() -> None:
    assert measure(hand_engines()) == {"at": "", "window": "", "roles": {"decode": DECODE_FROM_METRICS}, "notes": []}


def item(role: str, figure: str, stat: str, value: Any) -> dict[str, Any]:
    return {"metric": {"role": role, "figure": figure, "stat": stat}, "value": [1.7e9, value]}


ANSWER = {
    "status": "success",
    "data": {
        "resultType": "vector",
        "result": [
            item("decode", "requests", "increase", "4"),
            item("decode", "ttft", "p50", "0.3"),  # no count: left out
            item("decode", "itl", "count", "100"),  # no sum: mean 0
            item("decode", "itl", "p50", "0.01"),
            item("decode", "itl", "p90", "0.02"),
            item("decode", "e2e", "count", "4"),
            item("decode", "e2e", "sum", "2"),
            item("decode", "e2e", "p50", "NaN"),  # Prometheus' answer without an observation: none
            item("decode", "e2e", "p90", "+Inf"),
            item("decode", "running", "mean", "1.5"),
            {"metric": {"role": "decode", "figure": "ttft", "stat": "count"}, "value": [1.7e9]},
            {"metric": {"role": "decode", "figure": "ttft", "stat": "sum"}, "value": [1.7e9, "abc"]},
            {"metric": {"role": "decode", "figure": "e2e", "stat": "x"}, "value": None},
            {"metric": {"role": "decode", "figure": "itl", "stat": "y"}},
            item("router", "requests", "increase", "9"),  # not an engine role
            item("prefill", "ttft", "count", "3"),  # no request finished in the window: left out
            item("prefill", "ttft", "sum", "0.6"),
            {"value": [1.7e9, "1"]},
        ],
    },
}
DECODE_WINDOWED = {
    "requests": 4,
    "prompt_tokens_per_request": 0.0,
    "generation_tokens_per_request": 0.0,
    "running": 1.5,
    "itl": {"count": 100, "mean_s": 0.0, "p50_s": 0.01, "p90_s": 0.02},
    "e2e": {"count": 4, "mean_s": 0.5, "p50_s": None, "p90_s": None},
}


def test_prometheus_figures_and_their_defaults() -> None:
    assert from_prometheus(ANSWER) == {"decode": DECODE_WINDOWED}


def test_prometheus_figures_under_another_role_label() -> None:
    relabelled = {
        "status": "success",
        "data": {
            "result": [
                {"metric": {"engine_role": "prefill", "figure": "requests", "stat": "increase"}, "value": [0, "2"]},
                {
                    "metric": {"engine_role": "prefill", "figure": "prompt_tokens", "stat": "increase"},
                    "value": [0, "5"],
                },
                {"metric": {"role": "decode", "figure": "requests", "stat": "increase"}, "value": [0, "2"]},
            ]
        },
    }
    assert from_prometheus(relabelled, role_label="engine_role") == {
        "prefill": {"requests": 2, "prompt_tokens_per_request": 2.5, "generation_tokens_per_request": 0.0}
    }


def test_an_answer_that_is_not_a_success_gives_no_figure() -> None:
    assert from_prometheus({"status": "error", "data": ANSWER["data"]}) == {}
    assert from_prometheus({"data": ANSWER["data"]}) == {}
    assert from_prometheus({"status": "success"}) == {}
    assert from_prometheus({"status": "success", "data": {"result": None}}) == {}


def test_a_role_prometheus_answered_for_takes_its_window() -> None:
    found = measure(hand_engines(), ANSWER, "1m", at="T", notes=("first",))
    assert found == {
        "at": "T",
        "window": "1m",
        "roles": {"decode": {"source": "Prometheus, the last 1m", **DECODE_WINDOWED, "engines": ["h1", "h2"]}},
        "notes": ["first"],
    }


def test_a_window_without_an_engine_behind_it_names_none() -> None:
    found = measure([], ANSWER, "1m")
    assert found["roles"] == {"decode": {"source": "Prometheus, the last 1m", **DECODE_WINDOWED, "engines": []}}


def test_a_refusal_without_reasons_and_an_empty_window() -> None:
    refused = measure(hand_engines(), {"status": "error"}, "5m", notes=["first"])
    assert refused["roles"] == {"decode": DECODE_FROM_METRICS}
    assert refused["notes"] == [
        "first",
        "Prometheus refused the latency query (error: no reason given): the engines' "
        "/metrics, since each engine started",
    ]
    empty = measure(hand_engines(), {"status": "success", "data": {"result": []}}, "5m")
    assert empty["notes"] == [
        "Prometheus saw no engine request in the last 5m: the engines' /metrics, since each engine started"
    ]
    assert measure(hand_engines(), {}, "5m")["notes"] == []  # no answer at all: nothing to say


def test_the_query_groups_by_the_role_label_given() -> None:
    query = prometheus_query("5m", "j", role_label="engine_role")
    parts = query.split(" or ")
    assert len(parts) == 3 * 4 + 3 + 1
    assert parts[0] == (
        "label_replace(label_replace(histogram_quantile(0.5, sum by (le, engine_role) "
        '(rate(sglang:time_to_first_token_seconds_bucket{job="j"}[5m]))), "figure", "ttft", "", ""), '
        '"stat", "p50", "", "")'
    )
    assert parts[3] == (
        "label_replace(label_replace(sum by (engine_role) (increase(sglang:time_to_first_token_seconds_sum"
        '{job="j"}[5m])), "figure", "ttft", "", ""), "stat", "sum", "", "")'
    )
    assert parts[12] == (
        'label_replace(label_replace(sum by (engine_role) (increase(sglang:prompt_tokens_total{job="j"}[5m])), '
        '"figure", "prompt_tokens", "", ""), "stat", "increase", "", "")'
    )
    assert parts[-1] == (
        'label_replace(label_replace(sum by (engine_role) (avg_over_time(sglang:num_running_reqs{job="j"}[5m])), '
        '"figure", "running", "", ""), "stat", "mean", "", "")'
    )


# ---------------------------------------------------------------- the measured load


def load_of(decode: Any) -> tuple[int, int, int] | None:
    return measured_load({"roles": {"decode": decode}})


def test_the_measured_load_needs_finished_requests_and_their_prompts() -> None:
    assert measured_load({}) is None
    assert measured_load({"roles": None}) is None
    assert load_of(None) is None
    assert load_of({"requests": 0, "prompt_tokens_per_request": 100.0}) is None
    assert load_of({"requests": 3}) is None
    assert load_of({"requests": 3, "prompt_tokens_per_request": 0.0}) is None


def test_the_measured_load_rounds_and_is_at_least_one() -> None:
    assert load_of({"requests": 3, "prompt_tokens_per_request": 0.4, "generation_tokens_per_request": 0.4}) == (1, 1, 1)
    assert load_of({"requests": 3, "prompt_tokens_per_request": 2.6}) == (3, 1, 1)
    full = {"requests": 3, "prompt_tokens_per_request": 99.6, "generation_tokens_per_request": 7.4, "running": 3.6}
    assert load_of(full) == (100, 7, 4)


# ---------------------------------------------------------------- words


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "-"),
        (1.0, "1.00 s"),
        (1.5, "1.50 s"),
        (12_345.678, "12,345.68 s"),
        (0.9995, "999.5 ms"),
        (0.0123, "12.3 ms"),
        (0.0, "0.0 ms"),
    ],
)
def test_seconds(value: float | None, text: str) -> None:
    assert seconds(value) == text


def test_figure_text_counts_requests_unless_told() -> None:
    figure = {"count": 1234, "mean_s": 0.5, "p50_s": None, "p90_s": 2}
    assert figure_text("TTFT", figure) == "TTFT (1,234 requests) mean 500.0 ms, p50 -, p90 2.00 s"
    assert figure_text("ITL", figure, "tokens") == "ITL (1,234 tokens) mean 500.0 ms, p50 -, p90 2.00 s"


def test_summary_lines_of_requests_without_histograms() -> None:
    assert summary_lines({"requests": 5}) == [
        "5 requests finished",
        "ITL not published (sglang:inter_token_latency_seconds)",
    ]
    assert summary_lines({}) == ["no finished request yet"]


def test_summary_lines_of_histograms_without_requests() -> None:
    summary = {"ttft": {"count": 2, "mean_s": 1.5, "p50_s": 0.25, "p90_s": None}, "itl": {"count": 0}, "running": 0}
    assert summary_lines(summary) == [
        "0 requests finished; 0 running",
        "TTFT (2 requests) mean 1.50 s, p50 250.0 ms, p90 -",
    ]


def test_summary_lines_in_full() -> None:
    summary = {
        "requests": 1234,
        "prompt_tokens_per_request": 1500.4,
        "generation_tokens_per_request": 2000.6,
        "running": 2.5,
        "ttft": {"count": 0},
        "itl": {"count": 12345, "mean_s": 0.0125, "p50_s": 0.01, "p90_s": 1.0},
        "e2e": {"count": 1234, "mean_s": 2, "p50_s": 0.9995, "p90_s": 12_345.678},
    }
    assert summary_lines(summary) == [
        "1,234 requests finished; 1,500 prompt + 2,001 generated tokens per request; 2.5 running",
        "ITL (12,345 tokens) mean 12.5 ms, p50 10.0 ms, p90 1.00 s; E2E (1,234 requests) mean 2.00 s, p50 999.5 ms, "
        "p90 12,345.68 s",
    ]


def test_a_nan_request_count_is_no_request() -> None:
    assert (
        from_prometheus({"status": "success", "data": {"result": [item("decode", "requests", "increase", "NaN")]}})
        == {}
    )
