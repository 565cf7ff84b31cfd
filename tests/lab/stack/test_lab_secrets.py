"""The API key of the deployed lab is unreadable to an unprivileged local user by any path: ps, /proc/*/cmdline
and environ, the environment files, the serve scripts, the local facts, the journal; and the audit report does
not carry it. Needs the deployed lab (make lab)."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
import testinfra.host
from labtools import run_playbook

pytestmark = pytest.mark.lab

USER = "sglang-secret-probe"
# Every path a local user could try, each as one shell command run as that user.
PATHS = {
    "ps": "ps -eo pid,user,args ww",
    "proc cmdline": "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '",
    "proc environ": "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'",
    "env files": "cat /etc/sglang/* 2>&1",
    "serve scripts": "cat /opt/sglang/bin/* 2>&1",
    "local facts": "cat /etc/ansible/facts.d/* 2>&1",
    "journal": "journalctl --no-pager -o cat 2>&1 | tail -n 20000",
}
# Files the user can read, listed as the user; root then looks for the key in them (the key never enters the
# user's processes, whose command lines the other paths read).
READABLE = "find /etc /opt /var/lib /var/log /run /tmp /home -xdev -type f -readable"


def _key(host: testinfra.host.Host) -> str:
    for line in host.file("/etc/sglang/dsv4-decode.env").content_string.splitlines():
        name, _, value = line.partition("=")
        if name.strip() == "SGLANG_API_KEY":
            return value.strip().strip('"')
    pytest.fail("the lab's decode env file has no SGLANG_API_KEY; fix: make lab (the lab inventory sets one)")


@pytest.fixture(scope="module")
def lab_host(lab_hosts: dict[str, testinfra.host.Host]) -> Iterator[testinfra.host.Host]:
    host = next(iter(lab_hosts.values()))
    host.run_expect([0, 9], f"useradd --system --no-create-home --shell /bin/sh {USER}")
    yield host
    host.run(f"userdel {USER}")


def _as_user(host: testinfra.host.Host, command: str) -> str:
    """The output of `command` run as the unprivileged user (the key is never handed to it)."""
    run = host.run(f"runuser -u {USER} -- sh -c {shlex.quote(command)}")
    return run.stdout + run.stderr


def test_the_key_is_on_the_command_line_as_root(lab_host: testinfra.host.Host) -> None:
    """Control: root sees the key where SGLang puts it, so the checks below can fail."""
    key = _key(lab_host)
    assert key in lab_host.check_output("ps -eo args ww"), "no process carries --api-key; is the lab deployed?"


@pytest.mark.parametrize("path", list(PATHS))
def test_an_unprivileged_user_cannot_read_the_key(lab_host: testinfra.host.Host, path: str) -> None:
    key = _key(lab_host)
    seen = _as_user(lab_host, PATHS[path])
    assert key not in seen, f"{path}: the key is readable by {USER}"


def test_no_file_the_user_can_read_holds_the_key(lab_host: testinfra.host.Host) -> None:
    key = _key(lab_host)
    listing = "/run/sglang-secret-probe.list"
    lab_host.run(f"runuser -u {USER} -- sh -c {shlex.quote(READABLE + ' -print0')} > {listing}")
    count = int(lab_host.check_output(f"tr -cd '\\0' < {listing} | wc -c"))
    assert count > 0, f"{USER} can read no file at all; the listing failed"
    holding = lab_host.run(f"xargs -0 -a {listing} grep -lIF -- {shlex.quote(key)}").stdout.split()
    lab_host.run(f"rm -f {listing}")
    assert not holding, f"files readable by {USER} hold the key: {holding}"


def test_an_unprivileged_user_does_not_see_the_engines(lab_host: testinfra.host.Host) -> None:
    seen = _as_user(lab_host, "ps -eo user:32,args ww")  # full user names: ps truncates them to 8 characters
    assert "sglang" not in seen.replace(USER, ""), f"{USER} sees the servers' processes:\n{seen}"


def test_the_audit_report_does_not_carry_the_key(lab: Path, lab_hosts: dict, tmp_path: Path) -> None:
    key = _key(next(iter(lab_hosts.values())))
    run_playbook("-i", str(lab), "audit.yml", "--check", "-e", f"sglang_audit_report_dir={tmp_path}")
    leaked = [p for p in tmp_path.rglob("*") if p.is_file() and key in p.read_text(errors="replace")]
    assert list(tmp_path.rglob("*")), "the audit wrote no report"
    assert not leaked, f"the audit report carries the key: {leaked}"
