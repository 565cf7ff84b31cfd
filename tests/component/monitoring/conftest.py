"""Fixtures of the monitoring tests: the generated rules of the lab inventory, promtool, the simulator launcher."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests" / "component" / "sim"))

from sglang_envelope_cli.commands import load_inventory  # noqa: E402
from simtools import MODEL_CONFIG, Launcher  # noqa: E402


@pytest.fixture(scope="session")
def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is missing: `make apt` installs Debian's prometheus package, which brings it"
    return found


@pytest.fixture(scope="session")
def lab_inventory() -> tuple[dict[str, Any], dict[str, list[str]]]:
    return load_inventory(str(REPO / "inventories" / "lab"))


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("model") / "DeepSeek-V4-Flash"
    d.mkdir()
    shutil.copy(MODEL_CONFIG, d / "config.json")
    return d


@pytest.fixture
def launcher(model_dir: Path, tmp_path: Path) -> Iterator[Launcher]:
    lch = Launcher(model_dir, tmp_path)
    try:
        yield lch
    finally:
        lch.close()
