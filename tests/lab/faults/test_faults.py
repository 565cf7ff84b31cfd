"""Faults injected during a real site.yml run on the lab, each checked three ways:

- serving: every server answers /health (the previous or the new version), and no process runs other values than
  its files, except where the files changed and the restart had not been issued yet (old process, new files);
- reports: the audit says what happened (an interrupted deploy is reported as one, never as a hand edit), and the
  files keep the owner, group and mode the roles declare;
- recovery: a plain rerun of site.yml converges, the next run changes nothing, the audit is clean and no backup
  copy is left.

The decode engine's change used by the interruptions is mem_fraction_static 0.83 -> 0.82, passed as extra vars.
The faults: a health gate that never passes; an engine that passes its gate and crash-loops 10 s later; the router
failing its readiness gate; SIGINT then SIGKILL of the controller after a phase of the decode engine's deploy (three
phases, every phase in make test-stress); the SSH connection dropped while the decode engine's gate waits; the disk
full when the files and their backups are written; a release switch interrupted between the unpack and the link;
the SSH connection lost right after the link.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_gate import BY_ID
from faulttools import HOST, REPO, UNITS, Outcome, Run, after, backups, facts, metadata, playbook, sh, wait_serving

pytestmark = [pytest.mark.faults, pytest.mark.lab]

DECLARED_META = {"sh": "root:root 755", "env": "root:sglang 640", "service": "root:root 644"}


def lab_vars() -> dict[str, Any]:
    return dict(yaml.safe_load((REPO / "inventories/lab/group_vars/all/lab.yml").read_text()))


def envelope() -> dict[str, Any]:
    return dict(yaml.safe_load((REPO / "group_vars/all/envelope.yml").read_text()))


def decode_change() -> str:
    """Extra vars that change the decode engine only (mem_fraction_static 0.83 -> 0.82)."""
    decode = dict(envelope()["sglang_decode"], mem_fraction_static=0.82)
    return json.dumps({"sglang_decode": decode})


def main_pids() -> dict[str, str]:
    return {role: sh(f"systemctl show -p MainPID --value {unit}").strip() for role, unit in UNITS.items()}


def audit(tmp_path: Path) -> tuple[Run, dict[str, Any]]:
    folder = tmp_path / f"audit-{time.monotonic_ns()}"
    run = playbook("audit.yml", "--check", "-e", f"sglang_audit_report_dir={folder}", timeout=300)
    report = folder / "audit.json"
    assert report.is_file(), f"no audit report:\n{run.tail()}"
    return run, json.loads(report.read_text())


def drift(report: dict[str, Any], role: str) -> list[dict[str, Any]]:
    server = next(s for s in report["servers"] if s["role"] == role)
    return [d for d in server["drift"] if d["severity"] == "drift"]


def check_serving(report: dict[str, Any], restart_pending_ok: bool = False) -> str:
    codes = wait_serving()
    assert set(codes.values()) == {200}, f"not every server serves: {codes}"
    for server in report["servers"]:
        mixed = [d for d in server["drift"] if d["layer"] == "running"]
        assert not mixed, f"{server['role']} runs values its files do not have: {mixed}"
        if server["layers"].get("restart_pending") and not restart_pending_ok:
            raise AssertionError(f"{server['role']}: files changed after the process started")
    return "all serve"


def check_metadata() -> None:
    for path, meta in metadata().items():
        assert meta == DECLARED_META[path.rsplit(".", 1)[1]], f"{path} is {meta}"


def check_recovery(pinned: tuple[str, ...], tmp_path: Path) -> str:
    """A plain rerun of the same command (`pinned`: its extra arguments) converges: it passes, the audit is clean
    (declared, on disk, running and applied agree), and no backup, marker, release switch record or file metadata of
    the fault is left. That a converged host's next run changes nothing is molecule's idempotence step."""
    run = playbook("site.yml", *pinned)
    assert run.returncode == 0, f"the rerun failed:\n{run.tail()}"
    audit_run, report = audit(tmp_path)
    assert audit_run.returncode == 0, f"audit not clean after the rerun: {report['summary']}\n{audit_run.tail()}"
    assert backups() == [], backups()
    assert not any("in_progress" in r for r in facts().values()), facts()
    assert sh("test -e /etc/ansible/facts.d/sglang_release.fact && echo left", check=False) == ""
    check_metadata()
    return f"converged, changed={run.changed()} ({run.seconds:.0f} s), audit clean"


def check_rolled_back(run: Run, unit: str, verdict: str, outcome: Outcome, tmp_path: Path) -> None:
    """The run failed saying `unit` failed its gate with `verdict` (an id of sglang_gate.VERDICTS: the observations
    after it depend on timing and are not checked) and was rolled back; everything serves the previous version with
    exact files, no backup and no marker, and the audit is clean."""
    assert run.returncode != 0, run.tail()
    failed = f"{unit} failed its health gate after the change ({BY_ID[verdict].text}"
    assert failed in run.output, run.tail()
    outcome.notes.append(next(line.strip() for line in run.output.splitlines() if failed in line))
    assert "was rolled back" in run.output
    audit_run, report = audit(tmp_path)
    outcome.serving = check_serving(report) + " (rolled back)"
    # The rollback puts the files back exactly (owner, group, mode), removes its backups and drops the marker.
    check_metadata()
    assert backups() == [], backups()
    assert not any("in_progress" in r for r in facts().values()), facts()
    assert audit_run.returncode == 0, f"audit after the rollback: {report['summary']}\n{audit_run.tail()}"
    outcome.reports = "audit clean, metadata exact"


def test_health_gate_never_passes(pinned: tuple[str, ...], outcome: Outcome, tmp_path: Path) -> None:
    start = time.monotonic()
    env = dict(lab_vars()["sglang_engine_extra_env"], SGLANG_SIM_NEVER_READY="1")
    fault = json.dumps({"sglang_engine_extra_env": env, "sglang_engine_health_timeout": 6})
    run = playbook("site.yml", *pinned, "-e", fault)
    check_rolled_back(run, UNITS["prefill"], "not_healthy", outcome, tmp_path)
    outcome.recovery = check_recovery(pinned, tmp_path)
    outcome.seconds = time.monotonic() - start


def test_crash_loop_after_the_gate(pinned: tuple[str, ...], outcome: Outcome, tmp_path: Path) -> None:
    """The new version answers its gate, then exits 10 s later, again after every restart by systemd. The gate
    watches the process for sglang_common_health_settle (15 s here) and rolls it back."""
    outcome.fault = "crash-loop 10 s after the gate"
    start = time.monotonic()
    env = dict(lab_vars()["sglang_engine_extra_env"], SGLANG_SIM_CRASH_AFTER_S="10")
    fault = json.dumps({"sglang_engine_extra_env": env, "sglang_common_health_settle": 15})
    run = playbook("site.yml", *pinned, "-e", fault)
    check_rolled_back(run, UNITS["prefill"], "crashed_after_gate", outcome, tmp_path)
    outcome.recovery = check_recovery(pinned, tmp_path)
    outcome.seconds = time.monotonic() - start


def test_router_fails_its_readiness_gate(pinned: tuple[str, ...], outcome: Outcome, tmp_path: Path) -> None:
    """The new router cannot see its workers healthy: it probes them every second on a path the engines do not
    serve and gives up on a worker after one failure, so /readiness never reports every worker within the gate's
    timeout. The router is rolled back; the engines are not touched."""
    outcome.fault = "router readiness gate fails"
    start = time.monotonic()
    engines = {role: pid for role, pid in main_pids().items() if role != "router"}
    lost = ["--health-check-endpoint", "/no-such-endpoint", "--health-failure-threshold", "1"]
    router = dict(lab_vars().get("sglang_router") or envelope()["sglang_router"], health_check_interval_secs=1)
    fault = json.dumps({
        "sglang_router": router, "sglang_router_extra_args": ["--disable-tokenizer-autoload", *lost],
        "sglang_router_health_timeout": 10,
    })  # fmt: skip
    run = playbook("site.yml", *pinned, "-e", fault)
    check_rolled_back(run, UNITS["router"], "not_healthy", outcome, tmp_path)
    assert {role: pid for role, pid in main_pids().items() if role != "router"} == engines, "an engine restarted"
    outcome.recovery = check_recovery(pinned, tmp_path)
    outcome.seconds = time.monotonic() - start


def _interrupt(phase: str) -> Callable[[str], bool]:
    return {
        "files written": after(r"Render the systemd unit", "decode"),
        "left the router": after(r"Take out of every router \(smg drains it\) sglang-dsv4-decode", "decode"),
        "restart issued": after(r"Restart sglang-dsv4-decode\]", "decode"),
        # The gate's first answer: a retry while the new process starts, or its first pass (on a loaded machine
        # the process may be up by then); either way the engine is still out of the router.
        "gate waiting": after(
            r"Wait for a healthy answer from http://127.0.0.1:30001", "decode", then=r"^(FAILED - RETRYING|ok: \[)"
        ),
        "facts written": after(r"Write the local facts", "decode"),
    }[phase]


def check_interrupted(run: Run, phase: str, outcome: Outcome, tmp_path: Path) -> None:
    """After a run stopped at `phase` of the decode engine's deploy: everything serves, with no process running
    values its files lack, and the audit reports an interrupted deploy (never a hand edit)."""
    assert run.interrupted_at, f"the phase was never reached:\n{run.tail()}"
    outcome.notes.append(f"stopped at: {run.interrupted_at}")
    audit_run, report = audit(tmp_path)
    outcome.serving = check_serving(report, restart_pending_ok=phase in ("files written", "left the router"))
    # Between leaving the router and going back (restart_one.yml), the router does not route to the engine.
    unrouted = [d for d in drift(report, "router") if d["key"] == "workers" and "missing" in d["explanation"]]
    # The SIGKILL comes 2 s after the SIGINT: a run stopped after its files were written may have begun the
    # drain meanwhile (its task header is in the output). The engine is then out of the router or not, as the
    # kill found it; before that header it must still be routed.
    drain_began = re.search(r"Take out of every router \(smg drains it\) sglang-dsv4-decode", run.output) is not None
    if phase in ("left the router", "restart issued", "gate waiting"):
        assert [d["declared"] for d in unrouted] == ["http://127.0.0.1:30001"], drift(report, "router")
        outcome.serving += ", decode out of the router"
    elif phase == "files written" and drain_began:
        assert [d["declared"] for d in unrouted] in ([], ["http://127.0.0.1:30001"]), drift(report, "router")
        outcome.serving += ", decode out of the router" if unrouted else ""
        outcome.notes.append("the drain had begun when the run was killed")
    else:
        assert not unrouted, unrouted
    items = drift(report, "decode")
    explanations = " | ".join(d["explanation"] for d in items)
    assert "edited on the host" not in explanations, explanations
    if phase == "facts written":
        # The decode deploy finished; the extra vars are not in the inventory: the declaration differs from it.
        assert "in_progress" not in facts()["decode"]
        assert {(d["key"], d["layer"]) for d in items} == {("mem_fraction_static", "declared")}, items
        assert "the declaration changed since the last deploy" in explanations
        outcome.reports = "decode: declaration changed since the last deploy"
    else:
        marker = facts()["decode"].get("in_progress")
        assert marker and marker["envelope"]["mem_fraction_static"] == 0.82, facts()["decode"]
        deploy = [d for d in items if d["key"] == "deploy"]
        assert deploy, items
        assert deploy[0]["explanation"].startswith("interrupted deploy of mem_fraction_static 0.83 -> 0.82")
        assert deploy[0]["explanation"].endswith(": rerun site.yml")
        assert all(d["explanation"] == deploy[0]["explanation"] for d in items if d["key"] != "backups"), items
        outcome.reports = "decode: interrupted deploy (marker)"
    assert audit_run.returncode != 0, "the audit passed a host with an unfinished change"
    check_metadata()


PHASES = ["files written", "left the router", "restart issued", "gate waiting", "facts written"]
# One phase of each kind the audit tells apart (restart pending; out of the router with a marker; deploy finished),
# unless SGLANG_FAULT_EVERY_PHASE=1 (make test-stress): the other two phases are of the middle kind.
KILLED_AFTER = (
    PHASES if os.environ.get("SGLANG_FAULT_EVERY_PHASE") == "1" else ["files written", "gate waiting", "facts written"]
)


@pytest.mark.parametrize("phase", KILLED_AFTER)
def test_controller_killed(phase: str, pinned: tuple[str, ...], outcome: Outcome, tmp_path: Path) -> None:
    """SIGINT, then SIGKILL 2 s later, of ansible-playbook right after a phase of the decode engine's deploy."""
    outcome.fault = f"SIGINT+SIGKILL after decode {phase}"
    start = time.monotonic()
    run = playbook("site.yml", *pinned, "-e", decode_change(), stop_when=_interrupt(phase))
    check_interrupted(run, phase, outcome, tmp_path)
    outcome.recovery = check_recovery(pinned, tmp_path)
    outcome.seconds = time.monotonic() - start
    assert UNITS["decode"] in run.output


def drop_ssh(proc: subprocess.Popen[str]) -> None:
    """The network to the lab host fails for 20 s: sshd stops listening (its sessions live on, KillMode=process) and
    comes back by a timer; every SSH connection is cut where it enters the host's network (the socat carrying it)."""
    sh("systemd-run --on-active=20 systemctl start ssh.service && systemctl stop ssh.service")
    for pid in proxies_into(HOST):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def proxies_into(host: str) -> list[int]:
    """The socat processes carrying SSH into `host`'s network namespace (not those of another lab host)."""
    netns = os.stat(f"/run/netns/{host}").st_ino
    found = subprocess.run(["pgrep", "-f", "socat - TCP:127.0.0.1:22"], capture_output=True, text=True, check=False)
    pids = []
    for pid in map(int, found.stdout.split()):
        try:
            if os.stat(f"/proc/{pid}/ns/net").st_ino == netns:
                pids.append(pid)
        except FileNotFoundError:
            continue
    return pids


def test_ssh_connection_dropped(pinned: tuple[str, ...], outcome: Outcome, tmp_path: Path) -> None:
    """The SSH connection breaks while the decode engine's gate waits: the host is unreachable for the rest of the
    play, which ends failed; the new decode process runs its new files and the marker says the deploy did not
    finish."""
    outcome.fault = "SSH dropped while decode's gate waits"
    start = time.monotonic()
    run = playbook("site.yml", *pinned, "-e", decode_change(), stop_when=_interrupt("gate waiting"), fault=drop_ssh)
    assert run.returncode != 0 and "UNREACHABLE!" in run.output, run.tail()
    wait_ssh()
    check_interrupted(run, "gate waiting", outcome, tmp_path)
    outcome.recovery = check_recovery(pinned, tmp_path)
    outcome.seconds = time.monotonic() - start


def wait_ssh(timeout: float = 60) -> None:
    """Wait (bounded) for the lab host's sshd to accept connections again."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            sh("true", timeout=10)
            return
        except (AssertionError, subprocess.TimeoutExpired):
            time.sleep(2)
    raise AssertionError("the lab host's sshd did not come back")


FULL = "/run/sglang-fault-full"


def fill_disk(path: str) -> None:
    """Put `path` on a small file system of its own (its files copied, owners and modes kept) and fill it."""
    sh(f"mkdir -p {FULL} && mount -t tmpfs -o size=512k tmpfs {FULL} && cp -a {path}/. {FULL}/ && "
       f"mount --bind {FULL} {path} && (dd if=/dev/zero of={path}/.fill bs=4k 2>/dev/null || true)")  # fmt: skip


def free_disk(path: str) -> None:
    sh(f"rm -f {path}/.fill; umount {path}; umount {FULL}; rmdir {FULL}", check=False)


def test_disk_full_when_the_files_are_written(pinned: tuple[str, ...], outcome: Outcome, tmp_path: Path) -> None:
    """/opt/sglang/bin is full: the decode change (its serve script) cannot write the script's backup. The deploy
    says so, puts back what it had replaced (nothing here), drops the marker and restarts nothing: the previous
    version serves, exactly as before."""
    outcome.fault = "disk full while the files are written"
    start = time.monotonic()
    before = {"sums": sh("sha1sum /opt/sglang/bin/*.sh /etc/sglang/*.env"), "pids": main_pids(), "meta": metadata()}
    fill_disk("/opt/sglang/bin")
    try:
        run = playbook("site.yml", *pinned, "-e", decode_change())
        assert run.returncode != 0, run.tail()
        assert f"Writing the files of {UNITS['decode']} failed" in run.output, run.tail()
        assert f"No file had been replaced; {UNITS['decode']} was not restarted" in run.output, run.tail()
        assert sh("sha1sum /opt/sglang/bin/*.sh /etc/sglang/*.env") == before["sums"], "a file changed"
        assert main_pids() == before["pids"], "a server restarted"
        assert metadata() == before["meta"]
        assert backups() == [], backups()
        assert not any("in_progress" in r for r in facts().values()), facts()
        audit_run, report = audit(tmp_path)
        outcome.serving = check_serving(report) + " (nothing changed)"
        assert audit_run.returncode == 0, f"audit: {report['summary']}\n{audit_run.tail()}"
        outcome.reports = "audit clean, files and process as before"
    finally:
        free_disk("/opt/sglang/bin")
    outcome.recovery = check_recovery(pinned, tmp_path)
    outcome.seconds = time.monotonic() - start


def after_change(task: str) -> Callable[[str], bool]:
    """A stop condition: the `changed` result of the first task whose header holds `task` (the engines' release
    tasks run before any server's deploy, where faulttools.after waits)."""
    seen = {"task": False}

    def match(line: str) -> bool:
        if line.startswith("TASK [") and task in line:
            seen["task"] = True
            return False
        return seen["task"] and line.startswith("changed: [")

    return match


def new_release(pinned: tuple[str, ...], release: str) -> tuple[str, ...]:
    """Extra arguments that install `release`: the pinned release's wheels under another id."""
    old = pinned[1].split("=", 1)[1]
    return ("-e", json.dumps({
        "sglang_engine_release_id": release, "sglang_engine_wheelhouse_build": False,
        "sglang_engine_wheelhouse_src": str(REPO / ".cache/wheelhouse" / old),
    }))  # fmt: skip


def check_switch_reported(report: dict[str, Any], release: str, old: str) -> None:
    """The audit reports an interrupted switch from `old` to `release` on the engines, and does not pass."""
    switch = [d for s in report["servers"] if s["role"] != "router" for d in s["drift"] if d["key"] == "release"]
    assert switch, [s["drift"] for s in report["servers"]]
    assert switch[0]["explanation"].startswith(f"interrupted switch to release {release} (from {old})"), switch


def back_to(pinned: tuple[str, ...], release: str) -> None:
    back = playbook("site.yml", *pinned)
    assert back.returncode == 0, f"could not go back to the pinned release:\n{back.tail()}"
    sh(f"rm -rf /opt/sglang/releases/{release} /opt/sglang/wheelhouse/{release}", check=False)


def test_release_switch_interrupted(pinned: tuple[str, ...], outcome: Outcome, tmp_path: Path) -> None:
    """A new release (same wheels, another id) is unpacked, then the controller is killed before the current link
    moves. The engines keep serving the old release; the audit reports the interrupted switch; a rerun of the same
    command finishes it."""
    outcome.fault = "release switch interrupted (unpacked, not linked)"
    start = time.monotonic()
    old, new = pinned[1].split("=", 1)[1], new_release(pinned, "wh-fault-switch")
    try:
        run = playbook("site.yml", *new, stop_when=after_change("Install the requirements into the release venv"))
        assert run.interrupted_at, f"the unpack was never reached:\n{run.tail()}"
        assert sh("readlink /opt/sglang/current").strip().endswith(f"/{old}")
        audit_run, report = audit(tmp_path)
        outcome.serving = check_serving(report) + f" (release {old})"
        check_switch_reported(report, "wh-fault-switch", old)
        assert audit_run.returncode != 0, "the audit passed a host with an unfinished release switch"
        outcome.reports = "engines: interrupted release switch"
        outcome.recovery = check_recovery(new, tmp_path)
        assert {r["release"] for k, r in facts().items() if k != "router"} == {"wh-fault-switch"}
    finally:
        back_to(pinned, "wh-fault-switch")
    outcome.seconds = time.monotonic() - start


def test_ssh_lost_during_the_release_switch(pinned: tuple[str, ...], outcome: Outcome, tmp_path: Path) -> None:
    """The SSH connection breaks right after current moved to a new release, before any engine restarted on it: the
    engines keep serving the release they started with, the audit reports the interrupted switch, and a rerun of the
    same command restarts them on the new release and ends the switch."""
    outcome.fault = "SSH lost during the release switch (linked, not restarted)"
    start = time.monotonic()
    old, new = pinned[1].split("=", 1)[1], new_release(pinned, "wh-fault-ssh")
    pids = main_pids()
    try:
        linked = after_change("Rename the new link over /opt/sglang/current")
        run = playbook("site.yml", *new, stop_when=linked, fault=drop_ssh)
        assert run.interrupted_at and run.returncode != 0 and "UNREACHABLE!" in run.output, run.tail()
        wait_ssh()
        assert sh("readlink /opt/sglang/current").strip().endswith("/wh-fault-ssh")
        assert main_pids() == pids, "a server restarted before the connection was lost"
        audit_run, report = audit(tmp_path)
        outcome.serving = check_serving(report) + f" (release {old})"
        check_switch_reported(report, "wh-fault-ssh", old)
        assert audit_run.returncode != 0, "the audit passed a host with an unfinished release switch"
        outcome.reports = "engines: interrupted release switch"
        outcome.recovery = check_recovery(new, tmp_path)
        assert {r["release"] for k, r in facts().items() if k != "router"} == {"wh-fault-ssh"}
        assert all(main_pids()[role] != pids[role] for role in ("prefill", "decode")), "an engine kept the old release"
    finally:
        back_to(pinned, "wh-fault-ssh")
    outcome.seconds = time.monotonic() - start
