"""The audit report prints the time model's predictions in its fleet section, as given, or why there are none."""

from __future__ import annotations

from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_report import fleet_lines


def test_predicted_times_follow_the_memory_figures() -> None:
    fleet = {
        "parallel_calls": 64,
        "binding": "decode fleet max_running_requests",
        "predicted_time": [
            {"shape": "a typical call, 64 x 32,768 tokens", "ttft_p50": "128.00 s (a)", "ttft_p90": "232.00 s (b)",
             "itl_p50": "10.00 ms (c)", "itl_p90": "11.00 ms (d)", "binding": "prefill engine"},
            {"shape": "the longest call, 64 x 524,286 tokens", "unavailable": "time: not predicted (make perf-venv)"},
        ],
    }  # fmt: skip
    assert fleet_lines(fleet) == [
        "parallel calls: 64, bound by decode fleet max_running_requests",
        "predicted time, a typical call, 64 x 32,768 tokens: TTFT p50 128.00 s (a), p90 232.00 s (b); "
        "ITL p50 10.00 ms (c), p90 11.00 ms (d); bound by prefill engine",
        "predicted time, the longest call, 64 x 524,286 tokens: not predicted (make perf-venv)",
    ]
