"""The performance-model tests need AIConfigurator's venv (make perf-venv; make test builds it): a missing venv is a
failure, not a skip, as for the parser venv of the contract tests."""

from __future__ import annotations

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_aic import AicSteps
from perftools import PERF_VENV


@pytest.fixture(scope="session")
def aic() -> AicSteps:
    steps = AicSteps()
    if not steps.ready():
        pytest.fail(f"{PERF_VENV}/.installed is missing; fix: run `make perf-venv` (make test does it)")
    return steps
