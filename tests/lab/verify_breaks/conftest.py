"""Fixtures for the tests that break the lab on purpose and show the verify suite catching it.

Each test changes one thing on the lab host, runs the verify suite in a subprocess, asserts that it fails
with the specific check named, and puts the lab back (undoing the change, restarting what it restarted and
waiting for the router to report every worker healthy again).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The verify suite's modules (verify_expect, verify_remote, its probe checks) are imported from here.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "verify"))

from breaks_lab import Lab
from lab.stack.labtools import run_playbook


@pytest.fixture(scope="session")
def lab() -> Lab:
    if os.geteuid() != 0 or not Path("/run/netns").exists():
        pytest.fail("the break tests need root and the lab (make lab)", pytrace=False)
    # The lab up and deployed, as `make lab` leaves it (both playbooks are idempotent).
    run_playbook("playbooks/lab.yml").check()
    run_playbook("site.yml").check()
    lab = Lab()
    units = " ".join(f"{s.unit}.service" for s in lab.plan.servers.values())
    active = lab.host.run(f"systemctl is-active {units}")
    if active.rc != 0:
        pytest.fail(f"the lab is not deployed ({active.stdout.split()}) after site.yml", pytrace=False)
    return lab


@pytest.fixture
def ready_lab(lab: Lab) -> Iterator[Lab]:
    """The lab, ready before the test and made ready again after it."""
    lab.wait_ready()
    yield lab
    lab.wait_ready()
