"""The audit report word for word: server entries from the playbook's records, the capacity from the live pool,
the fleet's binding limit, the text and Markdown renderings, the chart names and arguments, the files written.

Every record, row, capacity and risk below is synthetic (typed for the rule under test), not an SGLang reply.
"""

from __future__ import annotations

import datetime
from dataclasses import asdict
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_capacity import ConcurrencyRow
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_report
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_plan import Fleet
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_report import (
    Report,
    Server,
    build,
    capacity_lines,
    chart_name,
    engine_capacity,
    fleet_lines,
    fmt,
    live_fleet_summary,
    live_state,
    render_charts,
    render_markdown,
    render_text,
    server_from_record,
    shown_rows,
    write,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_risks import EngineState

# ---------------------------------------------------------------- synthetic inputs


def _row(key: str, values: dict[str, Any], limit: bool = True, marks: dict[str, str] | None = None) -> dict[str, Any]:
    return {"key": key, "limit": limit, "values": values, "marks": marks or {}}


def _all(value: Any) -> dict[str, Any]:
    return {"declared": value, "on_disk": value, "running": value, "effective": value}


LIVE = {"context_length": 65536, "max_total_tokens": 1_000_000, "max_running_requests": 64, "page_size": 256}


def _decode(host: str = "gpu1", **live: Any) -> Server:
    """A decode engine with a live pool of 1,000,000 tokens in pages of 256 at a 65,536-token context."""
    return Server(
        host,
        "decode",
        "ok",
        rows=[_row("bf16_index_k", _all(True)), _row("context_length", _all(65536))],
        live={**LIVE, **live},
        predicted={"bf16_index_share": 0.08},
    )


# ---------------------------------------------------------------- records -> server entries


UNREACHABLE_CASES = [
    ("host_unreachable", {"host_unreachable": "no ssh"}, "h1: host unreachable: no ssh"),
    ("layers_msg", {"layers": {"unreachable": True, "msg": "timeout", "reason": "r"}}, "h1: host unreachable: timeout"),
    ("layers_reason", {"layers": {"unreachable": True, "reason": "refused"}}, "h1: host unreachable: refused"),
    ("layers_nothing", {"layers": {"unreachable": True}}, "h1: host unreachable: no result"),
    (
        "layers_before_live",
        {"layers": {"unreachable": True, "msg": "a"}, "live": {"unreachable": True, "msg": "b"}},
        "h1: host unreachable: a",
    ),
    ("live_msg", {"layers": {"msg": "a"}, "live": {"unreachable": True, "msg": "b"}}, "h1: host unreachable: b"),
    ("live_nothing", {"live": {"unreachable": True}}, "h1: host unreachable: no result"),
    (
        "record_over_layers",
        {"host_unreachable": "gone", "layers": {"unreachable": True, "msg": "a"}},
        "h1: host unreachable: gone",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("extra", "error"), [pytest.param(c[1], c[2], id=c[0]) for c in UNREACHABLE_CASES])
def test_unreachable_entry_names_why(extra: dict[str, Any], error: str) -> None:
    """An unreachable host or engine: only the reason, from the record, the layers or the live read (else no result)."""
    server = server_from_record({"host": "h1", "role": "decode", **extra})
    assert asdict(server) == asdict(Server("h1", "decode", "unreachable", errors=[error]))


FAILED_CASES = [
    ("record", {"failed": "systemctl show failed (rc=1)"}, "systemctl show failed (rc=1)"),
    ("layers_msg", {"layers": {"failed": True, "msg": "bad unit"}}, "bad unit"),
    ("live_reason", {"live": {"failed": True, "reason": "HTTP 500"}}, "HTTP 500"),
    ("live_nothing", {"live": {"failed": True}}, "no result"),
    (
        "both",
        {"layers": {"failed": True, "msg": "bad unit"}, "live": {"failed": True, "reason": "HTTP 500"}},
        "bad unit; HTTP 500",
    ),
    ("record_first", {"failed": "rc=2", "layers": {"failed": True, "msg": "bad unit"}}, "rc=2"),
]  # fmt: skip


@pytest.mark.parametrize(("extra", "why"), [pytest.param(c[1], c[2], id=c[0]) for c in FAILED_CASES])
def test_failed_task_entry_names_why(extra: dict[str, Any], why: str) -> None:
    """A failed audit task: an error entry naming host, role and every failure message."""
    server = server_from_record({"host": "h1", "role": "prefill", **extra})
    expected = Server("h1", "prefill", "error", errors=[f"h1: prefill: the audit task failed: {why}"])
    assert asdict(server) == asdict(expected)


def test_entry_keeps_what_the_readers_report_and_the_verdict() -> None:
    """A read server is judged here: rows and drift from the judge (envelope keys and host findings), problems,
    warnings, notes, live facts and layer fields from the readers."""
    envelope = {"context_length": 65536}
    record = {
        "host": "gpu1",
        "role": "decode",
        "declared": envelope,
        "layers": {
            "on_disk": envelope,
            "running": envelope,
            "running_source": "proc",
            "restart_pending": False,
            "edited_since_deploy": ["env_file"],
            "unit": "sglang.service",
            "files": {"script": {"exists": True}},
            "in_progress": None,
            "backups": ["b1"],
            "release_switch": None,
            "problems": ["unit file unreadable"],
            "notes": ["layer note"],
            "ignored": "not kept",
        },
        "live": {
            "endpoint": "http://10.0.0.1:30001",
            "version": "0.5.9",
            "errors": ["metrics unreadable"],
            "warnings_seen": ["a warning"],
            "live": {"context_length": 65536},
            "load": {"running": 1},
            "live_facts": {"attn_dp_size": 1},
            "router": {"ready": True},
            "sources": {"bf16_index_k": "/server_info"},
            "notes": {"bf16_index_k": "reported"},
        },
    }
    entry = asdict(server_from_record(record))
    rows = {r["key"]: r for r in entry.pop("rows")}
    assert rows["context_length"] == {
        "key": "context_length",
        "limit": True,
        "values": {"declared": 65536, "on_disk": 65536, "running": 65536, "effective": 65536},
        "marks": {},
    }
    assert set(rows) >= {"max_total_tokens", "max_running_requests"}  # every limit has a row
    backups = (
        "backup copies left by a deploy that did not finish (a finished deploy removes them once the server passed "
        "its gate): rerun site.yml"
    )
    assert entry == {
        "host": "gpu1",
        "role": "decode",
        "status": "error",
        "endpoint": "http://10.0.0.1:30001",
        "version": "0.5.9",
        "drift": [{"key": "backups", "layer": "on_disk", "layers": ["on_disk"], "declared": [], "live": ["b1"],
                   "severity": "drift", "explanation": backups}],
        "errors": ["metrics unreadable", "unit file unreadable"],
        "warnings": ["a warning"],
        "notes": ["layer note", "effective bf16_index_k from /server_info: reported"],
        "live": {"context_length": 65536},
        "load": {"running": 1},
        "live_facts": {"attn_dp_size": 1},
        "predicted": {},
        "router": {"ready": True},
        "layers": {
            "running_source": "proc",
            "restart_pending": False,
            "edited_since_deploy": ["env_file"],
            "unit": "sglang.service",
            "files": {"script": {"exists": True}},
            "in_progress": None,
            "backups": ["b1"],
            "release_switch": None,
        },
        "capacity": {},
        "latency": {},
    }  # fmt: skip


def test_entry_warns_when_the_model_predicts_nothing() -> None:
    record = {"host": "h", "role": "decode", "declared": {}, "live": {"live": {}},
              "model": {"config": {"architectures": ["X"]}, "gpu_memory_gib": 1}}  # fmt: skip
    (warning,) = server_from_record(record).warnings
    assert warning.startswith("h: capacity model: ") and warning.endswith("; unset keys are not compared")


STATUS_CASES = [
    ("clean", {}, {}, {}, "ok"),
    ("info_only", {}, {"releases": ["/opt/sglang/releases/old"]}, {}, "ok"),
    ("live_drift", {"live": {"context_length": 1}}, {}, {"context_length": 2}, "drift"),
    ("layers_drift", {}, {"backups": ["b"]}, {}, "drift"),
    ("error_over_drift", {"errors": ["x"], "live": {"context_length": 1}}, {}, {"context_length": 2}, "error"),
    ("problem_is_error", {}, {"problems": ["x"]}, {}, "error"),
    ("engine_down", {"status": "unreachable", "errors": ["x"]}, {}, {}, "unreachable"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("live", "layers", "declared", "status"), [pytest.param(*c[1:], id=c[0]) for c in STATUS_CASES]
)
def test_entry_status(live: dict[str, Any], layers: dict[str, Any], declared: dict[str, Any], status: str) -> None:
    """Status: engine unreachable, else error, else drift (severity drift only), else ok."""
    record = {"host": "h", "role": "decode", "live": live, "layers": layers, "declared": declared}
    assert server_from_record(record).status == status


@pytest.mark.parametrize(
    ("live", "notes"),
    [
        ({}, []),
        ({"notes": {"bf16_index_k": "ignored without a source"}}, []),
        ({"sources": {"bf16_index_k": "KV pool size"}}, ["effective bf16_index_k from KV pool size"]),
        (
            {"sources": {"bf16_index_k": "KV pool size"}, "notes": {"bf16_index_k": "within 2 %"}},
            ["effective bf16_index_k from KV pool size: within 2 %"],
        ),
        ({"sources": {"bf16_index_k": "x"}, "notes": {"other": "y"}}, ["effective bf16_index_k from x"]),
    ],
)
def test_index_key_note(live: dict[str, Any], notes: list[str]) -> None:
    """Where the effective bf16_index_k came from, when the live read says so."""
    record = {"host": "h", "role": "decode", "live": {"live": {}, **live}}
    assert server_from_record(record).notes == notes


# ---------------------------------------------------------------- capacity


def test_engine_capacity_from_the_live_pool_with_bf16_keys() -> None:
    """Full-length fit, what runs at once, the bf16 index-key cost and the ladder of contexts (router cap 32).
    A decode engine admits a call of whole pages plus SGLang's PD decode reserve of 512 tokens: 1,000,000 //
    (4,096 + 512) = 217, // 8,704 = 114, // 33,280 = 30, // 66,048 = 15 (the fp8 pool of 1,086,720: 235, 124,
    32, 16); the full-length call is served at most 65,534 tokens, two pages and the reserve: 15."""
    cap = engine_capacity(_decode(), 32)
    rows = cap.pop("_rows")
    assert cap == {
        "context_length": 65536,
        "pool_tokens": 1_000_000,
        "page_size": 256,
        "max_running_requests": 64,
        "full_length_fit": 15,
        "bf16_index_k": True,
        "bf16_index_share": 0.08,
        "full_length_at_once": 15,
        "ranks": 1,
        "admission_reserve": 512,
        "bf16_index_tokens": 86720,
        "table": [
            {"context_len": 4096, "fit_in_pool": 217, "concurrent": 32, "binding": "router",
             "fit_fp8_index": 235, "lost_to_bf16_index": 18},
            {"context_len": 8192, "fit_in_pool": 114, "concurrent": 32, "binding": "router",
             "fit_fp8_index": 124, "lost_to_bf16_index": 10},
            {"context_len": 32768, "fit_in_pool": 30, "concurrent": 30, "binding": "kv_pool",
             "fit_fp8_index": 32, "lost_to_bf16_index": 2},
            {"context_len": 65536, "fit_in_pool": 15, "concurrent": 15, "binding": "kv_pool",
             "fit_fp8_index": 16, "lost_to_bf16_index": 1},
        ],
    }  # fmt: skip
    assert [asdict(r) for r in rows] == cap["table"]


def test_engine_capacity_with_fp8_keys_and_no_router() -> None:
    """fp8 keys: no bf16 cost, no fp8 column; running slots bind when they are fewer than the pool holds
    (1,000,000 // (4,094 served + 512 reserve) = 217 at full length, // (4,096 + 512) = 217 on the ladder)."""
    server = _decode(context_length=4096, max_running_requests=100, page_size=None)
    server.rows = [_row("bf16_index_k", {"declared": True, "on_disk": True, "running": None, "effective": False})]
    cap = engine_capacity(server, None)
    del cap["_rows"]
    assert cap == {
        "context_length": 4096,
        "pool_tokens": 1_000_000,
        "page_size": 1,
        "max_running_requests": 100,
        "full_length_fit": 217,
        "bf16_index_k": False,
        "bf16_index_share": 0.08,
        "full_length_at_once": 100,
        "ranks": 1,
        "admission_reserve": 512,
        "table": [
            {"context_len": 4096, "fit_in_pool": 217, "concurrent": 100, "binding": "max_running_requests",
             "fit_fp8_index": None, "lost_to_bf16_index": None},
        ],
    }  # fmt: skip


@pytest.mark.parametrize(
    ("values", "active"),
    [
        ({"declared": False, "on_disk": False, "running": False, "effective": True}, True),
        ({"declared": True, "on_disk": True, "running": False, "effective": None}, False),
        ({"declared": True, "on_disk": False}, False),
        ({"declared": True, "on_disk": None, "running": None}, True),
        ({"declared": None}, None),
    ],
)
def test_bf16_keys_from_the_most_live_layer(values: dict[str, Any], active: bool | None) -> None:
    """The index-key dtype is the effective value, else running, else on disk, else declared."""
    server = _decode()
    server.rows = [_row("context_length", _all(1)), _row("bf16_index_k", values)]
    assert engine_capacity(server, None)["bf16_index_k"] is active


@pytest.mark.parametrize(
    "live",
    [
        {},
        {**LIVE, "context_length": None},
        {**LIVE, "max_total_tokens": "1000000"},
        {**LIVE, "max_running_requests": 64.0},
    ],
)
def test_no_capacity_without_integer_live_limits(live: dict[str, Any]) -> None:
    """Without context, pool and running requests as integers there is no capacity."""
    server = _decode()
    server.live = live
    assert engine_capacity(server, 32) == {}


def _router(host: str, **live: Any) -> Server:
    return Server(host, "router", "ok", live=live)


def _capped(host: str, running: int, context: int, pool: int) -> Server:
    """A decode engine's live capacity entry: page 1, no admission reserve."""
    server = Server(host, "decode", "ok")
    server.capacity = {"max_running_requests": running, "context_length": context, "pool_tokens": pool}
    return server


def test_live_fleet_summary_sums_routers_and_decode_engines() -> None:
    """Routers' caps and queues add up, the longest timeout counts; decode engines add up at the shortest context,
    each call served 65,534 tokens: d1 holds 3,000,000 // 65,534 = 45 (runs 32), d2 2,000,000 // 65,534 = 30."""
    servers = [
        _router("r1", max_concurrent_requests=40, queue_size=100, queue_timeout_secs=30),
        _router("r2", max_concurrent_requests=24, queue_size=28, queue_timeout_secs=60),
        _capped("d1", 32, 131072, 3_000_000),
        _capped("d2", 32, 65536, 2_000_000),
        Server("p1", "prefill", "ok", capacity={"max_running_requests": 999}),
        Server("d3", "decode", "ok"),
        Server("r3", "router", "unreachable"),
    ]
    assert live_fleet_summary(servers) == {
        "routers": 2,
        "decode_engines": 2,
        "router_max_concurrent_requests": 64,
        "router_queue_size": 128,
        "router_queue_timeout_secs": 60,
        "decode_running": 64,
        "decode_full_length_at_once": 62,
        "decode_full_length_fit": 75,
        "context_length": 65536,
        "decode_pool_tokens": 5_000_000,
        "parallel_calls": 64,
        "binding": "router max_concurrent_requests = decode fleet max_running_requests",
        "parallel_calls_full_context": 62,
        "binding_full_context": "decode KV pools at full context",
    }


def test_live_fleet_summary_router_without_cap() -> None:
    """A router without max_concurrent_requests leaves the fleet uncapped at the router; the decode slots bind
    (the pool holds 36,846 // 4,094 = 9 calls at full length). Neither router states its queue: each runs with smg's
    defaults (--queue-size 100, --queue-timeout-secs 60), so the fleet queues 2 x 100 calls for up to 60 s."""
    servers = [
        _router("r1", max_concurrent_requests=40),
        _router("r2", queue_size=None),
        _capped("d", 8, 4096, 36_846),
    ]
    assert live_fleet_summary(servers) == {
        "routers": 2,
        "decode_engines": 1,
        "router_max_concurrent_requests": None,
        "router_queue_size": 200,
        "router_queue_timeout_secs": 60,
        "decode_running": 8,
        "decode_full_length_at_once": 8,
        "decode_full_length_fit": 9,
        "context_length": 4096,
        "decode_pool_tokens": 36_846,
        "parallel_calls": 8,
        "binding": "decode fleet max_running_requests",
        "parallel_calls_full_context": 8,
        "binding_full_context": "decode fleet max_running_requests",
    }


def test_live_fleet_summary_routers_only_and_nothing() -> None:
    """Only routers: their admission binds, nothing at full context; no servers: only the counts."""
    assert live_fleet_summary([_router("r", max_concurrent_requests=5, queue_size=3, queue_timeout_secs=7)]) == {
        "routers": 1,
        "decode_engines": 0,
        "router_max_concurrent_requests": 5,
        "router_queue_size": 3,
        "router_queue_timeout_secs": 7,
        "parallel_calls": 5,
        "binding": "router max_concurrent_requests",
    }
    assert live_fleet_summary([]) == {"routers": 0, "decode_engines": 0}


def test_live_fleet_summary_pools_bind_at_full_context_together_with_slots() -> None:
    """Equal bounds at full context are named together, in order (32,752 // 4,094 = 8 calls, 8 slots)."""
    fleet = live_fleet_summary([_capped("d", 8, 4096, 32_752)])
    assert (fleet["parallel_calls_full_context"], fleet["binding_full_context"]) == (
        8,
        "decode fleet max_running_requests = decode KV pools at full context",
    )


def test_build_orders_servers_and_caps_the_ladder_at_the_routers() -> None:
    """Prefill, decode, router, then others, each by host; capacity for reachable engines only (not routers),
    its ladder capped at the routers' sum."""
    records = [
        {"host": "z", "role": "router", "layers": {"running": {"max_concurrent_requests": 10}}},
        {"host": "a", "role": "router", "layers": {"running": {"max_concurrent_requests": 6}}},
        {"host": "m", "role": "host", "host_unreachable": "down"},
        {"host": "b", "role": "decode", "live": {"live": dict(LIVE)}},
        {"host": "a", "role": "decode", "live": {"status": "unreachable", "live": dict(LIVE)}},
        {"host": "c", "role": "prefill", "live": {"live": dict(LIVE)}},
    ]
    report = build(records, fail_on_drift=False)
    assert [(s.role, s.host) for s in report.servers] == [
        ("prefill", "c"),
        ("decode", "a"),
        ("decode", "b"),
        ("router", "a"),
        ("router", "z"),
        ("host", "m"),
    ]
    prefill, down, decode = report.servers[:3]
    assert down.capacity == {} and report.servers[3].capacity == {}
    assert [(r["context_len"], r["concurrent"], r["binding"]) for r in decode.capacity["table"]][:2] == [
        (4096, 16, "router"),
        (8192, 16, "router"),
    ]
    assert prefill.capacity["full_length_fit"] == 15
    assert report.fail_on_drift is False
    assert report.fleet["router_max_concurrent_requests"] == 16


def test_build_without_router_caps_leaves_the_ladder_uncapped() -> None:
    """Routers without a cap (max_concurrent_requests 0) add no router bound to the ladder."""
    records = [{"host": "b", "role": "decode", "live": {"live": dict(LIVE)}},
               {"host": "r", "role": "router", "layers": {"running": {"max_concurrent_requests": 0}}}]  # fmt: skip
    decode = build(records).servers[0]
    assert {r["binding"] for r in decode.capacity["table"]} == {"max_running_requests", "kv_pool"}


def test_live_state_takes_live_values_over_declared_ones() -> None:
    """Each engine with integer live limits: declared rows overlaid by non-null live values; routers as they run."""
    engine = _decode("gpu1", max_queued_requests=None)
    engine.rows = [_row("context_length", {"declared": 131072, "effective": 65536}),
                   _row("max_queued_requests", {"declared": 16})]  # fmt: skip
    engine.predicted = {"dsv4": False}
    no_pool = Server("gpu2", "prefill", "ok", live={"context_length": 4096})
    router = _router("r", max_concurrent_requests=8)
    silent_router = Server("r2", "router", "unreachable")
    fleet = Fleet(
        {"gpu1": {"sglang_gpu_memory_gib": 141, "sglang_workload": {"p90_context_tokens": 8192}}, "r": {}},
        {},
    )
    state = live_state([router, no_pool, engine, silent_router], fleet)
    assert state.engines == [
        EngineState(
            "gpu1",
            "decode",
            {"context_length": 65536, "max_queued_requests": 16, "max_total_tokens": 1_000_000,
             "max_running_requests": 64, "page_size": 256},
            1_000_000, 64, 65536, 256, 141.0, 1, 512,
        )
    ]  # fmt: skip
    assert state.routers == [{"max_concurrent_requests": 8}]
    assert (state.workload, state.dsv4, state.source) == ({"p90_context_tokens": 8192}, False, "live")


def test_live_state_without_declaration() -> None:
    """No declaration: no GPU size, no workload; DeepSeek-V4 unless an engine's prediction says otherwise."""
    server = _decode("gpu9", page_size=None)
    server.predicted = {}
    state = live_state([server], None)
    assert [(e.host, e.page_size, e.gpu_memory_gib) for e in state.engines] == [("gpu9", 1, 0.0)]
    assert (state.workload, state.dsv4, state.routers) == ({}, True, [])


# ---------------------------------------------------------------- summary and dict


def test_summary_counts_and_exit_decision() -> None:
    """Counts per status, drift items of severity drift only; drift fails only with fail_on_drift."""
    servers = [
        Server("a", "decode", "drift", drift=[{"severity": "drift"}, {"severity": "info"}, {"severity": "drift"}]),
        Server("b", "decode", "ok", drift=[{"severity": "info"}]),
        Server("c", "router", "ok"),
    ]
    assert Report(servers, {}).summary == {
        "servers": 3, "ok": 2, "drift": 1, "unreachable": 0, "error": 0, "drift_items": 2, "failed": True,
    }  # fmt: skip
    assert Report(servers, {}, fail_on_drift=False).summary["failed"] is False
    assert Report([Server("a", "x", "unreachable")], {}, fail_on_drift=False).summary["failed"] is True
    assert Report([Server("a", "x", "error")], {}, fail_on_drift=False).summary["failed"] is True
    assert Report([], {}).summary == {
        "servers": 0, "ok": 0, "drift": 0, "unreachable": 0, "error": 0, "drift_items": 0, "failed": False,
    }  # fmt: skip


def test_as_dict_drops_private_capacity_keys() -> None:
    """The dict form: summary, fleet, servers (capacity without `_` keys) and risks."""
    server = Server("a", "decode", "ok", capacity={"pool_tokens": 5, "_rows": ["r"], "x_y": 1})
    data = Report([server], {"routers": 0}, risks=[{"id": "r"}]).as_dict()
    assert list(data) == ["summary", "fleet", "servers", "risks"]
    assert data["fleet"] == {"routers": 0} and data["risks"] == [{"id": "r"}]
    assert data["servers"] == [{**asdict(Server("a", "decode", "ok")), "capacity": {"pool_tokens": 5, "x_y": 1}}]
    assert server.capacity["_rows"] == ["r"]


# ---------------------------------------------------------------- pieces of the rendering


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "-"),
        (True, "true"),
        (False, "false"),
        ([], ""),
        ([1, 2, 3, 4], "1,2,3,4"),
        ([1, 2, 4, 8, 16], "1,2,…,16 (5)"),
        (["a", "b", "c", "d", "e", "f"], "a,b,…,f (6)"),
        (0.5, "0.5"),
        (1.0, "1"),
        (1e-07, "1e-07"),
        (0, "0"),
        ("a|b", "a|b"),
    ],
)
def test_fmt(value: Any, text: str) -> None:
    """How one value reads in a table cell."""
    assert fmt(value) == text


def test_shown_rows_are_limits_and_marked_rows() -> None:
    """Limit rows always; other rows only with a mark."""
    rows = [
        _row("a", {}, limit=True),
        _row("b", {}, limit=False),
        _row("c", {}, limit=False, marks={"running": "info"}),
        {"key": "d", "values": {}},
    ]
    assert [r["key"] for r in shown_rows(Server("h", "decode", "ok", rows=rows))] == ["a", "c"]


@pytest.mark.parametrize(
    ("server", "heading"),
    [
        (Server("h", "decode", "drift", version="0.5.9", endpoint="http://h:1"),
         "h decode (sglang 0.5.9, http://h:1): DRIFT"),
        (Server("h", "prefill", "ok", version="0.5.9"), "h prefill (sglang 0.5.9): OK"),
        (Server("h", "router", "ok", endpoint="http://h:8000"), "h router (smg, http://h:8000): OK"),
        (Server("h", "prefill", "unreachable"), "h prefill (version unknown): UNREACHABLE"),
        (Server("h", "Router", "error"), "h Router (version unknown): ERROR"),
    ],
)  # fmt: skip
def test_heading(server: Server, heading: str) -> None:
    """Host, role, version (smg for a router without one), endpoint and status in capitals."""
    assert render_text(Report([server], {})).splitlines()[0] == heading


CAPACITY = {"pool_tokens": 900, "context_length": 90, "full_length_fit": 9, "max_running_requests": 4,
            "full_length_at_once": 4}  # fmt: skip
FIT = (
    "live KV pool 900 tokens, effective context 90: 9 full-length requests fit; "
    "with max_running_requests 4, 4 run at once"
)


@pytest.mark.parametrize(
    ("extra", "lines"),
    [
        ({}, [FIT]),
        (
            {"bf16_index_k": True, "bf16_index_share": 0.0812, "bf16_index_tokens": 88},
            [FIT, "bf16 index keys cost 8.1% of the KV pool: 88 tokens (fp8 index keys would hold that many more)"],
        ),
        ({"bf16_index_k": False, "bf16_index_share": 0.0849},
         [FIT, "fp8 index keys; bf16 index keys would cost 8.5% of the KV pool"]),
        ({"bf16_index_k": None, "bf16_index_share": 0.5},
         [FIT, "fp8 index keys; bf16 index keys would cost 50.0% of the KV pool"]),
        ({"bf16_index_k": True, "bf16_index_share": None}, [FIT]),
        ({"bf16_index_k": True, "bf16_index_share": 0.0}, [FIT]),
    ],
)  # fmt: skip
def test_capacity_lines(extra: dict[str, Any], lines: list[str]) -> None:
    """The live capacity in words, with the bf16 index-key cost when the share is known."""
    assert capacity_lines(Server("h", "decode", "ok", capacity={**CAPACITY, **extra})) == lines


def test_no_capacity_lines_without_capacity() -> None:
    """No capacity, no lines."""
    assert capacity_lines(Server("h", "decode", "ok")) == []


FLEET = {
    "parallel_calls": 32,
    "binding": "router max_concurrent_requests",
    "parallel_calls_full_context": 15,
    "binding_full_context": "decode KV pools at full context",
    "context_length": 65536,
    "router_max_concurrent_requests": 32,
    "router_queue_size": 128,
    "router_queue_timeout_secs": 60,
    "decode_pool_tokens": 1_000_000,
    "decode_running": 64,
    "decode_engines": 1,
    "decode_full_length_at_once": 15,
}
FLEET_LINES = [
    "parallel calls: 32, bound by router max_concurrent_requests",
    "parallel calls at the full context of 65536 tokens: 15, bound by decode KV pools at full context",
    "router: 32 in flight, then 128 queued for up to 60 s, then 429",
    "per-call context: 65536 tokens; total context (decode KV pools): 1000000 tokens",
    "decode fleet (1 engine): runs 64 requests at once; 15 at the full context of 65536 tokens",
]


def test_fleet_lines() -> None:
    """The fleet's binding limits, router admission and decode totals in words, in this order."""
    assert fleet_lines(FLEET) == FLEET_LINES
    assert fleet_lines({"routers": 0, "decode_engines": 0}) == []


def test_fleet_line_of_an_uncapped_router() -> None:
    """A router without a cap admits without limit, then queues."""
    fleet = {"router_max_concurrent_requests": None, "router_queue_size": 0, "router_queue_timeout_secs": 0}
    assert fleet_lines(fleet) == ["router: no cap in flight, then 0 queued for up to 0 s, then 429"]
    fleet["router_max_concurrent_requests"] = 0
    assert fleet_lines(fleet) == ["router: 0 in flight, then 0 queued for up to 0 s, then 429"]


# ---------------------------------------------------------------- whole renderings


def _report(risks: list[dict[str, Any]] | None = None) -> Report:
    """Three servers: a drifting decode engine with every kind of extra line, a router, an unreachable host."""
    decode = Server(
        "gpu|1",
        "decode",
        "drift",
        endpoint="http://10.0.0.1:30001",
        version="0.5.9",
        rows=[
            _row("context_length", {"declared": 131072, "on_disk": 131072, "running": 131072, "effective": 65536},
                 marks={"effective": "drift"}),
            _row("tp_size", {"declared": 8, "on_disk": 8, "running": 8}, limit=False),
            _row("chunked_prefill_size", {"declared": None, "on_disk": None, "running": None, "effective": 8192},
                 limit=False, marks={"effective": "info"}),
            _row("kv_cache_dtype", {"declared": "a|b", "on_disk": "a|b"}, marks={"on_disk": "drift"}),
        ],
        drift=[
            {"key": "context_length", "layer": "effective", "layers": ["effective"], "severity": "drift",
             "explanation": "shorter | than declared"},
            {"key": "chunked_prefill_size", "layer": "effective", "layers": ["effective"], "severity": "info",
             "explanation": ""},
            {"key": "kv_cache_dtype", "layer": "on_disk", "layers": ["on_disk", "running"], "severity": "other"},
        ],
        errors=["metrics unreadable"],
        notes=["a note"],
        load={"running": 3, "queued": 1, "token_usage": 0.4567},
        layers={"running_source": "files", "restart_pending": True, "edited_since_deploy": ["env_file", "script"],
                "in_progress": {"since": "t"}},
        capacity={
            **CAPACITY,
            "bf16_index_k": True,
            "bf16_index_share": 0.08,
            "bf16_index_tokens": 88,
            "table": [
                {"context_len": 50, "fit_in_pool": 20, "concurrent": 4, "binding": "max_running_requests",
                 "fit_fp8_index": 21},
                {"context_len": 100, "fit_in_pool": 10, "concurrent": 4, "binding": "max_running_requests",
                 "fit_fp8_index": None},
            ],
        },
    )  # fmt: skip
    router = Server(
        "r1",
        "router",
        "ok",
        router={"ready": False, "healthy_workers": 1, "total_workers": 2},
        load={"running": 0, "queued": None},
        layers={"running_source": "proc", "edited_since_deploy": ["unit"]},
    )
    down = Server("gpu2", "decode", "unreachable", errors=["gpu2: host unreachable: no ssh"])
    return Report([decode, router, down], FLEET, risks=risks or [])


RISK = {
    "severity": "warn",
    "id": "some_risk",
    "summary": "a | b",
    "numbers": {"n": 1},
    "fixes": [{"title": "T", "valid": True, "diff": ["- x: 1", "+ x: 2"]}],
}

TEXT = """\
gpu|1 decode (sglang 0.5.9, http://10.0.0.1:30001): DRIFT
  key                   declared  on disk  running  effective
  context_length        131072    131072   131072   65536 *
  chunked_prefill_size  -         -        -        8192 ~
  kv_cache_dtype        a|b       a|b *    n/a      n/a
  drift: context_length from effective [effective]: shorter | than declared
  info: chunked_prefill_size from effective [effective]
  info: kv_cache_dtype from on_disk [on_disk,running]
  error: metrics unreadable
  note: a note
  load: 3 running, 1 queued, token usage 45.7%
  restart pending: files changed after the process started
  edited since the interrupted deploy: env_file, script
  running values: from the files (the process rewrites its title; files unchanged since start)
  live KV pool 900 tokens, effective context 90: 9 full-length requests fit; with max_running_requests 4, 4 run at once
  bf16 index keys cost 8.0% of the KV pool: 88 tokens (fp8 index keys would hold that many more)

r1 router (smg): OK
  load: 0 running, None queued, token usage ?
  router: NOT ready, 1/2 workers healthy
  edited since the last deploy: unit

gpu2 decode (version unknown): UNREACHABLE
  error: gpu2: host unreachable: no ssh

fleet:
  parallel calls: 32, bound by router max_concurrent_requests
  parallel calls at the full context of 65536 tokens: 15, bound by decode KV pools at full context
  router: 32 in flight, then 128 queued for up to 60 s, then 429
  per-call context: 65536 tokens; total context (decode KV pools): 1000000 tokens
  decode fleet (1 engine): runs 64 requests at once; 15 at the full context of 65536 tokens
risks (from the live values): not judged: 1 of 3 hosts unreachable
summary: 3 servers, 1 ok, 1 drifting (1 items), 1 unreachable, 0 with errors
legend: * drift, ~ information, - unset, n/a not reported
"""


def test_text_rendering_word_for_word() -> None:
    """The console report: aligned table with marks, extra lines, fleet, risks, summary and legend."""
    assert render_text(_report()) == TEXT


def test_text_rendering_lists_risks() -> None:
    """Risks: their count, then each finding indented."""
    lines = render_text(_report([RISK])).splitlines()
    start = lines.index("risks (from the live values): 1")
    assert lines[start : start + 5] == [
        "risks (from the live values): 1",
        "  warn: some_risk: a | b [n=1]",
        "    fix (T, passes validation):",
        "      - x: 1",
        "      + x: 2",
    ]


def test_ready_router_line() -> None:
    """A ready router: ready, healthy workers out of all."""
    server = Server("r", "router", "ok", router={"ready": True, "healthy_workers": 2, "total_workers": 2})
    assert render_text(Report([server], {})).splitlines()[1] == "  router: ready, 2/2 workers healthy"


MARKDOWN = """\
# SGLang limits audit

3 servers: 1 ok, 1 drifting (1 items), 1 unreachable, 0 with errors.

## Fleet

- parallel calls: 32, bound by router max_concurrent_requests
- parallel calls at the full context of 65536 tokens: 15, bound by decode KV pools at full context
- router: 32 in flight, then 128 queued for up to 60 s, then 429
- per-call context: 65536 tokens; total context (decode KV pools): 1000000 tokens
- decode fleet (1 engine): runs 64 requests at once; 15 at the full context of 65536 tokens

## Risks (from the live values)

Not judged: 1 of 3 hosts unreachable.

## gpu|1 decode (sglang 0.5.9, http://10.0.0.1:30001): DRIFT

| key | declared | on disk | running | effective |
|---|---|---|---|---|
| context_length | 131072 | 131072 | 131072 | **65536** (drift) |
| chunked_prefill_size | - | - | - | **8192** (info) |
| kv_cache_dtype | a\\|b | **a\\|b** (drift) | n/a | n/a |

- drift: context_length from effective [effective]: shorter \\| than declared
- info: chunked_prefill_size from effective [effective]
- info: kv_cache_dtype from on_disk [on_disk,running]
- error: metrics unreadable
- note: a note
- load: 3 running, 1 queued, token usage 45.7%
- restart pending: files changed after the process started
- edited since the interrupted deploy: env_file, script
- running values: from the files (the process rewrites its title; files unchanged since start)
- live KV pool 900 tokens, effective context 90: 9 full-length requests fit; with max_running_requests 4, 4 run at once
- bf16 index keys cost 8.0% of the KV pool: 88 tokens (fp8 index keys would hold that many more)

| context | fit in pool | at once | binding | fp8-index fit |
|---|---|---|---|---|
| 50 | 20 | 4 | max_running_requests | 21 |
| 100 | 10 | 4 | max_running_requests | - |

![capacity of gpu|1 decode](charts/gpu_1-decode.svg)

## r1 router (smg): OK

- load: 0 running, None queued, token usage ?
- router: NOT ready, 1/2 workers healthy
- edited since the last deploy: unit

## gpu2 decode (version unknown): UNREACHABLE

- error: gpu2: host unreachable: no ssh

Legend: (drift) leaves the declaration, (info) information only, - unset, n/a not reported.
"""


def test_markdown_rendering_word_for_word() -> None:
    """The Markdown report: summary, fleet, risks, per server the table (`|` escaped), lines, ladder and chart."""
    charts = {"gpu_1-decode.svg": "charts/gpu_1-decode.svg", "r2-router.svg": "unused.svg"}
    assert render_markdown(_report(), charts) == MARKDOWN


def test_markdown_lists_risks_as_a_code_block() -> None:
    """Risks render as indented (code) lines in place of `None found.`"""
    lines = render_markdown(_report([RISK])).splitlines()
    start = lines.index("## Risks (from the live values)")
    assert lines[start : start + 7] == [
        "## Risks (from the live values)",
        "",
        "    warn: some_risk: a | b [n=1]",
        "      fix (T, passes validation):",
        "        - x: 1",
        "        + x: 2",
        "",
    ]


def test_markdown_without_charts_or_rows() -> None:
    """No chart link without a chart; a server without shown rows has no table."""
    report = Report([Server("h", "decode", "ok", rows=[_row("tp_size", _all(8), limit=False)])], {})
    assert render_markdown(report).splitlines()[-4:] == [
        "## h decode (version unknown): OK",
        "",
        "",
        "Legend: (drift) leaves the declaration, (info) information only, - unset, n/a not reported.",
    ]


# ---------------------------------------------------------------- charts and files


@pytest.mark.parametrize(
    ("host", "role", "name"),
    [
        ("gpu1", "decode", "gpu1-decode.svg"),
        ("GPU-1.lab_2", "prefill", "GPU-1.lab_2-prefill.svg"),
        ("gpu 1/a:b|c", "decode", "gpu_1_a_b_c-decode.svg"),
        ("zé", "router", "z_-router.svg"),
    ],
)
def test_chart_name(host: str, role: str, name: str) -> None:
    """Chart file names: host-role with every character outside [A-Za-z0-9_.-] replaced by `_`."""
    assert chart_name(Server(host, role, "ok")) == name


def test_charts_are_drawn_per_engine_with_the_fleet_router_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """One chart per server with ladder rows: its rows, context, running cap, the fleet's router cap and a title."""
    calls: list[tuple[Any, ...]] = []

    def fake_svg(*args: Any) -> str:
        calls.append(args)
        return f"<svg>{len(calls)}</svg>"

    monkeypatch.setattr(sglang_report, "render_svg", fake_svg)
    rows = [ConcurrencyRow(4096, 10, 4, "max_running_requests", None, None)]
    servers = [
        Server("gpu 1", "decode", "ok", capacity={"_rows": rows, "context_length": 4096, "max_running_requests": 4}),
        Server("gpu2", "decode", "ok", capacity={"context_length": 1}),
        Server("gpu3", "prefill", "ok", capacity={"_rows": [], "context_length": 1}),
    ]
    report = Report(servers, {"router_max_concurrent_requests": 12})
    assert render_charts(report) == {"gpu_1-decode.svg": "<svg>1</svg>"}
    assert calls == [(rows, 4096, 4, 12, "gpu 1 decode: concurrent full-length requests (live pool)")]
    calls.clear()
    render_charts(Report(servers[:1], {}))
    assert calls == [(rows, 4096, 4, None, "gpu 1 decode: concurrent full-length requests (live pool)")]


def test_real_chart_carries_title_and_router_cap() -> None:
    """The drawn chart is well-formed SVG with the server's title and the router's cap in its legend."""
    server = _decode("gpu1")
    server.capacity = engine_capacity(server, 32)
    charts = render_charts(Report([server], {"router_max_concurrent_requests": 32}))
    assert list(charts) == ["gpu1-decode.svg"]
    texts = [t.text for t in ElementTree.fromstring(charts["gpu1-decode.svg"]).iter("{http://www.w3.org/2000/svg}text")]
    assert texts[0] == "gpu1 decode: concurrent full-length requests (live pool)"
    assert "router max_concurrent 32" in texts


JSON = """\
{
  "fleet": {
    "decode_engines": 0,
    "routers": 0
  },
  "risks": [],
  "servers": [
    {
      "capacity": {},
      "drift": [],
      "endpoint": null,
      "errors": [
        "h: host unreachable: no ssh"
      ],
      "host": "h",
      "latency": {},
      "layers": {
        "in_progress": {
          "since": "2026-01-02 03:04:05"
        }
      },
      "live": {},
      "live_facts": {},
      "load": {},
      "notes": [],
      "predicted": {},
      "role": "decode",
      "router": {},
      "rows": [],
      "status": "unreachable",
      "version": null,
      "warnings": []
    }
  ],
  "summary": {
    "drift": 0,
    "drift_items": 0,
    "error": 0,
    "failed": true,
    "ok": 0,
    "servers": 1,
    "unreachable": 1
  }
}
"""


def _small_report() -> Report:
    since = datetime.datetime(2026, 1, 2, 3, 4, 5)  # not JSON-native: written as its str()
    server = Server("h", "decode", "unreachable", errors=["h: host unreachable: no ssh"],
                    layers={"in_progress": {"since": since}})  # fmt: skip
    return Report([server], {"routers": 0, "decode_engines": 0})


def test_files_written_word_for_word(tmp_path: Path) -> None:
    """audit.json (sorted keys, indent 2, newline), audit.md and audit.txt in a new nested folder."""
    folder = tmp_path / "audits" / "run-1"
    files = write(_small_report(), folder)
    assert files == {
        "json": str(folder / "audit.json"),
        "markdown": str(folder / "audit.md"),
        "text": str(folder / "audit.txt"),
    }
    assert sorted(p.name for p in folder.iterdir()) == ["audit.json", "audit.md", "audit.txt"]
    assert (folder / "audit.json").read_text() == JSON
    assert (folder / "audit.txt").read_text() == (
        "h decode (version unknown): UNREACHABLE\n"
        "  error: h: host unreachable: no ssh\n"
        "\n"
        "fleet:\n"
        "risks (from the live values): not judged: 1 of 1 hosts unreachable\n"
        "summary: 1 servers, 0 ok, 0 drifting (0 items), 1 unreachable, 0 with errors\n"
        "legend: * drift, ~ information, - unset, n/a not reported\n"
    )
    assert (folder / "audit.md").read_text() == (
        "# SGLang limits audit\n\n"
        "1 servers: 0 ok, 0 drifting (0 items), 1 unreachable, 0 with errors.\n\n"
        "## Fleet\n\n\n"
        "## Risks (from the live values)\n\n"
        "Not judged: 1 of 1 hosts unreachable.\n\n"
        "## h decode (version unknown): UNREACHABLE\n\n"
        "- error: h: host unreachable: no ssh\n\n"
        "Legend: (drift) leaves the declaration, (info) information only, - unset, n/a not reported.\n"
    )


def test_files_overwrite_an_existing_folder(tmp_path: Path) -> None:
    """Writing again into the same folder replaces the files."""
    write(Report([], {}), tmp_path)
    files = write(_small_report(), tmp_path)
    assert Path(files["json"]).read_text() == JSON


def test_charts_are_written_and_linked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each chart is a file next to the report, linked from audit.md by its file name, listed as chart:<name>."""
    monkeypatch.setattr(sglang_report, "render_svg", lambda *args: "<svg/>")
    rows = [ConcurrencyRow(4096, 10, 4, "max_running_requests", None, None)]
    server = Server("a/b", "decode", "ok", capacity={**CAPACITY, "_rows": rows})
    files = write(Report([server], {}), tmp_path)
    assert files["chart:a_b-decode.svg"] == str(tmp_path / "a_b-decode.svg")
    assert sorted(files) == ["chart:a_b-decode.svg", "json", "markdown", "text"]
    assert (tmp_path / "a_b-decode.svg").read_text() == "<svg/>"
    assert "![capacity of a/b decode](a_b-decode.svg)" in (tmp_path / "audit.md").read_text().splitlines()
