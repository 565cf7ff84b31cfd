"""The preflight of site.yml on the lab: each refusal stops the run before any server stops (the same three
processes before and after, no file changed), names the declared variable, and refuses under --check too."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import testinfra.host
import yaml
from lab.stack.labtools import REPO
from lab.stack.labtools import run_playbook as playbook
from testinfra.utils.ansible_runner import AnsibleRunner

pytestmark = pytest.mark.lab

LAB_HOST = "lab1"
UNITS = ("sglang-dsv4-prefill", "sglang-dsv4-decode", "sglang-dsv4-router")
FILES = "/opt/sglang/bin/serve_dsv4_*.sh /etc/sglang/dsv4-*.env /etc/systemd/system/sglang-dsv4-*.service"
FOREIGN_PORT = 29555  # a listener the test starts on the lab host, owned by no server
HIDDEN_MODEL = "/root/models/DeepSeek-V4-Flash"  # ProtectHome=true makes /root inaccessible to the engines' units


def envelope(name: str) -> dict[str, object]:
    return dict(yaml.safe_load((REPO / "group_vars/all/envelope.yml").read_text())[name])


@pytest.fixture(scope="module")
def lab_host() -> Iterator[testinfra.host.Host]:
    playbook("playbooks/lab.yml").check()
    playbook("site.yml").check()
    host = AnsibleRunner(str(REPO / "inventories/lab/hosts.yml")).get_host(LAB_HOST)
    assert host is not None
    host.run(f"mkdir -p {HIDDEN_MODEL} && cp /models/DeepSeek-V4-Flash/config.json {HIDDEN_MODEL}/")
    listen = (
        f"import socket, time; s = socket.socket(); s.bind(('0.0.0.0', {FOREIGN_PORT})); s.listen(); time.sleep(3600)"
    )
    host.run(f'systemd-run --unit=preflight-foreign-listener python3 -c "{listen}"')
    yield host
    host.run("systemctl stop preflight-foreign-listener; rm -rf /root/models")


def state(host: testinfra.host.Host) -> tuple[list[str], str]:
    pids = [host.check_output(f"systemctl show -p MainPID --value {unit}") for unit in UNITS]
    return pids, host.check_output(f"sha1sum {FILES}")


CASES = {
    "port-held-by-another-process": (
        {"sglang_router": {**envelope("sglang_router"), "prometheus_port": FOREIGN_PORT}},
        [
            f"port {FOREIGN_PORT} (sglang_router.prometheus_port = {FOREIGN_PORT}) is already in use on this host by",
            "(python3, unit preflight-foreign-listener)",
        ],
    ),
    "model-hidden-by-the-sandbox": (
        {
            "sglang_engine_copy_model_config": False,
            "sglang_model": {**envelope("sglang_model"), "path": HIDDEN_MODEL},
        },
        [
            f"sglang-dsv4-prefill: {HIDDEN_MODEL} (sglang_model.path) is not readable by the unit's user sglang",
            "ProtectHome=",
        ],
    ),
    "transfer-backend-not-in-the-release": (
        {"sglang_engine_preflight_imports": {"mooncake": "disaggregation_transfer_backend mooncake imports it"}},
        ["module mooncake is not found in the release's Python /opt/sglang/current/venv/bin/python"],
    ),
}


RUNS = [*((case, False) for case in CASES), ("port-held-by-another-process", True)]


@pytest.mark.parametrize(("case", "check"), RUNS, ids=[f"{c}{'-check' if k else ''}" for c, k in RUNS])
def test_a_refusal_stops_the_run_before_any_server_stops(lab_host: testinfra.host.Host, case: str, check: bool) -> None:
    extra, fragments = CASES[case]
    before = state(lab_host)
    run = playbook("site.yml", "-e", json.dumps(extra), *(["--check"] if check else []))
    assert run.returncode != 0, run.output[-4000:]
    assert all(f in run.output for f in fragments), f"{fragments} not in:\n{run.output[-4000:]}"
    assert "TASK [Deploy the prefill engine]" not in run.output
    assert state(lab_host) == before, "a server restarted or a file changed"
