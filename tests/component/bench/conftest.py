"""Fixtures of the benchmark tests: simulators and the smg router on loopback (the simulator tests' launcher)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests" / "component" / "sim"))

from simtools import MODEL_CONFIG, Launcher  # noqa: E402


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Launcher]:
    model = tmp_path / "model" / "DeepSeek-V4-Flash"
    model.mkdir(parents=True)
    shutil.copy(MODEL_CONFIG, model / "config.json")
    lch = Launcher(model, tmp_path)
    try:
        yield lch
    finally:
        lch.close()
