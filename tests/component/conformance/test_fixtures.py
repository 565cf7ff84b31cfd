"""The audit fixtures that claim to be SGLang's are what SGLang 0.5.23's code produces (make_fixtures.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from pool_grid import PARSER_PYTHON, REPO

FIXTURES = REPO / "tests" / "unit" / "audit" / "fixtures"
MADE_BY_SGLANG = (
    "server_info_decode.json",
    "server_info_prefill.json",
    "models.json",
    "loads_decode.json",
    "metrics_decode.txt",
)


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not PARSER_PYTHON.exists():
        pytest.fail(f"{PARSER_PYTHON} is missing; fix: run `make parser-venv` (make test does it)")
    out = tmp_path_factory.mktemp("fixtures")
    run = subprocess.run(
        [str(PARSER_PYTHON), str(FIXTURES / "make_fixtures.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=REPO,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return out


@pytest.mark.parametrize("name", MADE_BY_SGLANG)
def test_committed_fixture_is_what_sglang_produces(regenerated: Path, name: str) -> None:
    committed = (FIXTURES / name).read_text()
    assert (regenerated / name).read_text() == committed, f"{name} is stale: run `make fixtures`"


def test_sglang_returns_the_api_key_in_server_info(regenerated: Path) -> None:
    """Why the no-leak tests are meaningful: SGLang's own /server_info carries the key in plain text."""
    body = json.loads((regenerated / "server_info_decode.json").read_text())
    assert body["api_key"] == "sk-lab-secret-123"
    assert "--api-key sk-lab-secret-123" in body["launch_command"]
