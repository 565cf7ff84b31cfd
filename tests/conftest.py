"""Settings shared by every test directory, and the marker of each group of tests (unit, component, lab)."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# The tests by what they need: each top-level directory of tests/ gives its tests one marker (pytest -m component).
GROUPS: dict[Path, tuple[str, str]] = {
    REPO / "tests" / "unit": ("unit", "pure Python, no lab, no root (tests/unit)"),
    REPO / "tests" / "component": (
        "component",
        "the real SGLang and smg code, the simulator, ansible-playbook renders, compilers; no lab, no root "
        "(tests/component)",
    ),
    REPO / "tests" / "lab": (
        "lab",
        "boots or uses the systemd-nspawn lab (needs root and `make apt`); deselect with -m 'not lab' (tests/lab)",
    ),
}


def _import_the_mutated_package() -> None:
    """Under mutmut (make mutation) the tests run in its copy, mutants/, whose module_utils holds the mutated
    code: `sglang_envelope` (installed editable from the work tree's module_utils) must name that copy."""
    package = importlib.import_module("module_utils")
    assert Path(package.__file__ or "").resolve().parent == REPO / "module_utils", package.__file__
    sys.modules["sglang_envelope"] = package
    for path in sorted((REPO / "module_utils").glob("[!_]*.py")):
        sys.modules[f"sglang_envelope.{path.stem}"] = importlib.import_module(f"module_utils.{path.stem}")


if REPO.name == "mutants" and (REPO / "module_utils").is_dir():
    _import_the_mutated_package()


def pytest_configure(config: pytest.Config) -> None:
    for marker, meaning in GROUPS.values():
        config.addinivalue_line("markers", f"{marker}: {meaning}")
    config.addinivalue_line(
        "markers",
        "rollout: limit changes under load on the lab (slow, minutes); `make test` runs them once, in their own pass",
    )
    config.addinivalue_line(
        "markers",
        "faults: injects faults into site.yml runs on the lab (tests/lab/faults); deselect with -m 'not faults'",
    )
    # Tools run by tests (ansible-playbook, and ansible-inventory called by testinfra's ansible
    # backend) come from this interpreter's venv, and read the project's ansible.cfg from any cwd.
    venv_bin = str(Path(sys.executable).parent)
    if venv_bin not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join([venv_bin, os.environ.get("PATH", "")])
    os.environ.setdefault("ANSIBLE_CONFIG", str(REPO / "ansible.cfg"))


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test gets the marker of its group directory (GROUPS); tests outside them get none."""
    for item in items:
        path = item.path.resolve()
        for directory, (marker, _) in GROUPS.items():
            if path.is_relative_to(directory):
                item.add_marker(marker)
