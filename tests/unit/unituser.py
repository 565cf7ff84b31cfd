"""A user who is not root, made for a test as the deploy makes a unit's user (a system user without a home), and
removed after it (a test runs a command as that user through runuser, as systemd runs the unit's process)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class UnitUser:
    name: str
    uid: int
    gid: int
    group: str


@contextmanager
def unit_user() -> Iterator[UnitUser]:
    """A fresh system user and group (named after this process, so parallel workers do not meet); skips where the
    tests do not run as root or the host lacks useradd."""
    if os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("runuser"):
        pytest.skip("making a user needs root, useradd and runuser")
    name = f"sglt{os.getpid()}"
    made = subprocess.run(["useradd", "--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin",
                           name], capture_output=True, text=True, check=False)  # fmt: skip
    assert made.returncode == 0, made.stderr
    try:
        import grp
        import pwd

        entry = pwd.getpwnam(name)
        yield UnitUser(name, entry.pw_uid, entry.pw_gid, grp.getgrgid(entry.pw_gid).gr_name)
    finally:
        subprocess.run(["userdel", name], capture_output=True, check=False)
        subprocess.run(["groupdel", name], capture_output=True, check=False)
