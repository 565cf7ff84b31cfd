"""measured_time_off_model (sglang_risks.measured_time_risks): the decode engines' measured TTFT / ITL p50 against
the model's prediction at the measured load, with pinned figures."""

from __future__ import annotations

from typing import Any

from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_risks import measured_time_risks

SOURCE = "Prometheus, the last 5m"


def measured(ttft_p50_s: float, itl_p50_s: float | None, requests: int = 40) -> dict[str, Any]:
    decode: dict[str, Any] = {"source": SOURCE, "engines": ["gpu-1", "gpu-2"], "requests": requests}
    decode["ttft"] = {"count": requests, "mean_s": ttft_p50_s, "p50_s": ttft_p50_s, "p90_s": ttft_p50_s}
    if itl_p50_s is not None:
        decode["itl"] = {"count": requests * 100, "mean_s": itl_p50_s, "p50_s": itl_p50_s, "p90_s": itl_p50_s}
    return {"roles": {"decode": decode}}


AT_LOAD = {
    "workload": {"isl": 4000, "osl": 500, "concurrency": 8},
    "ttft_p50": {"ms": 200.0},
    "itl_p50": {"ms": 5.0},
}


def test_within_the_tolerance_nothing_is_found() -> None:
    # 300 ms / 200 ms = 1.5 and 2.5 ms / 5 ms = 0.5: both exactly at +-50 %
    assert measured_time_risks(measured(0.300, 0.0025), AT_LOAD, 0.5, 20) == []


def test_beyond_the_tolerance_one_finding_per_figure() -> None:
    (itl,) = measured_time_risks(measured(0.210, 0.012), AT_LOAD, 0.5, 20)
    assert itl.as_dict() == {
        "id": "measured_time_off_model",
        "severity": "warn",
        "summary": "measured ITL p50 12.0 ms (Prometheus, the last 5m) is 2.40 x the time model's 5.0 ms at the "
        "measured load (8 call(s) of 4,000 in + 500 out), beyond +-50%: the hardware is the truth: recalibrate with "
        "plan --from-live",
        "numbers": {"figure": "ITL p50", "measured_ms": 12.0, "predicted_ms": 5.0, "ratio": 2.4, "tolerance": 0.5,
                    "requests": 40, "source": SOURCE},
        "servers": ["gpu-1 decode", "gpu-2 decode"],
        "fixes": [],
    }  # fmt: skip
    ttft, itl = measured_time_risks(measured(0.080, 0.012), AT_LOAD, 0.5, 20)
    assert (ttft.numbers["figure"], ttft.numbers["ratio"], ttft.numbers["measured_ms"]) == ("TTFT p50", 0.4, 80.0)


def test_too_few_requests_are_not_judged() -> None:
    assert measured_time_risks(measured(0.080, 0.012, requests=19), AT_LOAD, 0.5, 20) == []
    assert len(measured_time_risks(measured(0.080, 0.012, requests=20), AT_LOAD, 0.5, 20)) == 2


def test_a_tighter_tolerance_finds_more() -> None:
    found = measured_time_risks(measured(0.300, 0.0025), AT_LOAD, 0.2, 20)
    assert [(f.numbers["figure"], f.numbers["ratio"]) for f in found] == [("TTFT p50", 1.5), ("ITL p50", 0.5)]


def test_nothing_to_judge_without_itl_or_a_prediction() -> None:
    assert measured_time_risks(measured(0.210, None), AT_LOAD, 0.5, 20) == []
    assert measured_time_risks(measured(0.080, 0.012), {"unavailable": "time: not predicted"}, 0.5, 20) == []
    assert measured_time_risks({"roles": {}}, AT_LOAD, 0.5, 20) == []
