"""Shared fixtures for the unit tests: the model configs shipped in models/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

MODELS = Path(__file__).resolve().parents[2] / "models"


def load_model(name: str) -> dict[str, Any]:
    return dict(json.loads((MODELS / name / "config.json").read_text()))


@pytest.fixture
def dsv4() -> dict[str, Any]:
    return load_model("deepseek-v4-flash")


@pytest.fixture
def v32() -> dict[str, Any]:
    return load_model("deepseek-v3.2")
