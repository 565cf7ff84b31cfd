"""Rendered files of every inventory, produced by playbooks/render.yml with the deploy templates."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
INVENTORIES = ("lab", "production", "multinode")
PARSER_PYTHON = REPO / ".cache" / "sglang-parser-venv" / "bin" / "python"


@pytest.fixture(scope="session", params=INVENTORIES)
def rendered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp(f"render-{request.param}")
    playbook = Path(sys.executable).with_name("ansible-playbook")
    run = subprocess.run(
        [str(playbook), "-i", f"inventories/{request.param}", "playbooks/render.yml", "-e", f"sglang_render_dir={out}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return out


@pytest.fixture(scope="session")
def sglang_python() -> Path:
    if not PARSER_PYTHON.exists():
        pytest.fail(f"{PARSER_PYTHON} is missing; fix: run `make parser-venv` (make test does it)")
    return PARSER_PYTHON
