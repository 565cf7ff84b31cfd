"""Shared fixtures for the unit tests: the model configs shipped in models/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from modeltools import REPO, load_model
from sglang_envelope_cli import commands as sglang_cli
from shipped import SHIPPED, shipped_inventory


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
        # Resolved on both sides: under make mutation the inventories are a link from mutmut's copy to the checkout.
        shipped = [name for name in SHIPPED if path == (REPO / "inventories" / name).resolve()]
        return shipped_inventory(shipped[0]) if shipped else real(inventory)

    monkeypatch.setattr(sglang_cli, "load_inventory", load)


@pytest.fixture(autouse=True)
def _no_time_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """The unit tests run without the estimator's venv, whether or not this checkout has one: the CLI's time model
    answers "time: not predicted"; tests that predict pass a step source of their own."""
    from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_perf_fleet

    monkeypatch.setattr(sglang_cli, "time_steps", lambda: None)
    monkeypatch.setattr(sglang_perf_fleet, "default_steps", lambda: None)
