"""The verify probe's admission verdicts against fake routers on loopback.

The probe program (verify/probes/envelope_probe.py) fills a router's admission window, max_concurrent
+ queue_size = 4 requests here that each hold for about a second, then sends 2 more. A router that keeps its
limits answers those 2 with 429 at once; one that over-admits must make the verdict fail.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest
from loopback import http_server

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "verify" / "probes"))
import envelope_probe
from verdicts import admission_problems, rejection_problems

MAX_CONCURRENT, QUEUE, EXTRA = 2, 2, 2
SECONDS_PER_TOKEN = 0.01
CONFIG = {
    "max_concurrent": MAX_CONCURRENT,
    "queue_size": QUEUE,
    "extra": EXTRA,
    "max_parallel": 16,
    "hold_s": 1.0,
    "queue_timeout_s": 10,
    "request_timeout_s": 10,
    "reject_s": 1.0,
}
CALIBRATION = {"per_token_s": SECONDS_PER_TOKEN, "overhead_s": 0.0}


def fake_router(admits: int | None, reject_after_s: float = 0.0) -> object:
    """POST /generate: generates for max_new_tokens x 10 ms; with `admits`, a request arriving while that many
    are in flight gets 429 (after `reject_after_s`); None admits everything."""
    lock = threading.Lock()
    in_flight = [0]

    def handle(method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        tokens = int(json.loads(body)["sampling_params"]["max_new_tokens"])
        with lock:
            full = admits is not None and in_flight[0] >= admits
            if not full:
                in_flight[0] += 1
        if full:
            time.sleep(reject_after_s)
            return 429, b'{"error":"Too Many Requests"}'
        try:
            time.sleep(min(tokens * SECONDS_PER_TOKEN, 3.0))
            meta = {"prompt_tokens": 8, "completion_tokens": tokens, "finish_reason": {"type": "length"}}
            return 200, json.dumps({"text": "", "meta_info": meta}).encode()
        finally:
            with lock:
                in_flight[0] -= 1

    return handle


def run_parallel_probe(admits: int | None, reject_after_s: float = 0.0) -> dict:
    with http_server(fake_router(admits, reject_after_s)) as url:
        client = envelope_probe.Client(url, None)
        return envelope_probe.probe_parallel(client, CONFIG, CALIBRATION, 100, time.monotonic() + 20)


def test_a_router_that_keeps_its_limits_passes() -> None:
    par = run_parallel_probe(admits=MAX_CONCURRENT + QUEUE)
    assert [r["status"] for r in par["wave2"]] == [429] * EXTRA
    assert admission_problems(par) == []
    assert rejection_problems(par, CONFIG["reject_s"]) == []


@pytest.mark.parametrize(
    ("admits", "outcome"),
    [(None, "2x 200"), (MAX_CONCURRENT + QUEUE + 1, "1x 200, 1x 429")],
    ids=["admits-everything", "admits-one-too-many"],
)
def test_a_router_that_over_admits_fails(admits: int | None, outcome: str) -> None:
    par = run_parallel_probe(admits)
    assert admission_problems(par) == []  # the window itself was served
    problems = rejection_problems(par, CONFIG["reject_s"])
    assert problems and f"{outcome}, expected 429 each" in problems[0], problems


def test_a_slow_429_fails() -> None:
    par = run_parallel_probe(admits=MAX_CONCURRENT + QUEUE, reject_after_s=1.2)
    problems = rejection_problems(par, CONFIG["reject_s"])
    assert problems and problems[-1].startswith("429 took 1.2"), problems


def test_a_router_that_rejects_the_window_fails_admission() -> None:
    par = run_parallel_probe(admits=MAX_CONCURRENT)
    problems = admission_problems(par)
    assert problems and "2 of 4 parallel requests" in problems[0], problems


def test_nothing_sent_beyond_the_window_is_no_pass() -> None:
    assert rejection_problems({"wave2": [], "extra": 0}, 1.0) == ["0 extra requests sent, 0 planned"]
