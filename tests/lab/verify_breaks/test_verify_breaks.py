"""The verify suite fails, naming the check, for each way the lab is broken on purpose; it passes when intact.

Each test restores the lab. Run as root with the lab deployed (make lab):
    pytest tests/lab/verify_breaks -m lab
"""

from __future__ import annotations

import re

import pytest
from breaks_lab import Lab, keep_file, put_back, run_suite

pytestmark = pytest.mark.lab


def node(module: str, test: str, lab: Lab, role: str | None = None) -> str:
    param = f"ansible://{lab.name}" + (f"-{role}" if role else "")
    return f"verify/{module}::{test}[{param}]"


def test_suite_passes_on_intact_lab(ready_lab: Lab) -> None:
    """Baseline: the suite passes on the intact lab (its time is bench/verify_suite.py's figure). Without the probes,
    as the breaks below run it: `make verify` runs the whole suite, probes included, on the same lab right after this
    pass, and the probes' longest prompt alone takes minutes of prefill at the time model's pace."""
    run = run_suite("--no-probes")
    assert run.returncode == 0, f"the verify suite fails on the intact lab: {run.failed()}\n{run.output[-3000:]}"
    assert re.search(r"\b\d+ passed\b", run.output), run.output[-1000:]
    print(f"verify suite on the intact lab: {run.seconds:.1f} s")


def test_stopped_unit(ready_lab: Lab) -> None:
    lab = ready_lab
    unit = lab.plan.servers["decode"].unit
    lab.sh(f"systemctl stop {unit}.service")
    try:
        run = run_suite("--no-probes")
    finally:
        lab.sh(f"systemctl start {unit}.service")
        lab.restart_router_when_stuck()
    assert run.returncode == 1, run.output[-3000:]
    failed = run.failed()
    assert node("test_verify_units.py", "test_unit_active", lab, "decode") in failed, failed
    assert node("test_verify_health.py", "test_engine_health", lab, "decode") in failed, failed
    assert f"{unit} is inactive/dead" in run.output
    assert not [f for f in failed if f.endswith("-prefill]")], f"the prefill checks should pass: {failed}"


def test_env_file_mode(ready_lab: Lab) -> None:
    lab = ready_lab
    env_file = lab.plan.servers["decode"].env_file
    lab.sh(f"chmod 0644 {env_file}")
    try:
        run = run_suite("--no-probes")
    finally:
        lab.sh(f"chmod 0640 {env_file}")
    assert run.returncode == 1, run.output[-3000:]
    failed = run.failed()
    assert node("test_verify_files.py", "test_server_files", lab, "decode") in failed, failed
    assert node("test_verify_files.py", "test_secrets_not_world_readable", lab, "decode") in failed, failed
    assert f"{env_file} has mode 0644, expected 0640" in run.output
    assert sorted(failed) == sorted(
        [
            node("test_verify_files.py", "test_server_files", lab, "decode"),
            node("test_verify_files.py", "test_secrets_not_world_readable", lab, "decode"),
        ]
    ), f"only the file checks should fail: {failed}"


def test_live_limit_changed(ready_lab: Lab) -> None:
    """The decode script's --context-length edited and the unit restarted by hand."""
    lab = ready_lab
    decode = lab.plan.servers["decode"]
    declared = int(decode.envelope["context_length"])
    edited = declared // 2
    saved = keep_file(lab, decode.script)
    try:
        lab.sh(f"sed -i 's/--context-length {declared}\\b/--context-length {edited}/' {decode.script}")
        assert f"--context-length {edited}" in lab.sh(f"cat {decode.script}"), "the flag was not edited"
        lab.restart("decode")
        lab.restart_router_when_stuck()
        run = run_suite("--no-probes")
    finally:
        put_back(lab, decode.script, saved)
        lab.restart("decode")
        lab.restart_router_when_stuck()
    assert run.returncode == 1, run.output[-3000:]
    failed = run.failed()
    assert node("test_verify_limits.py", "test_live_limits", lab, "decode") in failed, failed
    assert f"context_length: declared {declared}, live {edited} from /v1/models max_model_len" in run.output
    assert node("test_verify_limits.py", "test_on_disk_envelope", lab, "decode") in failed, failed


def test_router_queue_size_zero(ready_lab: Lab) -> None:
    """smg restarted by hand with --queue-size 0: the parallel probe expects queueing and gets 429s."""
    lab = ready_lab
    router = lab.plan.servers["router"]
    declared = int(router.envelope["queue_size"])
    assert declared > 0, "the lab must declare a router queue for this test"
    saved = keep_file(lab, router.script)
    try:
        lab.sh(f"sed -i 's/--queue-size {declared}\\b/--queue-size 0/' {router.script}")
        assert "--queue-size 0" in lab.sh(f"cat {router.script}"), "the flag was not edited"
        lab.restart("router")
        lab.wait_ready()
        run = run_suite("--probes", paths=("verify/test_verify_probes.py", "verify/test_verify_limits.py"))
    finally:
        put_back(lab, router.script, saved)
        lab.restart("router")
    assert run.returncode == 1, run.output[-3000:]
    failed = run.failed()
    assert node("test_verify_probes.py", "test_probe_parallel_admitted", lab) in failed, failed
    assert "were not served" in run.output and "429" in run.output
    assert node("test_verify_limits.py", "test_router_live_limits", lab, "router") in failed, failed
