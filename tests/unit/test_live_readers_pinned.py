"""The live readers' reductions at their edges: smg's worker list (plugins/module_utils/smg_live.py)."""

from __future__ import annotations

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_engine_live import parse_latency
from ansible_collections.sglang.dsv4.plugins.module_utils.smg_live import reduce_workers


def test_a_worker_url_loses_only_its_trailing_slashes() -> None:
    body = {
        "workers": [
            {"url": "http://GPU-X//", "worker_type": "Prefill", "is_healthy": False},
            {"url": "http://gpu-7:30001X", "type": "decode"},
            {"url": "http://gpu-8:30001/"},
        ]
    }
    assert reduce_workers(body) == [
        {"url": "http://GPU-X", "type": "prefill", "healthy": False},
        {"url": "http://gpu-7:30001X", "type": "decode", "healthy": True},
        {"url": "http://gpu-8:30001", "type": "regular", "healthy": True},
    ]


# A /metrics page of two scheduler ranks (label sets), in SGLang's text format: histogram bounds out of order, a
# bucket without a bound, counters to sum, and series the latency figures do not read.
METRICS_PAGE = """\
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:num_running_reqs{model_name="m"} 3.0
sglang:time_to_first_token_seconds_bucket{le="0.5",model_name="m",tp_rank="0"} 4.0
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="m",tp_rank="0"} 1.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="m",tp_rank="0"} 5.0
sglang:time_to_first_token_seconds_count{model_name="m",tp_rank="0"} 5.0
sglang:time_to_first_token_seconds_sum{model_name="m",tp_rank="0"} 1.25
sglang:time_to_first_token_seconds_bucket{model_name="m",le="0.1",tp_rank="1"} 2.0
sglang:time_to_first_token_seconds_bucket{model_name="m",le="0.5",tp_rank="1"} 2.0
sglang:time_to_first_token_seconds_bucket{model_name="m",le="2.5",tp_rank="1"} 3.0
sglang:time_to_first_token_seconds_bucket{model_name="m",le="+Inf",tp_rank="1"} 3.0
sglang:time_to_first_token_seconds_bucket 7.0
sglang:time_to_first_token_seconds_count{model_name="m",tp_rank="1"} 3.0
sglang:time_to_first_token_seconds_sum{model_name="m",tp_rank="1"} 2.5
sglang:inter_token_latency_seconds_count{model_name="m"} 40.0
sglang:inter_token_latency_seconds_sum{model_name="m"} 0.5
sglang:prompt_tokens_total{model_name="m",tp_rank="0"} 1000.0
sglang:prompt_tokens_total{model_name="m",tp_rank="1"} 24.0
sglang:num_requests_total{model_name="m"} 8.0
sglang:time_to_first_token_seconds_created{model_name="m"} 1.7e9

# EOF
"""


def test_latency_histograms_and_counters_are_summed_over_label_sets() -> None:
    assert parse_latency(METRICS_PAGE) == {
        "ttft": {"buckets": [[0.1, 3.0], [0.5, 6.0], [2.5, 3.0]], "count": 8.0, "sum": 3.75},
        "itl": {"buckets": [], "count": 40.0, "sum": 0.5},
        "prompt_tokens": 1024.0,
        "requests": 8.0,
    }


def test_a_page_without_latency_series_gives_nothing() -> None:
    assert parse_latency('sglang:num_running_reqs{model_name="m"} 3.0\n') == {}
    assert parse_latency("") == {}
