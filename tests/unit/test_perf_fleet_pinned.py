"""The time model on a declared fleet (plugin_utils/sglang_perf_fleet.py), pinned whole: the SLO's words, each
prediction as plain data, the simulator's time scale, the audit's and check-request's answers and the planner's extra
prefill hosts. Two stub step sources of hand-set step times: test_perf_fleet.Stub (every prefill pass 1,000 ms) and
FastPrefill (every prefill pass 4 ms); both take 10 ms a decode step, with no attention growth (so the bf16
index-key term is 0) and the KV transfer declared free (backend fake). Expected values are computed by hand from the
model's documented rules in the comment beside each."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_perf_aic
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_perf_fleet as perf
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import (
    BAND_CITATION,
    DecodeQuery,
    Figure,
    Prediction,
    PrefillQuery,
    StepTime,
    Term,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_corrections import Fp4Experts, LongContext
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_plan import Shape, fleet_from_inventory, plan
from test_perf_fleet import DSV4, Stub, production

# the real default_steps, before the unit tests' autouse fixture replaces it with "no step source"
REAL_DEFAULT_STEPS = perf.default_steps

VERSION = (
    "step data measured with SGLang 0.5.14; this fleet runs SGLang 0.5.23, whose kernels may differ (not corrected)"
)
MEASURED = "stub (100% measured)"
SIM = "the simulator's SGLANG_SIM_SPEED_FACTOR"


class FastPrefill:
    """Every prefill pass (or chunk) 4 ms, every decode step 10 ms: the decode engine binds where its limit does."""

    def prefill(self, queries: Sequence[PrefillQuery]) -> list[StepTime]:
        return [StepTime(4.0, 4.0, 0.0, 0.0, 0.0, "stub", "0.5.14") for _ in queries]

    def decode(self, queries: Sequence[DecodeQuery]) -> list[StepTime]:
        return [StepTime(10.0, 10.0, 0.0, 0.0, 0.0, "stub", "0.5.14") for _ in queries]


class FailingAt(Stub):
    """The stub until its `fail_at`-th round of prefill queries, which fails."""

    def __init__(self, fail_at: int) -> None:
        self.fail_at, self.rounds = fail_at, 0

    def prefill(self, queries: Sequence[PrefillQuery]) -> list[StepTime]:
        self.rounds += 1
        if self.rounds >= self.fail_at:
            raise RuntimeError("the estimator exited 1\nTraceback ...")
        return super().prefill(queries)


def figure_dict(ms: float, low: float, high: float, source: str, text: str) -> dict[str, Any]:
    """as_dict's entry of one figure; the ms to float precision."""
    return {
        "ms": pytest.approx(ms),
        "low_ms": pytest.approx(low),
        "high_ms": pytest.approx(high),
        "source": source,
        "text": text,
    }


def hand_prediction(**changes: Any) -> Prediction:
    """A prediction written by hand: TTFT p50 4 s (band 3-5 s), p90 6 s (5-7 s), ITL p50 7 ms (6-8 ms),
    p90 12 ms (8-16 ms)."""
    fields: dict[str, Any] = {
        "ttft_p50": Figure(4000.0, 2000.0, 0.5, "S1"),
        "ttft_p90": Figure(6000.0, 4000.0, 0.25, "S1"),
        "itl_p50": Figure(7.0, 4.0, 0.25, "S2"),
        "itl_p90": Figure(12.0, 8.0, 0.5, "S3"),
        "itl_full": Figure(20.0, 20.0, 0.5, "S4"),
        "ttft_steady": Figure(3000.0, 3000.0, 0.5, "S5"),
        "binding": "decode engine",
        "decode_batch": 12.3456,
        "calls_per_s": 0.5,
        "terms": [Term("prefill of one prompt", 1000.0, "S1"), Term("KV transfer", 50.0, "ours")],
        "notes": ["n1", "n2"],
        "rejected": 2,
    }
    return Prediction(**(fields | changes))


def without_router_cap() -> tuple[dict[str, Any], dict[str, list[str]]]:
    hostvars, groups = production()
    del hostvars["gpu-node-01"]["sglang_router"]["max_concurrent_requests"]
    return hostvars, groups


# ---------------------------------------------------------------- durations and the SLO's words


@pytest.mark.parametrize(
    ("text", "unit", "ms"),
    [
        ("60", "s", 60_000.0),  # seconds unless told
        ("60s", "s", 60_000.0),
        ("80ms", "s", 80.0),
        ("80", "ms", 80.0),
        ("1.5m", "s", 90_000.0),
        ("2min", "s", 120_000.0),
        (" 2 min ", "ms", 120_000.0),
        ("0.5", "s", 500.0),  # below one unit is still a duration
        (".25s", "s", 250.0),
    ],
)
def test_parse_duration_ms(text: str, unit: str, ms: float) -> None:
    assert perf.parse_duration_ms(text, unit) == ms


def test_parse_duration_default_unit_is_seconds() -> None:
    assert perf.parse_duration_ms("3") == 3000.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0", "'0': a duration must be > 0"),
        ("0ms", "'0ms': a duration must be > 0"),
        ("soon", "'soon': expected a duration such as 60s, 1.5m or 80ms"),
        ("-5s", "'-5s': expected a duration such as 60s, 1.5m or 80ms"),
        ("5h", "'5h': expected a duration such as 60s, 1.5m or 80ms"),
    ],
)
def test_parse_duration_refusals(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        perf.parse_duration_ms(text)


def test_slo_text_names_seconds_from_one_second() -> None:
    assert perf.Slo(ttft_p90_ms=1000.0, itl_p90_ms=999.0).text() == "TTFT p90 <= 1 s, ITL p90 <= 999 ms"
    assert perf.Slo(ttft_p90_ms=1500.0, itl_p90_ms=1000.0).text() == "TTFT p90 <= 1.5 s, ITL p90 <= 1 s"
    assert perf.Slo(tokens_per_s=12.5).text() == ">= 12.5 output tokens/s per call"
    assert perf.Slo().text() == ""
    assert perf.DEFAULT_SLO.text() == "TTFT p90 <= 60 s, ITL p90 <= 80 ms"
    assert bool(perf.Slo(tokens_per_s=1.0)) and not perf.Slo()


def test_slo_misses_in_words() -> None:
    # TTFT p90 1,234,567 ms = 1,234.6 s; ITL p90 1,234.56 ms; ITL p50 8 ms = 125 tokens/s
    pred = hand_prediction(
        ttft_p90=Figure(1_234_567.0, 0.0, 0.5, "S"),
        itl_p90=Figure(1234.56, 0.0, 0.5, "S"),
        itl_p50=Figure(8.0, 8.0, 0.25, "S"),
    )
    slo = perf.Slo(ttft_p90_ms=60_000.0, itl_p90_ms=80.0, tokens_per_s=200.0)
    assert slo.misses(pred) == [
        "TTFT p90 1,234.6 s > 60 s",
        "ITL p90 1,234.6 ms > 80 ms",
        "125 output tokens/s per call < 200",
    ]
    assert perf.Slo(itl_p90_ms=1000.0).misses(pred) == ["ITL p90 1,234.6 ms > 1 s"]


def test_slo_met_exactly_at_each_limit() -> None:
    # TTFT p90 6,000 ms, ITL p90 12 ms, ITL p50 8 ms = 125 tokens/s: each at its limit meets it
    pred = hand_prediction(itl_p50=Figure(8.0, 8.0, 0.25, "S"))
    assert perf.Slo(ttft_p90_ms=6000.0, itl_p90_ms=12.0, tokens_per_s=125.0).misses(pred) == []
    # a hair beyond each
    assert perf.Slo(ttft_p90_ms=5999.0, itl_p90_ms=11.9, tokens_per_s=125.5).misses(pred) == [
        "TTFT p90 6.0 s > 5.999 s",
        "ITL p90 12.0 ms > 11.9 ms",
        "125 output tokens/s per call < 125.5",
    ]


# ---------------------------------------------------------------- the fleet's shape


def test_shape_of_defaults_the_transfer_backend_to_sglangs() -> None:
    # no backend declared: SGLang's default, mooncake, at one 200 Gb/s link per GPU at 80 % = 20 GB/s
    hostvars, groups = production()
    del hostvars["gpu-node-01"]["sglang_engine_common"]["disaggregation_transfer_backend"]
    shape = perf.fleet_shape_of(hostvars, groups, DSV4, 4000)
    assert (shape.transfer_backend, shape.transfer_bytes_per_s) == ("mooncake", 20e9)


def test_shape_of_sums_the_routers_queues() -> None:
    # a second router admitting 8 with a queue of 100 and a 30 s timeout: 64 + 8 admitted, 256 + 100 queued, the
    # shorter timeout
    hostvars, groups = production()
    hostvars["router-2"] = {
        "sglang_router": {"queue_size": 100, "queue_timeout_secs": 30, "max_concurrent_requests": 8}
    }
    groups["sglang_router"].append("router-2")
    shape = perf.fleet_shape_of(hostvars, groups, DSV4, 4000)
    assert (shape.router_max_concurrent, shape.router_queue_size, shape.router_queue_timeout_s) == (72, 356, 30.0)
    # a router without a queue size or timeout runs with smg's defaults (--queue-size 100, --queue-timeout-secs 60,
    # from smg's own parser): 256 + 100 queued, the shorter of 60 and 60 s
    hostvars["router-2"]["sglang_router"] = {"max_concurrent_requests": 8}
    shape = perf.fleet_shape_of(hostvars, groups, DSV4, 4000)
    assert (shape.router_max_concurrent, shape.router_queue_size, shape.router_queue_timeout_s) == (72, 356, 60)


def test_shape_of_chunked_prefill_off_is_one_pass_a_prompt() -> None:
    shape = perf.fleet_shape_of(*production(chunked_prefill_size=-1), DSV4, 4000)
    assert shape.chunked_prefill_size == perf.UNCHUNKED == 1 << 30


# ---------------------------------------------------------------- the default step source


def test_default_steps_is_the_estimator_when_its_venv_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sglang_perf_aic.AicSteps, "ready", lambda self: True)
    steps = REAL_DEFAULT_STEPS()  # the estimator under the default corrections: long context over the fp4 experts
    assert isinstance(steps, LongContext) and isinstance(steps.base, Fp4Experts)
    assert isinstance(steps.base.base, sglang_perf_aic.AicSteps)
    monkeypatch.setattr(sglang_perf_aic.AicSteps, "ready", lambda self: False)
    assert REAL_DEFAULT_STEPS() is None


# ---------------------------------------------------------------- the simulator's time scale


def sim(factor: Any = None) -> dict[str, Any]:
    hv: dict[str, Any] = {"sglang_engine_command": ["python3", "-m", "sglang_sim.server"]}
    if factor is not None:
        hv["sglang_engine_extra_env"] = {"SGLANG_SIM_SPEED_FACTOR": factor}
    return hv


REAL = {"sglang_engine_command": "python3 -m sglang.launch_server"}


def test_sim_speed_factor_reads_the_simulated_hosts_only() -> None:
    # a real engine before the simulated one; no decode group at all
    hostvars = {"p1": REAL, "p2": sim("0.5")}
    assert perf.sim_speed_factor(hostvars, {"sglang_prefill": ["p1", "p2"]}) == 0.5
    # a simulated host without the variable, then one with it
    hostvars = {"p1": sim(), "p2": sim("0.25")}
    assert perf.sim_speed_factor(hostvars, {"sglang_prefill": ["p1", "p2"]}) == 0.25
    # the command as one string
    hostvars = {"d1": {**REAL, "sglang_engine_command": "python3 -m sglang_sim", "sglang_engine_extra_env": {}}}
    assert perf.sim_speed_factor(hostvars, {"sglang_decode": ["d1"]}) is None
    hostvars = {
        "d1": {"sglang_engine_command": "sglang_sim", "sglang_engine_extra_env": {"SGLANG_SIM_SPEED_FACTOR": 2}}
    }
    assert perf.sim_speed_factor(hostvars, {"sglang_decode": ["d1"]}) == 2.0


def test_sim_speed_factor_none_for_real_engines_or_a_blank_value() -> None:
    real = {"p1": {**REAL, "sglang_engine_extra_env": {"SGLANG_SIM_SPEED_FACTOR": "0.5"}}, "d1": {}}
    assert perf.sim_speed_factor(real, {"sglang_prefill": ["p1"], "sglang_decode": ["d1"]}) is None
    assert perf.sim_speed_factor({"p1": sim("  ")}, {"sglang_prefill": ["p1"]}) is None
    assert perf.sim_speed_factor({"p1": sim("")}, {"sglang_prefill": ["p1"]}) is None
    assert perf.sim_speed_factor({}, {}) is None


@pytest.mark.parametrize("raw", ["fast", "0", "-1", "nan", "inf"])
def test_sim_speed_factor_refuses_what_is_not_a_positive_number(raw: str) -> None:
    message = (
        f"p1: sglang_engine_extra_env.SGLANG_SIM_SPEED_FACTOR={raw!r} is not a number > 0; fix: declare the "
        "simulator's speed factor as a plain number, e.g. '0.5'"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        perf.sim_speed_factor({"p1": sim(raw)}, {"sglang_prefill": ["p1"]})


def test_sim_speed_factor_refuses_two_factors() -> None:
    hostvars = {"p1": sim("0.25"), "d1": sim("0.5"), "d2": sim("0.5")}
    groups = {"sglang_prefill": ["p1"], "sglang_decode": ["d1", "d2"]}
    message = (
        "the simulated engines declare different SGLANG_SIM_SPEED_FACTORs (d1 0.5, d2 0.5, p1 0.25); fix: one value"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        perf.sim_speed_factor(hostvars, groups)
    # the same factor on every simulated host is the one factor
    assert perf.sim_speed_factor({"p1": sim("0.5"), "d1": sim("0.5")}, {**groups, "sglang_decode": ["d1"]}) == 0.5


# ---------------------------------------------------------------- a prediction as data, at a time scale


def test_as_dict_whole() -> None:
    # decode batch 12.3456 to 2 places; ITL p50 7 ms = 142.857 tokens/s to 1 place. SLO: TTFT p90 6 s > 5 s;
    # ITL p90 12 ms meets 12 ms; 142.857 (143 in words) < 150
    slo = perf.Slo(ttft_p90_ms=5000.0, itl_p90_ms=12.0, tokens_per_s=150.0)
    out = perf.as_dict(hand_prediction(), perf.Workload(isl=3000, osl=1000, concurrency=20), slo)
    assert out == {
        "calls": 20,
        "isl": 3000,
        "osl": 1000,
        "binding": "decode engine",
        "decode_batch": 12.35,
        "rejected": 2,
        "tokens_per_s_per_call": 142.9,
        "notes": ["n1", "n2"],
        "ttft_p50": figure_dict(4000.0, 3000.0, 5000.0, "S1", "4.00 s (3.00-5.00, mean error; S1)"),
        "ttft_p90": figure_dict(6000.0, 5000.0, 7000.0, "S1", "6.00 s (5.00-7.00, mean error; S1)"),
        "itl_p50": figure_dict(7.0, 6.0, 8.0, "S2", "7.00 ms (6.00-8.00, mean error; S2)"),
        "itl_p90": figure_dict(12.0, 8.0, 16.0, "S3", "12.00 ms (8.00-16.00, mean error; S3)"),
        "slo": "TTFT p90 <= 5 s, ITL p90 <= 12 ms, >= 150 output tokens/s per call",
        "slo_misses": ["TTFT p90 6.0 s > 5 s", "143 output tokens/s per call < 150"],
    }
    # without an SLO (or an empty one) no SLO keys
    assert "slo" not in perf.as_dict(hand_prediction(), perf.Workload(isl=1, osl=1, concurrency=1))
    assert "slo_misses" not in perf.as_dict(hand_prediction(), perf.Workload(isl=1, osl=1, concurrency=1), perf.Slo())


def test_figure_and_time_lines_name_the_refusals_and_the_slo() -> None:
    work = perf.Workload(isl=3000, osl=1000, concurrency=20)
    assert perf.time_lines(hand_prediction(binding="none"), work, perf.Slo(ttft_p90_ms=6000.0)) == [
        "time: 20 call(s) of 3,000 in + 1,000 out arriving at once: bound by nothing (every stage keeps up), "
        "decode batch 12.3",
        "  TTFT p50 4.00 s (3.00-5.00, mean error; S1)",
        "  TTFT p90 6.00 s (5.00-7.00, mean error; S1)",
        "  ITL p50 7.00 ms (6.00-8.00, mean error; S2)",
        "  ITL p90 12.00 ms (8.00-16.00, mean error; S3)",
        "  2 call(s) refused by the router's queue (full or timed out); TTFT counts the rest",
        "  SLO (TTFT p90 <= 6 s): met",
    ]


def test_at_speed_divides_every_time_by_the_factor() -> None:
    pred = hand_prediction()
    # the simulator at twice the modelled speed: every time halved, calls per second doubled
    assert perf.at_speed(pred, 2.0) == hand_prediction(
        ttft_p50=Figure(2000.0, 1000.0, 0.5, f"S1; divided by 2, {SIM}"),
        ttft_p90=Figure(3000.0, 2000.0, 0.25, f"S1; divided by 2, {SIM}"),
        itl_p50=Figure(3.5, 2.0, 0.25, f"S2; divided by 2, {SIM}"),
        itl_p90=Figure(6.0, 4.0, 0.5, f"S3; divided by 2, {SIM}"),
        itl_full=Figure(10.0, 10.0, 0.5, f"S4; divided by 2, {SIM}"),
        ttft_steady=Figure(1500.0, 1500.0, 0.5, f"S5; divided by 2, {SIM}"),
        calls_per_s=1.0,
        terms=[Term("prefill of one prompt", 500.0, "S1"), Term("KV transfer", 25.0, "ours")],
    )
    # at half the speed: times doubled
    slow = perf.at_speed(pred, 0.5)
    assert (slow.ttft_p90.ms, slow.itl_p50.estimated_ms, slow.calls_per_s) == (12000.0, 8.0, 0.25)
    assert slow.itl_p90.source == f"S3; divided by 0.5, {SIM}"
    # no factor, or 1: the prediction itself
    assert perf.at_speed(pred, None) is pred
    assert perf.at_speed(pred, 1) is pred
    assert perf.at_speed(pred, 0.0) is pred


# ---------------------------------------------------------------- predicted_times


def test_predicted_times_take_a_shape_the_osl_and_the_slo(monkeypatch: pytest.MonkeyPatch) -> None:
    # no step source given: the default one (here the stub). One call of 4,000 tokens with 500 out: 3,500 in, one
    # pass of 1,000 ms; batch 1; 10 ms a step = 100 tokens/s. TTFT p90 1 s misses 999 ms.
    monkeypatch.setattr(perf, "default_steps", Stub)
    (one,) = perf.predicted_times(*production(), DSV4, [Shape(1, 4000)], osl=500, slo=perf.Slo(ttft_p90_ms=999.0))
    ttft_src = f"{MEASURED}; our model: bf16 index keys"
    assert one == {
        "shape": "1 parallel calls x 4,000 tokens",
        "calls": 1,
        "isl": 3500,
        "osl": 500,
        "binding": "none",
        "decode_batch": 1.0,
        "rejected": 0,
        "tokens_per_s_per_call": 100.0,
        "notes": [BAND_CITATION, VERSION],
        "ttft_p50": figure_dict(1000.0, 490.0, 1510.0, ttft_src, f"1.00 s (0.49-1.51, mean error; {ttft_src})"),
        "ttft_p90": figure_dict(1000.0, 490.0, 1510.0, ttft_src, f"1.00 s (0.49-1.51, mean error; {ttft_src})"),
        "itl_p50": figure_dict(
            10.0,
            6.9,
            13.1,
            f"{MEASURED}; our model: decode batch 1.0, bf16 index keys",
            f"10.00 ms (6.90-13.10, mean error; {MEASURED}; our model: decode batch 1.0, bf16 index keys)",
        ),
        "itl_p90": figure_dict(
            10.0,
            6.9,
            13.1,
            f"{MEASURED}; our model: decode p90 batch 1, bf16 index keys",
            f"10.00 ms (6.90-13.10, mean error; {MEASURED}; our model: decode p90 batch 1, bf16 index keys)",
        ),
        "slo": "TTFT p90 <= 999 ms",
        "slo_misses": ["TTFT p90 1.0 s > 999 ms"],
    }


def test_predicted_times_at_the_calls_length_where_the_kv_pool_binds() -> None:
    # 64 calls of 200,000 tokens (199,000 in): the fleet answer runs 55 of them at once per decode engine (the KV
    # pool binds below the 64 slots); the router admits 64.
    # Prefill: 199,000 / 8,192 -> 25 chunks of 4 ms = 100 ms a prompt, one prompt a pass; the 64 finish at
    # 100, 200, .. 6,400 ms: p50 (rank 31.5) 3,250 ms, p90 (rank 56.7) 5,700 + 70 = 5,770 ms; band +-51 %.
    # Decode engine: 55 / (1,000 x 10 ms) = 0.0055 calls/ms, below the demand 64 / (100 + 10,000) and the prefill's
    # 1 / 100: the decode engine binds, batch 55; p90 batch 55 (the running limit); 1,000 / 10 ms = 100 tokens/s.
    (found,) = perf.predicted_times(*production(), DSV4, ["64x200000"], steps=FastPrefill())
    ttft_src = f"{MEASURED}; our model: 25 chunks, queueing, bf16 index keys"
    assert found == {
        "shape": "64 parallel calls x 200,000 tokens",
        "calls": 64,
        "isl": 199_000,
        "osl": 1000,
        "binding": "decode engine",
        "decode_batch": 55.0,
        "rejected": 0,
        "tokens_per_s_per_call": 100.0,
        "notes": [BAND_CITATION, VERSION],
        "ttft_p50": figure_dict(3250.0, 1592.5, 4907.5, ttft_src, f"3.25 s (1.59-4.91, mean error; {ttft_src})"),
        "ttft_p90": figure_dict(5770.0, 2827.3, 8712.7, ttft_src, f"5.77 s (2.83-8.71, mean error; {ttft_src})"),
        "itl_p50": figure_dict(
            10.0,
            6.9,
            13.1,
            f"{MEASURED}; our model: decode batch 55.0, bf16 index keys",
            f"10.00 ms (6.90-13.10, mean error; {MEASURED}; our model: decode batch 55.0, bf16 index keys)",
        ),
        "itl_p90": figure_dict(
            10.0,
            6.9,
            13.1,
            f"{MEASURED}; our model: decode p90 batch 55, bf16 index keys",
            f"10.00 ms (6.90-13.10, mean error; {MEASURED}; our model: decode p90 batch 55, bf16 index keys)",
        ),
    }


# ---------------------------------------------------------------- the audit


def itl_text(batch: str) -> str:
    return f"10.00 ms (6.90-13.10, mean error; {MEASURED}; our model: {batch}, bf16 index keys)"


def test_the_audit_at_the_calls_lengths_and_the_measured_load() -> None:
    # The longest call: 524,286 tokens, 523,286 in = 64 chunks of 4 ms = 256 ms a prompt; the KV pool runs 21 such
    # calls on the decode engine: 21 / 10,000 ms binds, batch 21. The 64 admitted finish at 256, 512, ..: p50 32.5 x
    # 256 = 8,320 ms, p90 57.7 x 256 = 14,771.2 ms.
    # The typical call: 32,768 tokens, 31,768 in = 4 chunks = 16 ms a prompt; 64 slots: demand 64 / (16 + 10,000)
    # is below every stage: batch 64 x 10,000 / 10,016 = 63.9; p50 32.5 x 16 = 520 ms, p90 57.7 x 16 = 923.2 ms.
    # The load: 190,000 in + 10,000 out (200,000 tokens: 55 at once), 64 calls, the simulator at half speed:
    # 190,000 / 8,192 -> 24 chunks = 96 ms a prompt; decode 55 / (10,000 x 10 ms) binds, batch 55; TTFT p50
    # 32.5 x 96 = 3,120 ms, p90 57.7 x 96 = 5,539.2 ms; every time x 2 (divided by 0.5).
    found = perf.audit_predictions(
        *production(), DSV4, load=(190_000, 10_000, 64), steps=FastPrefill(), speed_factor=0.5
    )
    longest_src = f"{MEASURED}; our model: 64 chunks, queueing, bf16 index keys"
    typical_src = f"{MEASURED}; our model: 4 chunks, queueing, bf16 index keys"
    assert found["predicted"] == [
        {
            "shape": "the longest call, 64 x 524,286 tokens at the router's admission",
            "ttft_p50": f"8.32 s (4.08-12.56, mean error; {longest_src})",
            "ttft_p90": f"14.77 s (7.24-22.30, mean error; {longest_src})",
            "itl_p50": itl_text("decode batch 21.0"),
            "itl_p90": itl_text("decode p90 batch 21"),
            "binding": "decode engine",
        },
        {
            "shape": "a typical call, 64 x 32,768 tokens at the router's admission",
            "ttft_p50": f"0.52 s (0.25-0.79, mean error; {typical_src})",
            "ttft_p90": f"0.92 s (0.45-1.39, mean error; {typical_src})",
            "itl_p50": itl_text("decode batch 63.9"),
            "itl_p90": itl_text("decode p90 batch 64"),
            "binding": "none",
        },
    ]
    load_src = f"{MEASURED}; our model: 24 chunks, queueing, bf16 index keys; divided by 0.5, {SIM}"
    itl50 = f"{MEASURED}; our model: decode batch 55.0, bf16 index keys; divided by 0.5, {SIM}"
    itl90 = f"{MEASURED}; our model: decode p90 batch 55, bf16 index keys; divided by 0.5, {SIM}"
    assert found["at_load"] == {
        "calls": 64,
        "isl": 190_000,
        "osl": 10_000,
        "binding": "decode engine",
        "decode_batch": 55.0,
        "rejected": 0,
        "tokens_per_s_per_call": 50.0,  # 20 ms a step at half speed
        "notes": [BAND_CITATION, VERSION],
        "ttft_p50": figure_dict(6240.0, 3057.6, 9422.4, load_src, f"6.24 s (3.06-9.42, mean error; {load_src})"),
        "ttft_p90": figure_dict(
            11078.4, 5428.416, 16728.384, load_src, f"11.08 s (5.43-16.73, mean error; {load_src})"
        ),
        "itl_p50": figure_dict(20.0, 13.8, 26.2, itl50, f"20.00 ms (13.80-26.20, mean error; {itl50})"),
        "itl_p90": figure_dict(20.0, 13.8, 26.2, itl90, f"20.00 ms (13.80-26.20, mean error; {itl90})"),
        "workload": {"isl": 190_000, "osl": 10_000, "concurrency": 64},
        "speed_factor": 0.5,
    }


def test_the_audit_without_a_router_cap_asks_what_the_decode_fleet_runs() -> None:
    # no max_concurrent_requests: the calls are what the fleet answer runs at once of each length: 21 of the
    # longest (524,286 tokens), 64 of the typical 32,768 (the decode running slots)
    found = perf.audit_predictions(*without_router_cap(), DSV4, steps=None)
    assert found == {
        "predicted": [
            {
                "shape": "the longest call, 21 x 524,286 tokens at the router's admission",
                "unavailable": perf.NOT_PREDICTED,
            },
            {
                "shape": "a typical call, 64 x 32,768 tokens at the router's admission",
                "unavailable": perf.NOT_PREDICTED,
            },
        ],
        "at_load": {},  # no load asked: nothing, even without a step source
    }


def test_the_audit_uses_the_default_step_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(perf, "default_steps", Stub)
    found = perf.audit_predictions(*production(), DSV4)
    assert [p["binding"] for p in found["predicted"]] == ["prefill engine", "prefill engine"]
    assert found["at_load"] == {}


def test_the_audit_names_the_calls_the_routers_queue_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    # whatever the model reports refused follows the binding stage; none: the stage alone
    def canned(cases: Sequence[tuple[Any, Any]], steps: Any) -> list[Prediction]:
        return [hand_prediction(rejected=3), hand_prediction(rejected=0, binding="none")][: len(cases)]

    monkeypatch.setattr(perf, "predict_shapes", canned)
    found = perf.audit_predictions(*production(), DSV4, steps=Stub())
    common = {
        "ttft_p50": "4.00 s (3.00-5.00, mean error; S1)",
        "ttft_p90": "6.00 s (5.00-7.00, mean error; S1)",
        "itl_p50": "7.00 ms (6.00-8.00, mean error; S2)",
        "itl_p90": "12.00 ms (8.00-16.00, mean error; S3)",
    }
    assert found["predicted"] == [
        {
            "shape": "the longest call, 64 x 524,286 tokens at the router's admission",
            **common,
            "binding": "decode engine; 3 refused by the router's queue",
        },
        {"shape": "a typical call, 64 x 32,768 tokens at the router's admission", **common, "binding": "none"},
    ]


# ---------------------------------------------------------------- one request


def test_request_times_idle_and_at_the_admitted_concurrency() -> None:
    # 199,000 in + 1,000 out = 200,000 tokens: 25 chunks of 4 ms = 100 ms a prompt.
    # Idle: one call, TTFT 100 ms (band 49-151 ms), batch 1; its decode 1 / 10,000 ms keeps up with 1 / 10,100.
    # At the router's 64: 55 at once on the decode engine (the KV pool at 200,000 tokens) binds, batch 55;
    # TTFT p50 3,250 ms, p90 5,770 ms (see test_predicted_times_at_the_calls_length_where_the_kv_pool_binds).
    lines = perf.request_times(fleet_from_inventory(*production()), DSV4, 199_000, 1_000, FastPrefill())
    one_src = f"{MEASURED}; our model: 25 chunks, bf16 index keys"
    many_src = f"{MEASURED}; our model: 25 chunks, queueing, bf16 index keys"
    assert lines == [
        "idle fleet, time: 1 call(s) of 199,000 in + 1,000 out arriving at once: bound by nothing (every stage keeps "
        "up), decode batch 1.0",
        f"  TTFT p50 0.10 s (0.05-0.15, mean error; {one_src})",
        f"  TTFT p90 0.10 s (0.05-0.15, mean error; {one_src})",
        f"  ITL p50 {itl_text('decode batch 1.0')}",
        f"  ITL p90 {itl_text('decode p90 batch 1')}",
        "at the admitted concurrency (64, the router's max_concurrent_requests), time: 64 call(s) of 199,000 in + "
        "1,000 out arriving at once: bound by the decode engine, decode batch 55.0",
        f"  TTFT p50 3.25 s (1.59-4.91, mean error; {many_src})",
        f"  TTFT p90 5.77 s (2.83-8.71, mean error; {many_src})",
        f"  ITL p50 {itl_text('decode batch 55.0')}",
        f"  ITL p90 {itl_text('decode p90 batch 55')}",
    ]


def test_request_times_of_the_smallest_call_and_without_a_router_cap() -> None:
    # 1 in + 1 out (nothing below one token); the router's 64 admitted
    lines = perf.request_times(fleet_from_inventory(*production()), DSV4, 1, 1, Stub())
    assert lines[0].startswith("idle fleet, time: 1 call(s) of 1 in + 1 out arriving at once: ")
    assert lines[5].startswith(
        "at the admitted concurrency (64, the router's max_concurrent_requests), time: 64 call(s) of 1 in + 1 out "
        "arriving at once: "
    )
    # no router cap: the decode running slots (64 per engine, one engine) are the admitted concurrency
    lines = perf.request_times(fleet_from_inventory(*without_router_cap()), DSV4, 1100, 1000, Stub())
    assert lines[5].startswith(
        "at the admitted concurrency (64, the decode running slots), time: 64 call(s) of 1,100 in + 1,000 out "
        "arriving at once: "
    )
    assert perf.request_times(fleet_from_inventory(*production()), DSV4, 1, 1, None) == [perf.NOT_PREDICTED]


# ---------------------------------------------------------------- the planner's extra prefill hosts


def planned(calls: int, tokens: int, slo_ms: float, steps: Any = None, osl: int = 1000, **common: Any) -> Any:
    fleet = fleet_from_inventory(*production(**common))
    result = plan(fleet, DSV4, Shape(calls, tokens))
    # the first lever alone: more prefill engines as declared (the other levers have tests of their own)
    return perf.plan_in_time(
        result, fleet, DSV4, perf.Slo(ttft_p90_ms=slo_ms), steps or Stub(), osl, tried=lambda b: perf.levers(b)[:1]
    )


ADVERTISE = "gpu-node-01: sglang_advertise_host: 127.0.0.1 -> gpu-node-01 (an address the new hosts reach)"


def test_one_more_prefill_host_at_todays_chunk_size() -> None:
    # 20 calls of 3,000 in, 2 a pass of 1,000 ms: today p90 9.1 s. One more engine: 10 each, 1, 1, 2, 2, .. 5, 5 s:
    # p50 (rank 9.5) 3 s, p90 (rank 17.1) 5 s, which meets 5 s at today's 8,192. The chunk size stays.
    # Decode: demand 20 / 11,000 ms under every stage: batch 20 x 10,000 / 11,000 = 18.2; p90 batch: the 2-call
    # groups of 2 engines overlap 20 times over a call's decode, capped at the 20 calls.
    result = planned(20, 4000, 5000.0)
    (option,) = result.options
    assert option.title == "add 1 prefill host"
    assert option.diff_lines() == [
        "inventory: add host gpu-node-01-prefill2 (a copy of gpu-node-01's prefill engine, 1 of 1) to group "
        "sglang_prefill",
        ADVERTISE,
    ]
    src = f"{MEASURED}; our model: queueing, bf16 index keys"
    assert option.times == [
        "time: 20 call(s) of 3,000 in + 1,000 out arriving at once: bound by nothing (every stage keeps up), "
        "decode batch 18.2",
        f"  TTFT p50 3.00 s (1.47-4.53, mean error; {src})",
        f"  TTFT p90 5.00 s (2.45-7.55, mean error; {src})",
        f"  ITL p50 {itl_text('decode batch 18.2')}",
        f"  ITL p90 {itl_text('decode p90 batch 20')}",
        "  SLO (TTFT p90 <= 5 s): met",
    ]
    assert option.meets_slo is True and result.refused == []


def test_the_added_option_is_predicted_at_the_asked_output_length() -> None:
    # 500 out: 3,500 in, still 2 a pass: the same TTFTs; decode demand 20 / (1,000 + 5,000) ms: batch 16.7
    result = planned(20, 4000, 5000.0, osl=500)
    (option,) = result.options
    assert option.title == "add 1 prefill host"
    src = f"{MEASURED}; our model: queueing, bf16 index keys"
    assert option.times == [
        "time: 20 call(s) of 3,500 in + 500 out arriving at once: bound by nothing (every stage keeps up), "
        "decode batch 16.7",
        f"  TTFT p50 3.00 s (1.47-4.53, mean error; {src})",
        f"  TTFT p90 5.00 s (2.45-7.55, mean error; {src})",
        f"  ITL p50 {itl_text('decode batch 16.7')}",
        f"  ITL p90 {itl_text('decode p90 batch 20')}",
        "  SLO (TTFT p90 <= 5 s): met",
    ]


def test_two_more_prefill_hosts_and_a_larger_chunk() -> None:
    # 6 calls of 32,769 in: 2 chunks of 32,768 (2 s), 3 of 16,384 (3 s), 5 of 8,192 (5 s). One more engine:
    # 3 calls each, p90 6 s at best. Two more: 2 each at 32,768, ends 2, 2, 2, 4, 4, 4 s: p90 4 s meets 4 s.
    # max_prefill_tokens 32,768 lets the chunk be 32,768.
    result = planned(6, 33_769, 4000.0, max_prefill_tokens=32_768)
    (option,) = result.options
    assert option.title == "add 2 prefill hosts, chunked_prefill_size 32768"
    assert option.diff_lines()[-1] == "sglang_prefill.chunked_prefill_size: 8192 -> 32768"
    assert (
        option.times[2]
        == f"  TTFT p90 4.00 s (1.96-6.04, mean error; {MEASURED}; our model: 2 chunks, queueing, bf16 index keys)"
    )


def test_a_chunk_size_the_validation_refuses_is_passed_over() -> None:
    # As above, but max_prefill_tokens 16,384 refuses chunk 32,768: 2 more hosts at 32,768 are refused, and the
    # first that meets 4 s at 16,384 (3 s a prompt) is 5 more: 6 engines, one call each, 3 s.
    result = planned(6, 33_769, 4000.0)
    (option,) = result.options
    assert option.title == "add 5 prefill hosts, chunked_prefill_size 16384"
    assert (
        option.times[2]
        == f"  TTFT p90 3.00 s (1.47-4.53, mean error; {MEASURED}; our model: 3 chunks, bf16 index keys)"
    )


def test_up_to_48_more_prefill_hosts() -> None:
    # 54 calls of 32,769 in at 2 s a prompt (chunk 32,768): p90 at rank 47.7 needs 49 engines done in the first
    # pass: 48 more hosts. With 47 more: 2 + 2 x 0.7 = 3.4 s.
    result = planned(54, 33_769, 2000.0, max_prefill_tokens=32_768)
    (option,) = result.options
    assert option.title == "add 48 prefill hosts, chunked_prefill_size 32768"
    assert option.diff_lines() == [
        "inventory: add hosts gpu-node-01-prefill2 .. gpu-node-01-prefill49 to group sglang_prefill "
        "(48 copies of gpu-node-01's prefill engine)",
        ADVERTISE,
        "sglang_prefill.chunked_prefill_size: 8192 -> 32768",
    ]
    assert option.times[0] == (
        "time: 54 call(s) of 32,769 in + 1,000 out arriving at once: bound by nothing (every stage keeps up), "
        "decode batch 45.0"
    )


def test_no_option_within_48_more_prefill_hosts() -> None:
    # 55 calls: p90 at rank 48.6 needs 50 engines (49 more). The best within 48 more: 49 engines at 32,768,
    # ends 49 x 2 s and 6 x 4 s: 2 + 2 x 0.6 = 3.2 s (band 1.57-4.83); its decode p90 batch the 55 calls.
    result = planned(55, 33_769, 2000.0, max_prefill_tokens=32_768)
    assert result.options == []
    assert result.refused == [
        "today's fleet, more prefill engines: no option within 48 prefill hosts and chunk sizes 8192, 16384, 32768 "
        "meets the SLO "
        f"(TTFT p90 <= 2 s); the best gives TTFT p90 3.20 s (1.57-4.83, mean error; {MEASURED}; our "
        f"model: 2 chunks, queueing, "
        f"bf16 index keys), ITL p90 {itl_text('decode p90 batch 55')}"
    ]


def test_more_prefill_hosts_on_top_of_an_answer() -> None:
    # 65 calls of 4,000 tokens do not fit today (64 slots): the answer admits 65. It misses TTFT p90 10 s; on top of
    # it one more prefill host at 16,384 (5 prompts a pass): ends 1 .. 6 s ten times, then 7 s: p90 (rank 57.6) 6 s.
    result = planned(65, 4000, 10_000.0)
    more, admit = result.options  # the one that meets the SLO has the goodput: it ranks first
    assert (admit.title, admit.meets_slo) == ("admit more calls", False)
    assert more.title == "add 1 prefill host, chunked_prefill_size 16384"
    assert more.diff_lines() == [
        "inventory: add host gpu-node-01-prefill2 (a copy of gpu-node-01's prefill engine, 1 of 1) to group "
        "sglang_prefill",
        "sglang_decode.max_running_requests: 64 -> 65",
        "sglang_router.max_concurrent_requests: 64 -> 65",
        ADVERTISE,
        "sglang_prefill.chunked_prefill_size: 8192 -> 16384",
    ]
    assert more.meets_slo is True
    assert (
        more.times[2] == f"  TTFT p90 6.00 s (2.94-9.06, mean error; {MEASURED}; our model: queueing, bf16 index keys)"
    )


def test_no_option_on_top_of_an_answer() -> None:
    # 500 ms is below one pass (1 s): nothing meets it. The best: the first of the grid with every call done in the
    # first pass: 5 more hosts at 32,768 (10 prompts a pass, 60 of the 65 calls in the first pass: p90 1 s);
    # its decode p90 batch: the answer's 65 running slots.
    result = planned(65, 4000, 500.0)
    assert [o.title for o in result.options] == ["admit more calls"]
    assert result.refused == [
        "admit more calls, more prefill engines: no option within 48 prefill hosts and chunk sizes 8192, 16384, "
        "32768 meets the SLO "
        f"(TTFT p90 <= 500 ms); the best gives TTFT p90 1.00 s (0.49-1.51, mean error; {MEASURED}; our "
        f"model: queueing, bf16 index "
        f"keys), ITL p90 {itl_text('decode p90 batch 65')}"
    ]


@pytest.mark.parametrize("fail_at", [2, 3])
def test_the_step_source_failing_while_adding_prefill_hosts(fail_at: int) -> None:
    # round 1 predicts today's fleet; round 2 the grid of extra hosts; round 3 the option found
    result = planned(20, 4000, 5000.0, steps=FailingAt(fail_at))
    assert result.options == []
    assert result.refused == ["time: not predicted (the estimator exited 1)"]
    assert result.today_times[2].startswith("  TTFT p90 9.10 s (")


def test_the_planner_without_an_slo_adds_nothing() -> None:
    fleet = fleet_from_inventory(*production())
    result = perf.plan_in_time(plan(fleet, DSV4, Shape(20, 4000)), fleet, DSV4, None, Stub())
    assert result.options == [] and result.refused == [] and result.slo == ""
    assert result.today_meets_slo is None
    # 2 prompts a pass of 1 s: 0.002 calls/ms; decode 20 / 10,000 ms: 0.002; the demand 20 / 11,000 ms is below
    # both: batch 20 x 10,000 / 11,000 = 18.2
    assert result.today_times[0] == (
        "time: 20 call(s) of 3,000 in + 1,000 out arriving at once: bound by nothing (every stage keeps up), "
        "decode batch 18.2"
    )
    assert len(result.today_times) == 5  # no SLO line


def test_workload_splits_a_call_into_prompt_and_output() -> None:
    assert perf.workload(3, 4000) == perf.Workload(isl=3000, osl=1000, concurrency=3)
    assert perf.workload(0, 500, 1000) == perf.Workload(isl=1, osl=499, concurrency=1)
    assert perf.workload(2, 2, 0) == perf.Workload(isl=1, osl=1, concurrency=2)


def test_the_p90_batch_of_a_steady_batch_of_one_is_one() -> None:
    # One prefill engine, one decode engine; a 200,000-token prompt is 25 chunks of 1,000 ms, so a call reaches
    # decode every 25 s and decodes its 1,000 tokens in 10 s: one call at a time. The steady batch (found to within
    # a millionth of a call) is 1, and so is the batch at the 90th percentile: no second call overlaps the first.
    hostvars, groups = production()
    shape = perf.fleet_shape_of(hostvars, groups, DSV4, 200_000)
    [pred] = perf.predict_shapes([(shape, perf.workload(63, 200_000))], Stub())
    assert pred.decode_batch == pytest.approx(1.0, abs=1e-6)
    assert pred.itl_p50.source == "stub (100% measured); our model: decode batch 1.0, bf16 index keys"
    assert pred.itl_p90.source == "stub (100% measured); our model: decode p90 batch 1, bf16 index keys"
    assert (pred.itl_p50.ms, pred.itl_p90.ms) == (10.0, 10.0)
