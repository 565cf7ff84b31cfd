"""The registry of environment variables that validation checks sglang_engine_extra_env against is SGLang 0.5.23's own
(sglang/srt/environ.py, read in the parser venv): every variable's name, kind, default, deprecated alias and secrecy,
in order, and the names it only warns about. Values are judged as SGLang's own parse judges them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_envtable import DEPRECATED, ENVS
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_sidedoors import REGISTRY, env_value_problem

REPO = Path(__file__).resolve().parents[3]
PARSER_PYTHON = REPO / ".cache" / "sglang-parser-venv" / "bin" / "python"
DUMP = Path(__file__).with_name("env_dump.py")


def _dump(*args: str, stdin: str | None = None) -> Any:
    if not PARSER_PYTHON.exists():
        pytest.fail(f"{PARSER_PYTHON} is missing; fix: run `make parser-venv` (make test does it)")
    run = subprocess.run(
        [str(PARSER_PYTHON), str(DUMP), *args], input=stdin, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


def test_table_is_sglang_registry() -> None:
    real = _dump()
    ours = [list(r) for r in ENVS]
    diff = [(o, r) for o, r in zip(ours, real["envs"], strict=False) if o != r]
    assert not diff, f"first differing rows (ours, real): {diff[:3]}; fix: make flag-tables"
    assert len(ours) == len(real["envs"]), f"{len(ours)} rows, {len(real['envs'])} in SGLang; fix: make flag-tables"
    assert [list(r) for r in DEPRECATED] == real["deprecated"], "fix: make flag-tables"
    assert len(ours) >= 700 and {r[1] for r in ours} == {"bool", "int", "float", "str", "tuple", "json"}
    # The variables the PD rules read are in it, with SGLang's defaults.
    assert REGISTRY["SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT"][1:3] == ("int", 300)
    assert REGISTRY["SGLANG_DISAGGREGATION_QUEUE_SIZE"][1:3] == ("int", 4)
    assert REGISTRY["SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL"][1:3] == ("float", 5.0)


# Texts for each kind, including the ones people write that SGLang's parse refuses.
TEXTS = {
    "bool": ["1", "0", "true", "TRUE", "False", "yes", "Y", "n", "on", "off", "2", "", " 1", "enabled"],
    "int": ["5", "-1", " 7 ", "+3", "1_000", "5m", "1.5", "", "0x10", "1e3", "300s"],
    "float": ["2", "2.5", "-0.5", "inf", "nan", "5s", "1e3", "", "1,5", "1_0.5"],
    "json": ['{"a": 1}', "[1, 2]", "{bad", "", "null", "'x'", "7"],
    "str": ["", "anything", "{bad"],
    "tuple": ["a,b", "", ","],
}


def test_values_are_judged_as_sglang_parses_them() -> None:
    """env_value_problem refuses exactly the texts SGLang's own EnvField.parse refuses (then SGLang warns and runs
    with the default), for a variable of every kind."""
    names = {kind: next(r[0] for r in ENVS if r[1] == kind) for kind in TEXTS}
    pairs = [[names[kind], text] for kind, texts in TEXTS.items() for text in texts]
    real = _dump("--parse", stdin=json.dumps(pairs))
    for (name, text), (accepted, detail) in zip(pairs, real, strict=True):
        problem = env_value_problem(name, text)
        assert (problem is None) == accepted, (name, text, detail, problem)
        if problem:
            assert detail in problem and f"Invalid value for {name}" in problem, (problem, detail)
