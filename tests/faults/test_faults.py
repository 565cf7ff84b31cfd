"""Faults injected during a real site.yml run on the lab, each checked three ways:

- serving: every server answers /health (the previous or the new version), and no process runs other values than
  its files, except where the files changed and the restart had not been issued yet (old process, new files);
- reports: the audit says what happened (an interrupted deploy is reported as one, never as a hand edit), and the
  files keep the owner, group and mode the roles declare;
- recovery: a plain rerun of site.yml converges, the next run changes nothing, the audit is clean and no backup
  copy is left.

The decode engine's change used by the interruptions is mem_fraction_static 0.83 -> 0.82, passed as extra vars.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from faulttools import REPO, UNITS, Outcome, Run, after, backups, facts, metadata, playbook, wait_serving

pytestmark = [pytest.mark.faults, pytest.mark.lab]

DECLARED_META = {"sh": "root:root 755", "env": "root:sglang 640", "service": "root:root 644"}


def lab_vars() -> dict[str, Any]:
    return dict(yaml.safe_load((REPO / "inventories/lab/group_vars/all/lab.yml").read_text()))


def decode_change() -> str:
    """Extra vars that change the decode engine only (mem_fraction_static 0.83 -> 0.82)."""
    envelope = yaml.safe_load((REPO / "group_vars/all/envelope.yml").read_text())
    decode = dict(envelope["sglang_decode"], mem_fraction_static=0.82)
    return json.dumps({"sglang_decode": decode})


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
    run = playbook("site.yml", *pinned)
    assert run.returncode == 0, f"the rerun failed:\n{run.tail()}"
    again = playbook("site.yml", *pinned)
    assert again.returncode == 0 and again.changed() == 0, f"not idempotent after the rerun:\n{again.tail()}"
    audit_run, report = audit(tmp_path)
    assert audit_run.returncode == 0, f"audit not clean after the rerun: {report['summary']}\n{audit_run.tail()}"
    assert backups() == [], backups()
    assert not any("in_progress" in r for r in facts().values()), facts()
    check_metadata()
    return f"converged, changed=0 ({run.seconds:.0f}+{again.seconds:.0f} s)"


def test_health_gate_never_passes(pinned: tuple[str, ...], outcome: Outcome, tmp_path: Path) -> None:
    start = time.monotonic()
    env = dict(lab_vars()["sglang_engine_extra_env"], SGLANG_SIM_NEVER_READY="1")
    fault = json.dumps({"sglang_engine_extra_env": env, "sglang_engine_health_timeout": 6})
    run = playbook("site.yml", *pinned, "-e", fault)
    assert run.returncode != 0, run.tail()
    assert "sglang-dsv4-prefill failed its health gate after the change" in run.output, run.tail()
    assert "was rolled back" in run.output
    audit_run, report = audit(tmp_path)
    outcome.serving = check_serving(report) + " (rolled back)"
    # The rollback puts the files back exactly (owner, group, mode), removes its backups and drops the marker.
    check_metadata()
    assert backups() == [], backups()
    assert "in_progress" not in facts()["prefill"], facts()["prefill"]
    assert audit_run.returncode == 0, f"audit after the rollback: {report['summary']}\n{audit_run.tail()}"
    outcome.reports = "audit clean, metadata exact"
    outcome.recovery = check_recovery(pinned, tmp_path)
    outcome.seconds = time.monotonic() - start


def _interrupt(phase: str) -> Callable[[str], bool]:
    return {
        "files written": after(r"Render the systemd unit", "decode"),
        "restart issued": after(r"Restart sglang-dsv4-decode\]", "decode"),
        "gate waiting": after(
            r"Wait for a healthy answer from http://127.0.0.1:30001", "decode", then=r"^FAILED - RETRYING"
        ),
        "facts written": after(r"Write the local facts", "decode"),
    }[phase]


@pytest.mark.parametrize("phase", ["files written", "restart issued", "gate waiting", "facts written"])
def test_controller_killed(phase: str, pinned: tuple[str, ...], outcome: Outcome, tmp_path: Path) -> None:
    """SIGINT, then SIGKILL 2 s later, of ansible-playbook right after a phase of the decode engine's deploy."""
    outcome.fault = f"SIGINT+SIGKILL after decode {phase}"
    start = time.monotonic()
    run = playbook("site.yml", *pinned, "-e", decode_change(), stop_when=_interrupt(phase))
    assert run.interrupted_at, f"the phase was never reached:\n{run.tail()}"
    outcome.notes.append(f"interrupted at: {run.interrupted_at}")
    audit_run, report = audit(tmp_path)
    outcome.serving = check_serving(report, restart_pending_ok=phase == "files written")
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
    outcome.recovery = check_recovery(pinned, tmp_path)
    outcome.seconds = time.monotonic() - start
    assert UNITS["decode"] in run.output
