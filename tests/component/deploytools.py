"""Helpers of the render and contract tests: paths, the shared envelope, ansible-playbook runs."""

from __future__ import annotations

import subprocess
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


def tracked_copy(dest: Path) -> None:
    """The repository's tracked files as they are in the work tree (uncommitted edits included, untracked and ignored
    files left out: no venv, cache or report) in the new directory dest."""
    git = ["git", "-C", str(REPO)]
    tree = subprocess.run([*git, "stash", "create"], capture_output=True, text=True, check=True).stdout.strip()
    archive = subprocess.run([*git, "archive", tree or "HEAD"], capture_output=True, check=True).stdout
    dest.mkdir()
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
