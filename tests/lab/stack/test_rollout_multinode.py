"""The multi-host lab under load (`make lab LAB=multinode`: 2 prefill, 2 decode and 2 router systemd-nspawn hosts
on one bridge, the routers reaching the workers by address, behind the HAProxy front on mlab-f1):

- one run that changes the decode engines, the front and the routers, under six closed-loop clients of the front:
  the decode engines restart one at a time, each leaving both routers first; HAProxy reloads in place; the routers
  restart one at a time, each drained in HAProxy first; the clients see no refused or reset connection and lose
  nothing;
- a second prefill engine joins the routers and the calls' TTFT falls as the time model predicts;
- a router host powered off under load: the front sends everything to the other router, and nothing is lost.

Slow (boots seven hosts, two site.yml runs and two audits: about 6 minutes on 2 cores): marked `rollout` (and
`lab`); `make test` runs it once, in its own pytest pass. It leaves the multi-host lab down.
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
from labtools import REPO, PlaybookRun, run_playbook

pytestmark = [pytest.mark.lab, pytest.mark.rollout]

INVENTORY = "inventories/multinode-lab/hosts.yml"
ROUTER_HOST = "mlab-r1"
FRONT_HOST = "mlab-f1"
FRONT = "http://10.231.0.41:8080"  # the HAProxy front (roles/sglang_frontend) on mlab-f1
LAB_KEY = "lab-test-key-not-secret"


def lab_router() -> dict[str, Any]:
    """The lab's router envelope (each of its two routers admits 48)."""
    return dict(
        yaml.safe_load((REPO / "inventories/multinode-lab/group_vars/sglang_router.yml").read_text())["sglang_router"]
    )


def decode_48(tmp_path: Path, **router: Any) -> Path:
    """The decode engines' max_running_requests at 48 (and `router` keys changed in the routers' envelope)."""
    envelope = yaml.safe_load((REPO / "group_vars/all/envelope.yml").read_text())
    d = dict(envelope["sglang_decode"])
    change: dict[str, Any] = {
        **({"sglang_router": {**lab_router(), **router}} if router else {}),
        "sglang_decode": {
            **d,
            "max_running_requests": 48,
            "cuda_graph_max_bs_decode": 48,
            "cuda_graph_bs_decode": [b for b in d["cuda_graph_bs_decode"] if b <= 48],
        },
    }
    path = tmp_path / "change-decode.json"
    path.write_text(json.dumps(change))
    return path


@pytest.fixture(scope="module")
def multinode() -> Iterator[str]:
    run_playbook("-i", INVENTORY, "playbooks/lab.yml").check()
    try:
        # The first deploy: nothing serves yet, so the four engine hosts install at once (sglang_engine_serial), the
        # routers one after the other.
        run_playbook("-i", INVENTORY, "site.yml", "-e", "sglang_engine_serial=4", timeout=2400).check()
        yield INVENTORY
    finally:
        run_playbook("-i", INVENTORY, "playbooks/lab_down.yml").check()


def under_load(netns: str, url: str, command: list[str], report: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """Six closed-loop clients of `url` from the network namespace `netns` while `command` runs (bench/rollout_load.py,
    with `extra` arguments); the report of every outcome is written to `report`."""
    argv = [sys.executable, str(REPO / "bench/rollout_load.py"), "--netns", netns, "--url", url, "--clients", "6",
            "--max-tokens", "16", "--command-timeout", "900", "--json", str(report), *extra,
            "--", *command]  # fmt: skip
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
    return done


def test_decode_front_and_router_changes_through_the_front_lose_nothing(multinode: str, tmp_path: Path) -> None:
    """One site.yml run that changes the decode engines' max_running_requests, a setting of the front (HAProxy's
    retries) and the routers' admission, under six clients of the front: the decode engines restart one at a time,
    each leaving both routers first; HAProxy's configuration is rewritten, checked by haproxy -c, and HAProxy reloads
    in place (its master hands the listening socket to the new workers); the routers restart one at a time (smg
    cannot hand its socket over), each drained in HAProxy first. The clients never meet a router that is not listening
    and lose nothing."""
    report = tmp_path / "load.json"
    site = ["ansible-playbook", "-i", multinode, "site.yml", "-e",
            f"@{decode_48(tmp_path, max_concurrent_requests=40)}", "-e", "sglang_frontend_retries=2"]  # fmt: skip
    done = under_load(FRONT_HOST, FRONT, site, report)
    body = json.loads(report.read_text())
    # Every call answered: 200, or 429 + Retry-After while the routers admit fewer. The clients ran from before the
    # command to after it; how many calls they got through is the machine's speed, printed above.
    assert body["lost"] == 0 and set(body["histogram"]) <= {"200", "429 + Retry-After"}, body["histogram"]
    # Each decode engine restarted once, for its own change, and no other engine: neither the front's change nor the
    # routers' restarted one (the prefill engines kept running).
    windows = [line.split("rollout window: ", 1)[1] for line in done.stdout.splitlines() if "rollout window: " in line]
    assert sorted(w.split(" was out of the router for")[0] for w in windows) == [
        "sglang-dsv4-decode on mlab-d1",
        "sglang-dsv4-decode on mlab-d2",
    ], windows
    assert "RUNNING HANDLER [sglang.dsv4.sglang_frontend : Reload HAProxy] *" in done.stdout
    assert "changed: [mlab-f1]" in done.stdout.split("Reload HAProxy", 1)[1]
    assert "Set in the HAProxy front, drain sglang-dsv4-router] *" in done.stdout
    for host in ("mlab-r1", "mlab-r2"):
        assert f"changed: [{host} -> mlab-f1]" in done.stdout, f"{host} was not drained in the front"


# ---------------------------------------------------------------- a second prefill engine, measured

PREFILL_2 = "http://10.231.0.12:30000"  # mlab-p2's prefill engine, as the router knows it
ROUTER = "http://127.0.0.1:8000"


def router_worker(multinode: str, **args: Any) -> dict[str, Any]:
    """sglang.dsv4.sglang_router_worker on the router host (the rollout's own step); its result."""
    done = subprocess.run(
        [str(Path(sys.executable).with_name("ansible")), ROUTER_HOST, "-i", multinode, "-o",
         "-m", "sglang.dsv4.sglang_router_worker", "-a", json.dumps({"router": ROUTER, "api_key": LAB_KEY, **args})],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return dict(json.loads(done.stdout.split("=>", 1)[1]))


def bench_ttft(inventory: Path, out: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """`sglang-envelope bench` of 8 calls of 6,000 tokens at once (one prompt a prefill pass); the TTFT p50 and p90
    rows (measured and predicted, ms)."""
    argv = [str(Path(sys.executable).with_name("sglang-envelope")), "bench", "--inventory", str(inventory),
            "--want", "8x6000", "--output-tokens", "64", "--concurrency", "8", "--out", str(out)]  # fmt: skip
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    print(done.stdout[-3000:])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (level,) = json.loads((out / "bench.json").read_text())["levels"]
    by = {row["figure"]: row for row in level["rows"]}
    assert by["errors"]["measured"] == 0 and level["result"]["completed"] == 8, by["errors"]
    return by["TTFT p50"], by["TTFT p90"]


def one_prefill_inventory(tmp_path: Path) -> Path:
    """The multi-host lab's inventory with mlab-p2 out of group sglang_prefill (its group_vars linked)."""
    source = REPO / INVENTORY
    hosts = yaml.safe_load(source.read_text())
    del hosts["all"]["children"]["sglang_engine"]["children"]["sglang_prefill"]["hosts"]["mlab-p2"]
    folder = tmp_path / "one-prefill"
    folder.mkdir()
    (folder / "hosts.yml").write_text(yaml.safe_dump(hosts))
    (folder / "group_vars").symlink_to(source.parent / "group_vars")
    return folder / "hosts.yml"


def test_a_second_prefill_engine_lowers_ttft_as_predicted(multinode: str, tmp_path: Path) -> None:
    spec = router_worker(multinode, url=PREFILL_2, state="absent")["spec"]
    try:
        one = bench_ttft(one_prefill_inventory(tmp_path), tmp_path / "one")
    finally:
        router_worker(multinode, state="present", spec=spec)
    two = bench_ttft(REPO / INVENTORY, tmp_path / "two")
    for name, before, after in (("p50", one[0], two[0]), ("p90", one[1], two[1])):
        measured, predicted = after["measured"] / before["measured"], after["predicted"] / before["predicted"]
        print(f"TTFT {name}: {before['measured']:.0f} -> {after['measured']:.0f} ms measured ({measured:.2f}x), "
              f"{before['predicted']:.0f} -> {after['predicted']:.0f} ms predicted ({predicted:.2f}x)")  # fmt: skip
        assert measured < 0.8, f"TTFT {name} did not fall with a second prefill engine ({measured:.2f}x)"
        assert abs(measured / predicted - 1) <= 0.15, (
            f"TTFT {name} fell {measured:.2f}x, the model said {predicted:.2f}x"
        )


# ---------------------------------------------------------------- a router host lost (last: it stays down)


def audit(multinode: str, tmp_path: Path, name: str) -> tuple[PlaybookRun, str]:
    """The audit of the lab as the tests above left it (decode engines at 48, routers at 40): the run and its report's
    text (audit.txt)."""
    folder = tmp_path / name
    run = run_playbook("-i", multinode, "audit.yml", "-e", f"@{decode_48(tmp_path, max_concurrent_requests=40)}",
                       "-e", f"sglang_audit_report_dir={folder}")  # fmt: skip
    return run, (folder / "audit.txt").read_text()


def test_a_router_host_powered_off_under_load_loses_nothing(multinode: str, tmp_path: Path) -> None:
    before, text = audit(multinode, tmp_path, "before")
    before.check()
    assert "front (HAProxy, group sglang_frontend):\n  mlab-f1: mlab-r1 in (UP, " in text and "mlab-r2 in (UP, " in text
    report = tmp_path / "load.json"
    power_off = ["ansible-playbook", "-i", multinode, "playbooks/lab_down.yml", "-e",
                 json.dumps({"sglang_lab_hosts": ["mlab-r2"]})]  # fmt: skip
    # The clients go on for 10 s after the host is gone: HAProxy's checks mark it down within 2 s.
    under_load(FRONT_HOST, FRONT, power_off, report, "--tail", "10")
    body = json.loads(report.read_text())
    assert body["lost"] == 0 and set(body["histogram"]) <= {"200", "429 + Retry-After"}, body["histogram"]
    after, text = audit(multinode, tmp_path, "after")
    assert after.returncode != 0  # mlab-r2 is unreachable, and out of the front
    assert "  mlab-f1: mlab-r1 in (UP, " in text and "mlab-r2 OUT (DOWN, 0 open)" in text, text
