"""Edges of the audit report (plugins/plugin_utils/sglang_report.py): trailing text of notes and drift lines is kept up
to its last character, a router declaring no admission cap counts as 0, and the declared fleet's workload reaches the
risks judged on the live values. Every record, server and fleet here is synthetic."""

from __future__ import annotations

from typing import Any

from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_plan import Fleet
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_report import (
    Report,
    Server,
    build,
    live_fleet_summary,
    render_text,
    server_from_record,
)

LIVE = {"context_length": 65536, "max_total_tokens": 1_000_000, "max_running_requests": 64, "page_size": 256}


def _record(**live: Any) -> dict[str, Any]:
    return {"host": "gpu1", "role": "decode", "live": {"live": {}, **live}}


def test_the_index_key_note_keeps_a_trailing_capital_x() -> None:
    """Only the ': ' left by an empty note is stripped, not a source or note that ends in 'X'."""
    without_note = server_from_record(_record(sources={"bf16_index_k": "/server_info on host X"}))
    assert without_note.notes == ["effective bf16_index_k from /server_info on host X"]
    with_note = server_from_record(
        _record(sources={"bf16_index_k": "KV pool size (capacity model)"}, notes={"bf16_index_k": "read on host X"})
    )
    assert with_note.notes == ["effective bf16_index_k from KV pool size (capacity model): read on host X"]


def test_a_drift_line_keeps_a_trailing_capital_x() -> None:
    drift = {"key": "page_size", "layer": "running", "layers": ["running", "effective"], "severity": "drift"}
    server = Server("gpu1", "decode", "drift", drift=[{**drift, "explanation": "restarted by hand on host X"}])
    report = Report([server], live_fleet_summary([server]))
    assert render_text(report).splitlines()[:2] == [
        "gpu1 decode (version unknown): DRIFT",
        "  drift: page_size from running [running,effective]: restarted by hand on host X",
    ]


def test_a_router_admitting_zero_leaves_the_fleet_without_a_router_bound() -> None:
    """smg reads max_concurrent_requests 0 as no limit: that router admits without bound, so the fleet does."""
    routers = [
        Server("r1", "router", "ok", live={"max_concurrent_requests": 0}),
        Server("r2", "router", "ok", live={"max_concurrent_requests": 8}),
    ]
    fleet = live_fleet_summary(routers)
    assert fleet["router_max_concurrent_requests"] is None
    assert "parallel_calls" not in fleet


def test_the_declared_workload_adds_the_p90_admission_risk() -> None:
    """1,000,000 tokens hold 15 calls of the longest served (65,534 tokens: 65,536 in pages, plus the 512-token
    admission reserve) and 64 (the running cap) of the declared p90 of 8,192: a router admitting 200 is beyond
    both; without the declaration only the full-context risk is judged."""
    records = [
        {"host": "gpu1", "role": "decode", "live": {"live": dict(LIVE)}},
        {"host": "r", "role": "router", "layers": {"running": {"max_concurrent_requests": 200}}},
    ]
    declared = Fleet({"gpu1": {"sglang_workload": {"p90_context_tokens": 8192}}, "r": {}}, {})
    with_declaration = build(records, declared=declared).risks
    admission = [r for r in with_declaration if r["id"].startswith("router_admits_beyond")]
    assert [(r["id"], r["numbers"]["decode_holds"], r["numbers"]["tokens_per_call"]) for r in admission] == [
        ("router_admits_beyond_full_context", 15, 65534),
        ("router_admits_beyond_p90_context", 64, 8192),
    ]
    assert [r["id"] for r in build(records).risks] == [
        "router_admits_beyond_full_context",
        "fp8_index_keys",
        "single_decode_engine",
    ]
