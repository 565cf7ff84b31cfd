"""`sglang-envelope bench` end to end without SGLang: the parser venv, the simulator's tokenizer, the versions, the
runner's command line and environment, bench_serving's result files, the report and the whole command, with the
subprocess edge replaced by a fake that writes what the runner would."""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import Any

import pytest
from modeltools import load_model
from sglang_envelope_cli import bench
from shipped import shipped_inventory
from test_bench_pinned import E2E, NO_P99, PRED, QUEUE, RESULT, ROWS, TABLE, TPUT, WAVE, rows_of

DSV4 = load_model("deepseek-v4-flash")
RUNNER = str(bench.RUNNER)
WHY = "time: not predicted (make perf-venv)"
NS = 1_234_567_890_123_456_789  # time.time_ns(): the waves' seeds start at 1,234,567,890,123,456 % 10^9
SEED = 890_123_456
UNTIMED_TABLE = [
    "figure        measured  predicted  band  ratio  source",
    *[
        f"{figure:<12}         —          —            —  {WHY}"
        for figure in ("TTFT p50", "TTFT p90", "TTFT p99", "ITL p50", "ITL p90", "ITL p99", "E2E p50")
    ],
    f"output tok/s         —          —            —  {WHY}",
]


def untimed(errors: float | None) -> list[dict[str, Any]]:
    return rows_of(*[(None, None, None, None, None, WHY)] * 8, (errors, None, None, None, None, WHY))


def venv(root: Path, installed: bool = True, python: bool = True) -> Path:
    (root / "bin").mkdir(parents=True)
    if installed:
        (root / ".installed").write_text("")
    if python:
        (root / "bin" / "python").write_text("")
    return root


def dist(venv_root: Path, python: str, name: str, version: str | None) -> None:
    info = venv_root / "lib" / python / "site-packages" / f"{name}-{version or 0}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", *([f"Name: {name}"] if version else []), f"Version: {version or 0}"]
    (info / "METADATA").write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------- the parser venv and the tokenizer


@pytest.mark.parametrize(("installed", "python"), [(False, False), (True, False), (False, True)])
def test_a_parser_venv_not_installed_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, installed: bool, python: bool
) -> None:
    monkeypatch.setattr(bench, "PARSER_VENV", venv(tmp_path / "pv", installed, python))
    with pytest.raises(bench.BenchError) as info:
        bench.parser_python()
    assert str(info.value) == (
        f"{tmp_path}/pv is not installed (SGLang's benchmark client runs there); fix: make parser-venv"
    )


def test_the_parser_venv_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench, "PARSER_VENV", venv(tmp_path / "pv"))
    assert bench.parser_python() == tmp_path / "pv" / "bin" / "python"


class Runs:
    """subprocess.run of the runner: `tokenizer DIR VOCAB` writes DIR/tokenizer.json, `runs FILE` writes each wave's
    result file (results[i]: its lines, None: none written), git rev-parse answers a commit."""

    def __init__(self, results: list[list[str] | None] | None = None, returncode: int = 0, stderr: str = "") -> None:
        self.results = results or []
        self.returncode, self.stderr = returncode, stderr
        self.calls: list[tuple[list[str], dict[str, Any]]] = []
        self.runs: list[dict[str, Any]] = []
        self.runs_text = ""

    def __call__(self, cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append((list(cmd), kwargs))
        if cmd[:2] == ["git", "rev-parse"]:
            return subprocess.CompletedProcess(cmd, 0, stdout="c0ffee\n", stderr="")
        if cmd[-3] == "tokenizer":
            if self.returncode == 0:
                (Path(cmd[-2]) / "tokenizer.json").write_text("{}")
            return subprocess.CompletedProcess(cmd, self.returncode, stdout="", stderr=self.stderr)
        assert cmd[-2] == "runs"
        self.runs_text = Path(cmd[-1]).read_text()
        self.runs = json.loads(self.runs_text)
        for run, lines in zip(self.runs, self.results, strict=False):
            if lines is not None:
                out = run["argv"][run["argv"].index("--output-file") + 1]
                Path(out).write_text("".join(line + "\n" for line in lines))
        return subprocess.CompletedProcess(cmd, 0)


def test_the_simulator_tokenizer_is_made_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tokenizers = tmp_path / "cache" / "bench-tokenizer"
    monkeypatch.setattr(bench, "TOKENIZERS", tokenizers)
    monkeypatch.setattr(bench, "parser_python", lambda: Path("/pv/bin/python"))
    runs = Runs()
    monkeypatch.setattr(bench.subprocess, "run", runs)
    made = bench.sim_tokenizer("m", 1000)
    assert made == tokenizers / "m-1000" and (made / "tokenizer.json").read_text() == "{}"
    assert sorted(p.name for p in tokenizers.iterdir()) == ["m-1000"]  # the folder it was made in is renamed
    ((cmd, kwargs),) = runs.calls
    building = Path(cmd[3])
    assert cmd == ["/pv/bin/python", RUNNER, "tokenizer", str(building), "1000"]
    assert building.parent == tokenizers and building.name.startswith("m-1000.")
    assert kwargs == {"capture_output": True, "text": True, "check": False}
    assert bench.sim_tokenizer("m", 1000) == made and len(runs.calls) == 1
    assert bench.sim_tokenizer("m", 2000) == tokenizers / "m-2000" and len(runs.calls) == 2  # the folder exists


def test_a_failed_tokenizer_says_the_end_of_its_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench, "TOKENIZERS", tmp_path / "tok")
    monkeypatch.setattr(bench, "parser_python", lambda: Path("/pv/bin/python"))
    monkeypatch.setattr(bench.subprocess, "run", Runs(returncode=1, stderr="a" * 10 + "b" * 500 + "\n "))
    with pytest.raises(bench.BenchError) as info:
        bench.sim_tokenizer("m", 1000)
    assert str(info.value) == "making the simulator's tokenizer failed: " + "b" * 500
    assert list((tmp_path / "tok").iterdir()) == []
    monkeypatch.setattr(bench.subprocess, "run", Runs(returncode=2, stderr="bad"))
    with pytest.raises(bench.BenchError, match=r"^making the simulator's tokenizer failed: bad$"):
        bench.sim_tokenizer("m", 1000)


# ---------------------------------------------------------------- versions


def test_a_distribution_version_from_a_venv(tmp_path: Path) -> None:
    root = tmp_path / "venv"
    dist(root, "python3.11", "Foo_Bar", "1.2.3")
    dist(root, "python3.12", "foo-bar", "9.9")
    dist(root, "python3.10", "nameless", None)
    assert bench._version(root, "foo-bar") == "1.2.3"  # the first site-packages in name order
    assert bench._version(root, "other") is None
    assert bench._version(tmp_path / "absent", "foo-bar") is None


def test_versions_name_the_client_the_time_model_and_the_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench, "REPO", tmp_path)
    monkeypatch.setattr(bench, "PARSER_VENV", tmp_path / "pv")
    monkeypatch.setattr(bench, "PERF_VENV", tmp_path / ".cache" / "aiconfigurator-venv")
    dist(tmp_path / "pv", "python3.12", "sglang", "0.5.23")
    dist(tmp_path / ".cache" / "aiconfigurator-venv", "python3.12", "aiconfigurator_core", "0.12.0")
    runs = Runs()
    monkeypatch.setattr(bench.subprocess, "run", runs)
    assert bench.versions() == {
        "sglang (bench_serving)": "0.5.23",
        "aiconfigurator-core (time model)": "0.12.0",
        "repository commit": "c0ffee",
    }
    assert runs.calls == [
        (["git", "rev-parse", "HEAD"], {"cwd": tmp_path, "capture_output": True, "text": True, "check": True})
    ]


@pytest.mark.parametrize("error", [OSError("no git"), subprocess.CalledProcessError(128, "git")])
def test_versions_without_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    monkeypatch.setattr(bench, "REPO", tmp_path)
    monkeypatch.setattr(bench, "PARSER_VENV", tmp_path / "pv")
    monkeypatch.setattr(bench, "PERF_VENV", tmp_path / ".cache" / "aiconfigurator-venv")

    def fail(*_args: Any, **_kwargs: Any) -> None:
        raise error

    monkeypatch.setattr(bench.subprocess, "run", fail)
    assert bench.versions() == {
        "sglang (bench_serving)": None,
        "aiconfigurator-core (time model)": None,
        "repository commit": None,
    }


# ---------------------------------------------------------------- results


def test_plain_makes_non_finite_figures_null() -> None:
    value = {1: (1.5, math.nan), "a": [math.inf, {"b": -math.inf}], "c": "s", "d": None, "e": True, "f": 3}
    assert bench.plain(value) == {
        "1": [1.5, None],
        "a": [None, {"b": None}],
        "c": "s",
        "d": None,
        "e": True,
        "f": 3,
    }


def test_the_result_is_the_last_line_written(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    assert bench.last_result(path) is None
    path.write_text("\n  \n")
    assert bench.last_result(path) is None
    path.write_text('{"n": 1}\n{"n": 2}\n{"n": 3}\n\n')
    assert bench.last_result(path) == {"n": 3}


# ---------------------------------------------------------------- the runner


LEVELS = [WAVE, bench.Level("2x1k", concurrency=1, prompts=3, isl=900, osl=100)]


class Started:
    """subprocess.Popen of the runner: `runs` does its work when it starts; it has ended by the first wait."""

    def __init__(self, runs: Runs, cmd: list[str], **kwargs: Any) -> None:
        self.returncode = runs(cmd, **kwargs).returncode

    def __enter__(self) -> Started:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None

    def wait(self, timeout: float | None = None) -> int:
        return self.returncode

    def poll(self) -> int:
        return self.returncode


def running(monkeypatch: pytest.MonkeyPatch, runs: Runs, euid: int = 1000) -> None:
    monkeypatch.setattr(bench, "parser_python", lambda: Path("/pv/bin/python"))
    monkeypatch.setattr(bench.subprocess, "run", runs)
    monkeypatch.setattr(bench.subprocess, "Popen", lambda cmd, **kwargs: Started(runs, cmd, **kwargs))
    monkeypatch.setattr(time, "time_ns", lambda: NS)
    monkeypatch.setattr(os, "geteuid", lambda: euid)
    monkeypatch.setenv("OPENAI_API_KEY", "stale")
    monkeypatch.setenv("API_KEY", "stale")
    monkeypatch.setenv("BENCH_PINNED_OTHER", "kept")


def test_every_wave_runs_in_one_runner_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = Runs([["{}", '{"completed": 4}'], None])
    running(monkeypatch, runs)
    target = bench.Target("r1", "http://10.0.0.1:8000", None)
    assert bench.run_levels(LEVELS, target, "/tok", tmp_path, "k3y") == [{"completed": 4}, None]
    ((cmd, kwargs),) = runs.calls
    assert cmd == ["/pv/bin/python", RUNNER, "runs", f"{tmp_path}/runs.json"]
    env = kwargs.pop("env")
    assert kwargs == {"stdout": None}  # the runner's lines to the terminal (not --json)
    assert (env["OPENAI_API_KEY"], "API_KEY" in env, env["BENCH_PINNED_OTHER"]) == ("k3y", False, "kept")
    first = bench.bench_argv(WAVE, "http://10.0.0.1:8000", "/tok", tmp_path / "level-1-c4.jsonl", SEED)
    second = bench.bench_argv(LEVELS[1], "http://10.0.0.1:8000", "/tok", tmp_path / "level-2-c1.jsonl", SEED + 1)
    assert runs.runs == [
        {"title": "[level 1/2] 4x300: 4 call(s) of 200 in + 101 out at once -> http://10.0.0.1:8000", "argv": first},
        {
            "title": "[level 2/2] 2x1k: 1 call(s) of 900 in + 100 out at once, 3 prompts -> http://10.0.0.1:8000",
            "argv": second,
        },
    ]
    assert first[:2] == ["--seed", "890123456"] and second[:2] == ["--seed", "890123457"]
    assert runs.runs_text.startswith('[\n {\n  "title": "[level 1/2]') and runs.runs_text.endswith("\n }\n]\n")


def test_without_a_key_the_client_sends_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = Runs()
    running(monkeypatch, runs)
    assert bench.run_levels([WAVE], bench.Target("r1", "http://r1:1", None), "/tok", tmp_path, None) == [None]
    env = runs.calls[0][1]["env"]
    assert ("OPENAI_API_KEY" in env, "API_KEY" in env, env["BENCH_PINNED_OTHER"]) == (False, False, "kept")


def test_a_router_in_a_namespace_is_run_inside_it_as_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = Runs([['{"completed": 4}']])
    running(monkeypatch, runs, euid=0)
    target = bench.Target("lab1", "http://127.0.0.1:8000", "ns1")
    assert bench.run_levels([WAVE], target, "/tok", tmp_path, None) == [{"completed": 4}]
    assert runs.calls[0][0] == ["ip", "netns", "exec", "ns1", "/pv/bin/python", RUNNER, "runs", f"{tmp_path}/runs.json"]
    running(monkeypatch, runs, euid=1)
    with pytest.raises(bench.BenchError) as info:
        bench.run_levels([WAVE], target, "/tok", tmp_path, None)
    assert str(info.value) == "the router lab1 listens in network namespace ns1: run as root"
    assert len(runs.calls) == 1


# ---------------------------------------------------------------- the report


def test_the_report_document_and_lines(tmp_path: Path) -> None:
    levels = [WAVE, bench.Level("4x300", 1, 1, 200, 101), bench.Level("2x1k", 2, 5, 900, 100)]
    target = bench.Target("lab1", "http://127.0.0.1:8000", "ns1")
    preds = [PRED, {"error": WHY}, {"error": WHY}]
    doc, lines = bench.report(
        "inventories/lab", target, levels, [RESULT, {"completed": 0}, None], preds, None, ["one", "two"], {"x": 1}
    )
    assert doc == {
        "inventory": "inventories/lab",
        "router": {"host": "lab1", "url": "http://127.0.0.1:8000", "netns": "ns1"},
        "speed_factor": None,
        "notes": ["one", "two"],
        "x": 1,
        "levels": [
            {"shape": "4x300", "concurrency": 4, "prompts": 4, "isl": 200, "osl": 101}
            | {"result": RESULT, "predicted": PRED, "rows": ROWS},
            {"shape": "4x300", "concurrency": 1, "prompts": 1, "isl": 200, "osl": 101}
            | {"result": {"completed": 0}, "predicted": {"error": WHY}, "rows": untimed(1.0)},
            {"shape": "2x1k", "concurrency": 2, "prompts": 5, "isl": 900, "osl": 100}
            | {"result": None, "predicted": {"error": WHY}, "rows": untimed(None)},
        ],
    }
    assert lines == [
        "bench of inventories/lab: router lab1 at http://127.0.0.1:8000 (netns ns1)",
        "  one",
        "  two",
        "",
        "level 1/3: 4x300: 4 call(s) of 200 in + 101 out at once",
        "  completed 3 of 4 in 12.50 s",
        "  predicted: bound by decode engine, decode batch 4.0",
        *[f"  {line}" for line in TABLE],
        "",
        "level 2/3: 4x300: 1 call(s) of 200 in + 101 out at once",
        "  completed 0 of 1 in 0.00 s",
        *[f"  {line}" for line in UNTIMED_TABLE],
        f"  errors               1          —            —  {WHY}",
        "",
        "level 3/3: 2x1k: 2 call(s) of 900 in + 100 out at once, 5 prompts",
        "  no result: bench_serving failed (its output is above)",
        *[f"  {line}" for line in UNTIMED_TABLE],
        f"  errors               —          —            —  {WHY}",
    ]
    with pytest.raises(ValueError, match="zip"):
        bench.report("i", target, levels, [RESULT], preds, None, [], {})


# ---------------------------------------------------------------- the whole command


class FixedNow(datetime):
    @classmethod
    def now(cls, tz: tzinfo | None = None) -> FixedNow:  # type: ignore[override]
        moment = cls(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
        return moment if tz is UTC else cls(1999, 9, 9, 9, 9, 9)


def args_of(**given: Any) -> argparse.Namespace:
    defaults: dict[str, Any] = {
        "inventory": "inventories/lab",
        "want": None,
        "output_tokens": 101,
        "concurrency": None,
        "prompts": 0,
        "tokenizer": None,
        "url": None,
        "out": None,
        "production_load_ok": False,
    }
    return argparse.Namespace(**(defaults | given))


class Setup:
    """The command's edges: the inventory (a shipped one, edited), the model config, the prediction, the repository,
    the parser venv, the simulator's tokenizer already made, the runner, the clock."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inventory: str = "lab") -> None:
        self.hostvars, self.groups = shipped_inventory(inventory)
        self.steps = object()
        self.configs: list[Any] = []
        self.predictions: list[dict[str, Any]] = []
        self.predicted: list[Any] = []
        self.runs = Runs()
        self.repo = tmp_path / "repo"
        monkeypatch.setattr(bench, "REPO", self.repo)
        monkeypatch.setattr(bench, "PARSER_VENV", venv(tmp_path / "pv"))
        monkeypatch.setattr(bench, "PERF_VENV", self.repo / ".cache" / "aiconfigurator-venv")
        tokenizers = tmp_path / "tok"
        (tokenizers / "deepseek-v4-flash-129280").mkdir(parents=True)
        (tokenizers / "deepseek-v4-flash-129280" / "tokenizer.json").write_text("{}")
        monkeypatch.setattr(bench, "TOKENIZERS", tokenizers)
        monkeypatch.setattr(bench.subprocess, "run", self.runs)
        monkeypatch.setattr(bench.subprocess, "Popen", lambda cmd, **kwargs: Started(self.runs, cmd, **kwargs))
        monkeypatch.setattr(bench, "datetime", FixedNow)
        monkeypatch.setattr(bench, "predict_levels", self.predict)
        monkeypatch.setattr(time, "time_ns", lambda: NS)
        monkeypatch.setattr(os, "geteuid", lambda: 0)
        monkeypatch.delenv("SGLANG_API_KEY", raising=False)

    def predict(self, hostvars: Any, groups: Any, config: Any, levels: Any, steps: Any) -> list[dict[str, Any]]:
        assert (hostvars, groups, config, steps) == (self.hostvars, self.groups, DSV4, self.steps)
        self.predicted = list(levels)
        return self.predictions

    def load(self, inventory: str) -> tuple[dict[str, Any], dict[str, list[str]]]:
        assert inventory == "inventories/lab"
        return self.hostvars, self.groups

    def config(self, hv: Any) -> dict[str, Any]:
        self.configs.append(hv)
        return DSV4

    def __call__(self, args: argparse.Namespace) -> int:
        return bench.bench_command(args, self.load, self.config, self.steps)  # type: ignore[arg-type]


def run_of(setup: Setup, index: int) -> list[str]:
    return list(setup.runs.calls[index][0])


def test_without_a_want_the_wave_is_the_audit_s_typical_call_on_the_lab(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the lab declares no sglang_workload: the audit's typical call of 32,768 tokens, 101 of them output
    setup = Setup(tmp_path, monkeypatch)
    setup.predictions = [{"error": WHY}]
    setup.runs.results = [[json.dumps(RESULT)]]
    assert setup(args_of(concurrency="2")) == 0
    assert setup.predicted == [bench.Level("the audit's typical call: 32,768 tokens", 2, 2, 32_667, 101)]
    assert capsys.readouterr().out.startswith("bench: 1 level(s) against http://127.0.0.1:8000; predicting ...\n")


def test_a_lab_bench_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    setup = Setup(tmp_path, monkeypatch)
    setup.hostvars["lab1"]["sglang_engine_extra_env"]["SGLANG_SIM_SPEED_FACTOR"] = "0.5"
    setup.predictions = [PRED, {"error": WHY}]
    setup.runs.results = [[json.dumps(RESULT)], ['{"completed": 1, "duration": 2.0, "median_ttft_ms": NaN}']]
    assert setup(args_of(want=["4x300"], concurrency="1,4")) == 0
    levels = [bench.Level("4x300", 4, 4, 199, 101), bench.Level("4x300", 1, 1, 199, 101)]
    assert setup.predicted == levels and setup.configs == [setup.hostvars["lab1"]]
    out = setup.repo / "reports" / "bench-lab-20250102T030405Z"
    ((runner, kwargs), (git, _)) = setup.runs.calls  # the waves, then the commit for the report
    assert git == ["git", "rev-parse", "HEAD"]
    assert runner == ["ip", "netns", "exec", "lab1", f"{tmp_path}/pv/bin/python", RUNNER, "runs", f"{out}/runs.json"]
    assert kwargs["env"]["OPENAI_API_KEY"] == "lab-test-key-not-secret"
    tokenizer = f"{tmp_path}/tok/deepseek-v4-flash-129280"
    assert setup.runs.runs[0]["argv"] == bench.bench_argv(
        levels[0], "http://127.0.0.1:8000", tokenizer, out / "level-1-c4.jsonl", SEED
    )
    # predicted x 2 at speed factor 0.5: TTFT p50 1,200 (600..1,800), p90 2,000 (1,000..4,000), ITL p50 20
    # (10..40), p90 40 (20..80); E2E 1,200 + 100 x 20 = 3,200 (1,600..5,800); output 404,000 / 4,000 = 101
    rows = rows_of(
        (900.0, 1200.0, 600.0, 1800.0, 0.75, "prefill model"),
        (1500.0, 2000.0, 1000.0, 4000.0, 0.75, "prefill model p90"),
        (1700.5, None, None, None, None, NO_P99),
        (15.0, 20.0, 10.0, 40.0, 0.75, "decode model"),
        (30.0, 40.0, 20.0, 80.0, 0.75, "decode model p90"),
        (45.25, None, None, None, None, NO_P99),
        (2400.0, 3200.0, 1600.0, 5800.0, 0.75, E2E),
        (303.0, 101.0, 50.5, 202.0, 3.0, TPUT),
        (1.0, 2.0, None, None, None, QUEUE),
    )
    lines = [
        "bench of inventories/lab: router lab1 at http://127.0.0.1:8000 (netns lab1)",
        "  simulator at speed factor 0.5: predicted times x 2",
        "",
        "level 1/2: 4x300: 4 call(s) of 199 in + 101 out at once",
        "  completed 3 of 4 in 12.50 s",
        "  predicted: bound by decode engine, decode batch 4.0",
        "  figure           measured    predicted              band  ratio  source",
        "  TTFT p50        900.00 ms       1.20 s       0.60-1.80 s   0.75  prefill model",
        "  TTFT p90           1.50 s       2.00 s       1.00-4.00 s   0.75  prefill model p90",
        "  TTFT p99           1.70 s            —                        —  the model has no p99",
        "  ITL p50          15.00 ms     20.00 ms    10.00-40.00 ms   0.75  decode model",
        "  ITL p90          30.00 ms     40.00 ms    20.00-80.00 ms   0.75  decode model p90",
        "  ITL p99          45.25 ms            —                        —  the model has no p99",
        "  E2E p50            2.40 s       3.20 s       1.60-5.80 s   0.75  " + E2E,
        "  output tok/s  303.0 tok/s  101.0 tok/s  50.5-202.0 tok/s   3.00  " + TPUT,
        "  errors                  1            2                        —  " + QUEUE,
        "",
        "level 2/2: 4x300: 1 call(s) of 199 in + 101 out at once",
        "  completed 1 of 1 in 2.00 s",
        *[f"  {line}" for line in UNTIMED_TABLE],
        f"  errors               0          —            —  {WHY}",
    ]
    captured = capsys.readouterr()
    assert captured.out == "\n".join(
        [
            "bench: 2 level(s) against http://127.0.0.1:8000; predicting ...",
            *lines,
            "",
            f"written: {out}/bench.json",
            f"written: {out}/bench.svg",
            f"written: {out}/bench.txt and bench_serving's own files {out}/level-*.jsonl",
            "",
        ]
    )
    assert captured.err == ""
    assert (out / "bench.txt").read_text() == "\n".join(lines) + "\n"
    text = (out / "bench.json").read_text()
    assert text.startswith('{\n "inventory": "inventories/lab",\n "router": {\n  "host": "lab1",')
    assert text.endswith("\n}\n")
    assert json.loads(text) == {
        "inventory": "inventories/lab",
        "router": {"host": "lab1", "url": "http://127.0.0.1:8000", "netns": "lab1"},
        "speed_factor": 0.5,
        "notes": ["simulator at speed factor 0.5: predicted times x 2"],
        "started_utc": "20250102T030405Z",
        "tokenizer": tokenizer,
        "client": f"{tmp_path}/pv/bin/python",
        "versions": {
            "sglang (bench_serving)": None,
            "aiconfigurator-core (time model)": None,
            "repository commit": "c0ffee",
        },
        "levels": [
            {"shape": "4x300", "concurrency": 4, "prompts": 4, "isl": 199, "osl": 101}
            | {"result": RESULT, "predicted": PRED, "rows": rows},
            {"shape": "4x300", "concurrency": 1, "prompts": 1, "isl": 199, "osl": 101}
            | {"result": {"completed": 1, "duration": 2.0, "median_ttft_ms": None}}
            | {"predicted": {"error": WHY}, "rows": untimed(0.0)},
        ],
    }
    svg = (out / "bench.svg").read_text()
    assert svg.startswith("<svg ") and svg.endswith("</svg>\n")
    assert ">lab: 4x300, measured vs predicted</text>" in svg and svg.count("<circle") == 3
    assert sorted(p.name for p in out.iterdir()) == [
        "bench.json", "bench.svg", "bench.txt", "level-1-c4.jsonl", "level-2-c1.jsonl", "runs.json",
    ]  # fmt: skip


def test_two_shapes_by_url_with_more_prompts_and_a_failed_wave(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    setup = Setup(tmp_path, monkeypatch)
    env = setup.hostvars["lab1"]["sglang_engine_extra_env"]
    del env["SGLANG_SIM_STEP_TABLE"], env["SGLANG_SIM_SPEED_FACTOR"]
    setup.predictions = [{"error": WHY}] * 4
    setup.runs.results = [['{"completed": 3}'], ['{"completed": 0}'], None, ['{"completed": 3}']]
    monkeypatch.setenv("SGLANG_API_KEY", "env-key")
    out = tmp_path / "given" / "out"
    args = args_of(want=["4x300", "2x1k"], concurrency="2,1", prompts=3, url="http://10.0.0.9:1/", out=str(out))
    assert setup(args) == 1
    assert setup.predicted == [
        bench.Level("4x300", 2, 3, 199, 101),
        bench.Level("4x300", 1, 3, 199, 101),
        bench.Level("2x1k", 2, 3, 899, 101),
        bench.Level("2x1k", 1, 3, 899, 101),
    ]
    captured = capsys.readouterr()
    assert captured.err == "error: level(s) 2, 3 completed no call\n"
    assert captured.out.startswith(
        "bench: 4 level(s) against http://10.0.0.9:1; predicting ...\n"
        "bench of inventories/lab: router lab1 at http://10.0.0.9:1\n"
        "  the simulated engines do not run the model's step times (no SGLANG_SIM_STEP_TABLE in "
        "sglang_engine_extra_env): the ratios compare the model with the simulator's own settings\n"
        "  --prompts above a level: the model's figures are of the first wave\n\n"
        "level 1/4: 4x300: 2 call(s) of 199 in + 101 out at once, 3 prompts\n"
    )
    assert captured.out.endswith(
        f"written: {out}/bench.json\nwritten: {out}/bench-1.svg\nwritten: {out}/bench-2.svg\n"
        f"written: {out}/bench.txt and bench_serving's own files {out}/level-*.jsonl\n"
    )
    assert setup.runs.calls[0][0] == [f"{tmp_path}/pv/bin/python", RUNNER, "runs", f"{out}/runs.json"]
    assert setup.runs.calls[0][1]["env"]["OPENAI_API_KEY"] == "env-key"
    doc = json.loads((out / "bench.json").read_text())
    assert (doc["speed_factor"], doc["router"]["netns"], len(doc["notes"])) == (None, None, 2)
    assert ">lab: 2x1k, measured vs predicted</text>" in (out / "bench-2.svg").read_text()


def test_an_existing_report_folder_is_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    setup = Setup(tmp_path, monkeypatch)
    setup.predictions = [{"error": WHY}]
    setup.runs.results = [None]
    (tmp_path / "out").mkdir()
    assert setup(args_of(want=["1x300"], out=str(tmp_path / "out"))) == 1
    assert capsys.readouterr().err == "error: level(s) 1 completed no call\n"


def test_a_level_with_prompts_equal_to_its_calls_adds_no_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    setup = Setup(tmp_path, monkeypatch)
    setup.predictions = [{"error": WHY}]
    setup.runs.results = [['{"completed": 2}']]
    assert setup(args_of(want=["2x300"], concurrency="2", prompts=2, out=str(tmp_path / "o"))) == 0
    doc = json.loads((tmp_path / "o" / "bench.json").read_text())
    assert doc["notes"] == ["simulator at speed factor 0.56: predicted times x 1.78571"]
    assert capsys.readouterr().err == ""


def test_real_engines_with_their_tokenizer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    setup = Setup(tmp_path, monkeypatch, "multinode")
    setup.predictions = [{"error": WHY}]
    setup.runs.results = [['{"completed": 1}']]
    setup.hostvars["decode-01"]["sglang_model"] = {"name": "other"}
    args = args_of(want=["1x300"], production_load_ok=True, tokenizer="/models/tok", out=str(tmp_path / "o"))
    assert setup(args) == 0
    assert setup.configs == [setup.hostvars["decode-01"]]  # the first decode host's model
    assert setup.runs.runs[0]["argv"][-5:-1] == [
        "--tokenizer", "/models/tok", "--output-file", f"{tmp_path}/o/level-1-c1.jsonl",
    ]  # fmt: skip
    assert "OPENAI_API_KEY" not in setup.runs.calls[0][1]["env"]
    header = capsys.readouterr().out.splitlines()[1]
    assert header == "bench of inventories/lab: router router-01 at http://router-01:8000"


def test_the_model_of_a_fleet_without_decode_is_its_first_prefill_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup = Setup(tmp_path, monkeypatch, "multinode")
    setup.groups["sglang_decode"] = []
    args = args_of(want=["1x300"], production_load_ok=True)
    assert setup(args) == 2  # real engines without --tokenizer
    assert setup.configs == [setup.hostvars["prefill-01"]]


@pytest.mark.parametrize(
    ("edit", "given", "error"),
    [
        (
            lambda hv, groups: groups.update(sglang_decode=[], sglang_prefill=[]),
            {},
            "error: inventories/lab declares no engine host; fix: add hosts to sglang_decode",
        ),
        (
            lambda hv, groups: None,
            {"concurrency": "4,x"},
            "error: --concurrency '4,x': expected numbers separated by commas, e.g. 64,8,1",
        ),
        (
            lambda hv, groups: hv["lab1"].update(sglang_api_key="{{ k }}"),
            {},
            "error: lab1: sglang_api_key is vaulted or templated, so its value is not read here; fix: export "
            "SGLANG_API_KEY=<key>",
        ),
        (
            lambda hv, groups: groups.update(sglang_router=[]),
            {"production_load_ok": True},
            "error: the inventory declares no host in sglang_router; fix: declare the router, or pass --url",
        ),
    ],
)
def test_what_stops_the_command_before_it_sends(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    edit: Callable[[Any, Any], None],
    given: dict[str, Any],
    error: str,
) -> None:
    setup = Setup(tmp_path, monkeypatch)
    edit(setup.hostvars, setup.groups)
    assert setup(args_of(want=["1x300"], **given)) == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", error + "\n")
    assert setup.runs.calls == []


def test_a_namespace_without_root_stops_after_the_prediction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    setup = Setup(tmp_path, monkeypatch)
    setup.predictions = [{"error": WHY}]
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert setup(args_of(want=["1x300"], out=str(tmp_path / "o"))) == 2
    captured = capsys.readouterr()
    assert captured.out == "bench: 1 level(s) against http://127.0.0.1:8000; predicting ...\n"
    assert captured.err == "error: the router lab1 listens in network namespace lab1: run as root\n"
    assert [p.name for p in (tmp_path / "o").iterdir()] == ["runs.json"]
