"""Fixtures for the audit against the lab.

`lab` is the fixture of tests/lab/stack (it boots the shared lab and its rootfs). The drift tests edit files and restart
engines, so by default they run on a scratch lab host of their own (`labaudit`, booted next to the shared hosts
with the same group_vars, powered off at the end); SGLANG_AUDIT_LAB=shared runs them on the shared lab instead.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from audit_lab import (
    BODY_PASSED,
    LAB_TESTS,
    SCRATCH,
    AuditLab,
    first_decode_host,
    lab_unavailable,
    scratch_inventory,
    shared_lab_requested,
)

sys.path.insert(0, str(LAB_TESTS))  # labtools

_REASON = lab_unavailable()
if _REASON is None:
    _spec = importlib.util.spec_from_file_location("lab_conftest", LAB_TESTS / "conftest.py")
    assert _spec is not None and _spec.loader is not None
    _lab_conftest = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_lab_conftest)
    lab = _lab_conftest.lab
else:

    @pytest.fixture(scope="session")
    def lab() -> Path:
        pytest.skip(f"lab not up: {_REASON}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Iterator[pytest.TestReport]:
    report: pytest.TestReport = yield
    if report.when == "call":
        item.stash[BODY_PASSED] = report.passed
    return report


@pytest.fixture(scope="session")
def audit_lab(lab: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuditLab]:
    from labtools import run_playbook

    if shared_lab_requested():
        yield AuditLab(lab, first_decode_host(lab))
        return
    inventory = scratch_inventory(tmp_path_factory.mktemp("auditlab"))
    run_playbook("-i", str(inventory), "playbooks/lab.yml").check()
    try:
        yield AuditLab(inventory, SCRATCH)
    finally:
        run_playbook("-i", str(inventory), "playbooks/lab_down.yml").check()
