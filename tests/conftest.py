"""Settings shared by every test directory, and the marker of each group of tests (unit, component, lab)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

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


# Under mutmut (make mutation) the tests run in its copy, mutants/, whose collection holds the mutated module_utils:
# the core is imported from there, ahead of the work tree's (installed editable).
MUTATED = REPO / "collections"
if REPO.name == "mutants" and (MUTATED / "ansible_collections").is_dir():
    sys.path.insert(0, str(MUTATED))


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


# The directories whose few tests take longest (minutes each: venvs built from the package index, wheels and kernels
# built with nvcc, loads sent through smg), started first: xdist's own order (most tests first) leaves them for last,
# and the pass then ends on one worker while the other has nothing left.
# Longest first, by their time alone on an idle machine (s): readme 228, build 345, sim 153, fork 110 (nvcc),
# monitoring 90, bench 66, frontend 55, verify_offline 47, install 41, kernels 24.
LONGEST_FIRST = (
    "tests/component/readme",
    "tests/component/build",
    "tests/component/sim",
    "tests/component/fork",
    "tests/component/monitoring",
    "tests/component/bench",
    "tests/component/frontend",
    "tests/component/verify_offline",
    "tests/component/install",
    "tests/component/kernels",
)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under `pytest -n 2 --dist loadscope` (make test) a worker takes a whole directory of tests at a time and runs
    it in order: a directory's session fixtures and caches are set up once, and its tests that build on each other
    (tests/component/build) run in sequence."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class DirectoryScheduling(LoadScopeScheduling):  # type: ignore[misc]
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return nodeid.split("::", 1)[0].rpartition("/")[0]

        def _assign_work_unit(self, node: Any) -> None:
            if not self.ordered:  # the longest directories first, then xdist's order (most tests first)
                for scope in reversed([s for s in LONGEST_FIRST if s in self.workqueue]):
                    self.workqueue.move_to_end(scope, last=False)
                self.ordered = True
            super()._assign_work_unit(node)

    return DirectoryScheduling(config, log)
