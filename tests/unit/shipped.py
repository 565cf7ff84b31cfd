"""The shipped inventories (inventories/lab, multinode, production) as ansible-inventory resolves them, resolved
once per test session: ansible-inventory costs about a second a call, and many unit tests read them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_calibration import VARIABLE as PERF_MEASURED
from sglang_envelope_cli import commands as sglang_cli

REPO = Path(__file__).resolve().parents[2]
SHIPPED = ("lab", "multinode", "production")
Inventory = tuple[dict[str, Any], dict[str, list[str]]]
_RESOLVED: dict[str, Inventory] = {}


def shipped_inventory(name: str, measured: bool = False) -> Inventory:
    """(hostvars, groups) of inventories/<name>; a fresh copy each call. Without `measured`, the inventory's measured
    points (sglang_perf_measured) are left out: the unit tests answer steps from stub sources, which those points
    would calibrate into other numbers; the calibration's own tests keep them."""
    if name not in _RESOLVED:
        _RESOLVED[name] = sglang_cli.load_inventory(str(REPO / "inventories" / name))
    hostvars, groups = copy.deepcopy(_RESOLVED[name])
    if not measured:
        for hv in hostvars.values():
            hv.pop(PERF_MEASURED, None)
    return hostvars, groups
