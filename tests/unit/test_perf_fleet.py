"""The time model on a declared fleet (plugin_utils/sglang_perf_fleet.py) with a stub step source of hand-set step
times: every prefill pass 1,000 ms, every decode step 10 ms, no attention growth (so no bf16 index-key term) and the
KV transfer declared free (backend fake). Expected values are computed by hand in each test."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_perf_fleet as perf
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import DecodeQuery, PrefillQuery, StepTime
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_plan import (
    RANKING_NOTE,
    Price,
    Shape,
    change,
    fleet_from_inventory,
    plan,
    summary,
)
from modeltools import load_model
from shipped import shipped_inventory


class Stub:
    def prefill(self, queries: Sequence[PrefillQuery]) -> list[StepTime]:
        return [StepTime(1000.0, 1000.0, 0.0, 0.0, 0.0, "stub", "0.5.14") for _ in queries]

    def decode(self, queries: Sequence[DecodeQuery]) -> list[StepTime]:
        return [StepTime(10.0, 10.0, 0.0, 0.0, 0.0, "stub", "0.5.14") for _ in queries]


def production(**common: Any) -> tuple[dict[str, Any], dict[str, list[str]]]:
    hostvars, groups = copy.deepcopy(shipped_inventory("production"))
    hv = hostvars["gpu-node-01"]
    hv["sglang_engine_common"] = {**hv["sglang_engine_common"], "disaggregation_transfer_backend": "fake", **common}
    return hostvars, groups


DSV4 = load_model("deepseek-v4-flash")
SRC = "stub (100% measured); our model: "


def test_shape_of_production_reads_the_fleet_answer() -> None:
    hostvars, groups = production()
    shape = perf.fleet_shape_of(hostvars, groups, DSV4, 200_000)
    assert (shape.prefill_engines, shape.decode_engines, shape.prefill_tp, shape.decode_tp) == (1, 1, 4, 4)
    assert shape.chunked_prefill_size == 8192
    assert shape.decode_max_running == 55  # the fleet answer at 200,000 tokens: the KV pool binds below 64 slots
    assert perf.fleet_shape_of(hostvars, groups, DSV4, None).decode_max_running == 64
    assert (shape.router_max_concurrent, shape.router_queue_size, shape.router_queue_timeout_s) == (64, 256, 60.0)
    assert shape.model == "deepseek-ai/DeepSeek-V4-Flash" and shape.transfer_backend == "fake"
    assert shape.key_ratio != 1.0  # bf16 index keys declared


def test_predicted_times_one_short_call() -> None:
    # 1 call of 4,000 tokens: 3,000 in (one pass, 1,000 ms; no transfer), 1,000 out at 10 ms a step
    (one,) = perf.predicted_times(*production(), DSV4, [(1, 4000)], steps=Stub())
    assert (one["shape"], one["isl"], one["osl"], one["binding"]) == (
        "1 parallel calls x 4,000 tokens",
        3000,
        1000,
        "none",
    )
    assert one["ttft_p50"]["ms"] == pytest.approx(1000.0)
    # band: 51 % of the estimated 1,000 ms
    assert one["ttft_p90"]["text"] == f"1.00 s (0.49-1.51, mean error; {SRC}bf16 index keys)"
    assert one["itl_p50"]["ms"] == pytest.approx(10.0)
    assert one["itl_p90"]["text"].startswith(
        "10.00 ms (6.90-13.10, mean error; stub (100% measured); our model: decode p90 batch"
    )


def test_predicted_times_a_burst_queues_on_the_prefill_engine() -> None:
    # 10 calls of 3,000 in arriving at once: 2 prompts a pass (8192 // 3000), 5 passes of 1,000 ms;
    # TTFTs 1,1,2,2,3,3,4,4,5,5 s: p50 (5th) 3 s, p90 (9th) 5 s
    (burst,) = perf.predicted_times(*production(), DSV4, ["10x4000"], steps=Stub())
    assert burst["ttft_p50"]["ms"] == pytest.approx(3000.0)
    assert burst["ttft_p90"]["ms"] == pytest.approx(5000.0)


def test_predicted_times_without_a_step_source_say_so() -> None:
    out = perf.predicted_times(*production(), DSV4, ["1x4k"])  # the unit tests have no estimator venv
    assert out == [{"shape": "1 parallel calls x 4,000 tokens", "error": "time: not predicted (make perf-venv)"}]


def test_slo_parsing_and_misses() -> None:
    assert perf.parse_duration_ms("60s") == 60_000 and perf.parse_duration_ms("80ms") == 80
    assert perf.parse_duration_ms("1.5m") == 90_000 and perf.parse_duration_ms("80", "ms") == 80
    with pytest.raises(ValueError, match="a duration"):
        perf.parse_duration_ms("soon")
    slo = perf.Slo(ttft_p90_ms=500.0, itl_p90_ms=80.0, tokens_per_s=200.0)
    assert slo.text() == "TTFT p90 <= 500 ms, ITL p90 <= 80 ms, >= 200 output tokens/s per call"
    assert not perf.Slo()


def test_a_shape_that_misses_two_slo_terms_names_both() -> None:
    # the 20 calls below: TTFT p90 9.1 s (> 2 s), and each decode step 10 ms on the stub (> 5 ms)
    hostvars, groups = production()
    fleet = fleet_from_inventory(hostvars, groups)
    result = plan(fleet, DSV4, Shape(20, 4000))
    perf.plan_in_time(result, fleet, DSV4, perf.Slo(ttft_p90_ms=2000.0, itl_p90_ms=5.0), Stub())
    assert [line for line in result.today_times if "SLO" in line] == [
        "  SLO (TTFT p90 <= 2 s, ITL p90 <= 5 ms): missed: TTFT p90 9.1 s > 2 s; ITL p90 10.0 ms > 5 ms"
    ]


def test_plan_adds_prefill_hosts_to_meet_the_ttft_slo() -> None:
    # 20 calls of 4,000 tokens (3,000 in) fit today (64 slots). At chunk 8192 an engine prefills 2 prompts a pass of
    # 1,000 ms: the calls end passes 1, 1, 2, 2, .. 10, 10, and p90 of 20 (numpy's rule, rank 18.1) lies a tenth of
    # the way from the 18th (pass 9) to the 19th (pass 10): 9.1 s. For <= 2 s the 19th call must end by pass 2: with
    # 8192, 4P >= 19, P = 5 prefill engines; with 16384 a pass holds 5 prompts, 10P >= 19 holds at P = 2.
    # The fewest hosts win: 1 more prefill host and chunk 16384.
    hostvars, groups = production()
    fleet = fleet_from_inventory(hostvars, groups)
    result = plan(fleet, DSV4, Shape(20, 4000))
    perf.plan_in_time(result, fleet, DSV4, perf.Slo(ttft_p90_ms=2000.0), Stub())
    assert result.fits_today and result.today_meets_slo is False
    assert "  SLO (TTFT p90 <= 2 s): missed: TTFT p90 9.1 s > 2 s" in result.today_times
    option = result.options[0]  # the best goodput per GPU of three (the next test)
    assert option.title == "add 1 prefill host, chunked_prefill_size 16384" and option.meets_slo is True
    assert option.diff_lines() == [
        "inventory: add host gpu-node-01-prefill2 (a copy of gpu-node-01's prefill engine, 1 of 1) to group "
        "sglang_prefill",
        "gpu-node-01: sglang_advertise_host: 127.0.0.1 -> gpu-node-01 (an address the new hosts reach)",
        "sglang_prefill.chunked_prefill_size: 8192 -> 16384",  # the decode engines keep theirs
    ]
    assert option.times[-1] == "  SLO (TTFT p90 <= 2 s): met"
    assert option.times[2].startswith("  TTFT p90 2.00 s (")


def test_the_levers_are_priced_and_ranked_by_goodput_per_gpu() -> None:
    """The same 20 calls of 3,000 in + 1,000 out against TTFT p90 <= 2 s, every lever tried. The stub answers every
    pass 1,000 ms and every step 10 ms, whatever the tp: a call takes 1 s of prefill and 10 s of decode, and a closed
    loop of 20 calls completes 20 / 11 s = 1.818 calls/s on every fleet that meets the SLO, 1,818 output tokens/s.
    - more prefill engines: 1 more at chunk 16,384 (above): 12 GPUs (3 engines of tp 4): 151.5 tokens/s per GPU;
    - the ratio: one more decode host, at the declared chunk 8,192 (2 prompts a pass): the 19th call must end by the
      second pass, 4P >= 19: 5 prefill engines (4 more): 7 engines, 28 GPUs: 64.9;
    - prefill at tp 8 on hosts of its own, chunk 8,192: 5 engines of 8 GPUs in place of the declared one, and the
      decode engine's 4: 44 GPUs: 41.3;
    - decode with dp attention: attn_dp_size is not an envelope key the schema accepts, so validation refuses it.
    Today: 8 GPUs, TTFT p90 9.1 s misses the SLO: goodput 0."""
    fleet = fleet_from_inventory(*production())
    result = plan(fleet, DSV4, Shape(20, 4000))
    perf.plan_in_time(result, fleet, DSV4, perf.Slo(ttft_p90_ms=2000.0), Stub())
    assert [(o.title, o.price.gpus if o.price else None) for o in result.options] == [
        ("add 1 prefill host, chunked_prefill_size 16384", 12),
        ("add 4 prefill hosts, 1 more decode host (the prefill:decode ratio)", 28),
        ("prefill on 5 prefill hosts of their own at tp 8", 44),
    ]
    assert [round(o.price.goodput_per_gpu, 1) for o in result.options if o.price] == [151.5, 64.9, 41.3]
    assert result.today_price == Price(8, 0.0, pytest.approx(9100.0), 10.0, False)
    assert result.options[2].diff_lines() == [
        "inventory: add hosts gpu-node-01-prefill-tp8-1 .. gpu-node-01-prefill-tp8-5 to group sglang_prefill (5 "
        "copies of gpu-node-01's prefill engine at tp_size 8)",
        "inventory: remove gpu-node-01 from group sglang_prefill (its prefill GPUs are freed)",
        "the new prefill hosts' sglang_prefill.tp_size (GPUs 0-7): 4 -> 8",
        "gpu-node-01: sglang_advertise_host: 127.0.0.1 -> gpu-node-01 (an address the new hosts reach)",
    ]
    assert result.refused == [
        "today's fleet, decode with dp attention: every option that meets the SLO is refused by validation; the "
        "first: add 4 prefill hosts, decode with dp attention: gpu-node-01: sglang_decode.attn_dp_size=4: not a "
        "known decode envelope key (did you mean tp_size?); fix: remove it or use one of the schema keys in "
        "plugins/module_utils/sglang_schema.py"
    ]
    assert summary(result) == [
        "          GPUs (added)  fits  TTFT p90  ITL p90  goodput/GPU     SLO",
        "today                8   yes     9.1 s  10.0 ms    0.0 tok/s  missed",
        "option 1       12 (+4)   yes     2.0 s  10.0 ms  151.5 tok/s     met",
        "option 2      28 (+20)   yes     2.0 s  10.0 ms   64.9 tok/s     met",
        "option 3      44 (+36)   yes     2.0 s  10.0 ms   41.3 tok/s     met",
        "all 20 calls arrive at once (a closed loop: each call is followed by the next)",
        "levers tried for the SLO: more prefill engines, prefill at tp 8, the prefill:decode ratio, decode with dp "
        "attention",
        RANKING_NOTE,
    ]


def test_poisson_arrivals_are_a_choice_and_said() -> None:
    """--rate: 0.5 calls/s of 3,000 in + 1,000 out, one prompt's pass 1 s (2 a pass, rho 0.25): the M/D/1 waits are
    short, and the plan says the arrivals it used."""
    fleet = fleet_from_inventory(*production())
    result = plan(fleet, DSV4, Shape(20, 4000))
    perf.plan_in_time(result, fleet, DSV4, None, Stub(), rate_per_s=0.5)
    assert result.arrivals == "Poisson arrivals at 0.5 calls/s (at most 20 at once)"
    assert result.today_times[0].startswith("time: calls of 3,000 in + 1,000 out arriving at 0.5/s (Poisson): ")


def test_many_added_hosts_of_a_role_are_one_diff_line() -> None:
    hostvars, groups = production()
    fleet = fleet_from_inventory(hostvars, groups)
    option = change(fleet, DSV4, "more prefill", [], add_prefill_hosts=4)
    assert option.diff_lines()[0] == (
        "inventory: add hosts gpu-node-01-prefill2 .. gpu-node-01-prefill5 to group sglang_prefill "
        "(4 copies of gpu-node-01's prefill engine)"
    )


def test_plan_without_a_step_source_says_time_was_not_predicted() -> None:
    hostvars, groups = production()
    fleet = fleet_from_inventory(hostvars, groups)
    result = perf.plan_in_time(plan(fleet, DSV4, Shape(100, 200_000)), fleet, DSV4, perf.Slo(60_000.0), None)
    assert result.today_times == ["time: not predicted (make perf-venv)"]
    assert all(o.times == ["time: not predicted (make perf-venv)"] for o in result.options + result.shorter)
    assert all(o.meets_slo is None for o in result.options)


def test_time_risks_router_beyond_prefill_and_itl() -> None:
    # router admits 64 calls of 4,000 tokens: 32 passes of 1,000 ms; 60 s SLO is met, a 5 s one is not:
    # 5 rounds x 2 prompts = 10 started in time, so about floor(10 / 0.9) = 11 calls meet TTFT p90
    hostvars, groups = production()
    fleet = fleet_from_inventory(hostvars, groups)
    assert perf.time_risks(fleet, DSV4, 4000, perf.Slo(60_000.0, 80.0), Stub()) == []
    (prefill, itl) = perf.time_risks(fleet, DSV4, 4000, perf.Slo(5_000.0, 5.0), Stub())
    assert prefill["id"] == "router_admits_beyond_prefill_slo"
    assert prefill["numbers"]["starts_within_slo"] == 11
    assert [f["title"] for f in prefill["fixes"]] == [
        "add 5 prefill hosts",  # ceil(ceil(0.9 * 64) / 10) = 6 engines
        "admit only what the prefill engines start within 5 s",
    ]
    assert itl["id"] == "decode_batch_beyond_itl_slo" and itl["numbers"]["itl_at_limit_ms"] == 10.0


def test_a_call_longer_than_the_routers_request_timeout_is_a_risk_with_a_fix() -> None:
    """64 calls of 3,000 in + 1,000 out at once, 2 prompts a pass of 1 s: they end prefill at 1, 1, 2, 2 .. 32 s and
    the p90 (rank 56.7) at 29 s; then 999 tokens at ITL p90 10 ms: 38.99 s, beyond a request_timeout_secs of 30. The
    fix takes each figure's band high end: 29 x 1.51 = 43.79 s and 999 x 13.1 ms = 13.09 s, 56.88: 57 s. At 40 s
    there is no risk."""
    hostvars, groups = production()
    router = hostvars["gpu-node-01"]["sglang_router"]
    hostvars["gpu-node-01"]["sglang_router"] = {**router, "request_timeout_secs": 30}
    (risk,) = perf.time_risks(fleet_from_inventory(hostvars, groups), DSV4, 4000, perf.Slo(60_000.0, 80.0), Stub())
    assert (risk["id"], risk["severity"]) == ("call_beyond_request_timeout", "warn")
    assert risk["numbers"] == {
        "calls": 64,
        "tokens_per_call": 4000,
        "e2e_p90_s": 39.0,
        "ttft_p90_s": 29.0,
        "request_timeout_secs": 30.0,
    }
    assert [f["title"] for f in risk["fixes"]] == [
        "raise request_timeout_secs to the band's high end of the call's time (57 s)"
    ]
    assert risk["summary"].endswith(
        "beyond gpu-node-01's request_timeout_secs=30: smg ends each attempt at that deadline, so a stream ends in a "
        "stream_error event and a call not yet answered is retried, then refused with 502"
    )
    hostvars["gpu-node-01"]["sglang_router"] = {**router, "request_timeout_secs": 40}
    assert perf.time_risks(fleet_from_inventory(hostvars, groups), DSV4, 4000, perf.Slo(60_000.0, 80.0), Stub()) == []


def test_the_audit_predicts_the_longest_and_the_typical_call_at_the_routers_admission() -> None:
    # The router admits 64. The longest call: 524,288 - 2 = 524,286 tokens, 523,286 in = 64 chunks of 8,192 at
    # 1,000 ms: 64 s a prompt; the typical call (no sglang_workload): 32,768 tokens, 31,768 in = 4 chunks: 4 s.
    # 64 prompts first in, first out on one prefill engine, read by numpy's rule: p50 at rank 32.5, p90 at 57.7.
    longest, typical = perf.audit_predictions(*production(), DSV4, steps=Stub())["predicted"]
    assert longest["shape"] == "the longest call, 64 x 524,286 tokens at the router's admission"
    assert longest["ttft_p50"].startswith("2,080.00 s (") and longest["ttft_p90"].startswith("3,692.80 s (")
    assert typical["shape"] == "a typical call, 64 x 32,768 tokens at the router's admission"
    assert typical["ttft_p50"].startswith("130.00 s (") and typical["ttft_p90"].startswith("230.80 s (")
    assert typical["itl_p50"].startswith("10.00 ms (") and "stub" in typical["itl_p50"]
    assert longest["binding"] == typical["binding"] == "prefill engine"


def test_the_audit_says_when_time_is_not_predicted() -> None:
    hostvars, groups = production()
    hostvars["gpu-node-01"]["sglang_workload"] = {"p90_context_tokens": 16_384}
    # the unit tests have no estimator venv
    found = perf.audit_predictions(hostvars, groups, DSV4, steps=None)["predicted"]
    assert [f["shape"] for f in found] == [
        "the longest call, 64 x 524,286 tokens at the router's admission",
        "a typical call, 64 x 16,384 tokens at the router's admission",
    ]
    assert all(f["unavailable"] == perf.NOT_PREDICTED for f in found)
