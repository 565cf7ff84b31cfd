"""The shipped inventories (inventories/lab, multinode, production) as ansible-inventory resolves them, resolved
once per test session: ansible-inventory costs about a second a call, and many unit tests read them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from sglang_envelope_cli import commands as sglang_cli

REPO = Path(__file__).resolve().parents[2]
SHIPPED = ("lab", "multinode", "production")
Inventory = tuple[dict[str, Any], dict[str, list[str]]]
_RESOLVED: dict[str, Inventory] = {}


def shipped_inventory(name: str) -> Inventory:
    """(hostvars, groups) of inventories/<name>; a fresh copy each call."""
    if name not in _RESOLVED:
        _RESOLVED[name] = sglang_cli.load_inventory(str(REPO / "inventories" / name))
    return copy.deepcopy(_RESOLVED[name])
