"""The CLI's time model switch (cli/sglang_envelope_cli/commands.time_steps and --no-time), the predicted times an
admitted `check-request` prints, and how `plan` names its step source (steps_origin), pinned as whole outputs. The
step sources are stand-ins that fail with a known reason, so the printed line shows which source the command asked."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import sglang_envelope_cli.commands as cli
import yaml
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_perf_fleet
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import (
    DecodeQuery,
    PrefillQuery,
    StepSource,
    StepTime,
)
from shipped import shipped_inventory

# The command module's own time_steps, taken before the unit tests' autouse fixture replaces it.
TIME_STEPS = cli.time_steps

PROD = "inventories/production"
ADMITTED = (
    "1000 input + 10 new tokens: admitted: 64 like it run at once; the next 256 wait in the router's queue (up to "
    "queue_timeout_secs=60, then 'timed out waiting for an admission slot'); beyond that smg answers 429 'admission "
    "queue is at capacity'\n"
)


class OfflineSteps:
    """A step source whose estimator cannot be reached."""

    def prefill(self, queries: Sequence[PrefillQuery]) -> list[StepTime]:
        raise RuntimeError("estimator offline\nsecond line")

    def decode(self, queries: Sequence[DecodeQuery]) -> list[StepTime]:
        raise RuntimeError("estimator offline\nsecond line")


def test_time_steps_is_the_default_source_with_time_on_and_none_without(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the time model on, the step source is perf.default_steps(); with --no-time there is none."""
    source = OfflineSteps()
    monkeypatch.setattr(sglang_perf_fleet, "default_steps", lambda: source)
    monkeypatch.setitem(cli._TIME, "on", True)
    assert TIME_STEPS() is source
    monkeypatch.setitem(cli._TIME, "on", False)
    assert TIME_STEPS() is None


def test_an_admitted_request_prints_the_times_of_the_step_source_asked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """check-request asks time_steps() for its source: the failing source's first line is the time printed."""
    monkeypatch.setattr(cli, "time_steps", OfflineSteps)
    rc = cli.main(["check-request", "-i", PROD, "--input-tokens", "1000", "--max-new-tokens", "10"])
    assert (rc, *capsys.readouterr()) == (0, ADMITTED + "  time: not predicted (estimator offline)\n", "")


def test_no_time_switches_the_time_model_off_for_the_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same request with the command's own time_steps: the default source without --no-time, none with it
    ("not predicted (make perf-venv)"); the switch holds for that command only."""
    monkeypatch.setattr(cli, "time_steps", TIME_STEPS)
    monkeypatch.setattr(sglang_perf_fleet, "default_steps", OfflineSteps)
    monkeypatch.setitem(cli._TIME, "on", True)
    argv = ["check-request", "-i", PROD, "--input-tokens", "1000", "--max-new-tokens", "10"]
    assert cli.main(["--no-time", *argv]) == 0
    assert capsys.readouterr() == (ADMITTED + "  time: not predicted (make perf-venv)\n", "")
    assert cli._TIME == {"on": True}
    assert cli.main(argv) == 0
    assert capsys.readouterr() == (ADMITTED + "  time: not predicted (estimator offline)\n", "")
    assert cli._TIME == {"on": True}


class EstimatorSteps(OfflineSteps):
    """A step source that names its estimator's version, as AIConfigurator's does."""

    def version(self) -> str:
        return "0.12.0"


UNCALIBRATED = (
    "time: UNCALIBRATED, a generic H200's step times and not this fleet's (no sglang_perf_measured declared; "
    "docs/time.md); from: "
)


class VersionLabel(OfflineSteps):
    version = "0.12.0"  # a label, not a method: not the estimator's


@pytest.mark.parametrize(
    ("steps", "origin"),
    [
        (EstimatorSteps(), "AIConfigurator 0.12.0 (its measured H200 step data)"),
        (OfflineSteps(), "OfflineSteps"),
        (VersionLabel(), "VersionLabel"),
    ],
)
def test_steps_origin_names_the_estimator_by_its_version_else_the_source_type(steps: StepSource, origin: str) -> None:
    """The time line on top of `plan`: a source that is not calibrated says so first; then a source with a version()
    method is AIConfigurator's; any other source is named by its type."""
    assert cli.steps_origin(steps) == UNCALIBRATED + origin


ROUTER_ALERTS = ["SMGAdmissionNearLimit", "SMGQueueNearFull", "SMGRejecting429", "SMGWorkersUnhealthy", "SMGRouterDown"]
OUT_OF_FRONT = {
    "alert": "SGLangRouterOutOfFront",
    "expr": 'min by (server) (haproxy_server_status{job="sglang_frontend",server="lab1",state="UP"}) == 0',
    "for": "10m",
    "labels": {"severity": "warning", "guards": "sglang_frontend", "server": "lab1:router"},
    "annotations": {
        "summary": "lab1:router: out of the HAProxy front for 10m",
        "description": "A front (group sglang_frontend) has not sent new connections to the router lab1:router for "
        "10m: its /readiness fails, or it was drained or put in maintenance and not put back. The other routers "
        "serve its share, and the fleet admits max_concurrent_requests=64 fewer calls at once",
    },
}


@pytest.mark.parametrize(
    ("frontends", "front_rules"),
    [(None, []), ([], []), (["lab1"], [OUT_OF_FRONT])],
    ids=["no-front-group", "empty-front-group", "fronted"],
)
def test_routers_behind_a_front_get_the_out_of_front_alert(
    frontends: list[str] | None, front_rules: list[dict[str, object]]
) -> None:
    """The lab inventory (one router, lab1, admitting 64): its router group gets SGLangRouterOutOfFront (the
    policy's front_out_for, 10m) only when the inventory's sglang_frontend group has a host; its test file too."""
    hostvars, groups = shipped_inventory("lab")
    if frontends is not None:
        groups["sglang_frontend"] = frontends
    files = cli.monitoring_files(hostvars, groups)
    rules = {g["name"]: g["rules"] for g in yaml.safe_load(files["sglang_rules.yml"])["groups"]}
    assert [r["alert"] for r in rules["smg-lab1"]] == ROUTER_ALERTS + [r["alert"] for r in front_rules]
    assert rules["smg-lab1"][5:] == front_rules
    assert ("SGLangRouterOutOfFront" in files["sglang_rules_test.yml"]) == bool(front_rules)


class AnsweringSteps:
    """A step source that answers: a pass 1,000 ms, a step 10 ms."""

    def prefill(self, queries: Sequence[PrefillQuery]) -> list[StepTime]:
        return [StepTime(1000.0, 1000.0, 0.0, 0.0, 0.0, "stub", "0.5.14") for _ in queries]

    def decode(self, queries: Sequence[DecodeQuery]) -> list[StepTime]:
        return [StepTime(10.0, 10.0, 0.0, 0.0, 0.0, "stub", "0.5.14") for _ in queries]


def test_plan_carries_each_slo_term_given_on_the_command_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "time_steps", AnsweringSteps)
    argv = ["plan", "-i", PROD, "--want", "1x4k", "--ttft-p90", "60s", "--tokens-per-s", "5"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == UNCALIBRATED + "AnsweringSteps"  # the unit tests' inventories leave the measured points out
    assert out[2] == (
        "want 1 parallel calls x 4,000 tokens (inventories/production), SLO TTFT p90 <= 60 s, >= 5 output tokens/s "
        "per call"
    )


@pytest.mark.parametrize("no_time", [True, False], ids=["no-time", "no-estimator"])
def test_an_slo_without_the_time_model_is_refused_with_the_fix(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], no_time: bool
) -> None:
    """plan with an SLO and no predicted time exits 2 with the fix instead of answering as if no SLO was asked."""
    monkeypatch.setattr(cli, "time_steps", TIME_STEPS)
    monkeypatch.setattr(sglang_perf_fleet, "default_steps", lambda: None)
    argv = ["plan", "-i", PROD, "--want", "100x200k", "--ttft-p90", "60s"]
    assert cli.main(["--no-time", *argv] if no_time else argv) == 2
    why = "--no-time leaves the time model out" if no_time else "time: not predicted (make perf-venv)"
    assert capsys.readouterr() == (
        "",
        f"error: the SLO (TTFT p90 <= 60 s) needs predicted times, and {why}; fix: run `make perf-venv` and drop "
        "--no-time, or ask without --ttft-p90/--itl-p90/--tokens-per-s\n",
    )


def test_bench_gets_the_command_s_step_source(monkeypatch: pytest.MonkeyPatch) -> None:
    source = OfflineSteps()
    seen: list[object] = []
    monkeypatch.setattr(cli, "time_steps", lambda: source)
    monkeypatch.setattr(cli.bench, "bench_command", lambda args, load, config, steps: seen.append(steps) or 0)
    assert cli.main(["bench", "-i", "inventories/lab"]) == 0
    assert seen == [source]
