"""The lab lifecycle: boot, reach over SSH through the inventory, idempotence, teardown."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import testinfra.host
from labtools import REPO, nspawn_pids, run_playbook

pytestmark = pytest.mark.lab

# A second, throwaway host for the teardown test, so the shared lab stays up.
SCRATCH = "labscratch"


def test_hosts_run_systemd_as_pid1(lab_hosts: dict[str, testinfra.host.Host]) -> None:
    for name, host in lab_hosts.items():
        state = host.run("systemctl is-system-running").stdout.strip()
        failed = host.run("systemctl --failed --no-legend --plain").stdout.strip()
        assert state in {"running", "degraded"}, f"{name}: {state}; failed units: {failed}"
        assert host.file("/proc/1/comm").content_string.strip() == "systemd", name
        assert host.run("hostname").stdout.strip() == name


def test_hosts_have_only_loopback(lab_hosts: dict[str, testinfra.host.Host]) -> None:
    for name, host in lab_hosts.items():
        links = json.loads(host.check_output("ip -json link show"))
        assert [link["ifname"] for link in links] == ["lo"], name
        assert "UP" in links[0]["flags"], f"{name}: lo is down, sshd would be unreachable"
        resolve = "python3 -c 'import socket, sys; print(socket.gethostbyname(sys.argv[1]))'"
        assert host.check_output(f"{resolve} localhost") == "127.0.0.1", name
        assert host.check_output(f"{resolve} {name}").startswith("127."), f"{name} does not resolve"


def test_hosts_have_what_a_deploy_needs(lab_hosts: dict[str, testinfra.host.Host]) -> None:
    for name, host in lab_hosts.items():
        # python3-venv: a venv with pip, filled from a wheelhouse since the host has no network.
        venv = host.run("python3 -m venv /tmp/venv-check && /tmp/venv-check/bin/pip --version")
        host.run("rm -rf /tmp/venv-check")
        assert venv.rc == 0, f"{name}: {venv.stderr}"
        assert host.run("python3 --version").stdout.startswith("Python 3.11"), name
        for tool in ("curl", "ss", "ps"):
            assert host.exists(tool), f"{name}: {tool} missing"


def test_ansible_reaches_hosts_through_inventory(lab: Path) -> None:
    proc = subprocess.run(
        ["ansible", "sglang_lab_hosts", "-i", str(lab), "-m", "ansible.builtin.ping"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert '"pong"' in proc.stdout or "pong" in proc.stdout


def test_create_is_idempotent(lab: Path, lab_hosts: dict[str, testinfra.host.Host]) -> None:
    run = run_playbook("playbooks/lab.yml").check()
    assert run.recap()["localhost"]["changed"] == 0, run.output[-3000:]
    for name in lab_hosts:
        assert len(nspawn_pids(name)) == 1, f"{name}: expected exactly one systemd-nspawn"


def test_rejects_bad_host_names(lab: Path) -> None:
    run = run_playbook("playbooks/lab.yml", "-e", json.dumps({"sglang_lab_hosts": ["Lab_1"]}))
    assert run.returncode != 0
    assert "sglang_lab_hosts must list lab host names" in run.output
    assert not nspawn_pids("Lab_1")


def test_scratch_host_boots_and_is_destroyed(lab: Path, lab_hosts: dict[str, testinfra.host.Host]) -> None:
    only_scratch = ("-e", json.dumps({"sglang_lab_hosts": [SCRATCH]}))
    try:
        up = run_playbook("playbooks/lab.yml", *only_scratch).check()
        assert up.recap()["localhost"]["changed"] >= 1
        assert len(nspawn_pids(SCRATCH)) == 1
        assert Path("/run/netns", SCRATCH).exists()
    finally:
        down = run_playbook("playbooks/lab_down.yml", *only_scratch).check()
    assert down.recap()["localhost"]["changed"] == 1
    assert not nspawn_pids(SCRATCH)
    assert not Path("/run/netns", SCRATCH).exists()
    assert run_playbook("playbooks/lab_down.yml", *only_scratch).check().recap()["localhost"]["changed"] == 0
    # The shared lab hosts were left alone.
    for name, host in lab_hosts.items():
        assert len(nspawn_pids(name)) == 1, name
        assert host.run("systemctl is-system-running").stdout.strip() in {"running", "degraded"}
