"""The simulator's tables against SGLang 0.5.23's real parser and ServerArgs (in the parser venv).

sim/sglang_sim/flag_table.py claims every `serve` option in registration order, with its dest;
sim/sglang_sim/server_args_defaults.py claims every ServerArgs field that /server_info serializes, with the
value the parser gives it before model resolution. Both are read here from SGLang itself
(tests/component/contract/sglang_parse.py --describe), not from the simulator's own counts.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from pool_grid import PARSER_PYTHON, REPO
from sglang_sim.flag_table import SGLANG_FLAGS
from sglang_sim.server_args_defaults import SERVER_ARGS_DEFAULTS

HELP = ["-h", "--help"]


@pytest.fixture(scope="module")
def sglang() -> dict[str, Any]:
    if not PARSER_PYTHON.exists():
        pytest.fail(f"{PARSER_PYTHON} is missing; fix: run `make parser-venv` (make test does it)")
    run = subprocess.run(
        [str(PARSER_PYTHON), str(REPO / "tests" / "component" / "contract" / "sglang_parse.py"), "--describe"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return dict(json.loads(run.stdout))


def test_flag_table_is_the_parser_in_order(sglang: dict[str, Any]) -> None:
    actions = [(tuple(o), d) for o, d in zip(sglang["options"], sglang["dests"], strict=True) if o != HELP]
    assert len(sglang["options"]) == len(actions) + 1  # the --help action
    ours = [(row[0], row[3]) for row in SGLANG_FLAGS]
    missing = [a for a in actions if a not in ours]
    extra = [a for a in ours if a not in actions]
    assert not missing and not extra, f"missing from the table: {missing[:10]}; not SGLang's: {extra[:10]}"
    assert ours == actions, "same options, different order: argparse prefix matching would differ"


def test_server_args_fields_are_sglangs(sglang: dict[str, Any]) -> None:
    keys = sglang["resolved_keys"]
    assert set(SERVER_ARGS_DEFAULTS) == set(keys), set(SERVER_ARGS_DEFAULTS) ^ set(keys)
    assert list(SERVER_ARGS_DEFAULTS) == keys  # /server_info's key order


def test_server_args_defaults_are_sglangs(sglang: dict[str, Any]) -> None:
    resolved = sglang["resolved"]
    differ = {
        key: (value, resolved[key])
        for key, value in SERVER_ARGS_DEFAULTS.items()
        if key != "model_path" and json.loads(json.dumps(value, default=str)) != resolved[key]
    }
    assert not differ, f"{len(differ)} defaults differ (simulator, SGLang): {dict(list(differ.items())[:10])}"


def test_the_counts_the_simulator_states(sglang: dict[str, Any]) -> None:
    """sim/README.md and tests/component/sim state 531 options (532 actions with --help) and 546 fields: SGLang's
    counts."""
    assert (len(sglang["options"]), len(SGLANG_FLAGS)) == (532, 531)
    assert len(sglang["resolved_keys"]) == len(SERVER_ARGS_DEFAULTS) == 546
