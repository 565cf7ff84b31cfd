"""Fixtures for the render and contract tests: ansible-playbook runs, throwaway inventories, rendered files."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploytools import INVENTORIES, LAB_INVENTORY, VAULT_KEY, playbook


@pytest.fixture
def bad_inventory(tmp_path: Path) -> Callable[[dict[str, Any]], Path]:
    """A copy of the lab inventory (symlinks resolved) plus one override file; lab1 points at an
    unroutable address, so any contact would show up as an unreachable lab1 in the recap."""

    def make(overrides: dict[str, Any]) -> Path:
        inventory = tmp_path / "inventory"
        shutil.copytree(LAB_INVENTORY, inventory, symlinks=False)
        (inventory / "group_vars" / "all" / "zz-test-override.yml").write_text(yaml.safe_dump(overrides))
        host_vars = inventory / "host_vars"
        host_vars.mkdir(exist_ok=True)
        (host_vars / "lab1.yml").write_text(
            yaml.safe_dump(
                {
                    "ansible_connection": "ssh",
                    "ansible_host": "192.0.2.1",
                    "ansible_ssh_common_args": "-o ConnectTimeout=2",
                }
            )
        )
        return inventory

    return make


@pytest.fixture(scope="session", params=INVENTORIES)
def rendered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """(inventory name, directory) of playbooks/render.yml's output for each inventory; an inventory that takes its
    API key from its vault file gets it as an operator's vault file gives it (VAULT_KEY, here in the clear)."""
    out = tmp_path_factory.mktemp(f"deploy-render-{request.param}")
    vault = out.parent / f"vault-{request.param}.yml"
    vault.write_text(yaml.safe_dump({"sglang_api_key": VAULT_KEY}))
    playbook("-i", f"inventories/{request.param}", "playbooks/render.yml", "-e", f"sglang_render_dir={out}",
             *(["-e", f"@{vault}"] if request.param != "lab" else [])).check()  # fmt: skip
    return request.param, out
