"""The audit's time model at the measured load (sglang_perf_fleet.audit_predictions, at_speed): the declared shapes
and the measured workload in one round, divided by the simulator's speed factor where it applies. The stub step
source of test_perf_fleet.py: every prefill pass 1,000 ms, every decode step 10 ms, the KV transfer free."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_perf_fleet as perf
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import DecodeQuery, PrefillQuery, StepTime
from test_perf_fleet import DSV4, Stub, production


class Counting(Stub):
    def __init__(self) -> None:
        self.rounds = 0

    def prefill(self, queries: Sequence[PrefillQuery]) -> list[StepTime]:
        self.rounds += 1
        return super().prefill(queries)

    def decode(self, queries: Sequence[DecodeQuery]) -> list[StepTime]:
        return super().decode(queries)


def test_one_round_answers_the_declared_shapes_and_the_measured_load() -> None:
    steps = Counting()
    found = perf.audit_predictions(*production(), DSV4, load=(3000, 1000, 1), steps=steps, speed_factor=4.0)
    assert steps.rounds == 1
    assert found["predicted"] == perf.audit_predictions(*production(), DSV4, steps=Stub())["predicted"]
    at_load = found["at_load"]
    assert (at_load["workload"], at_load["speed_factor"]) == ({"isl": 3000, "osl": 1000, "concurrency": 1}, 4.0)
    # one call of 3,000 in: one pass of 1,000 ms, 10 ms a step; divided by 4
    assert (at_load["ttft_p50"]["ms"], at_load["itl_p50"]["ms"]) == (pytest.approx(250.0), pytest.approx(2.5))
    assert at_load["ttft_p50"]["text"] == (
        "0.25 s (0.12-0.38, mean error; stub (100% measured); our model: bf16 index keys; divided by 4, "
        "the simulator's "
        "SGLANG_SIM_SPEED_FACTOR)"
    )


def test_real_engines_keep_the_models_time() -> None:
    found = perf.audit_predictions(*production(), DSV4, load=(3000, 1000, 1), steps=Stub())
    assert (found["at_load"]["ttft_p50"]["ms"], found["at_load"]["speed_factor"]) == (pytest.approx(1000.0), None)


def test_without_a_step_source_or_a_load() -> None:
    found = perf.audit_predictions(*production(), DSV4, load=(3000, 1000, 1), steps=None)  # no estimator venv here
    assert found["at_load"] == {"unavailable": perf.NOT_PREDICTED}
    assert perf.audit_predictions(*production(), DSV4, steps=Stub())["at_load"] == {}


class Recording(Stub):
    def __init__(self) -> None:
        self.asked: list[object] = []

    def prefill(self, queries: Sequence[PrefillQuery]) -> list[StepTime]:
        self.asked += queries
        return super().prefill(queries)

    def decode(self, queries: Sequence[DecodeQuery]) -> list[StepTime]:
        self.asked += queries
        return super().decode(queries)


def test_two_windows_of_a_steady_load_ask_the_estimator_the_same_steps() -> None:
    # 1,542 and 1,519 prompt tokens, 318 and 322 output tokens: both 1,500 + 320 to two figures, so the second
    # audit's steps are the first's (answered from the estimator's cache)
    first, second = Recording(), Recording()
    one = perf.audit_predictions(*production(), DSV4, load=(1542, 318, 3), steps=first)
    two = perf.audit_predictions(*production(), DSV4, load=(1519, 322, 3), steps=second)
    assert first.asked == second.asked
    assert one["at_load"]["workload"] == two["at_load"]["workload"] == {"isl": 1500, "osl": 320, "concurrency": 3}
    # a load that moved beyond the grid asks anew
    third = Recording()
    perf.audit_predictions(*production(), DSV4, load=(1650, 318, 3), steps=third)
    assert third.asked != first.asked


@pytest.mark.parametrize(
    ("tokens", "grid"), [(1542, 1500), (1550, 1600), (32, 32), (7, 7), (0, 1), (524288, 520000), (99_999, 100_000)]
)
def test_token_counts_go_to_two_significant_figures(tokens: int, grid: int) -> None:
    assert perf.two_figures(tokens) == grid
