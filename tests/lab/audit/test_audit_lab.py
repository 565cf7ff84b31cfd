"""audit.yml against a lab host after site.yml: a clean audit passes; drift injected into each layer is flagged in
that layer and key only, fails the run, and putting the edit back (or site.yml, which also restarts a process that
runs other flags than its files) clears it.

The lab host is a scratch host of these tests (see conftest.py); each test leaves it as deployed (by site.yml, or
by putting back the file it edited) and is redeployed when it fails.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from audit_lab import BODY_PASSED, AuditLab
from labtools import REPO, PlaybookRun, run_playbook

pytestmark = pytest.mark.lab

DECODE_SCRIPT = "/opt/sglang/bin/serve_dsv4_decode.sh"
DECODE_ENV = "/etc/sglang/dsv4-decode.env"
DECODE_UNIT = "sglang-dsv4-decode"


def on_host(lab: AuditLab, command: str) -> str:
    """Run a shell command on the lab host through the inventory; fail the test if it fails."""
    proc = subprocess.run(
        ["ansible", lab.host, "-i", str(lab.inventory), "-m", "ansible.builtin.shell", "-a", command],
        cwd=REPO, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"{command}: {proc.stdout}{proc.stderr}"
    return proc.stdout


def wait_healthy(lab: AuditLab, port: int, timeout_s: int = 120) -> None:
    on_host(lab, f"for i in $(seq {timeout_s}); do curl -sf http://127.0.0.1:{port}/health && exit 0; sleep 1; done; "
                 "exit 1")  # fmt: skip


def runs_with(unit: str, argv: str, tries: int = 240) -> str:
    """A shell command: wait (bounded: `tries` half-seconds) until the unit's main process runs with `argv` in its
    command line (its serve script has exec'd the engine); exit 1 if it never does."""
    cmdline = f"/proc/$(systemctl show -p MainPID --value {unit})/cmdline"
    return (f"( for i in $(seq {tries}); do xargs -0 < {cmdline} 2>/dev/null | grep -qF -- '{argv}' && exit 0; "
            "sleep 0.5; done; exit 1 )")  # fmt: skip


def deploy(lab: AuditLab) -> PlaybookRun:
    return run_playbook("-i", str(lab.inventory), "site.yml").check()


def audit(lab: AuditLab, tmp_path: Path, *extra: str) -> tuple[PlaybookRun, dict[str, Any]]:
    folder = tmp_path / f"audit-{time.monotonic_ns()}"
    run = run_playbook("-i", str(lab.inventory), "audit.yml", "--check", "-e", f"sglang_audit_report_dir={folder}",
                       *extra, timeout=600)  # fmt: skip
    report = folder / "audit.json"
    assert report.is_file(), f"no report written:\n{run.output[-4000:]}"
    return run, json.loads(report.read_text())


def drift_of(report: dict[str, Any]) -> set[tuple[str, str, str, str]]:
    """(host, role, key, origin layer) of every item with severity drift."""
    return {
        (s["host"], s["role"], d["key"], d["layer"])
        for s in report["servers"]
        for d in s["drift"]
        if d["severity"] == "drift"
    }


def server(report: dict[str, Any], host: str, role: str) -> dict[str, Any]:
    return next(s for s in report["servers"] if (s["host"], s["role"]) == (host, role))


def assert_clean(run: PlaybookRun, report: dict[str, Any]) -> None:
    statuses = {(s["host"], s["role"]): s["status"] for s in report["servers"]}
    assert run.returncode == 0, f"audit failed: {statuses}\n{run.output[-4000:]}"
    assert drift_of(report) == set() and set(statuses.values()) == {"ok"}, statuses


@pytest.fixture(scope="module")
def deployed(audit_lab: AuditLab) -> AuditLab:
    """The lab host deployed by site.yml."""
    deploy(audit_lab)
    return audit_lab


@pytest.fixture
def redeploy(deployed: AuditLab, request: pytest.FixtureRequest) -> Iterator[AuditLab]:
    """Redeploy after a test that failed, whatever it left behind (site.yml restores the files and restarts on
    change). A test that passed did so itself: each ends with the host as deployed and a clean audit."""
    yield deployed
    if not request.node.stash.get(BODY_PASSED, False):
        deploy(deployed)


def test_clean_audit_passes_in_check_mode_and_prints_the_table(deployed: AuditLab, tmp_path: Path) -> None:
    # A few calls first, so that the engines' latency histograms have something to show beside the model.
    body = json.dumps({"input_ids": [7] * 1000, "sampling_params": {"max_new_tokens": 32, "ignore_eos": True}})
    key = yaml.safe_load((REPO / "inventories/lab/group_vars/all/lab.yml").read_text())["sglang_api_key"]
    headers = f"-H 'Authorization: Bearer {key}' -H 'Content-Type: application/json'"
    on_host(deployed, f"for i in 1 2 3; do curl -sf {headers} -d '{body}' http://127.0.0.1:8000/generate >/dev/null "
                      "|| exit 1; done")  # fmt: skip
    run, report = audit(deployed, tmp_path)
    assert_clean(run, report)
    assert {(s["host"], s["role"]) for s in report["servers"]} == {
        (deployed.host, "prefill"), (deployed.host, "decode"), (deployed.host, "router")
    }  # fmt: skip
    for role in ("prefill", "decode", "router"):
        assert f"{deployed.host} {role} (" in run.output, f"no table for {role}"
    assert "key                   declared  on disk  running  effective" in run.output
    assert "parallel calls:" in run.output
    # The time model's TTFT / ITL for the longest and the typical call at the router's admission, with band and
    # source (make test builds the estimator's venv, so they are predicted, not "not predicted").
    times = report["fleet"]["predicted_time"]
    assert [t["shape"].split(",")[0] for t in times] == ["the longest call", "a typical call"], times
    assert all("AIConfigurator 0.12.0" in t["ttft_p90"] and "our model" in t["ttft_p90"] for t in times), times
    assert "predicted time, the longest call" in run.output
    # Measured TTFT and ITL beside the model's prediction at the measured load.
    assert "measured vs the model at the measured load" in run.output, run.output[-3000:]
    for figure in ("TTFT p50: measured", "ITL p50: measured"):
        assert figure in run.output, figure
    decode = server(report, deployed.host, "decode")
    assert decode["version"] == "0.5.23" and decode["capacity"]["full_length_fit"] > 0
    # The effective index-key dtype, with where it came from, in the table and the notes.
    assert decode["live"]["bf16_index_k"] is True
    # The simulator reports the dtype as the patched engine does (internal_states[0].dsv4_index_k_dtype).
    source = "effective bf16_index_k from /server_info internal_states[0].dsv4_index_k_dtype"
    assert any(n.startswith(source) for n in decode["notes"]), decode["notes"]
    # Risks of the live envelope, each with numbers and fixes that pass the fleet validation.
    assert "risks (from the live values):" in run.output
    ids = {r["id"] for r in report["risks"]}
    assert {"router_admits_beyond_full_context", "single_decode_engine"} <= ids, ids
    # Every risk of the envelope comes with numbers and fixes that pass the validation. The measured time off the
    # model (a loaded machine slows the lab's simulated engines) is a warning to recalibrate: numbers, no fix.
    for risk in report["risks"]:
        fixable = risk["id"] != "measured_time_off_model"
        assert risk["numbers"] and bool(risk["fixes"]) == fixable, risk
        assert all(f["valid"] for f in risk["fixes"]), risk
    assert run.recap()[deployed.host]["changed"] == 0


def test_hand_edited_script_is_on_disk_drift(redeploy: AuditLab, tmp_path: Path) -> None:
    """An edit the process has not read: drift on disk only. Putting the file back clears it (the other drift tests
    show that site.yml does too)."""
    lab, host = redeploy, redeploy.host
    on_host(lab, f"cp -p {DECODE_SCRIPT} /root/serve.orig && "
                 f"sed -i 's/--max-running-requests 64/--max-running-requests 48/' {DECODE_SCRIPT} && "
                 f"grep -q -- '--max-running-requests 48' {DECODE_SCRIPT}")  # fmt: skip
    run, report = audit(lab, tmp_path)
    assert run.returncode != 0
    assert drift_of(report) == {(host, "decode", "max_running_requests", "on_disk")}
    item = next(d for d in server(report, host, "decode")["drift"] if d["key"] == "max_running_requests")
    assert item["layers"] == ["on_disk"] and item["live"] == 48
    assert "a restart would apply the edit" in item["explanation"]
    on_host(lab, f"cp -p /root/serve.orig {DECODE_SCRIPT}")
    assert_clean(*audit(lab, tmp_path))


def test_changed_declaration_is_declared_drift(deployed: AuditLab, tmp_path: Path) -> None:
    lab, host = deployed, deployed.host
    hostvars = json.loads(subprocess.run(["ansible-inventory", "-i", str(lab.inventory), "--host", host], cwd=REPO,
                                         capture_output=True, text=True, check=True).stdout)  # fmt: skip
    declared = dict(hostvars["sglang_decode"])
    assert declared.get("max_running_requests") == 64, declared
    declared["max_running_requests"] = 48
    run, report = audit(lab, tmp_path, "-e", json.dumps({"sglang_decode": declared}))
    assert run.returncode != 0
    assert drift_of(report) == {(host, "decode", "max_running_requests", "declared")}
    item = next(d for d in server(report, host, "decode")["drift"] if d["key"] == "max_running_requests")
    assert item["declared"] == 48 and item["live"] == 64 and "run site.yml" in item["explanation"]
    assert_clean(*audit(lab, tmp_path))  # the inventory as deployed


def test_flag_changed_by_hand_then_only_the_process_keeps_it(redeploy: AuditLab, tmp_path: Path) -> None:
    """A flag edited and the engine restarted by hand drifts on disk, in the process and in what it applies. The
    edit undone without a restart leaves the process (and what it applies) alone drifting. site.yml reads the
    process against the files, restarts it, and the audit is clean again."""
    lab, host = redeploy, redeploy.host
    on_host(lab, f"cp -p {DECODE_SCRIPT} /root/serve.orig && "
                 f"sed -i 's/--context-length 524288/--context-length 262144/' {DECODE_SCRIPT} && "
                 f"systemctl restart {DECODE_UNIT} && {runs_with(DECODE_UNIT, '--context-length 262144')}")  # fmt: skip
    wait_healthy(lab, 30001)
    run, report = audit(lab, tmp_path)
    assert run.returncode != 0
    assert drift_of(report) == {(host, "decode", "context_length", "on_disk")}
    item = next(d for d in server(report, host, "decode")["drift"] if d["key"] == "context_length")
    assert item["layers"] == ["on_disk", "running", "effective"], item
    assert server(report, host, "decode")["live"]["context_length"] == 262144

    on_host(lab, f"cp -p /root/serve.orig {DECODE_SCRIPT}")
    run, report = audit(lab, tmp_path)
    assert run.returncode != 0
    assert drift_of(report) == {(host, "decode", "context_length", "running")}
    item = next(d for d in server(report, host, "decode")["drift"] if d["key"] == "context_length")
    assert item["layers"] == ["running", "effective"], item
    # The files did not change, but site.yml reads the process against them and restarts it.
    deploy(lab)
    assert_clean(*audit(lab, tmp_path))


def test_bf16_index_keys_off_changes_the_effective_capacity(redeploy: AuditLab, tmp_path: Path) -> None:
    lab, host = redeploy, redeploy.host
    _, before = audit(lab, tmp_path)
    flag = "SGLANG_DSV4_BF16_INDEX_K"
    on_host(lab, f"cp -p {DECODE_ENV} /root/env.orig && "
                 f"sed -i 's/^{flag}=1$/{flag}=0/' {DECODE_ENV} && grep -q '^{flag}=0$' {DECODE_ENV} && "
                 f"systemctl restart {DECODE_UNIT}")  # fmt: skip
    wait_healthy(lab, 30001)
    run, after = audit(lab, tmp_path)
    assert run.returncode != 0
    assert drift_of(after) == {(host, "decode", "bf16_index_k", "on_disk")}
    item = next(d for d in server(after, host, "decode")["drift"] if d["key"] == "bf16_index_k")
    # The engine now budgets fp8 keys: its pool says so, and the audit infers it (or the engine reports it).
    assert item["layers"] == ["on_disk", "running", "effective"], item
    assert server(after, host, "decode")["live"]["bf16_index_k"] is False
    pool_before = server(before, host, "decode")["capacity"]["pool_tokens"]
    cap_after = server(after, host, "decode")["capacity"]
    assert cap_after["bf16_index_k"] is False
    assert cap_after["pool_tokens"] > pool_before, (pool_before, cap_after["pool_tokens"])
    assert cap_after["full_length_fit"] >= server(before, host, "decode")["capacity"]["full_length_fit"]
    info = [d for d in server(after, host, "decode")["drift"] if d["key"] == "max_total_tokens"]
    assert info and info[0]["severity"] == "info", "the live pool should differ from the bf16 prediction"
    on_host(lab, f"cp -p /root/env.orig {DECODE_ENV} && systemctl restart {DECODE_UNIT}")
    wait_healthy(lab, 30001)
    assert_clean(*audit(lab, tmp_path))


def test_unreachable_host_fails_the_audit_without_drift(deployed: AuditLab, tmp_path: Path) -> None:
    """A host that cannot be reached is reported unreachable, never as drift, and fails the run."""
    # No network namespace of that name: the ssh ProxyCommand fails (a new host name, so no reused connection).
    run, report = audit(deployed, tmp_path, "-e", "ansible_host=labnowhere")
    assert run.returncode != 0
    assert report["summary"]["unreachable"] == 3 and report["summary"]["drift"] == 0
    assert drift_of(report) == set()


def test_inventory_declares_the_values_the_drift_tests_edit() -> None:
    """Guard for the edits above: the shared envelope declares what the sed patterns expect."""
    envelope = yaml.safe_load((REPO / "group_vars" / "all" / "envelope.yml").read_text())
    assert envelope["sglang_decode"]["max_running_requests"] == 64
    assert envelope["sglang_engine_common"]["context_length"] == 524288
    assert envelope["sglang_engine_common"]["bf16_index_k"] is True
