"""The probe program waits for an idle router before it fills the admission window: against the real smg 1.13.0
in front of two simulated engines on 127.0.0.1, a call of other traffic still running holds the probe back, and the
probe says so when the call outlasts its wait."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from verify_remote import PROBE

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
from simtools import MODEL_CONFIG, Launcher, metrics_url

SLOW = {"SGLANG_SIM_TTFT_MS": "100", "SGLANG_SIM_TOKENS_PER_SEC": "10"}


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(router URL, its metrics URL)."""
    model = tmp_path_factory.mktemp("model") / "DeepSeek-V4-Flash"
    model.mkdir()
    model.joinpath("config.json").write_text(MODEL_CONFIG.read_text())
    launcher = Launcher(model, tmp_path_factory.mktemp("logs"))
    try:
        proc, url = launcher.pd_router(
            ["--context-length", "8192"],
            ["--policy", "round_robin", "--max-concurrent-requests", "2", "--queue-size", "2"],
            SLOW,
        )
        yield url, metrics_url(proc).removesuffix("/metrics")
    finally:
        launcher.close()


def _probe(url: str, metrics: str, idle_wait_s: float) -> dict[str, Any]:
    config = {"router": url, "metrics_url": metrics, "idle_wait_s": idle_wait_s, "deadline_s": 30}
    proc = subprocess.run(
        [sys.executable, str(PROBE), json.dumps(config)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))


def _probe_during_a_call(router: tuple[str, str], tokens: int, idle_wait_s: float) -> dict[str, Any]:
    """The probe, sent while a call of other traffic generates `tokens` at the simulator's 10 tokens/s."""
    url, metrics = router
    body = {"text": "hello", "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True}}
    call = threading.Thread(target=lambda: httpx.post(url + "/generate", json=body, timeout=60), daemon=True)
    call.start()
    deadline = time.monotonic() + 20
    while "smg_admission_inflight 1" not in httpx.get(metrics + "/metrics").text and time.monotonic() < deadline:
        time.sleep(0.1)
    found = _probe(url, metrics, idle_wait_s)
    call.join(30)
    return found


def test_an_idle_router_is_probed_at_once(router: tuple[str, str]) -> None:
    found = _probe(*router, idle_wait_s=10)
    assert found["before"]["held"] == 0 and found["before"]["waited_s"] < 1, found
    assert "error" not in found


def test_the_probe_waits_for_a_call_of_other_traffic_to_end(router: tuple[str, str]) -> None:
    found = _probe_during_a_call(router, 40, idle_wait_s=30)  # a call of about 4 s
    assert found["before"]["held"] == 0 and 1 <= found["before"]["waited_s"] < 10, found
    assert "error" not in found


def test_a_call_that_outlasts_the_wait_stops_the_probe_with_the_reason(router: tuple[str, str]) -> None:
    found = _probe_during_a_call(router, 100, idle_wait_s=2)  # a call of about 10 s
    assert found["before"]["held"] == 1, found
    assert found["error"].startswith("the router still held 1 calls (running or queued) after 2"), found
    assert "parallel" not in found and "context" not in found
