"""The argument tables validation, the codec and the simulator use are the real parsers' tables: every action's
option strings, dest, type, nargs, choices, default and action class, in order, as SGLang 0.5.23 (on CPU, in the
parser venv) and smg 1.13.0 (in this venv) register them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_argspec import SGLANG_ROWS, SMG_ROWS, Flag
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_schema import KEYS
from flag_dump import rows_of, smg_parser

REPO = Path(__file__).resolve().parents[3]
PARSER_PYTHON = REPO / ".cache" / "sglang-parser-venv" / "bin" / "python"


def _as_rows(table: tuple[Flag, ...]) -> list[list[Any]]:
    return [[list(f.options), f.dest, f.type, f.nargs, f.choices, f.default, f.action] for f in table]


def _compare(ours: list[list[Any]], real: list[list[Any]], what: str) -> None:
    diff = [(o, r) for o, r in zip(ours, real, strict=False) if o != r]
    assert not diff, f"{what}: first differing rows (ours, real): {diff[:3]}; fix: make flag-tables"
    assert len(ours) == len(real), f"{what}: {len(ours)} rows here, {len(real)} in the parser; fix: make flag-tables"


def test_sglang_table_is_sglang_parser() -> None:
    if not PARSER_PYTHON.exists():
        pytest.fail(f"{PARSER_PYTHON} is missing; fix: run `make parser-venv` (make test does it)")
    run = subprocess.run(
        [str(PARSER_PYTHON), str(Path(__file__).with_name("flag_dump.py")), "sglang"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    real = json.loads(run.stdout)
    assert len(real) == 531  # 532 actions with --help
    assert sum(1 for row in real if row[4] is not None) >= 90  # flags with a fixed set of choices
    _compare(_as_rows(SGLANG_ROWS), real, "SGLang 0.5.23")


def test_smg_table_is_smg_parser() -> None:
    real = json.loads(json.dumps(rows_of(smg_parser())))
    assert len(real) == 212  # 213 actions with --help
    _compare(_as_rows(SMG_ROWS), real, "smg 1.13.0")


def test_every_envelope_flag_is_in_its_parser() -> None:
    """The schema takes each key's flag and type from the tables; the tables must carry every key."""
    for key in KEYS:
        assert key.flag or key.env, key.name
        if key.flag:
            assert key.kind in ("int", "float", "str", "bool", "intlist", "strlist", "size"), key
