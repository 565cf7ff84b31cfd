"""The lab host the audit tests run on: a scratch host of their own, or the shared lab (SGLANG_AUDIT_LAB=shared)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
# Whether a test's body passed (conftest.py's pytest_runtest_makereport): the fixture that redeploys after a test
# skips a rerun that the test's own last steps (site.yml, then a clean audit) made needless.
BODY_PASSED = pytest.StashKey[bool]()
LAB_TESTS = REPO / "tests" / "lab" / "stack"
SCRATCH = "labaudit"


@dataclass(frozen=True)
class AuditLab:
    inventory: Path
    host: str  # runs prefill, decode and router


def lab_unavailable() -> str | None:
    """Why the lab cannot run here, or None."""
    if not (LAB_TESTS / "conftest.py").is_file():
        return "tests/lab/stack/conftest.py (the lab fixture) does not exist"
    if os.geteuid() != 0:
        return "the lab needs root"
    missing = [t for t in ("systemd-nspawn", "nsenter", "socat", "ssh", "debootstrap") if shutil.which(t) is None]
    if missing:
        return f"the lab needs {', '.join(missing)} on the controller (make apt)"
    return None


def shared_lab_requested() -> bool:
    return os.environ.get("SGLANG_AUDIT_LAB") == "shared"


def scratch_inventory(folder: Path) -> Path:
    """The lab inventory's group_vars with one host of our own in every server group."""
    (folder / "group_vars").symlink_to(REPO / "inventories" / "lab" / "group_vars")
    member = {"hosts": {SCRATCH: None}}
    children = {
        "sglang_lab_hosts": {"hosts": {SCRATCH: {"ansible_host": SCRATCH}}},
        "sglang_engine": {"children": {"sglang_prefill": member, "sglang_decode": member}},
        "sglang_router": member,
    }
    path = folder / "hosts.yml"
    path.write_text(json.dumps({"all": {"children": children}}))  # JSON is YAML
    return path


def first_decode_host(inventory: Path) -> str:
    out = subprocess.run(["ansible-inventory", "-i", str(inventory), "--list"], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    return str(json.loads(out)["sglang_decode"]["hosts"][0])
