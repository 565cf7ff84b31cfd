"""Shared fixtures for the unit tests: the model configs shipped in models/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sglang_envelope_cli import commands as sglang_cli
from shipped import SHIPPED, shipped_inventory

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "models"


def load_model(name: str) -> dict[str, Any]:
    return dict(json.loads((MODELS / name / "config.json").read_text()))


@pytest.fixture
def dsv4() -> dict[str, Any]:
    return load_model("deepseek-v4-flash")


@pytest.fixture
def v32() -> dict[str, Any]:
    return load_model("deepseek-v3.2")


def pytest_collection_finish(session: pytest.Session) -> None:
    """The shipped inventories are resolved while collecting, so every test (and a forked worker) has them."""
    if any("tests/unit" in str(item.path) for item in session.items):
        for name in SHIPPED:
            shipped_inventory(name)


@pytest.fixture(autouse=True)
def _shipped_inventories_resolved_once(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's --inventory of a shipped inventory reads the resolved copy; load_inventory's own tests do not."""
    if "load_inventory" in request.node.name:
        return
    real = sglang_cli.load_inventory

    def load(inventory: str) -> tuple[dict[str, Any], dict[str, list[str]]]:
        path = Path(inventory).resolve()
        shipped = [name for name in SHIPPED if path == REPO / "inventories" / name]
        return shipped_inventory(shipped[0]) if shipped else real(inventory)

    monkeypatch.setattr(sglang_cli, "load_inventory", load)
