"""Fixtures for the simulator tests: free ports, a model directory, simulator and smg processes.

Every process is started in its own session and killed in teardown; every wait has a deadline.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from simtools import MODEL_CONFIG, Launcher


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The model directory the sims read, holding the project's DeepSeek-V4-Flash config.json."""
    assert MODEL_CONFIG.is_file(), f"{MODEL_CONFIG} is missing"
    d = tmp_path_factory.mktemp("model") / "DeepSeek-V4-Flash"
    d.mkdir()
    shutil.copy(MODEL_CONFIG, d / "config.json")
    return d


@pytest.fixture(scope="module")
def launcher(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launcher]:
    lch = Launcher(model_dir, tmp_path_factory.mktemp("logs"))
    try:
        yield lch
    finally:
        lch.close()


@pytest.fixture
def fresh_launcher(model_dir: Path, tmp_path: Path) -> Iterator[Launcher]:
    lch = Launcher(model_dir, tmp_path)
    try:
        yield lch
    finally:
        lch.close()
