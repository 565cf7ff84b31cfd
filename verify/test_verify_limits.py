"""Declared limits against the files on the host and the values the live servers apply.

The host's layers and live values are read on the host by the audit's own readers (sglang_layers,
sglang_engine_live, smg_live) and judged on the controller by the audit's judge (plugins/module_utils/sglang_drift.py,
judge), with the same capacity-model inputs: a verdict here is the audit's verdict. Live engine values:
context_length from /v1/models max_model_len, max_running_requests from
internal_states[0].effective_max_running_requests_per_dp, max_total_tokens from max_total_num_tokens, the other keys
from the resolved server arguments. smg does not report its limits over HTTP: the router's effective limits are its
running argv with smg's defaults.
"""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_drift, sglang_flags, sglang_schema
from verify_expect import ENGINE_ROLES, SERVER_ROLES, HostPlan, Server


def _verdict(plan: HostPlan, server: Server, observed: dict[str, Any]) -> sglang_drift.Verdict:
    secret = {"api_key": sglang_flags.REDACTED} if server.api_key else {}  # only whether a key is set is compared
    return sglang_drift.judge(
        server.role,
        {**server.envelope, **secret},
        observed.get("layers"),
        observed.get("live"),
        None if server.role == "router" else plan.model_inputs,
        expected_workers=plan.workers if server.role == "router" else None,
    )


def _drifting(verdict: sglang_drift.Verdict, layer: str) -> list[tuple[sglang_drift.Row, str]]:
    """The rows whose value at `layer` is drift, with the judge's explanation of their key."""
    why = {d.key: d.explanation for d in verdict.drift if d.severity == "drift"}
    return [(r, why.get(r.key, "")) for r in verdict.rows if r.marks.get(layer) == "drift"]


@pytest.mark.parametrize("role", SERVER_ROLES)
def test_on_disk_envelope(plan: HostPlan, server: Server, observed: dict[str, Any]) -> None:
    """The serve script and environment file on the host carry the declared envelope."""
    layers = observed.get("layers")
    assert layers, f"{server.unit}: files could not be read: {observed.get('layers_error')}"
    assert layers.get("on_disk") is not None, f"{server.unit}: {'; '.join(layers.get('problems') or [])}"
    wrong = [
        f"{r.key}: declared {r.values['declared']!r}, {server.script} has {r.values.get('on_disk')!r} ({why})"
        for r, why in _drifting(_verdict(plan, server, observed), "on_disk")
    ]
    assert not wrong, f"{server.unit}: " + "; ".join(wrong)


@pytest.mark.parametrize("role", ENGINE_ROLES)
def test_live_limits(plan: HostPlan, server: Server, observed: dict[str, Any]) -> None:
    """Every declared key the engine reports is applied as declared; every declared limit is observable."""
    assert not observed.get("live_error"), observed.get("live_error")
    live = observed["live"]
    assert live.get("live") is not None, f"{server.unit}: no live answer: {'; '.join(live.get('errors') or [])}"
    assert not live.get("errors"), f"{server.unit}: " + "; ".join(live["errors"])
    verdict = _verdict(plan, server, observed)
    unseen = [
        f"{r.key}: declared {r.values['declared']!r}, no live source ({live['notes'].get(r.key, '')})"
        for r in verdict.rows
        if r.limit and r.values["declared"] is not None and "effective" not in r.values
        and not sglang_schema.BY_NAME[r.key].env
    ]  # fmt: skip
    wrong = [
        f"{r.key}: declared {r.values['declared']!r}, live {r.values['effective']!r} from "
        f"{verdict.sources.get(r.key, '/server_info')} ({why})"
        for r, why in _drifting(verdict, "effective")
    ]
    assert not unseen + wrong, f"{server.unit}: " + "; ".join(unseen + wrong)


@pytest.mark.parametrize("role", ["router"])
def test_router_live_limits(plan: HostPlan, server: Server, observed: dict[str, Any]) -> None:
    """smg runs with the declared limits (its argv, or its files when unchanged since it started), and routes to
    the declared workers."""
    layers = observed.get("layers") or {}
    unknown = "; ".join(layers.get("notes") or layers.get("problems") or [])
    assert layers.get("running") is not None, f"{server.unit}: the running limits are unknown: {unknown}"
    verdict = _verdict(plan, server, observed)
    wrong = [
        f"{r.key}: declared {r.values['declared']!r}, running {r.values.get('running')!r} "
        f"(from {layers.get('running_source')}; {why})"
        for r, why in _drifting(verdict, "running")
    ]
    wrong += [d.explanation for d in verdict.drift if d.key == "workers"]
    assert not wrong, f"{server.unit}: " + "; ".join(wrong)
