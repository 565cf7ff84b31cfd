"""Declared limits against the files on the host and the values the live servers apply.

Live engine values are read and normalized by the audit's live reader (module_utils/sglang_live.py, run on
the host) and judged with the audit's comparison rules (module_utils/sglang_drift.py): context_length from
/v1/models max_model_len, max_running_requests from internal_states[0].effective_max_running_requests_per_dp,
max_total_tokens from max_total_num_tokens, the other keys from the resolved server arguments. smg does not
report its limits over HTTP: the router's live limits are its running argv with smg's defaults
(sglang_live.router_effective).
"""

from __future__ import annotations

from typing import Any

import pytest
from sglang_envelope import sglang_drift, sglang_live, sglang_schema
from verify_expect import ENGINE_ROLES, SERVER_ROLES, Server


def _declared_keys(server: Server) -> dict[str, Any]:
    keys = {k.name: k for k in sglang_schema.keys_for(server.role)}
    return {k: v for k, v in server.envelope.items() if k in keys and not keys[k].secret and v is not None}


@pytest.mark.parametrize("role", SERVER_ROLES)
def test_on_disk_envelope(server: Server, observed: dict[str, Any]) -> None:
    """The serve script and environment file on the host carry the declared envelope."""
    layers = observed.get("layers")
    assert layers, f"{server.unit}: files could not be read: {observed.get('layers_error')}"
    on_disk = layers.get("on_disk")
    assert on_disk is not None, f"{server.unit}: {'; '.join(layers.get('problems') or [])}"
    wrong = [
        f"{k}: declared {v!r}, {server.script} has {on_disk.get(k)!r}"
        for k, v in _declared_keys(server).items()
        if not sglang_drift.same(k, v, on_disk.get(k))
    ]
    assert not wrong, f"{server.unit}: " + "; ".join(wrong)


@pytest.mark.parametrize("role", ENGINE_ROLES)
def test_live_limits(server: Server, observed: dict[str, Any]) -> None:
    """Every declared key the engine reports is applied as declared; every declared limit is observable."""
    assert not observed.get("live_error"), observed.get("live_error")
    live = observed["live"]
    assert live.get("engine"), f"{server.unit}: no live answer: {'; '.join(live.get('errors') or [])}"
    assert not live.get("errors"), f"{server.unit}: " + "; ".join(live["errors"])
    engine = live["engine"]
    effective, facts = engine["effective"], engine["facts"]
    ctx = sglang_drift.live_context(effective, facts, engine.get("requested") or {})
    limits = set(sglang_schema.limit_keys(server.role))
    problems = []
    for key, declared in _declared_keys(server).items():
        if key not in effective:
            if key in limits and not sglang_schema.BY_NAME[key].env:
                problems.append(f"{key}: declared {declared!r}, no live source ({engine['notes'].get(key, '')})")
            continue
        gap = sglang_drift.effective_gap(key, declared, effective[key], {}, ctx, effective.get("context_length"))
        if gap and gap[0] == "drift":
            source = engine["sources"].get(key, "/server_info")
            problems.append(f"{key}: declared {declared!r}, live {effective[key]!r} from {source} ({gap[1]})")
    assert not problems, f"{server.unit}: " + "; ".join(problems)


@pytest.mark.parametrize("role", ["router"])
def test_router_live_limits(server: Server, observed: dict[str, Any]) -> None:
    """smg runs with the declared limits (its argv, or its files when unchanged since it started)."""
    layers = observed.get("layers") or {}
    running = layers.get("running")
    why = "; ".join(layers.get("notes") or layers.get("problems") or [])
    assert running is not None, f"{server.unit}: the running limits are unknown: {why}"
    effective, _ = sglang_live.router_effective(running)
    wrong = [
        f"{k}: declared {v!r}, running {running.get(k, effective.get(k))!r} (from {layers.get('running_source')})"
        for k, v in _declared_keys(server).items()
        if not sglang_drift.same(k, v, running.get(k, effective.get(k)))
    ]
    assert not wrong, f"{server.unit}: " + "; ".join(wrong)
