"""AicSteps, the time model's step source backed by AIConfigurator's venv, with the venv's interpreter replaced: the
batch it sends, the answers it caches (file, key, contents), the errors it raises, and the step times it returns."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_paths, sglang_perf_aic
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import DecodeQuery, PrefillQuery, StepTime
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_aic import AicSteps, PerfVenvMissing

SCRIPT = sglang_perf_aic.SCRIPT  # beside the module, wherever it is imported from


def make_venv(root: Path, *versions: str, installed: bool = True, python: str = "python3.11") -> Path:
    venv = root / "venv"
    for version in versions:
        (venv / "lib" / python / "site-packages" / f"aiconfigurator_core-{version}.dist-info").mkdir(parents=True)
    venv.mkdir(exist_ok=True)
    if installed:
        (venv / ".installed").write_text("")
    return venv


def answer(ms: float, version: str = "0.5.14") -> dict[str, Any]:
    return {
        "ms": ms,
        "ops": {"context_attention": 1.0, "gemm": 2.0},
        "sources": {"context_attention": "silicon", "gemm": "sol"},
        "backend_version": version,
        "oom": None,
    }


class Interpreter:
    """subprocess.run's stand-in: records each command and answers each request with ms = its isl / 1000 (or an
    error for a batch of 0)."""

    def __init__(self, returncode: int = 0, stderr: str = "") -> None:
        self.calls: list[tuple[list[str], dict[str, Any]]] = []
        self.returncode, self.stderr = returncode, stderr

    def batches(self) -> list[list[dict[str, Any]]]:
        return [json.loads(kwargs["input"]) for _, kwargs in self.calls]

    def __call__(self, cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append((cmd, kwargs))
        out = [
            {"error": "KeyError: 'batch'"} if req["batch"] == 0 else answer(req["isl"] / 1000)
            for req in json.loads(kwargs["input"])
        ]
        return subprocess.CompletedProcess(cmd, self.returncode, json.dumps(out), self.stderr)


@pytest.fixture
def interpreter(monkeypatch: pytest.MonkeyPatch) -> Interpreter:
    fake = Interpreter()
    monkeypatch.setattr(sglang_perf_aic.subprocess, "run", fake)
    return fake


def key(version: str, request: dict[str, Any]) -> str:
    """The cache key: the request (sorted JSON) under the estimator's version and the script's own digest."""
    salt = version + hashlib.sha256(SCRIPT.read_bytes()).hexdigest()
    return hashlib.sha256((salt + json.dumps(request, sort_keys=True)).encode()).hexdigest()[:32]


REQ = {"mode": "static_ctx", "model": "M", "tp": 4, "ep": 4, "isl": 2000, "prefix": 0, "batch": 1}
FULL = {"system": "h200_sxm", "database_mode": "HYBRID"} | REQ


# ---------------------------------------------------------------- the venv


def test_the_defaults_are_the_repositorys_venv_and_cache() -> None:
    steps = AicSteps()
    repo = sglang_paths.project_dir()
    assert (steps.venv, steps.cache, steps.timeout_s, steps.calls) == (
        repo / ".cache" / "aiconfigurator-venv",
        repo / ".cache" / "perf",
        900,
        0,
    )
    assert (SCRIPT.name, SCRIPT.resolve().parent) == ("aic_steps.py", Path(sglang_perf_aic.__file__).resolve().parent)


def test_ready_is_the_installed_marker(tmp_path: Path) -> None:
    assert AicSteps(make_venv(tmp_path, "0.12.0", installed=False)).ready() is False
    (tmp_path / "venv" / ".installed").write_text("")
    assert AicSteps(tmp_path / "venv").ready() is True


def test_version_is_the_newest_installed_aiconfigurator_core(tmp_path: Path) -> None:
    assert AicSteps(make_venv(tmp_path, "0.11.2", "0.12.0", python="python3.12")).version() == "0.12.0"


@pytest.mark.parametrize(("versions", "installed"), [((), True), (("0.12.0",), False), ((), False)])
def test_a_venv_not_installed_says_how_to_install_it(
    tmp_path: Path, versions: tuple[str, ...], installed: bool
) -> None:
    venv = make_venv(tmp_path, *versions, installed=installed)
    with pytest.raises(PerfVenvMissing) as raised:
        AicSteps(venv).version()
    assert str(raised.value) == f"{venv} is not installed; fix: run `make perf-venv`"
    assert isinstance(raised.value, RuntimeError)


def test_no_query_needs_no_venv(tmp_path: Path) -> None:
    steps = AicSteps(tmp_path / "missing", cache=tmp_path / "cache")
    assert steps.both([], []) == ([], [])
    assert steps.prefill([]) == []
    assert steps.decode([]) == []
    assert steps.calls == 0


# ---------------------------------------------------------------- one round


def test_both_sends_one_batch_and_splits_the_answers(tmp_path: Path, interpreter: Interpreter) -> None:
    steps = AicSteps(make_venv(tmp_path, "0.12.0"), cache=None, timeout_s=30)
    prefills = [PrefillQuery("M", 4, 8, 3000, 1000, 2), PrefillQuery("M", 4, 8, 5000, 0, 1)]
    decodes = [DecodeQuery("M", 4, 8, 7000, 64)]
    got = steps.both(prefills, decodes)
    assert interpreter.calls == [
        (
            [str(tmp_path / "venv" / "bin" / "python"), str(SCRIPT)],
            {
                "input": json.dumps(
                    [
                        {"system": "h200_sxm", "database_mode": "HYBRID", "mode": "static_ctx", "model": "M"}
                        | {"tp": 4, "ep": 8, "isl": 3000, "prefix": 1000, "batch": 2},
                        {"system": "h200_sxm", "database_mode": "HYBRID", "mode": "static_ctx", "model": "M"}
                        | {"tp": 4, "ep": 8, "isl": 5000, "prefix": 0, "batch": 1},
                        {"system": "h200_sxm", "database_mode": "HYBRID", "mode": "static_gen", "model": "M"}
                        | {"tp": 4, "ep": 8, "isl": 7000, "prefix": 0, "batch": 64},
                    ]
                ),
                "capture_output": True,
                "text": True,
                "timeout": 30,
                "check": False,
            },
        )
    ]
    origin = "AIConfigurator 0.12.0 (SGLang 0.5.14 data on H200)"
    assert got == (
        [StepTime(3.0, 1.0, 0.0, 2.0, 1.0, origin, "0.5.14"), StepTime(5.0, 1.0, 2.0, 2.0, 1.0, origin, "0.5.14")],
        [StepTime(7.0, 1.0, 4.0, 2.0, 1.0, origin, "0.5.14")],
    )
    assert steps.calls == 1


def test_prefill_and_decode_alone_are_rounds_with_the_other_side_empty(
    tmp_path: Path, interpreter: Interpreter
) -> None:
    steps = AicSteps(make_venv(tmp_path, "0.12.0"), cache=None)
    assert [s.ms for s in steps.prefill([PrefillQuery("M", 4, 4, 4000, 0, 1)])] == [4.0]
    assert [s.ms for s in steps.decode([DecodeQuery("M", 4, 4, 6000, 8)])] == [6.0]
    assert [[r["mode"] for r in batch] for batch in interpreter.batches()] == [["static_ctx"], ["static_gen"]]
    assert interpreter.calls[0][1]["timeout"] == 900
    assert steps.calls == 2


def test_a_request_keeps_its_own_system(tmp_path: Path, interpreter: Interpreter) -> None:
    steps = AicSteps(make_venv(tmp_path, "0.12.0"), cache=None)
    steps.raw([REQ | {"system": "b200_sxm", "database_mode": "SILICON"}])
    assert interpreter.batches() == [[REQ | {"system": "b200_sxm", "database_mode": "SILICON"}]]


# ---------------------------------------------------------------- the cache


def test_an_answer_is_cached_under_the_hash_of_request_version_and_script(
    tmp_path: Path, interpreter: Interpreter
) -> None:
    cache = tmp_path / "perf" / "answers"
    steps = AicSteps(make_venv(tmp_path, "0.12.0"), cache=cache)
    assert steps.raw([REQ]) == [answer(2.0)]
    name = key("0.12.0", FULL)
    assert sorted(p.name for p in cache.iterdir()) == [f"{name}.json"]
    assert (cache / f"{name}.json").read_text() == json.dumps(answer(2.0))
    # a second process reads it back without running the estimator
    again = AicSteps(tmp_path / "venv", cache=cache)
    assert again.raw([REQ]) == [answer(2.0)]
    assert (again.calls, len(interpreter.calls)) == (0, 1)


def test_a_cached_answer_is_read_from_its_file(tmp_path: Path, interpreter: Interpreter) -> None:
    cache = tmp_path / "perf"
    cache.mkdir()
    (cache / f"{key('0.12.0', FULL)}.json").write_text(json.dumps({"ms": 99.0, "from": "cache"}))
    steps = AicSteps(make_venv(tmp_path, "0.12.0"), cache=cache)
    other = REQ | {"isl": 8000}
    assert steps.raw([REQ, other]) == [{"ms": 99.0, "from": "cache"}, answer(8.0)]
    assert interpreter.batches() == [[FULL | {"isl": 8000}]]


def test_another_estimator_version_misses_the_cache(tmp_path: Path, interpreter: Interpreter) -> None:
    cache = tmp_path / "perf"
    cache.mkdir()
    (cache / f"{key('0.11.0', FULL)}.json").write_text(json.dumps({"ms": 99.0}))
    assert AicSteps(make_venv(tmp_path, "0.12.0"), cache=cache).raw([REQ]) == [answer(2.0)]
    assert len(interpreter.calls) == 1


def test_the_same_request_twice_is_asked_once(tmp_path: Path, interpreter: Interpreter) -> None:
    steps = AicSteps(make_venv(tmp_path, "0.12.0"), cache=None)
    other = REQ | {"isl": 3000}
    assert steps.raw([REQ, other, REQ]) == [answer(2.0), answer(3.0), answer(2.0)]
    assert interpreter.batches() == [[FULL, FULL | {"isl": 3000}]]


def test_without_a_cache_each_round_runs_the_estimator(tmp_path: Path, interpreter: Interpreter) -> None:
    steps = AicSteps(make_venv(tmp_path, "0.12.0"), cache=None)
    steps.raw([REQ])
    steps.raw([REQ])
    assert steps.calls == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["venv"]


def test_a_refused_request_raises_and_is_not_cached(tmp_path: Path, interpreter: Interpreter) -> None:
    cache = tmp_path / "perf"
    steps = AicSteps(make_venv(tmp_path, "0.12.0"), cache=cache)
    with pytest.raises(RuntimeError) as raised:
        steps.raw([REQ, REQ | {"batch": 0}])
    assert str(raised.value) == (
        "AIConfigurator refused {'system': 'h200_sxm', 'database_mode': 'HYBRID', 'mode': 'static_ctx', "
        "'model': 'M', 'tp': 4, 'ep': 4, 'isl': 2000, 'prefix': 0, 'batch': 0}: KeyError: 'batch'"
    )
    assert sorted(p.name for p in cache.iterdir()) == [f"{key('0.12.0', FULL)}.json"]


def test_a_failed_estimator_process_raises_with_the_end_of_its_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sglang_perf_aic.subprocess, "run", Interpreter(3, "x" * 10 + "y" * 2000))
    steps = AicSteps(make_venv(tmp_path, "0.12.0"), cache=tmp_path / "perf")
    with pytest.raises(RuntimeError) as raised:
        steps.raw([REQ])
    assert str(raised.value) == "aic_steps.py failed (3): " + "y" * 2000
    assert steps.calls == 1
    assert not (tmp_path / "perf").exists()


def test_a_real_interpreter_gets_the_batch_on_stdin(tmp_path: Path) -> None:
    """The venv's python is a script here: it checks it was handed aic_steps.py and answers from stdin."""
    venv = make_venv(tmp_path, "0.12.0")
    (venv / "bin").mkdir()
    python = venv / "bin" / "python"
    python.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        "assert sys.argv[1].endswith('aic_steps.py'), sys.argv\n"
        "print('note', file=sys.stderr)\n"
        "json.dump([{'ms': r['isl'] / 1000, 'ops': {}, 'sources': {}, 'backend_version': '0.5.14', 'oom': None}"
        " for r in json.load(sys.stdin)], sys.stdout)\n"
    )
    python.chmod(0o755)
    steps = AicSteps(venv, cache=None)
    assert steps.prefill([PrefillQuery("M", 4, 4, 1500, 0, 1)]) == [
        StepTime(1.5, 0.0, 1.5, 0.0, 0.0, "AIConfigurator 0.12.0 (SGLang 0.5.14 data on H200)", "0.5.14")
    ]
    assert os.access(python, os.X_OK)


# ---------------------------------------------------------------- a step's time by source


def test_a_step_time_splits_by_source_tag() -> None:
    got = AicSteps._step(
        {
            "ms": "20.5",
            "ops": {
                "context_attention": 4.0,
                "generation_attention": 0.5,
                "gemm": 3.0,
                "moe": 6.0,
                "allreduce": 2.0,
                "embedding": 1.0,
            },
            "sources": {
                "context_attention": "silicon",
                "generation_attention": "estimated",
                "gemm": "silicon",
                "moe": "sol",
                "allreduce": "empirical",
            },
            "backend_version": "0.5.9",
        }
    )
    assert got == StepTime(
        ms=20.5,
        measured_ms=7.0,
        extrapolated_ms=7.5,
        sol_ms=6.0,
        attention_ms=4.5,
        origin="AIConfigurator 0.12.0 (SGLang 0.5.9 data on H200)",
        data_version="0.5.9",
    )


def test_a_step_without_a_backend_version_names_none() -> None:
    got = AicSteps._step({"ms": 1, "ops": {"mixed_attention": 1.0}, "sources": {"mixed_attention": "mixed"}})
    assert got == StepTime(1.0, 0, 1.0, 0, 1.0, "AIConfigurator 0.12.0 (SGLang  data on H200)", "")
    assert type(got.ms) is float


@pytest.mark.parametrize(("extra", "message"), [(1, "longer"), (-1, "shorter")])
def test_an_estimator_answering_another_count_than_asked_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: int, message: str
) -> None:
    def run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        count = len(json.loads(kwargs["input"])) + extra
        return subprocess.CompletedProcess(cmd, 0, json.dumps([answer(1.0)] * count), "")

    monkeypatch.setattr(sglang_perf_aic.subprocess, "run", run)
    cache = tmp_path / "perf"
    with pytest.raises(ValueError, match=f"^zip\\(\\) argument 2 is {message} than argument 1$"):
        AicSteps(make_venv(tmp_path, "0.12.0"), cache=cache).raw([REQ, REQ | {"isl": 3000}])
