"""Helpers of the performance-model tests: the repository, AIConfigurator's venv and the test's own direct run of the
estimator (not the project's code)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
PERF_VENV = REPO / ".cache" / "aiconfigurator-venv"
DIRECT = Path(__file__).with_name("aic_direct.py")


def model_config(name: str) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((REPO / "models" / name / "config.json").read_text())
    return config


def start_direct(cells: list[dict[str, Any]]) -> subprocess.Popen[str]:
    """AIConfigurator itself on `cells`, in its venv, by the test's own script (not the project's code)."""
    proc = subprocess.Popen(
        [str(PERF_VENV / "bin" / "python"), str(DIRECT)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(cells))
    proc.stdin.close()
    return proc


def finish_direct(proc: subprocess.Popen[str]) -> list[dict[str, Any]]:
    assert proc.stdout is not None and proc.stderr is not None
    out, err = proc.stdout.read(), proc.stderr.read()
    assert proc.wait(timeout=600) == 0, err[-2000:]
    answers: list[dict[str, Any]] = json.loads(out)
    return answers
