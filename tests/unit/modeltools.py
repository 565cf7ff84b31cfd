"""The repository root and the model configs shipped in models/, for the unit tests (a module of its own: pytest
loads several conftest modules under one name, so tests import helpers from here, not from conftest)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "models"


def load_model(name: str) -> dict[str, Any]:
    return dict(json.loads((MODELS / name / "config.json").read_text()))
