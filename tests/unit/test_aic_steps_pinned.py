"""aic_steps.py, the script run inside AIConfigurator's venv, with AIConfigurator replaced by stubs: the estimate it
asks for per request, the answer it writes back, and the batch protocol on stdin and stdout."""

from __future__ import annotations

import io
import json
import logging
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils import aic_steps


class Tag:
    """A value that is not a str but prints as one (AIConfigurator's enums)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text


class Summary:
    def get_context_latency_dict(self) -> dict[str, Any]:
        return {"context_attention": "2.5", "context_gemm": 3}

    def get_context_source_dict(self) -> dict[str, Any]:
        return {"context_attention": Tag("silicon"), "context_gemm": Tag("sol")}

    def get_generation_latency_dict(self) -> dict[str, Any]:
        return {"generation_attention": "0.25", "generation_moe": 1}

    def get_generation_source_dict(self) -> dict[str, Any]:
        return {"generation_attention": Tag("estimated"), "generation_moe": Tag("empirical")}


class Result:
    def __init__(self, warning: Any) -> None:
        self.summary = Summary()
        self.ttft = "12.5"
        self.tpot = "1.75"
        self.backend_version = Tag("0.5.14")
        self.kv_cache_warning = warning


class Estimator:
    """cli_estimate's stand-in: records each call."""

    def __init__(self, warning: Any = "") -> None:
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self.warning = warning

    def __call__(self, *args: Any, **kwargs: Any) -> Result:
        self.calls.append((args, kwargs))
        return Result(self.warning)


def versions(log: list[str]) -> Any:
    def version(system: str) -> str:
        log.append(system)
        return f"v-{system}"

    return version


CTX_ANSWER = {
    "ms": 12.5,
    "ops": {"context_attention": 2.5, "context_gemm": 3.0},
    "sources": {"context_attention": "silicon", "context_gemm": "sol"},
    "backend_version": "0.5.14",
    "oom": None,
}
GEN_ANSWER = {
    "ms": 1.75,
    "ops": {"generation_attention": 0.25, "generation_moe": 1.0},
    "sources": {"generation_attention": "estimated", "generation_moe": "empirical"},
    "backend_version": "0.5.14",
    "oom": None,
}


def test_a_prefill_request_asks_for_one_static_context_pass() -> None:
    estimate, seen = Estimator(), []
    req = {
        "mode": "static_ctx",
        "model": "DEEPSEEK_V4",
        "system": "b200_sxm",
        "database_mode": "SILICON",
        "tp": "4",
        "ep": "8",
        "isl": "4096",
        "prefix": "1024",
        "batch": "3",
    }
    answer = aic_steps._estimate(estimate, versions(seen), req)
    assert estimate.calls == [
        (
            ("DEEPSEEK_V4", "b200_sxm"),
            {
                "mode": "static_ctx",
                "backend_name": "sglang",
                "backend_version": "v-b200_sxm",
                "database_mode": "SILICON",
                "isl": 4096,
                "osl": 2,
                "prefix": 1024,
                "batch_size": 3,
                "tp_size": 4,
                "moe_ep_size": 8,
            },
        )
    ]
    assert seen == ["b200_sxm"]
    assert answer == CTX_ANSWER
    assert [type(v) for v in answer["ops"].values()] == [float, float]
    assert type(answer["ms"]) is float


def test_a_request_without_system_mode_or_prefix_takes_h200_hybrid_and_no_prefix() -> None:
    estimate, seen = Estimator(), []
    req = {"mode": "static_ctx", "model": "M", "tp": 4, "ep": 4, "isl": 100, "batch": 1}
    aic_steps._estimate(estimate, versions(seen), req)
    assert estimate.calls == [
        (
            ("M", "h200_sxm"),
            {
                "mode": "static_ctx",
                "backend_name": "sglang",
                "backend_version": "v-h200_sxm",
                "database_mode": "HYBRID",
                "isl": 100,
                "osl": 2,
                "prefix": 0,
                "batch_size": 1,
                "tp_size": 4,
                "moe_ep_size": 4,
            },
        )
    ]
    assert seen == ["h200_sxm"]


def test_a_decode_request_asks_for_one_static_generation_step() -> None:
    estimate = Estimator()
    req = {"mode": "static_gen", "model": "M", "tp": 2, "ep": 2, "isl": 9000, "prefix": 0, "batch": 16}
    answer = aic_steps._estimate(estimate, versions([]), req)
    assert estimate.calls[0][1]["mode"] == "static_gen"
    assert answer == GEN_ANSWER
    assert type(answer["ms"]) is float


def test_the_kv_cache_warning_is_the_oom_field() -> None:
    req = {"mode": "static_gen", "model": "M", "tp": 2, "ep": 2, "isl": 9000, "batch": 16}
    answer = aic_steps._estimate(Estimator("KV cache exceeds memory"), versions([]), req)
    assert answer == GEN_ANSWER | {"oom": "KV cache exceeds memory"}


@pytest.mark.parametrize("mode", ["static", "ctx", "STATIC_CTX"])
def test_an_unknown_mode_is_an_error_answer_and_no_estimate(mode: str) -> None:
    estimate, seen = Estimator(), []
    req = {"mode": mode, "model": "M", "tp": 2, "ep": 2, "isl": 9000, "batch": 16}
    assert aic_steps._estimate(estimate, versions(seen), req) == {"error": f"unknown mode '{mode}'"}
    assert estimate.calls == []
    assert seen == []


# ---------------------------------------------------------------- libyaml


def _fake_yaml(with_libyaml: Any) -> types.ModuleType:
    yaml = types.ModuleType("yaml")
    loads: list[tuple[str, Any]] = []

    def load(text: str, Loader: Any) -> tuple[str, Any]:
        loads.append((text, Loader))
        return (text, Loader)

    def safe_load(text: str) -> str:
        return f"python parser: {text}"

    yaml.load = load  # type: ignore[attr-defined]
    yaml.safe_load = safe_load  # type: ignore[attr-defined]
    yaml.CSafeLoader = "CSafeLoader"  # type: ignore[attr-defined]
    yaml.loads = loads  # type: ignore[attr-defined]
    if with_libyaml is not None:
        yaml.__with_libyaml__ = with_libyaml  # type: ignore[attr-defined]
    return yaml


def test_yaml_safe_load_goes_through_libyaml_when_pyyaml_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    yaml = _fake_yaml(True)
    monkeypatch.setitem(sys.modules, "yaml", yaml)
    aic_steps.parse_yaml_in_c()
    assert yaml.safe_load("a: 1") == ("a: 1", "CSafeLoader")
    assert yaml.loads == [("a: 1", "CSafeLoader")]  # type: ignore[attr-defined]


@pytest.mark.parametrize("with_libyaml", [False, None])
def test_yaml_safe_load_stays_without_libyaml(monkeypatch: pytest.MonkeyPatch, with_libyaml: Any) -> None:
    yaml = _fake_yaml(with_libyaml)
    monkeypatch.setitem(sys.modules, "yaml", yaml)
    aic_steps.parse_yaml_in_c()
    assert yaml.safe_load("a: 1") == "python parser: a: 1"


# ---------------------------------------------------------------- the batch on stdin and stdout


@pytest.fixture
def logging_restored() -> Iterator[None]:
    before = logging.root.manager.disable
    yield
    logging.disable(before)


def _install_aiconfigurator(monkeypatch: pytest.MonkeyPatch, estimate: Any, lookups: list[tuple[str, str]]) -> None:
    def get_latest_database_version(*, system: str, backend: str) -> str:
        lookups.append((system, backend))
        return f"db-{system}"

    package = types.ModuleType("aiconfigurator")
    cli = types.ModuleType("aiconfigurator.cli")
    api = types.ModuleType("aiconfigurator.cli.api")
    sdk = types.ModuleType("aiconfigurator.sdk")
    perf_database = types.ModuleType("aiconfigurator.sdk.perf_database")
    api.cli_estimate = estimate  # type: ignore[attr-defined]
    perf_database.get_latest_database_version = get_latest_database_version  # type: ignore[attr-defined]
    for name, module in {
        "aiconfigurator": package,
        "aiconfigurator.cli": cli,
        "aiconfigurator.cli.api": api,
        "aiconfigurator.sdk": sdk,
        "aiconfigurator.sdk.perf_database": perf_database,
        "yaml": _fake_yaml(False),
    }.items():
        monkeypatch.setitem(sys.modules, name, module)


class NoisyEstimator(Estimator):
    """Prints a note as AIConfigurator does, and refuses a batch of 13."""

    def __call__(self, *args: Any, **kwargs: Any) -> Result:
        print("loading the database")
        if kwargs["batch_size"] == 13:
            raise ValueError("batch 13 is out of the table")
        return super().__call__(*args, **kwargs)


def test_main_answers_a_batch_in_order_on_stdout_only(monkeypatch: pytest.MonkeyPatch, logging_restored: None) -> None:
    estimate, lookups = NoisyEstimator(), []
    _install_aiconfigurator(monkeypatch, estimate, lookups)
    batch = [
        {"mode": "static_ctx", "model": "M", "tp": 4, "ep": 4, "isl": 100, "batch": 1},
        {"mode": "static_gen", "model": "M", "tp": 4, "ep": 4, "isl": 100, "batch": 13},
        {"mode": "decode", "model": "M", "tp": 4, "ep": 4, "isl": 100, "batch": 1},
        {"mode": "static_gen", "model": "M", "system": "b200_sxm", "tp": 4, "ep": 4, "isl": 100, "batch": 2},
        {"mode": "static_gen", "model": "M", "tp": 4, "ep": 4, "isl": 200, "batch": 2},
    ]
    stdin, stdout, stderr = io.StringIO(json.dumps(batch)), io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdin", stdin)
    monkeypatch.setattr(sys, "stdout", stdout)
    monkeypatch.setattr(sys, "stderr", stderr)
    assert aic_steps.main() == 0
    assert json.loads(stdout.getvalue()) == [
        CTX_ANSWER,
        {"error": "ValueError: batch 13 is out of the table"},
        {"error": "unknown mode 'decode'"},
        GEN_ANSWER,
        GEN_ANSWER,
    ]
    assert stdout.getvalue().startswith('[{"ms": 12.5, "ops": {"context_attention": 2.5, ')
    assert stderr.getvalue() == "loading the database\n" * 4
    # the database version is looked up once per system and handed to each estimate
    assert lookups == [("h200_sxm", "sglang"), ("b200_sxm", "sglang")]
    assert [kwargs["backend_version"] for _, kwargs in estimate.calls] == ["db-h200_sxm", "db-b200_sxm", "db-h200_sxm"]
    assert logging.root.manager.disable == logging.WARNING


def test_main_answers_an_empty_batch_with_an_empty_list(
    monkeypatch: pytest.MonkeyPatch, logging_restored: None
) -> None:
    _install_aiconfigurator(monkeypatch, Estimator(), [])
    stdout = io.StringIO()
    monkeypatch.setattr(sys, "stdin", io.StringIO("[]"))
    monkeypatch.setattr(sys, "stdout", stdout)
    assert aic_steps.main() == 0
    assert stdout.getvalue() == "[]"
