"""site.yml on the lab (systemd-nspawn host lab1 with systemd as PID 1): three healthy units, a check run that
changes nothing, and a failed restart that rolls back to the running version. That a real rerun changes nothing is
molecule's idempotence step (make test, on lab2) and the fault suite's recovery check after every fault."""

from __future__ import annotations

import json

import pytest
import testinfra.host
import yaml
from lab.stack.labtools import REPO
from lab.stack.labtools import PlaybookRun as Run
from lab.stack.labtools import run_playbook as playbook
from testinfra.utils.ansible_runner import AnsibleRunner

pytestmark = pytest.mark.lab

LAB_HOST = "lab1"
LAB_KEY = "lab-test-key-not-secret"
UNITS = ("sglang-dsv4-prefill", "sglang-dsv4-decode", "sglang-dsv4-router")


@pytest.fixture(scope="module")
def lab_host() -> testinfra.host.Host:
    """lab1 over SSH as the deploy reaches it; playbooks/lab.yml boots it unless it runs (a namespace left
    by a stopped host is no proof that it runs)."""
    playbook("playbooks/lab.yml").check()
    host = AnsibleRunner(str(REPO / "inventories/lab/hosts.yml")).get_host(LAB_HOST)
    assert host is not None
    return host


@pytest.fixture(scope="module")
def release(lab_host: testinfra.host.Host) -> str:
    """Converge the lab once; return the engine release it runs (later runs pin it, so an edit of the
    sources during the test session cannot start a new release)."""
    playbook("site.yml").check()
    facts = json.loads(lab_host.file("/etc/ansible/facts.d/sglang.fact").content_string)
    assert facts["prefill"]["release"] == facts["decode"]["release"], facts
    return str(facts["prefill"]["release"])


def _pinned(release: str, *args: str) -> Run:
    return playbook("site.yml", "-e", f"sglang_engine_release_id={release}", *args)


def test_site_deploys_three_healthy_units(lab_host: testinfra.host.Host, release: str) -> None:
    for unit in UNITS:
        service = lab_host.service(unit)
        assert service.is_running and service.is_enabled, unit
    readiness = json.loads(lab_host.check_output("curl -sf http://127.0.0.1:8000/readiness"))
    assert readiness == {"status": "ready", "healthy_workers": 2, "total_workers": 2}
    for port in (30000, 30001):
        assert lab_host.run(f"curl -sf -o /dev/null http://127.0.0.1:{port}/health").rc == 0
    assert lab_host.file("/opt/sglang/current").linked_to == f"/opt/sglang/releases/{release}"


def test_the_running_engine_has_the_declared_flags_and_the_key_only_in_its_env(
    lab_host: testinfra.host.Host, release: str
) -> None:
    pid = lab_host.check_output("systemctl show -p MainPID --value sglang-dsv4-decode")
    argv = lab_host.file(f"/proc/{pid}/cmdline").content.split(b"\0")
    assert b"--context-length" in argv and argv[argv.index(b"--context-length") + 1] == b"524288"
    assert b"--api-key" in argv and argv[argv.index(b"--api-key") + 1] == LAB_KEY.encode()
    for role in ("prefill", "decode", "router"):
        script = lab_host.file(f"/opt/sglang/bin/serve_dsv4_{role}.sh")
        assert LAB_KEY not in script.content_string and '"${SGLANG_API_KEY}"' in script.content_string
        env_file = lab_host.file(f"/etc/sglang/dsv4-{role}.env")
        assert (env_file.mode, env_file.user, env_file.group) == (0o640, "root", "sglang")
        assert f"SGLANG_API_KEY={LAB_KEY}" in env_file.content_string
    facts = lab_host.file("/etc/ansible/facts.d/sglang.fact").content_string
    assert LAB_KEY not in facts
    assert set(json.loads(facts)) == {"prefill", "decode", "router"}


def test_check_diff_after_a_run_changes_nothing(release: str) -> None:
    run = _pinned(release, "--check", "--diff").check()
    assert run.recap()[LAB_HOST]["changed"] == 0, run.output[-4000:]
    assert "--- before" not in run.output


def test_check_diff_with_a_pending_change_shows_it_and_changes_nothing(
    lab_host: testinfra.host.Host, release: str
) -> None:
    """A pending change to the decode engine (watchdog_timeout 600 -> 900): --check --diff shows exactly what would
    be written: the one changed line of its serve script, the local facts record (once, after the decode engine's
    gate: the router's record is unchanged, so its write is skipped as in a real run), the drift exporter's
    declaration and the generated alert rules (both carry the declared envelope). The environment file's diff stays
    hidden (it holds the key), and the host is untouched: the same files, facts and processes."""
    state = (
        "sha1sum /opt/sglang/bin/*.sh /etc/sglang/*.env /etc/systemd/system/sglang-dsv4-*.service "
        "/etc/ansible/facts.d/sglang.fact; systemctl show -p MainPID --value " + " ".join(UNITS)
    )
    before = lab_host.check_output(state)
    envelope = yaml.safe_load((REPO / "group_vars/all/envelope.yml").read_text())
    change = json.dumps({"sglang_decode": dict(envelope["sglang_decode"], watchdog_timeout=900)})
    run = _pinned(release, "--check", "--diff", "-e", change).check()
    diffs = run.output.split("--- before: ")[1:]
    assert [b.split("\n", 1)[0] for b in diffs] == [
        "/opt/sglang/bin/serve_dsv4_decode.sh",
        "/etc/ansible/facts.d/sglang.fact",
        "/etc/sglang/drift-export.json",
        "/etc/prometheus/sglang_rules.yml",
    ], run.output[-4000:]
    hunk = diffs[0].split("\n\n", 1)[0]  # the diff ends at the first blank line of the output
    changed = [line for line in hunk.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert changed == ["-  --watchdog-timeout 600.0 \\", "+  --watchdog-timeout 900.0 \\"], (changed, hunk)
    assert LAB_KEY not in run.output
    assert run.recap()[LAB_HOST]["changed"] > 0, "the check run did not report the pending change"
    assert lab_host.check_output(state) == before, "a --check run changed the host"


def test_failed_restart_rolls_back_to_the_running_version(lab_host: testinfra.host.Host, release: str) -> None:
    script = "/opt/sglang/bin/serve_dsv4_prefill.sh"
    before = lab_host.file(script).content_string
    broken = '{"sglang_engine_command": ["/opt/sglang/current/venv/bin/python", "-m", "sglang_sim_missing"]}'
    run = _pinned(release, "-e", broken, "-e", "sglang_engine_health_timeout=15")
    assert run.returncode != 0, run.output[-4000:]
    assert "sglang-dsv4-prefill failed its health gate after the change" in run.output
    assert "was rolled back" in run.output
    assert "PLAY [Deploy the router]" not in run.output or run.recap()[LAB_HOST]["failed"] == 1
    assert lab_host.file(script).content_string == before
    assert lab_host.run("curl -sf -o /dev/null http://127.0.0.1:30000/health").rc == 0
    assert not lab_host.run(f"ls {script}.*~ 2>/dev/null").stdout.strip(), "backups left behind"
    rerun = _pinned(release).check()
    assert rerun.recap()[LAB_HOST]["changed"] == 0, rerun.output[-4000:]
