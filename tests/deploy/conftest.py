"""Fixtures for the deploy-path tests: ansible-playbook runs, throwaway inventories, rendered files."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ENVELOPE = REPO / "group_vars" / "all" / "envelope.yml"
LAB_INVENTORY = REPO / "inventories" / "lab"
INVENTORIES = ("lab", "production", "multinode")

_RECAP = re.compile(
    r"^(?P<host>\S+)\s*:\s*ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
    r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)",
    re.MULTILINE,
)


@dataclass(frozen=True)
class Run:
    """One ansible-playbook run: exit code, output and the PLAY RECAP counters per host."""

    args: tuple[str, ...]
    returncode: int
    output: str

    @property
    def recap(self) -> dict[str, dict[str, int]]:
        return {
            m["host"]: {k: int(m[k]) for k in ("ok", "changed", "unreachable", "failed")}
            for m in _RECAP.finditer(self.output)
        }

    def ok(self) -> Run:
        if self.returncode != 0:
            pytest.fail(f"ansible-playbook {' '.join(self.args)} exited {self.returncode}:\n{self.output[-5000:]}")
        return self


def playbook(*args: str, timeout: float = 900, env: dict[str, str] | None = None) -> Run:
    """ansible-playbook from the repository root with the project's ansible.cfg."""
    binary = Path(sys.executable).with_name("ansible-playbook")
    proc = subprocess.run(
        [str(binary), *args],
        cwd=REPO,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1", **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return Run(tuple(args), proc.returncode, proc.stdout + proc.stderr)


def envelope() -> dict[str, Any]:
    """The shared declared envelope (group_vars/all/envelope.yml)."""
    return dict(yaml.safe_load(ENVELOPE.read_text()))


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
    """(inventory name, directory) of playbooks/render.yml's output for each inventory."""
    out = tmp_path_factory.mktemp(f"deploy-render-{request.param}")
    playbook("-i", f"inventories/{request.param}", "playbooks/render.yml", "-e", f"sglang_render_dir={out}").ok()
    return request.param, out
