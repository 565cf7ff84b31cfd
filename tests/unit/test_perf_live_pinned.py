"""The live fleet as a step source (plugin_utils/sglang_perf_live.py) on hand-made measurements: the figures and the
words of their basis, what is missing and what to do then, the answers with and without a shape source (the queries
it is asked, the scale it takes), and the audit reports it reads. Every expected value is worked out by hand.

The hand measurement: prefill engines 10 requests of 1,000 prompt tokens at a TTFT mean of 0.5 s (2,000 tokens/s);
decode engines (two) 20 requests of 900 prompt and 100 generated tokens, 8 running (4 an engine), an ITL mean of
31.25 ms over 2,020 tokens; context 900 + 100 / 2 = 950."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import DecodeQuery, PrefillQuery, StepTime
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_live import (
    LiveFigures,
    LiveFiguresMissing,
    LiveSteps,
    live_steps,
    measured_of,
)

PREFILL_BASIS = "1,000 prompt tokens per request over a TTFT mean of 0.500 s on the prefill engines (10 requests)"
FIGURES = LiveFigures(
    prefill_tokens_per_s=2000.0,
    prompt_tokens=1000.0,
    decode_step_ms=31.25,
    batch=4.0,
    context=950,
    prefill_basis=PREFILL_BASIS,
    decode_basis="the ITL mean of 2,020 tokens at batch 4 and context 950",
    source="A; B",
    at="T",
)


def hand(prefill: dict[str, Any] | None = None, decode: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    """The hand measurement, its roles' figures changed by `prefill` and `decode` (None values dropped)."""
    p = {"source": "A", "requests": 10, "prompt_tokens_per_request": 1000.0, "ttft": {"count": 10, "mean_s": 0.5}}
    d = {
        "source": "B",
        "requests": 20,
        "prompt_tokens_per_request": 900.0,
        "generation_tokens_per_request": 100.0,
        "engines": ["h1", "h2"],
        "running": 8,
        "itl": {"count": 2020, "mean_s": 0.03125},
    }
    p = {k: v for k, v in {**p, **(prefill or {})}.items() if v is not None}
    d = {k: v for k, v in {**d, **(decode or {})}.items() if v is not None}
    return {"at": "T", "window": "", "roles": {"prefill": p, "decode": d}, "notes": [], **top}


# ---------------------------------------------------------------- the figures


def test_the_figures_of_a_measurement() -> None:
    assert LiveFigures.of(hand()) == FIGURES


def test_one_source_is_named_once() -> None:
    assert LiveFigures.of(hand({"source": "S"}, {"source": "S"})).source == "S"


def test_without_itl_the_step_is_e2e_less_ttft_over_the_later_tokens() -> None:
    decode = {
        "itl": None,
        "requests": 1234,
        "generation_tokens_per_request": 1001.0,
        "e2e": {"count": 1234, "mean_s": 3.5},
        "ttft": {"count": 1234, "mean_s": 0.5},
    }
    found = LiveFigures.of(hand(decode=decode))
    # (3.5 - 0.5) s over 1,000 tokens; context 900 + 1,001 / 2 = 1,400.5, rounded half to even
    assert (found.decode_step_ms, found.context) == (3.0, 1400)
    assert found.decode_basis == (
        "(E2E mean - TTFT mean) / 1,000 tokens of 1,234 requests (no ITL histogram) at batch 4 and context 1,400"
    )


def test_two_output_tokens_give_the_step_from_e2e_and_ttft() -> None:
    # one token after the first: (0.8 - 0.5) s over 1 token = 300 ms
    decode = {"itl": None, "generation_tokens_per_request": 2.0, "e2e": {"mean_s": 0.8}, "ttft": {"mean_s": 0.5}}
    assert LiveFigures.of(hand(decode=decode)).decode_step_ms == pytest.approx(300.0)


def test_an_itl_mean_of_zero_is_no_itl() -> None:
    decode = {"itl": {"count": 0, "mean_s": 0}, "e2e": {"mean_s": 0.599}, "ttft": {"mean_s": 0.0}, "requests": 3}
    found = LiveFigures.of(hand(decode=decode, at=None))
    # a TTFT mean of 0 still gives the step: 0.599 s over 99 tokens
    assert found.decode_step_ms == pytest.approx(599 / 99)
    assert found.decode_basis == (
        "(E2E mean - TTFT mean) / 99 tokens of 3 requests (no ITL histogram) at batch 4 and context 950"
    )
    assert found.at == "?"


def test_the_defaults_of_a_sparse_measurement() -> None:
    decode = {
        "requests": 5,
        "prompt_tokens_per_request": None,
        "generation_tokens_per_request": None,
        "engines": None,
        "running": None,
        "itl": {"count": 7, "mean_s": 0.03125},
    }
    found = LiveFigures.of(hand(decode=decode))
    # one output token, the prefill engines' 1,000 prompt tokens, one engine, batch at least 1: context 1,000.5 -> 1,000
    assert (found.batch, found.context) == (1.0, 1000)
    assert found.decode_basis == "the ITL mean of 7 tokens at batch 1 and context 1,000"


def test_the_context_is_at_least_one_token() -> None:
    # no prompt tokens counted anywhere and one output token: 0 + 1 / 2 = 0.5, rounded half to even to 0, raised to 1
    measured = hand(
        {"prompt_tokens_per_request": 0.0}, {"prompt_tokens_per_request": None, "generation_tokens_per_request": 1.0}
    )
    assert LiveFigures.of(measured).context == 1


def test_the_batch_is_running_requests_per_engine_at_least_one() -> None:
    assert LiveFigures.of(hand(decode={"running": 1})).batch == 1.0  # 0.5 an engine
    assert LiveFigures.of(hand(decode={"running": 9, "engines": ["h1", "h2", "h3"]})).batch == 3.0
    assert LiveFigures.of(hand(decode={"running": 6, "engines": []})).batch == 6.0


NO_PREFILL = (
    "no finished request with a TTFT on the prefill engines: send traffic through the router, then rerun "
    "ansible-playbook audit.yml"
)
NO_DECODE = "no finished request on the decode engines: send traffic through the router, then rerun the audit"
NO_STEP = (
    "the decode engines publish no inter-token latency, and their E2E and TTFT do not give one (a request of more "
    "than one output token is needed)"
)


@pytest.mark.parametrize(
    ("measured", "message"),
    [
        ({}, NO_PREFILL),
        ({"roles": None}, NO_PREFILL),
        (hand({"requests": 0}), NO_PREFILL),
        (hand({"ttft": None}), NO_PREFILL),
        (hand({"ttft": {"count": 10, "mean_s": 0}}), NO_PREFILL),
        (hand(decode={"requests": 0}), NO_DECODE),
        (hand(decode={"requests": None}), NO_DECODE),
        (hand(decode={"itl": None}), NO_STEP),
        (hand(decode={"itl": None, "e2e": {"mean_s": 1.0}}), NO_STEP),  # no TTFT on the decode engines
        (hand(decode={"itl": None, "e2e": {"mean_s": 0}, "ttft": {"mean_s": 0.1}}), NO_STEP),
        (
            hand(
                decode={
                    "itl": None,
                    "e2e": {"mean_s": 1.0},
                    "ttft": {"mean_s": 0.1},
                    "generation_tokens_per_request": 1,
                }
            ),
            NO_STEP,
        ),
        (
            hand(
                decode={
                    "itl": None,
                    "e2e": {"mean_s": 1.0},
                    "ttft": {"mean_s": 0.1},
                    "generation_tokens_per_request": None,
                }
            ),
            NO_STEP,
        ),
    ],
)
def test_what_is_missing_is_said(measured: dict[str, Any], message: str) -> None:
    with pytest.raises(LiveFiguresMissing) as caught:
        LiveFigures.of(measured)
    assert str(caught.value) == message


def test_missing_figures_are_a_value_error() -> None:
    assert issubclass(LiveFiguresMissing, ValueError)


# ---------------------------------------------------------------- the answers


def live(ms: float) -> StepTime:
    return StepTime(ms, ms, 0.0, 0.0, 0.0, "live fleet (measured T)", "live")


def test_describe() -> None:
    head = (
        f"live fleet (prefill 2,000 tokens/s per engine: {PREFILL_BASIS}; decode 31.25 ms per step: the ITL mean of "
        "2,020 tokens at batch 4 and context 950; A; B; measured T; "
    )
    assert LiveSteps(FIGURES).describe() == (
        head + "prefill time proportional to its tokens, the decode step the same at any batch and context)"
    )
    assert LiveSteps(FIGURES, Plain()).describe() == (
        head + "scaled to the estimator's growth with batch, context and prefix)"
    )


def test_proportional_answers() -> None:
    steps = LiveSteps(FIGURES)
    # 2 tokens a ms: 3 x 1,000 tokens in 1,500 ms, 1 token in 0.5 ms, at least one token a prompt
    prefills = [
        PrefillQuery("m", 4, 4, 1000, 0, 3),
        PrefillQuery("m", 4, 4, 1000, 999, 1),
        PrefillQuery("m", 4, 4, 7, 7, 2),
    ]
    assert steps.prefill(prefills) == [live(1500.0), live(0.5), live(1.0)]
    assert steps.decode([DecodeQuery("m", 4, 4, 100, 1), DecodeQuery("m", 4, 4, 9000, 64)]) == [live(31.25)] * 2
    assert steps.both([], []) == ([], [])
    assert steps.scale == {}


class Plain:
    """A shape source asked apart: prefill (isl - prefix) x batch / 100 ms, decode 2 ms a sequence; writes down
    what it was asked."""

    def __init__(self) -> None:
        self.prefills: list[list[PrefillQuery]] = []
        self.decodes: list[list[DecodeQuery]] = []

    def prefill(self, queries: Sequence[PrefillQuery]) -> list[StepTime]:
        self.prefills.append(list(queries))
        return [StepTime((q.isl - q.prefix) * q.batch / 100, 0.0, 0.0, 0.0, 0.0, "shape") for q in queries]

    def decode(self, queries: Sequence[DecodeQuery]) -> list[StepTime]:
        self.decodes.append(list(queries))
        return [StepTime(2.0 * q.batch, 0.0, 0.0, 0.0, 0.0, "shape") for q in queries]


class Batched(Plain):
    def __init__(self) -> None:
        super().__init__()
        self.rounds = 0

    def both(
        self, prefills: Sequence[PrefillQuery], decodes: Sequence[DecodeQuery]
    ) -> tuple[list[StepTime], list[StepTime]]:
        self.rounds += 1
        return Plain.prefill(self, prefills), Plain.decode(self, decodes)


P = PrefillQuery("m", 4, 4, 2000, 0, 1)
D = DecodeQuery("n", 8, 8, 5000, 2)


@pytest.mark.parametrize("kind", [Plain, Batched])
def test_shaped_answers_scale_the_shape_to_the_measured_points(kind: type[Plain]) -> None:
    shape = kind()  # a fresh recorder each run
    steps = LiveSteps(FIGURES, shape)
    # measured: 1,000 tokens in 500 ms where the shape says 10 (x 50); a step of 31.25 ms at batch 4 where it says 8
    assert steps.both([P], [D]) == ([live(20.0 * 50)], [live(4.0 * 31.25 / 8)])
    assert steps.scale == {"prefill": 50.0, "decode": 3.90625}
    assert shape.prefills == [[P, PrefillQuery("m", 4, 4, 1000, 0, 1)]]
    assert shape.decodes == [[D, DecodeQuery("n", 8, 8, 950, 4)]]
    if isinstance(shape, Batched):
        assert shape.rounds == 1


def test_every_query_of_a_round_is_scaled_and_the_measured_points_are_not_answered() -> None:
    # three prefills and three decodes in one round: the shape's times x 50 (prefill) and x 3.90625 (decode), and
    # the two measured points the round adds are left out of the answer
    shape = Plain()
    p2, p3 = PrefillQuery("m", 4, 4, 3000, 1000, 2), PrefillQuery("m", 4, 4, 600, 0, 1)
    d2, d3 = DecodeQuery("n", 8, 8, 5000, 8), DecodeQuery("n", 8, 8, 9000, 1)
    prefills, decodes = LiveSteps(FIGURES, shape).both([P, p2, p3], [D, d2, d3])
    assert prefills == [live(20.0 * 50), live(40.0 * 50), live(6.0 * 50)]
    assert decodes == [live(4.0 * 3.90625), live(16.0 * 3.90625), live(2.0 * 3.90625)]


def test_the_measured_points_take_the_model_of_the_first_query() -> None:
    shape = Plain()
    assert LiveSteps(FIGURES, shape).decode([D]) == [live(15.625)]
    assert shape.prefills == [[PrefillQuery("n", 8, 8, 1000, 0, 1)]]
    shape = Plain()
    assert LiveSteps(FIGURES, shape).prefill([P]) == [live(1000.0)]
    assert shape.decodes == [[DecodeQuery("m", 4, 4, 950, 4)]]


def test_nothing_asked_asks_the_shape_nothing() -> None:
    shape = Batched()
    assert LiveSteps(FIGURES, shape).both([], []) == ([], [])
    assert (shape.rounds, shape.prefills, shape.decodes) == (0, [], [])


def test_the_measured_points_are_at_least_one_token_and_one_sequence() -> None:
    small = LiveFigures(2000.0, 0.4, 31.25, 0.4, 1, "", "", "", "T")
    shape = Plain()
    LiveSteps(small, shape).both([P], [D])
    assert shape.prefills[0][-1] == PrefillQuery("m", 4, 4, 1, 0, 1)
    assert shape.decodes[0][-1] == DecodeQuery("n", 8, 8, 1, 1)


# ---------------------------------------------------------------- the audit's report


def write(folder: Path, measured: Any, raw: str | None = None) -> Path:
    folder.mkdir(parents=True)
    report = folder / "audit.json"
    report.write_text(raw if raw is not None else json.dumps({"fleet": {"measured_time": measured}}))
    return report


def measured_on(*hosts: str) -> dict[str, Any]:
    found = hand()
    found["roles"]["prefill"]["engines"] = [hosts[0]]
    found["roles"]["decode"]["engines"] = list(hosts)
    return found


@pytest.mark.parametrize("measured", [None, [], {}, {"roles": {}}, {"at": "T"}])
def test_a_report_without_a_measurement(tmp_path: Path, measured: Any) -> None:
    report = write(tmp_path / "audit-1", measured)
    with pytest.raises(LiveFiguresMissing) as caught:
        measured_of(report, ["h1"])
    assert str(caught.value) == (
        f"{report} holds no measured latency (an audit older than the latency figures, or no engine published "
        "/metrics); fix: rerun ansible-playbook audit.yml"
    )


def test_a_report_without_a_fleet(tmp_path: Path) -> None:
    report = write(tmp_path / "audit-1", None, raw="{}")
    with pytest.raises(LiveFiguresMissing, match="holds no measured latency"):
        measured_of(report, ["h1"])


def test_a_report_of_another_fleet(tmp_path: Path) -> None:
    report = write(tmp_path / "audit-1", measured_on("h1", "lab3", "lab2"))
    with pytest.raises(LiveFiguresMissing) as caught:
        measured_of(report, ["h1", "h9"])
    assert str(caught.value) == (
        f"{report} measured engines on lab2, lab3, which this inventory does not declare: it is another fleet's "
        "audit; fix: pass --from-live <this inventory's report folder>"
    )


def test_a_report_of_this_fleet(tmp_path: Path) -> None:
    report = write(tmp_path / "audit-1", measured_on("h1", "h2"))
    assert measured_of(report, ["h2", "h1", "h3"]) == measured_on("h1", "h2")


def test_live_steps_from_a_folder_or_its_file(tmp_path: Path) -> None:
    report = write(tmp_path / "audit-1", measured_on("h1", "h2"))
    shape = Plain()
    from_folder = live_steps(str(tmp_path / "audit-1"), tmp_path / "elsewhere", ["h1", "h2"], shape)
    assert (from_folder.figures, from_folder.shape) == (FIGURES, shape)
    from_file = live_steps(report, tmp_path / "elsewhere", ["h1", "h2"])
    assert (from_file.figures, from_file.shape) == (FIGURES, None)


@pytest.mark.parametrize("name", ["nothing-here", "empty-folder"])
def test_live_steps_from_a_path_without_a_report(tmp_path: Path, name: str) -> None:
    (tmp_path / "empty-folder").mkdir()
    path = str(tmp_path / name)
    with pytest.raises(LiveFiguresMissing) as caught:
        live_steps(path, tmp_path, ["h1"])
    assert str(caught.value) == f"{path}: no audit report there (audit.json); fix: ansible-playbook audit.yml"


def test_live_steps_take_the_newest_report_of_this_fleet(tmp_path: Path) -> None:
    write(tmp_path / "audit-20261201T000000Z", measured_on("h1"))
    busy = measured_on("h1")
    busy["roles"]["decode"]["running"] = 12
    write(tmp_path / "audit-20261202T000000Z", busy)
    write(tmp_path / "audit-20261203T000000Z", measured_on("lab2"))  # another fleet's
    write(tmp_path / "audit-20261204T000000Z", None, raw="{not json")  # unreadable
    write(tmp_path / "audit-20261205T000000Z", {"roles": {}})  # no measurement
    write(tmp_path / "other-20261206T000000Z", measured_on("h1", "h2"))  # not an audit folder
    found = live_steps(None, tmp_path, ["h1"])
    assert found.figures.batch == 12.0  # the newest readable report of this fleet: 12 running on its one engine
    assert found.shape is None
    shape = Plain()
    assert live_steps(None, tmp_path, ["h1"], shape).shape is shape  # the shape source goes with the found report


def test_the_newest_report_of_this_fleet_without_a_request_is_said(tmp_path: Path) -> None:
    write(tmp_path / "audit-20261201T000000Z", measured_on("h1"))
    idle = measured_on("h1")
    idle["roles"]["decode"]["requests"] = 0
    write(tmp_path / "audit-20261202T000000Z", idle)
    with pytest.raises(LiveFiguresMissing, match="no finished request on the decode engines"):
        live_steps(None, tmp_path, ["h1"])


def test_live_steps_without_a_report_of_this_fleet(tmp_path: Path) -> None:
    write(tmp_path / "audit-1", measured_on("lab2"))
    with pytest.raises(LiveFiguresMissing) as caught:
        live_steps("", tmp_path, ["h1", "h2"])
    assert str(caught.value) == (
        f"no audit report under {tmp_path} measured this fleet's engines (h1, h2); fix: ansible-playbook audit.yml "
        "-i <inventory> with traffic on the fleet, or pass --from-live <report folder>"
    )
