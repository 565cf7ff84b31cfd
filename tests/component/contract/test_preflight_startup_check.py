"""The preflight's last step on an engine: SGLang's own startup checks run by the release's Python, with the
unit's environment, on the flags its serve script passes (plugins/module_utils/sglang_preflight.py PROBE). Here the
parser venv plays the release (it has SGLang 0.5.23), the probe runs as this process (the transient unit's user and
sandbox are the module's part, tested on the lab), and the model path is the controller's copy of the config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_flags import to_environ
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_preflight import probe_argv, server_problems
from deploytools import REPO, envelope

F_PATH = REPO / "collections/ansible_collections/sglang/dsv4/plugins/filter/sglang.py"
PARSER_PYTHON = REPO / ".cache" / "sglang-parser-venv" / "bin" / "python"


def _filters() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("sglang_filters_startup", F_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


F = _filters()


def probe(python: Path, envelope_changes: dict[str, Any], extra_env: dict[str, str]) -> dict[str, Any]:
    """The probe's answer for the production decode engine (its envelope changed by `envelope_changes`), run with
    the environment its unit's file would hold."""
    hostvars = envelope()
    hostvars["sglang_decode"] = {**hostvars["sglang_decode"], **envelope_changes}
    declared = F.engine_envelope(hostvars, "decode", True)
    argv = F.argv(declared, "decode")
    argv[argv.index("--model-path") + 1] = str(REPO / "models" / str(hostvars["sglang_model"]["name"]))
    check = {**F.startup_check_files(), "argv": argv, "timeout": 240}
    spec = {"listeners": [], "paths": [], "python": str(python), "imports": [], "gpu_ids": [], "sglang_check": check}
    unit_env = {**dict(to_environ("decode", declared)), "SGLANG_API_KEY": "s3cret", **extra_env}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "SGL_", "MC_"))} | unit_env
    run = subprocess.run(probe_argv(sys.executable, spec), capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    return dict(json.loads(run.stdout))


def problems(answer: dict[str, Any]) -> list[str]:
    server = {
        "role": "decode",
        "unit": "sglang-dsv4-decode",
        "user": "sglang",
        "python": "/opt/sglang/current/venv/bin/python",
    }
    return server_problems(server, answer, lambda _port: [])


@pytest.fixture(scope="module")
def parser_python() -> Path:
    if not PARSER_PYTHON.exists():
        pytest.fail(f"{PARSER_PYTHON} is missing; fix: run `make parser-venv` (make test does it)")
    return PARSER_PYTHON


def test_the_production_engine_passes_sglang_checks_in_the_release(parser_python: Path) -> None:
    answer = probe(parser_python, {}, {})
    assert answer["sglang_check"]["ok"] is True, answer["sglang_check"]
    assert answer["sglang_check"]["resolved"]["disaggregation_mode"] == "decode"
    assert problems(answer) == []


def test_what_the_release_refuses_stops_the_preflight_with_what_it_names(parser_python: Path) -> None:
    """A kv-cache dtype that SGLang 0.5.23 refuses for DeepSeek-V4 (the deep check's corpus has it too)."""
    answer = probe(parser_python, {"kv_cache_dtype": "fp8_e5m2"}, {})
    assert answer["sglang_check"]["ok"] is False
    found = problems(answer)
    assert len(found) == 1 and found[0].startswith(
        "sglang-dsv4-decode: SGLang's own startup checks, run in the release's Python /opt/sglang/current/venv/bin/"
        "python as the unit runs (its user, sandbox and environment file), refuse its command line: "
    ), found
    assert "--kv-cache-dtype" in found[0] and "sglang_decode.*" in found[0]


def test_a_release_without_sglang_is_noted_not_refused() -> None:
    answer = probe(Path(sys.executable), {}, {})
    assert answer["sglang_check"] == {"skipped": f"the release's Python {sys.executable} has no sglang"}
    assert problems(answer) == []
