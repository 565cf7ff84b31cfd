"""The CLI commands of cli/sglang_envelope_cli/commands.py, called in-process, with what each passes on pinned: the
ansible-inventory command line load_inventory runs (against a recording stand-in for subprocess), the SLO options
parse_slo reads (units, defaults, refusals), and what `plan` hands its step source, time model and risk section
(recording stand-ins for live_steps, plan_in_time and risk_section), with the exit status and printed output."""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import sglang_envelope_cli.commands as cli
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_perf_fleet as perf
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_plan import Fit, Plan, PlanError, Shape
from shipped import shipped_inventory

REPO = cli.REPO  # the checkout the CLI names (under make mutation, its copy)
PROD = "inventories/production"

# --- load_inventory: the command it runs ---------------------------------------------------------------------------


def strict() -> dict[str, str]:
    """ansible-inventory's environment: this one, made strict (a source no plugin parses fails it)."""
    return {
        **os.environ,
        "ANSIBLE_INVENTORY_UNPARSED_FAILED": "true",
        "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "true",
    }


LISTING = {
    "_meta": {"hostvars": {"h1": {"sglang_gpu_memory_gib": 141}, "h2": {}}},
    "all": {"children": ["ungrouped", "sglang_decode"]},
    "sglang_decode": {"hosts": ["h2", "h1"]},
    "ungrouped": {},
}


class Recorder:
    """A stand-in for the subprocess module: records each run(cmd, **kwargs) and answers `stdout`."""

    def __init__(self, stdout: str) -> None:
        self.stdout = stdout
        self.calls: list[tuple[list[str], dict[str, Any]]] = []

    def run(self, cmd: list[str], **kwargs: Any) -> SimpleNamespace:
        self.calls.append((cmd, kwargs))
        return SimpleNamespace(stdout=self.stdout, stderr="", returncode=0)


def recorded_load_inventory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, inventory: Path, listing: dict[str, Any], with_exe: bool
) -> tuple[Any, list[tuple[list[str], dict[str, Any]]]]:
    """load_inventory(inventory) with the interpreter in tmp_path/bin (an ansible-inventory beside it or not)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    if with_exe:
        (bindir / "ansible-inventory").write_text("")
    monkeypatch.setattr(sys, "executable", str(bindir / "python"))
    recorder = Recorder(json.dumps(listing))
    monkeypatch.setattr(cli, "subprocess", recorder)
    return cli.load_inventory(str(inventory)), recorder.calls


def test_load_inventory_of_a_directory_runs_the_ansible_inventory_beside_the_interpreter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory inventory is its own playbook dir; the command runs in the checkout, as text; groups list their
    hosts (children's included) sorted, hostvars come from _meta."""
    inv = tmp_path / "inv"
    inv.mkdir()
    found, calls = recorded_load_inventory(monkeypatch, tmp_path, inv, LISTING, with_exe=True)
    assert calls == [
        (
            [str(tmp_path / "bin" / "ansible-inventory"), "-i", str(inv), "--playbook-dir", str(inv), "--list"],
            {"capture_output": True, "text": True, "cwd": REPO, "env": strict(), "check": False},
        )
    ]
    assert found == (
        {"h1": {"sglang_gpu_memory_gib": 141}, "h2": {}},
        {"all": ["h1", "h2"], "sglang_decode": ["h1", "h2"], "ungrouped": []},
    )


def test_load_inventory_of_a_file_takes_its_folder_and_ansible_inventory_from_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hosts file's playbook dir is the folder that holds it; with no ansible-inventory beside the interpreter, the
    one on PATH runs."""
    inv = tmp_path / "inv"
    inv.mkdir()
    hosts = inv / "hosts.yml"
    hosts.write_text("all: {}\n")
    _, calls = recorded_load_inventory(monkeypatch, tmp_path, hosts, LISTING, with_exe=False)
    assert calls == [
        (
            ["ansible-inventory", "-i", str(hosts), "--playbook-dir", str(inv), "--list"],
            {"capture_output": True, "text": True, "cwd": REPO, "env": strict(), "check": False},
        )
    ]


@pytest.mark.parametrize(
    "listing",
    [
        {"all": {"children": ["sglang_decode"]}, "sglang_decode": {"hosts": ["h1"]}},
        {"_meta": {}, "all": {"children": ["sglang_decode"]}, "sglang_decode": {"hosts": ["h1"]}},
    ],
    ids=["no-meta", "meta-without-hostvars"],
)
def test_load_inventory_without_hostvars_reads_none(
    listing: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listing without _meta, or a _meta without hostvars: no host variables, the groups still read."""
    found, _ = recorded_load_inventory(monkeypatch, tmp_path, tmp_path, listing, with_exe=True)
    assert found == ({}, {"all": ["h1"], "sglang_decode": ["h1"]})


# --- parse_slo -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ttft", "itl", "tokens", "slo"),
    [
        ("60s", "80ms", 20.0, perf.Slo(60_000.0, 80.0, 20.0)),
        ("60", "80", None, perf.Slo(60_000.0, 80.0, None)),  # bare numbers: TTFT in s, ITL in ms
        ("1.5m", "0.1s", None, perf.Slo(90_000.0, 100.0, None)),
        ("2", None, None, perf.Slo(2_000.0, None, None)),
        (None, "40", None, perf.Slo(None, 40.0, None)),
        (None, None, 12.5, perf.Slo(None, None, 12.5)),
        ("", "", None, perf.Slo(None, None, None)),
        (None, None, None, perf.Slo(None, None, None)),
    ],
)
def test_parse_slo_reads_ttft_in_seconds_and_itl_in_milliseconds(
    ttft: str | None, itl: str | None, tokens: float | None, slo: perf.Slo
) -> None:
    """--ttft-p90 defaults to seconds, --itl-p90 to milliseconds; an option not given is not asked."""
    assert cli.parse_slo(ttft, itl, tokens) == slo


@pytest.mark.parametrize(
    ("ttft", "itl", "message"),
    [
        ("fast", None, "SLO: 'fast': expected a duration such as 60s, 1.5m or 80ms"),
        ("0s", None, "SLO: '0s': a duration must be > 0"),
        (None, "0", "SLO: '0': a duration must be > 0"),
        ("60s", "80 us", "SLO: '80 us': expected a duration such as 60s, 1.5m or 80ms"),
    ],
)
def test_parse_slo_refuses_a_bad_duration_with_the_value_and_the_rule(
    ttft: str | None, itl: str | None, message: str
) -> None:
    with pytest.raises(PlanError) as info:
        cli.parse_slo(ttft, itl, None)
    assert str(info.value) == message


def test_plan_with_a_bad_slo_exits_2_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`plan --itl-p90 0ms`: nothing planned, the refusal on stderr."""
    monkeypatch.setitem(cli._TIME, "on", True)
    rc = cli.main(["plan", "-i", PROD, "--want", "10x4k", "--itl-p90", "0ms"])
    assert (rc, *capsys.readouterr()) == (2, "", "error: SLO: '0ms': a duration must be > 0\n")


# --- plan_command: what it hands on --------------------------------------------------------------------------------


class NamedSteps:
    """A step source that names its estimator's version; never asked for a step here."""

    def __init__(self, version: str) -> None:
        self._version = version

    def version(self) -> str:
        return self._version

    def prefill(self, queries: Any) -> Any:
        raise AssertionError("not asked")

    def decode(self, queries: Any) -> Any:
        raise AssertionError("not asked")


DEFAULT = NamedSteps("1.0-default")
LIVE = NamedSteps("2.0-live")


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """The production inventory, time on, and recording stand-ins for the step sources, the planner, the time model
    and the risk section: {"live": [...], "timed": [...], "risks": [...]}."""
    calls: dict[str, list[Any]] = {"live": [], "timed": [], "risks": []}
    prod = shipped_inventory("production")
    monkeypatch.setattr(cli, "load_inventory", lambda inventory: copy.deepcopy(prod))
    monkeypatch.setitem(cli._TIME, "on", True)
    monkeypatch.setattr(cli, "time_steps", lambda: DEFAULT)

    def live(path: str | None, reports: Path, engines: list[str], shape: Any) -> NamedSteps:
        calls["live"].append((path, reports, engines, shape))
        return LIVE

    def timed(result: Plan, fleet: Any, config: Any, slo: Any, steps: Any, osl: int, rate: Any) -> None:
        assert rate is None  # no --rate: all the calls at once
        calls["timed"].append((result.shape, slo, steps, osl))

    def risk(hostvars: Any, groups: Any, tokens: int, slo: Any, osl: int, steps: Any) -> str:
        calls["risks"].append((tokens, slo, osl, steps))
        return "RISKS"

    monkeypatch.setattr(cli, "live_steps", live)
    monkeypatch.setattr(perf, "plan_in_time", timed)
    monkeypatch.setattr(cli, "risk_section", risk)
    monkeypatch.setattr(cli, "plan", lambda fleet, config, shape: Plan(shape, FITS, []))
    render = lambda result, inventory: f"PLAN {result.shape.calls}x{result.shape.tokens} {inventory}"  # noqa: E731
    monkeypatch.setattr(cli, "render", render)
    return calls


SLO = perf.Slo(30_000.0, 50.0, None)
FITS = Fit(0, 1_000, "a stand-in", 1, 1, 1, 1, None)  # the planner's stand-in: every shape fits today


def test_plan_times_each_shape_on_the_default_source_and_judges_risks_at_the_last(
    recorded: dict[str, list[Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --from-live the step source is time_steps()'s; each shape is timed against the SLO and output length
    given; the risks are judged at the last shape's length, against the same SLO and source."""
    rc = cli.plan_command("prod", ["100x200k", "10x4k"], SLO, 500)
    assert (rc, *capsys.readouterr()) == (
        0,
        "time: UNCALIBRATED, a generic H200's step times and not this fleet's (no sglang_perf_measured declared; "
        "docs/time.md); from: AIConfigurator 1.0-default (its measured H200 step data)\n\n"
        "PLAN 100x200000 prod\nPLAN 10x4000 prod\nRISKS\n",
        "",
    )
    assert recorded == {
        "live": [],
        "timed": [(Shape(100, 200_000), SLO, DEFAULT, 500), (Shape(10, 4000), SLO, DEFAULT, 500)],
        "risks": [(4000, SLO, 500, DEFAULT)],
    }


@pytest.mark.parametrize("slo", [None, perf.Slo()], ids=["none", "empty"])
def test_plan_without_an_slo_times_with_none_and_judges_risks_at_the_default_slo(
    slo: perf.Slo | None, recorded: dict[str, list[Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    """No SLO option given: the time model gets no SLO, the risk section perf.DEFAULT_SLO (TTFT 60 s, ITL 80 ms);
    the output length defaults to 1000 tokens."""
    assert cli.plan_command("prod", ["10x4k"], slo) == 0
    assert recorded["timed"] == [(Shape(10, 4000), None, DEFAULT, 1000)]
    assert recorded["risks"] == [(4000, perf.Slo(60_000.0, 80.0, None), 1000, DEFAULT)]
    assert capsys.readouterr().out.startswith(
        "time: UNCALIBRATED, a generic H200's step times and not this fleet's (no sglang_perf_measured declared; "
        "docs/time.md); from: AIConfigurator 1.0-default"
    )


@pytest.mark.parametrize(("from_live", "path"), [("", None), ("reports/audit-x", "reports/audit-x")])
def test_plan_from_live_reads_the_audit_reports_and_shapes_them_with_the_default_source(
    from_live: str, path: str | None, recorded: dict[str, list[Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    """--from-live (no value: the newest report under reports/) asks live_steps for the fleet's engine hosts, shaped
    by the default source; the live source then times the plan and the risks."""
    rc = cli.plan_command("prod", ["10x4k"], SLO, 700, from_live)
    assert (rc, *capsys.readouterr()) == (
        0,
        "time: UNCALIBRATED, a generic H200's step times and not this fleet's (no sglang_perf_measured declared; "
        "docs/time.md); from: AIConfigurator 2.0-live (its measured H200 step data)\n\nPLAN 10x4000 prod\nRISKS\n",
        "",
    )
    assert recorded == {
        "live": [(path, REPO / "reports", ["gpu-node-01"], DEFAULT)],
        "timed": [(Shape(10, 4000), SLO, LIVE, 700)],
        "risks": [(4000, SLO, 700, LIVE)],
    }


def test_plan_from_live_with_no_time_is_refused(
    recorded: dict[str, list[Any]], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--from-live with --no-time: exit 2 and the conflict named, before any report is read."""
    monkeypatch.setitem(cli._TIME, "on", False)
    assert cli.plan_command("prod", ["10x4k"], None, 1000, "") == 2
    assert capsys.readouterr() == (
        "",
        "error: --from-live asks for time, --no-time leaves it out: pass one of them\n",
    )
    assert recorded == {"live": [], "timed": [], "risks": []}


# --- check_request_command: the engines admission is judged over -------------------------------------------------


def test_check_request_judges_admission_over_each_decode_engine_by_host(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The multinode inventory: its three decode hosts, by name, are the engines of the admission answer, and their
    three limits what caps the answer's length."""
    seen: list[list[tuple[str, str]]] = []
    real = cli.check_request

    def check(*args: Any, engines: Any, generating: Any) -> Any:
        seen.append([(e.host, e.role) for e in engines])
        assert [g.max_req_len for g in generating] == [e.max_req_len for e in engines]
        return real(*args, engines=engines, generating=generating)

    mn = shipped_inventory("multinode")
    monkeypatch.setattr(cli, "load_inventory", lambda inventory: copy.deepcopy(mn))
    monkeypatch.setattr(cli, "check_request", check)
    assert cli.check_request_command("mn", 1000, 10, False) == 0
    assert seen == [[("decode-01", "decode"), ("decode-02", "decode"), ("decode-03", "decode")]]
    assert capsys.readouterr().out.startswith("1000 input + 10 new tokens: admitted: 192 like it run at once; ")
