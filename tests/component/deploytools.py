"""Helpers of the render and contract tests: paths, the shared envelope, ansible-playbook runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from lab.stack.labtools import PlaybookRun as Run
from lab.stack.labtools import run_playbook as playbook

REPO = Path(__file__).resolve().parents[2]
ENVELOPE = REPO / "group_vars" / "all" / "envelope.yml"
LAB_INVENTORY = REPO / "inventories" / "lab"
INVENTORIES = ("lab", "production", "multinode")
VAULT_KEY = "sk-from-the-vault-file"  # the key of the inventories whose key lives in group_vars/all/vault.yml

__all__ = ["Run", "playbook"]  # shared with the lab tests: one way to run ansible-playbook and read its recap


def envelope() -> dict[str, Any]:
    """The shared declared envelope (group_vars/all/envelope.yml)."""
    return dict(yaml.safe_load(ENVELOPE.read_text()))
