"""measured_time_off_model (plugin_utils/sglang_risks.py: measured_time_risks): which request count judges each
figure, where a figure is passed over, the load without a workload's lengths, and the rounding of the numbers."""

from __future__ import annotations

from typing import Any

from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_risks import measured_time_risks


def decode_only(ttft: dict[str, Any] | None, itl: dict[str, Any] | None, **more: Any) -> dict[str, Any]:
    decode: dict[str, Any] = {"source": "S", "engines": ["gpu-1"], **more}
    if ttft is not None:
        decode["ttft"] = ttft
    if itl is not None:
        decode["itl"] = itl
    return {"roles": {"decode": decode}}


def at_load(ttft_ms: float, itl_ms: float, **workload: Any) -> dict[str, Any]:
    return {"workload": workload, "ttft_p50": {"ms": ttft_ms}, "itl_p50": {"ms": itl_ms}}


def test_the_ttft_counts_its_own_requests_and_the_itl_the_engines_finished_requests() -> None:
    """30 first tokens observed, 5 requests finished: with 20 needed the TTFT is judged, the ITL is not."""
    measured = decode_only({"count": 30, "p50_s": 0.4}, {"count": 3000, "p50_s": 0.02}, requests=5)
    (ttft,) = measured_time_risks(measured, at_load(100.0, 5.0, concurrency=2, isl=10, osl=20), 0.5, 20)
    assert ttft.as_dict() == {
        "id": "measured_time_off_model",
        "severity": "warn",
        "summary": "measured TTFT p50 400.0 ms (S) is 4.00 x the time model's 100.0 ms at the measured load (2 call(s) "
        "of 10 in + 20 out), beyond +-50%: the hardware is the truth: recalibrate with plan --from-live",
        "numbers": {"figure": "TTFT p50", "measured_ms": 400.0, "predicted_ms": 100.0, "ratio": 4.0, "tolerance": 0.5,
                    "requests": 30, "source": "S"},
        "servers": ["gpu-1 decode"],
        "fixes": [],
    }  # fmt: skip


def test_the_itl_is_judged_on_the_finished_requests_not_its_token_count() -> None:
    measured = decode_only({"count": 1, "p50_s": 0.4}, {"count": 2, "p50_s": 0.02}, requests=25)
    (itl,) = measured_time_risks(measured, at_load(100.0, 5.0, concurrency=1), 0.5, 20)
    assert itl.as_dict() == {
        "id": "measured_time_off_model",
        "severity": "warn",
        "summary": "measured ITL p50 20.0 ms (S) is 4.00 x the time model's 5.0 ms at the measured load (1 call(s) of "
        "0 in + 0 out), beyond +-50%: the hardware is the truth: recalibrate with plan --from-live",
        "numbers": {"figure": "ITL p50", "measured_ms": 20.0, "predicted_ms": 5.0, "ratio": 4.0, "tolerance": 0.5,
                    "requests": 25, "source": "S"},
        "servers": ["gpu-1 decode"],
        "fixes": [],
    }  # fmt: skip


def test_without_counts_there_are_no_requests() -> None:
    """A figure without its count and an engine without finished requests count 0: below even 1 needed."""
    measured = decode_only({"p50_s": 0.4}, {"p50_s": 0.02})
    assert measured_time_risks(measured, at_load(100.0, 5.0), 0.5, 1) == []


def test_a_prediction_of_zero_is_passed_over_and_one_below_a_millisecond_is_judged() -> None:
    measured = decode_only({"count": 40, "p50_s": 0.4}, {"count": 4000, "p50_s": 0.002}, requests=40)
    (itl,) = measured_time_risks(measured, at_load(0.0, 0.5), 0.5, 20)
    assert (itl.numbers["figure"], itl.numbers["predicted_ms"], itl.numbers["ratio"]) == ("ITL p50", 0.5, 4.0)


def test_a_ttft_without_a_p50_is_passed_over_and_the_itl_still_judged() -> None:
    measured = decode_only({"count": 40}, {"count": 4000, "p50_s": 0.02}, requests=40)
    found = measured_time_risks(measured, at_load(100.0, 5.0), 0.5, 20)
    assert [f.numbers["figure"] for f in found] == ["ITL p50"]


def test_the_numbers_are_rounded_to_a_tenth_of_a_millisecond_and_the_ratio_to_two_decimals() -> None:
    measured = decode_only({"count": 40, "p50_s": 0.01234}, None, requests=40)
    (ttft,) = measured_time_risks(measured, at_load(5.06, 5.0, concurrency=4, isl=1000, osl=100), 0.5, 20)
    assert ttft.numbers == {"figure": "TTFT p50", "measured_ms": 12.3, "predicted_ms": 5.1, "ratio": 2.44,
                            "tolerance": 0.5, "requests": 40, "source": "S"}  # fmt: skip
    assert ttft.summary == (
        "measured TTFT p50 12.3 ms (S) is 2.44 x the time model's 5.1 ms at the measured load (4 call(s) of 1,000 in "
        "+ 100 out), beyond +-50%: the hardware is the truth: recalibrate with plan --from-live"
    )
