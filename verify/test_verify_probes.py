"""Envelope probes through the router: opt-in (--probes, or sglang_verify_probes: true in the inventory).

The probe program (probes/envelope_probe.py) runs on the router host. It is sized from the live engine values
(context length, longest accepted input, KV pool) and the declared router limits, and bounded in fan-out and
time (sglang_verify_probe_* settings, plus twice the time model's first token of the longest prompt: a prompt of
the full context takes minutes to prefill, on an H200 as on the lab's simulator). It fills the router's admission
window: run it only on an idle stack.
"""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils import smg_live
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_declared import local_url
from probes.verdicts import admission_problems, describe, rejection_problems
from verify_expect import ENGINE_ROLES, HostPlan, probes_off
from verify_remote import run_probe
from verify_session import plan_of, snapshot_of
from verify_time import predicted

IDLE_WAIT_S = 120  # the probes wait this long at most for calls of earlier traffic to leave the router


def _engines_live(runner: Any, plan: HostPlan) -> dict[str, list[dict[str, Any]]]:
    """Live state of every engine of the inventory (their hosts' snapshots)."""
    out: dict[str, list[dict[str, Any]]] = {r: [] for r in ENGINE_ROLES}
    for role in ENGINE_ROLES:
        for worker in plan.workers[role]:
            seen = snapshot_of(runner, worker["host"])["servers"].get(role) or {}
            engine = seen.get("live") or {}
            if engine.get("live") is None:
                pytest.fail(f"{role} engine on {worker['host']} gave no live values: {seen.get('live')}", pytrace=False)
            out[role].append(engine)
    return out


def probe_config(runner: Any, plan: HostPlan) -> dict[str, Any]:
    router = plan.servers["router"]
    s = plan.settings
    engines = _engines_live(runner, plan)
    every = engines["prefill"] + engines["decode"]
    contexts = [e["live"].get("context_length") for e in every]
    inputs = [e["live_facts"].get("max_req_input_len") for e in every]
    pools = [e["live"].get("max_total_tokens") for e in engines["decode"]]
    if None in contexts or None in inputs or None in pools:
        pytest.fail(
            f"engines report no context length, max_req_input_len or KV pool: {contexts}, {inputs}, {pools}",
            pytrace=False,
        )
    metrics = router.listeners[1]  # (address, port) of smg's metrics listener (sglang_layout.LISTENER_KEYS)
    limits, _ = smg_live.router_effective({k: v for k, v in router.envelope.items() if v is not None})
    longest = min(int(i) for i in inputs) - 1  # SGLang accepts an input shorter than max_req_input_len
    hold = float(s["sglang_verify_probe_hold_secs"])
    # The longest accepted prompt is prefilled once (the probes' prompts repeat one token, so the others hit the
    # prefix cache): its first token takes what the time model says, twice over for the model's band.
    first_token_s = 2 * predicted(runner, longest, 1)[0].ttft_p90.ms / 1000
    config: dict[str, Any] = {
        "router": router.base_url,
        "api_key_file": router.env_file,
        "metrics_url": local_url("" if metrics[0] == "*" else metrics[0], metrics[1]),
        "idle_wait_s": IDLE_WAIT_S,
        "token_id": int(s["sglang_verify_probe_token_id"]),
        "deadline_s": float(s["sglang_verify_probe_deadline_secs"]) + first_token_s,
        "request_timeout_s": 30 + first_token_s,
        # No request may stay open longer than the router's own queue + request timeouts.
        "bound_s": limits["queue_timeout_secs"] + limits["request_timeout_secs"],
        "context": {"context_len": min(int(c) for c in contexts), "max_input": longest},
        "parallel": {
            "max_concurrent": limits["max_concurrent_requests"] or 0,
            "queue_size": limits["queue_size"],
            "extra": int(s["sglang_verify_probe_extra"]),
            "hold_s": hold,
            "reject_s": float(s["sglang_verify_probe_reject_secs"]),
            "queue_timeout_s": limits["queue_timeout_secs"],
            "request_timeout_s": limits["request_timeout_secs"],
            "max_parallel": int(s["sglang_verify_probe_max_parallel"]),
        },
        "total": {
            "pool_tokens": sum(int(p) for p in pools),
            "input_tokens": longest,
            "context_len": min(int(c) for c in contexts),
            "max_requests": int(s["sglang_verify_probe_max_total"]),
            "hold_s": hold,
        },
    }
    if limits["max_concurrent_requests"] is None:  # 0: smg has no in-flight cap, nothing to saturate
        config["parallel"] = None
        config["parallel_skipped"] = "the router declares max_concurrent_requests 0 (no in-flight cap): nothing to fill"
    if "decode" in plan.servers:
        decode = plan.servers["decode"]
        config["total"]["observe"] = {"url": decode.base_url, "api_key_file": decode.env_file}
    return config


@pytest.fixture(scope="module")
def probe(request: pytest.FixtureRequest, runner: Any, host: Any) -> dict[str, Any]:
    plan = plan_of(runner, host.backend.host)
    off = probes_off(plan, request.config.getoption("probes"))
    if off:
        pytest.skip(off)
    config = probe_config(runner, plan)
    result = run_probe(host, plan, config)
    assert "error" not in result, f"probe: {result['error']}"
    return {"config": config, "result": result}


def _parallel(probe: dict[str, Any]) -> dict[str, Any]:
    if probe["config"].get("parallel") is None:
        pytest.skip(probe["config"].get("parallel_skipped") or "no parallel probe")
    par: dict[str, Any] = probe["result"].get("parallel") or {}
    assert par, f"the parallel probe did not run: {probe['result'].get('calibration')}"
    assert "error" not in par, f"parallel probe: {par.get('error')}"
    return par


def test_probe_context_over_rejected(probe: dict[str, Any]) -> None:
    """A request one token over the live context length gets 400 with SGLang's message."""
    ctx = probe["result"]["context"]
    over = ctx["over"]
    assert over.get("status") == 400, (
        f"{over['input_tokens']} input tokens (context length {ctx['context_len']}): expected 400, got "
        f"{over.get('status')} {over.get('error') or over.get('body') or over.get('finish')!r}"
    )
    assert ctx["expected_message"] in over.get("body", ""), (
        f"400 without SGLang's message {ctx['expected_message']!r}: {over.get('body')!r}"
    )


def test_probe_context_under_accepted(probe: dict[str, Any]) -> None:
    """A request of the longest accepted input (max_req_input_len - 1 tokens) is served."""
    under = probe["result"]["context"]["under"]
    assert under.get("status") == 200, (
        f"{under['input_tokens']} input tokens: expected 200, got {under.get('status')} "
        f"{under.get('error') or under.get('body')!r}"
    )
    if under.get("prompt_tokens") is not None:
        assert under["prompt_tokens"] == under["input_tokens"], f"prompt_tokens {under['prompt_tokens']}"


def test_probe_parallel_admitted(probe: dict[str, Any]) -> None:
    """max_concurrent_requests + queue_size parallel requests all succeed (running or queued)."""
    problems = admission_problems(_parallel(probe))
    assert not problems, problems[0]


def test_probe_parallel_rejected_promptly(probe: dict[str, Any]) -> None:
    """Requests beyond max_concurrent_requests + queue_size get 429 within the reject bound."""
    par = _parallel(probe)
    if par.get("capped"):
        pytest.skip(par["reason"])
    problems = rejection_problems(par, probe["config"]["parallel"]["reject_s"])
    assert not problems, "; ".join(problems)


def test_probe_every_request_accounted(probe: dict[str, Any]) -> None:
    """No probe request hangs past the declared timeouts; each one ends as 200 or an expected rejection."""
    res = probe["result"]
    par = res.get("parallel") or {}
    bound = probe["config"]["bound_s"]
    requests = [("wave1", r) for r in par.get("wave1", [])] + [("wave2", r) for r in par.get("wave2", [])]
    requests += [("total", r) for r in (res.get("total") or {}).get("results", [])]
    requests += [("context", res["context"]["under"]), ("context-over", res["context"]["over"])]
    allowed = {"wave1": {200}, "wave2": {429, 200}, "total": {200, 429, 503}, "context": {200}, "context-over": {400}}
    hung = [f"{k}: {r.get('error')}" for k, r in requests if r.get("timeout") or (r.get("seconds") or 0) > bound]
    assert not hung, f"{len(hung)} requests hung (declared bound {bound} s): {hung[:5]}"
    odd = [
        f"{k}: {r.get('status')} {r.get('error') or r.get('body', '')!r}"
        for k, r in requests
        if r.get("status") not in allowed[k]
    ]
    assert not odd, f"{len(odd)} of {len(requests)} requests ended unexpectedly: {odd[:5]}"


def test_probe_total_context_never_dropped(probe: dict[str, Any]) -> None:
    """Concurrent requests beyond the decode KV pool are queued or rejected, never cut off mid-generation."""
    total = probe["result"].get("total") or {}
    assert total, f"the total-context probe did not run: {probe['result'].get('calibration')}"
    if total.get("capped"):
        pytest.skip(total["reason"])
    results = total.get("results") or []
    assert results, "the total-context probe sent nothing"
    completed, rejected, dropped = [], [], []
    for r in results:
        if (
            r.get("status") == 200
            and r.get("done")
            and r.get("finish") == "length"
            and not r.get("stream_error")
            and r.get("completion_tokens") == total["max_new_tokens"]
        ):
            completed.append(r)
        elif r.get("chunks", 0) == 0 and (r.get("status") not in (200, None) or r.get("stream_error")):
            rejected.append(r)  # refused before any output: queued or rejected is fine, dropped is not
        else:
            dropped.append(r)
    assert not dropped, (
        f"{len(dropped)} of {len(results)} requests ({total['tokens_sent']} tokens against a pool of "
        f"{total['pool_tokens']}) were cut off: {dropped[:3]}"
    )
    assert completed, f"none of {len(results)} requests completed: {describe(results)}"
    usage = (total.get("observed") or {}).get("max_token_usage", 0.0)
    assert usage <= 1.0, f"the decode engine reported token_usage {usage} > 1"
