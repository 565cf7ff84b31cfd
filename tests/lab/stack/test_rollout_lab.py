"""Limit changes under load on the single-host lab (lab1, or the lab SGLANG_LAB_INVENTORY names, runs prefill, decode
and router): six closed-loop clients of the load harness (bench/rollout_load.py) send /generate through the router
while site.yml runs.

- A router-only limit change restarts the router and no engine.
- A decode max_running_requests change is a controlled outage of the only decode engine: it leaves the router,
  finishes what it runs, restarts, passes a real generation and comes back; no request is aborted, no connection
  fails, new requests get 503 + Retry-After from the router meanwhile, and the run reports the window.

Slow (three site.yml runs, about 4 minutes): marked `rollout` (and `lab`); `make test` runs it once, in its own
pytest pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import testinfra.host
import yaml
from labtools import REPO, run_playbook, single_host_lab

pytestmark = [pytest.mark.lab, pytest.mark.rollout]

INVENTORY, LAB_HOST = single_host_lab()
LAB_KEY = "lab-test-key-not-secret"
ENGINES = ("sglang-dsv4-prefill", "sglang-dsv4-decode")


def declared(name: str) -> dict[str, Any]:
    envelope = yaml.safe_load((REPO / "group_vars/all/envelope.yml").read_text())
    return dict(envelope[name])


def lowered(tmp_path: Path, decode: bool) -> Path:
    """Extra vars: the router admits 48; with `decode`, the decode engine runs 48 (and its cuda graphs stop at 48)."""
    change: dict[str, Any] = {"sglang_router": {**declared("sglang_router"), "max_concurrent_requests": 48}}
    if decode:
        d = declared("sglang_decode")
        change["sglang_decode"] = {
            **d,
            "max_running_requests": 48,
            "cuda_graph_max_bs_decode": 48,
            "cuda_graph_bs_decode": [b for b in d["cuda_graph_bs_decode"] if b <= 48],
        }
    path = tmp_path / f"change-{'decode' if decode else 'router'}.json"
    path.write_text(json.dumps(change))
    return path


def started_at(host: testinfra.host.Host, unit: str) -> str:
    return host.run(f"systemctl show -p ActiveEnterTimestampMonotonic --value {unit}").stdout.strip()


def under_load(tmp_path: Path, *playbook_args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    report = tmp_path / "load.json"
    argv = [
        sys.executable,
        str(REPO / "bench/rollout_load.py"),
        "--netns",
        LAB_HOST,
        "--clients",
        "6",
        "--max-tokens",
        "16",
        "--request-timeout",
        "60",
        "--command-timeout",
        "600",
        "--json",
        str(report),
        "--",
        "ansible-playbook",
        "-i",
        str(INVENTORY),
        "site.yml",
        *playbook_args,
    ]
    env = {
        **os.environ,
        "SGLANG_API_KEY": LAB_KEY,
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
    }
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False)
    return done, json.loads(report.read_text())


@pytest.fixture(scope="module")
def lab_host() -> testinfra.host.Host:
    from testinfra.utils.ansible_runner import AnsibleRunner

    run_playbook("-i", str(INVENTORY), "playbooks/lab.yml").check()
    run_playbook("-i", str(INVENTORY), "site.yml").check()
    host = AnsibleRunner(str(INVENTORY)).get_host(LAB_HOST)
    assert host is not None
    return host


def test_limit_changes_under_load(lab_host: testinfra.host.Host, tmp_path: Path) -> None:
    try:
        # A router-only change: the router restarts, the engines do not.
        before = {u: started_at(lab_host, u) for u in ENGINES}
        router_change = f"@{lowered(tmp_path, decode=False)}"
        router_only = run_playbook("-i", str(INVENTORY), "site.yml", "-e", router_change).check()
        assert {u: started_at(lab_host, u) for u in ENGINES} == before, router_only.output[-3000:]
        assert "rollout window:" not in router_only.output

        # The decode change under load.
        done, report = under_load(tmp_path, "-e", f"@{lowered(tmp_path, decode=True)}")
        print(done.stdout[-6000:])
        assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
        histogram = report["histogram"]
        assert report["lost"] == 0, histogram
        assert set(histogram) <= {"200", "503 + Retry-After (no_available_workers)"}, histogram
        # The outage ended: requests sent after the last 503 were served (site.yml goes on for seconds after the
        # decode engine is back; the clients retry within a second). How many requests the clients got through is
        # the machine's speed, not a guarantee: the harness prints the figures above.
        refused = [o["end"] for o in report["outcomes"] if o["kind"] != "200"]
        served_after = [o for o in report["outcomes"] if o["kind"] == "200" and o["start"] > max(refused, default=0)]
        assert served_after, histogram
        assert f"rollout window: sglang-dsv4-decode on {LAB_HOST} was out of the router for" in done.stdout
        assert "lost 0 of" in done.stdout and "window:" in done.stdout
        decode = lab_host.run(
            f"curl -sf -H 'Authorization: Bearer {LAB_KEY}' http://127.0.0.1:30001/server_info"
        ).stdout
        assert json.loads(decode)["max_running_requests"] == 48
    finally:
        run_playbook("-i", str(INVENTORY), "site.yml").check()
