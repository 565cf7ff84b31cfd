"""A decode max_running_requests change under load on the multi-host lab (`make lab LAB=multinode`: 2 prefill,
2 decode and 1 router systemd-nspawn host on one bridge, the router reaching the workers by address): the decode
engines restart one at a time, each leaving the router first, and six closed-loop clients lose no request.

Slow (boots five hosts, two site.yml runs: about 8 minutes on 2 cores): marked `rollout` (and `lab`); `make test`
runs it once, in its own pytest pass. It leaves the multi-host lab down.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from labtools import REPO, run_playbook

pytestmark = [pytest.mark.lab, pytest.mark.rollout]

INVENTORY = "inventories/multinode-lab/hosts.yml"
ROUTER_HOST = "mlab-r1"
LAB_KEY = "lab-test-key-not-secret"


def decode_48(tmp_path: Path) -> Path:
    envelope = yaml.safe_load((REPO / "group_vars/all/envelope.yml").read_text())
    d = dict(envelope["sglang_decode"])
    change: dict[str, Any] = {
        "sglang_decode": {
            **d,
            "max_running_requests": 48,
            "cuda_graph_max_bs_decode": 48,
            "cuda_graph_bs_decode": [b for b in d["cuda_graph_bs_decode"] if b <= 48],
        }
    }
    path = tmp_path / "change-decode.json"
    path.write_text(json.dumps(change))
    return path


@pytest.fixture(scope="module")
def multinode() -> Iterator[str]:
    run_playbook("-i", INVENTORY, "playbooks/lab.yml").check()
    try:
        run_playbook("-i", INVENTORY, "site.yml").check()
        yield INVENTORY
    finally:
        run_playbook("-i", INVENTORY, "playbooks/lab_down.yml").check()


def test_decode_change_under_load_loses_nothing(multinode: str, tmp_path: Path) -> None:
    report = tmp_path / "load.json"
    argv = [
        sys.executable,
        str(REPO / "bench/rollout_load.py"),
        "--netns",
        ROUTER_HOST,
        "--clients",
        "6",
        "--max-tokens",
        "16",
        "--command-timeout",
        "900",
        "--json",
        str(report),
        "--",
        "ansible-playbook",
        "-i",
        multinode,
        "site.yml",
        "-e",
        f"@{decode_48(tmp_path)}",
    ]
    env = {
        **os.environ,
        "SGLANG_API_KEY": LAB_KEY,
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
    }
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=1200, check=False)
    print(done.stdout[-6000:])
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    body = json.loads(report.read_text())
    # One decode engine out at a time, the other serving: every request a 200 (no 503 either). The clients ran from
    # before the command to after it; how many requests they got through is the machine's speed, printed above.
    assert body["lost"] == 0 and set(body["histogram"]) == {"200"}, body["histogram"]
    for host in ("mlab-d1", "mlab-d2"):
        assert f"rollout window: sglang-dsv4-decode on {host} was out of the router for" in done.stdout
    assert "rollout window: sglang-dsv4-prefill" not in done.stdout
