"""Time probe through the router (with the envelope probes: --probes, or sglang_verify_probes: true).

A few streamed requests, one at a time (sglang_verify_time_requests of sglang_verify_time_input_tokens prompt and
sglang_verify_time_output_tokens output tokens), sent by the probe program on the router host; their median TTFT
and ITL, measured on the stream, against the time model's prediction for that workload on the declared fleet
(plugin_utils/sglang_perf_fleet.py over AIConfigurator's step data), divided by the simulator's
SGLANG_SIM_SPEED_FACTOR where the engines are the simulator. Each must lie within sglang_verify_time_tolerance of the
prediction. The prediction runs on the controller and needs the estimator's venv (make perf-venv).
"""

from __future__ import annotations

import statistics
from typing import Any

import pytest
from verify_expect import HostPlan, probes_off
from verify_remote import run_probe
from verify_session import plan_of
from verify_time import predicted


def time_config(plan: HostPlan) -> dict[str, Any]:
    router, s = plan.servers["router"], plan.settings
    return {
        "router": router.base_url,
        "api_key_file": router.env_file,
        "token_id": int(s["sglang_verify_probe_token_id"]),
        "deadline_s": float(s["sglang_verify_probe_deadline_secs"]),
        "time": {
            "requests": int(s["sglang_verify_time_requests"]),
            "input_tokens": int(s["sglang_verify_time_input_tokens"]),
            "output_tokens": int(s["sglang_verify_time_output_tokens"]),
            "timeout_s": 60,
        },
    }


def test_probe_time_matches_the_model(request: pytest.FixtureRequest, runner: Any, host: Any) -> None:
    """Single-stream TTFT and ITL through the router lie within the declared tolerance of the model's prediction."""
    plan = plan_of(runner, host.backend.host)
    off = probes_off(plan, request.config.getoption("probes"))
    if off:
        pytest.skip(off)
    config = time_config(plan)
    isl, osl = config["time"]["input_tokens"], config["time"]["output_tokens"]
    pred, factor = predicted(runner, isl, osl)
    result = run_probe(host, plan, config)
    assert "error" not in result, f"probe: {result['error']}"
    runs = result["time"]["results"]
    failed = [r for r in runs if r.get("status") != 200 or not r.get("done") or r.get("itl_s") is None]
    assert not failed, f"{len(failed)} of {len(runs)} time probe requests did not stream to the end: {failed[:2]}"
    tolerance = float(plan.settings["sglang_verify_time_tolerance"])
    speed = f"; the model divided by the simulator's speed factor {factor:g}" if factor else ""
    problems = []
    for name, key, figure, unit in (("TTFT", "ttft_s", pred.ttft_p50, "s"), ("ITL", "itl_s", pred.itl_p50, "ms")):
        measured_ms = statistics.median(r[key] for r in runs) * 1000
        ratio = measured_ms / figure.ms
        print(f"time probe {name}: measured {measured_ms:,.1f} ms, predicted {figure.text(unit)}, ratio {ratio:.2f}")
        if abs(ratio - 1) > tolerance:
            problems.append(
                f"{name}: measured {measured_ms:,.1f} ms (median of {len(runs)} streamed requests of {isl:,} + {osl:,} "
                f"tokens, one at a time), predicted {figure.ms:,.1f} ms ({figure.source}), ratio {ratio:.2f}, beyond "
                f"+-{tolerance:.0%} (sglang_verify_time_tolerance){speed}"
            )
    assert not problems, "; ".join(problems)
