"""The envelope probe and its verdicts against a stand-in router on 127.0.0.1 (no lab needed).

The probe program runs as a subprocess, as it does on a host; its JSON goes through the verify suite's own
probe tests, which must pass for a correct router and fail for each defect.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import test_verify_probes as verdicts  # the verify suite's probe checks (verify/ on sys.path)
from fake_router import Behaviour, FakeRouter
from verify_remote import PROBE


def probe(
    actual: Behaviour, sized_for: Behaviour | None = None, extra: int = 2, max_parallel: int = 64, max_total: int = 8
) -> dict[str, Any]:
    """Run the probe, sized for the `sized_for` declaration, against a router that behaves as `actual`."""
    d = sized_for or Behaviour()
    with FakeRouter(actual) as router:
        config: dict[str, Any] = {
            "router": router.url,
            "token_id": 100,
            "deadline_s": 30,
            "request_timeout_s": 10,
            "bound_s": 120,
            "context": {"context_len": d.context_len, "max_input": d.max_req_input_len - 1},
            "parallel": {
                "max_concurrent": d.max_concurrent,
                "queue_size": d.queue_size,
                "extra": extra,
                # Long enough for the whole first wave to be in flight on a loaded 2-core machine.
                "hold_s": 1.5,
                "reject_s": 1.0,
                "queue_timeout_s": 60,
                "request_timeout_s": 60,
                "max_parallel": max_parallel,
            },
            "total": {
                "context_len": d.context_len,
                "pool_tokens": d.pool_tokens,
                "input_tokens": 3000,
                "max_requests": max_total,
                "hold_s": 0.4,
                "observe": {"url": router.url},
            },
        }
        proc = subprocess.run(
            [sys.executable, str(PROBE), json.dumps(config)], capture_output=True, text=True, timeout=60, check=False
        )
    assert proc.returncode == 0, proc.stderr
    return {"config": config, "result": json.loads(proc.stdout)}


CHECKS: list[Callable[[dict[str, Any]], None]] = [
    verdicts.test_probe_context_over_rejected,
    verdicts.test_probe_context_under_accepted,
    verdicts.test_probe_parallel_admitted,
    verdicts.test_probe_parallel_rejected_promptly,
    verdicts.test_probe_every_request_accounted,
    verdicts.test_probe_total_context_never_dropped,
]


def failing(result: dict[str, Any]) -> list[str]:
    out = []
    for check in CHECKS:
        try:
            check(result)
        except AssertionError:
            out.append(check.__name__)
    return out


def test_correct_router_passes_every_probe() -> None:
    result = probe(Behaviour())
    assert failing(result) == [], json.dumps(result["result"])[:3000]
    assert result["result"]["total"]["requests"] >= 3, "the total probe must exceed the pool"


def test_queue_size_zero_fails_admission() -> None:
    result = probe(Behaviour(queue_size=0))
    assert "test_probe_parallel_admitted" in failing(result)


def test_longer_live_context_fails_over_probe() -> None:
    failed = failing(probe(Behaviour(context_len=8192, max_req_input_len=8186)))
    assert "test_probe_context_over_rejected" in failed


def test_shorter_live_context_fails_under_probe() -> None:
    failed = failing(probe(Behaviour(context_len=2048, max_req_input_len=2042)))
    assert "test_probe_context_under_accepted" in failed


def test_smaller_router_window_fails_admission() -> None:
    failed = failing(probe(Behaviour(max_concurrent=2)))
    assert "test_probe_parallel_admitted" in failed


def test_dropped_stream_fails_total_probe() -> None:
    result = probe(Behaviour(drop_when_pool_full=True))
    assert "test_probe_total_context_never_dropped" in failing(result)


def test_capped_fan_out_is_reported() -> None:
    result = probe(Behaviour(), max_parallel=5)
    par = result["result"]["parallel"]
    assert par["capped"] and "fan-out cap 5" in par["reason"]
    with pytest.raises(pytest.skip.Exception):
        verdicts.test_probe_parallel_rejected_promptly(result)
    verdicts.test_probe_parallel_admitted(result)
