"""Monitoring on the lab: Prometheus scrapes the stack, a simulator fault profile fires its alert in the real
Prometheus and reaches Alertmanager, and a hand edit fires the drift alert within two drift-exporter periods.

Needs the stack deployed (make lab); the module runs playbooks/monitoring.yml first (idempotent, seconds when
nothing changed). Bounded: about two minutes in all.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import testinfra.host
import yaml
from labtools import REPO, run_playbook

pytestmark = pytest.mark.lab

LAB_VARS = REPO / "inventories" / "lab" / "group_vars" / "all"
PROMETHEUS = "http://127.0.0.1:9090"
ALERTMANAGER = "http://127.0.0.1:9093"
SCRIPT = "/opt/sglang/bin/serve_dsv4_decode.sh"


def _vars() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in sorted(LAB_VARS.glob("*.yml")):
        out.update(yaml.safe_load(path.read_text()) or {})
    return out


@pytest.fixture(scope="module")
def host(lab: Path, lab_hosts: dict[str, testinfra.host.Host]) -> testinfra.host.Host:
    h = lab_hosts["lab1"]
    if h.run("curl -sf http://127.0.0.1:30001/health").rc != 0:
        pytest.fail("the stack is not deployed on lab1: run make lab first", pytrace=False)
    run_playbook("playbooks/monitoring.yml", timeout=300).check()
    return h


def _get(host: testinfra.host.Host, url: str) -> Any:
    out = host.run(f"curl -sf {shlex.quote(url)}")
    assert out.rc == 0, f"{url}: {out.stderr}"
    return json.loads(out.stdout)


# The bounds of the waits below only keep a broken chain from hanging the suite: how fast an alert fires is a
# figure (printed), not a guarantee. A drift export runs every sglang_monitoring_drift_period_s at Nice=10 and may
# take up to its TimeoutStartSec (30 s) on a loaded host; an edit made just after a run began is seen by the next.
DRIFT_EXPORT_TIMEOUT_S = 30


def drift_bound(period: int) -> int:
    """Seconds within which a change shows in the drift exporter's series, even on a loaded host: two timer periods
    and two runs at their timeout, plus a scrape and an evaluation (5 s each in the lab) and as much again."""
    return 2 * (period + max(period, DRIFT_EXPORT_TIMEOUT_S)) + 20


def _until(what: str, check: Callable[[], Any], timeout: float, step: float = 1.0) -> tuple[Any, float]:
    started = time.monotonic()
    last = None
    while time.monotonic() - started < timeout:
        last = check()
        if last:
            return last, time.monotonic() - started
        time.sleep(step)
    raise AssertionError(f"{what}: not within {timeout:.0f} s (last: {last})")


def _firing(host: testinfra.host.Host, name: str, **labels: str) -> list[dict[str, Any]]:
    alerts = _get(host, f"{PROMETHEUS}/api/v1/alerts")["data"]["alerts"]
    return [
        a for a in alerts
        if a["labels"].get("alertname") == name and a["state"] == "firing"
        and all(a["labels"].get(k) == v for k, v in labels.items())
    ]  # fmt: skip


def test_prometheus_scrapes_the_stack(host: testinfra.host.Host) -> None:
    def targets_up() -> dict[str, int] | None:
        result = _get(host, f"{PROMETHEUS}/api/v1/query?query={quote('sum by (job) (up)')}")["data"]["result"]
        up = {r["metric"]["job"]: int(float(r["value"][1])) for r in result}
        return up if up.get("sglang_engine") == 2 and up.get("sglang_router") == 1 and up.get("sglang_drift") else None

    _until("every engine, the router and the drift exporter scraped", targets_up, 120)
    rules = _get(host, f"{PROMETHEUS}/api/v1/rules")["data"]["groups"]
    assert {g["name"] for g in rules} >= {
        "sglang-lab1-prefill",
        "sglang-lab1-decode",
        "smg-lab1",
        "sglang-envelope-drift",
    }
    audited = f"{PROMETHEUS}/api/v1/query?query={quote('sglang_envelope_audit_ok')}"
    period = int(_vars()["sglang_monitoring_drift_period_s"])
    _until("the drift exporter audited both engines",
           lambda: len(_get(host, audited)["data"]["result"]) == 2, drift_bound(period))  # fmt: skip


@pytest.fixture
def kv_fill(host: testinfra.host.Host) -> Iterator[None]:
    key = _vars()["sglang_api_key"]

    def profile(body: dict[str, Any]) -> None:
        cmd = (
            f"curl -sf -X POST -H 'Authorization: Bearer {key}' -H 'Content-Type: application/json' "
            f"-d {shlex.quote(json.dumps(body))} http://127.0.0.1:30001/sim/profile"
        )
        assert host.run(cmd).rc == 0

    profile({"profile": "kv_fill"})
    try:
        yield
    finally:
        profile({"profile": "normal"})


def test_kv_fill_fires_in_prometheus_and_reaches_alertmanager(host: testinfra.host.Host, kv_fill: None) -> None:
    # About 25 s on an idle lab (a 5 s scrape, a 5 s evaluation, `for` 15 s); the bound is only a hang guard.
    _, took = _until("SGLangKVPoolFull firing", lambda: _firing(host, "SGLangKVPoolFull", server="lab1:decode"), 240)
    received = _until(
        "Alertmanager received SGLangKVPoolFull",
        lambda: [
            a for a in _get(host, f"{ALERTMANAGER}/api/v2/alerts") if a["labels"].get("alertname") == "SGLangKVPoolFull"
        ],
        120,
    )[0]
    assert received[0]["labels"]["guards"] == "max_total_num_tokens"
    print(f"SGLangKVPoolFull firing {took:.0f} s after the kv_fill profile")


@pytest.fixture
def edited_script(host: testinfra.host.Host) -> Iterator[str]:
    original = host.file(SCRIPT).content_string
    assert "--context-length 524288" in original
    backup = "/root/serve_dsv4_decode.sh.orig"
    host.run(f"cp -p {SCRIPT} {backup}")
    host.run(f"sed -i 's/--context-length 524288/--context-length 262144/' {SCRIPT}")
    try:
        yield original
    finally:
        host.run(f"cp -p {backup} {SCRIPT} && rm -f {backup}")


def test_a_hand_edit_fires_the_drift_alert_within_two_periods(host: testinfra.host.Host, edited_script: str) -> None:
    period = int(_vars()["sglang_monitoring_drift_period_s"])
    labels = {"server": "lab1:decode", "key": "context_length", "layer": "on_disk"}
    # Fires within two timer periods on an idle host (one to export, one for the rule's evaluation and scrape): a
    # figure, printed. On a loaded host the export itself may take up to its timeout: drift_bound is the hang guard.
    _, took = _until(
        "SGLangEnvelopeDrift firing", lambda: _firing(host, "SGLangEnvelopeDrift", **labels), drift_bound(period)
    )
    print(f"SGLangEnvelopeDrift firing {took:.0f} s after the edit (timer period {period} s, "
          f"{took / period:.1f} periods)")  # fmt: skip
