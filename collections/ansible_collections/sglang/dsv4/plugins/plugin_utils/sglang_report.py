"""The audit report: per server a table of limits x layers (declared, on disk, running, effective), the drift, and the
capacity derived from the LIVE pool; rendered as text (console), Markdown, JSON and SVG charts.

Input: one record per server and role, as the audit playbook collects it: what the host's readers returned and what
the server is judged against (sglang_drift.judge runs here, on the controller):
  {host, role, host_unreachable?: msg, failed?: msg, layers: <sglang_layers_info result>, live: <sglang_live_info
   result>, declared: envelope, model?: capacity-model inputs, declared_files?: {name: {owner, group, mode}},
   expected_workers?: <sglang_declared.workers() result> (router)}
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_capacity import (
    ConcurrencyRow,
    EngineLimits,
    concurrency_table,
    default_context_lens,
    request_lengths,
)
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_drift import LAYERS, judge
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_haproxy import front_rows
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_latency import (
    HISTOGRAMS,
    METRICS_SOURCE,
    engine_summary,
    seconds,
    summary_lines,
)

from .sglang_chart import render_svg
from .sglang_fleet import (
    CONTEXT,
    KV_POOL,
    PREFILL,
    ROUTER,
    RUNNING,
    Engine,
    Memory,
    answer,
    engine_calls,
    router_admission,
    router_queue,
)
from .sglang_plan import Fleet
from .sglang_risks import EngineState, FleetState, measured_time_risks, risks, workload_of
from .sglang_risks import render as render_risks

TITLES = {"declared": "declared", "on_disk": "on disk", "running": "running", "effective": "effective"}
MARK = {"drift": "*", "info": "~"}


# ---------------------------------------------------------------- collecting


@dataclass
class Server:
    host: str
    role: str
    status: str  # ok | drift | unreachable | error
    endpoint: str | None = None
    version: str | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    drift: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    live: dict[str, Any] = field(default_factory=dict)
    load: dict[str, Any] = field(default_factory=dict)
    live_facts: dict[str, Any] = field(default_factory=dict)
    predicted: dict[str, Any] = field(default_factory=dict)
    router: dict[str, Any] = field(default_factory=dict)
    layers: dict[str, Any] = field(default_factory=dict)
    capacity: dict[str, Any] = field(default_factory=dict)
    latency: dict[str, Any] = field(default_factory=dict)  # sglang_latency.engine_summary of its /metrics


def _msg(result: Mapping[str, Any] | None) -> str:
    result = result or {}
    return str(result.get("msg") or result.get("reason") or "no result")


def _index_k_note(sources: Mapping[str, str], notes: Mapping[str, str]) -> list[str]:
    """Where the effective bf16_index_k came from: the engine's report, or the rule that inferred it."""
    if "bf16_index_k" not in sources:
        return []
    return [f"effective bf16_index_k from {sources['bf16_index_k']}: {notes.get('bf16_index_k', '')}".rstrip(": ")]


# What the report keeps of the layers module's result.
LAYER_FIELDS = (
    "running_source", "restart_pending", "edited_since_deploy", "unit", "files",
    "in_progress", "backups", "release_switch",
)  # fmt: skip


def server_from_record(record: Mapping[str, Any]) -> Server:
    """One server's report entry from what the playbook registered, judged against its declaration."""
    host, role = str(record["host"]), str(record["role"])
    layers = record.get("layers") or {}
    live = record.get("live") or {}
    if record.get("host_unreachable") or layers.get("unreachable") or live.get("unreachable"):
        why = record.get("host_unreachable") or _msg(layers if layers.get("unreachable") else live)
        return Server(host, role, "unreachable", errors=[f"{host}: host unreachable: {why}"])
    failed = [r for r in (layers, live) if r.get("failed")]
    if record.get("failed") or failed:
        why = record.get("failed") or "; ".join(_msg(r) for r in failed)
        return Server(host, role, "error", errors=[f"{host}: {role}: the audit task failed: {why}"])
    verdict = judge(
        role, record.get("declared") or {}, layers or None, live or None, record.get("model"),
        declared_files=record.get("declared_files"), expected_workers=record.get("expected_workers"),
    )  # fmt: skip
    server = Server(
        host,
        role,
        "ok",
        endpoint=live.get("endpoint"),
        version=live.get("version"),
        rows=[asdict(r) for r in verdict.rows],
        drift=[asdict(d) for d in verdict.drift],
        errors=list(live.get("errors") or []) + list(layers.get("problems") or []),
        warnings=list(live.get("warnings_seen") or []) + [f"{host}: {w}" for w in verdict.warnings],
        notes=list(layers.get("notes") or []) + _index_k_note(verdict.sources, verdict.notes),
        live=dict(verdict.effective or {}),
        load=dict(live.get("load") or {}),
        live_facts=dict(live.get("live_facts") or {}),
        predicted=dict(verdict.predicted),
        router=dict(live.get("router") or {}),
        layers={k: layers.get(k) for k in LAYER_FIELDS},
    )
    if live.get("latency"):
        server.latency = engine_summary(live["latency"], (live.get("load") or {}).get("running"))
    if live.get("status") == "unreachable":
        server.status = "unreachable"
    elif server.errors:
        server.status = "error"
    elif any(d.get("severity") == "drift" for d in server.drift):
        server.status = "drift"
    return server


# ---------------------------------------------------------------- capacity from the live pool


def _live_limits(live: Mapping[str, Any], pool: int, engine: Engine) -> EngineLimits:
    """One rank of the live engine as EngineLimits (only pool, context, page, running requests and reserve are
    known): its pool and its share of the engine's running requests (the live max_running_requests is the whole
    engine's)."""
    context, page = int(live["context_length"]), int(live.get("page_size") or 1)
    max_req_len, max_req_input_len = request_lengths(context, pool)
    return EngineLimits(
        resolved={}, context_len=context, max_total_num_tokens=pool, token_capacity_swa=None,
        max_running_requests=engine.running, max_req_len=max_req_len,
        max_req_input_len=max_req_input_len, page_size=page, bytes_per_token=0.0, fixed_bytes=0,
        weights_bytes=0, kv_budget_bytes=0, memory_usage={}, admission_reserve=engine.reserve,
    )  # fmt: skip


def _bf16_active(server: Server) -> bool | None:
    for row in server.rows:
        if row["key"] == "bf16_index_k":
            values = row["values"]
            for layer in ("effective", "running", "on_disk", "declared"):
                if layer in values and values[layer] is not None:
                    return bool(values[layer])
    return None


def engine_capacity(server: Server, router_cap: int | None) -> dict[str, Any]:
    """Concurrent full-length requests at the effective context, from the live pool; the bf16 index-key cost."""
    live = server.live
    if not all(isinstance(live.get(k), int) for k in ("context_length", "max_total_tokens", "max_running_requests")):
        return {}
    engine = _live_engine(server)
    limits = _live_limits(live, int(live["max_total_tokens"]), engine)
    share = server.predicted.get("bf16_index_share")
    bf16 = _bf16_active(server)
    fp8 = None
    full = engine_calls(engine, engine.served)
    out: dict[str, Any] = {
        "context_length": limits.context_len,
        "pool_tokens": limits.max_total_num_tokens,
        "page_size": limits.page_size,
        "max_running_requests": int(live["max_running_requests"]),  # the whole engine's, as it reports it
        "full_length_fit": full.pool_fit_per_engine,
        "full_length_at_once": full.per_engine,
        "bf16_index_k": bf16,
        "bf16_index_share": share,
    }
    if engine.ranks != 1 or engine.reserve:
        out.update(ranks=engine.ranks, admission_reserve=engine.reserve)
    if bf16 and share:
        fp8_pool = int(limits.max_total_num_tokens / (1 - float(share))) // limits.page_size * limits.page_size
        fp8 = _live_limits(live, fp8_pool, engine)
        out["bf16_index_tokens"] = fp8_pool - limits.max_total_num_tokens
    rows = concurrency_table(limits, default_context_lens(limits.context_len), router_cap, fp8, engine.ranks)
    out["table"] = [asdict(r) for r in rows]
    out["_rows"] = rows
    return out


def _live_engine(server: Server) -> Engine:
    ranks = int(server.live_facts.get("attn_dp_size") or 1)
    return Engine.from_live(server.host, server.role, server.live, ranks)


def _capacity_engine(server: Server) -> Engine | None:
    """The engine as its live capacity entry states it (engine_capacity), or None when that is incomplete."""
    cap = server.capacity
    if not all(isinstance(cap.get(k), int) for k in ("context_length", "pool_tokens", "max_running_requests")):
        return None
    ranks = int(cap.get("ranks") or 1)
    return Engine(
        server.host, server.role, int(cap["pool_tokens"]), int(cap["max_running_requests"]) // ranks,
        int(cap["context_length"]), int(cap.get("page_size") or 1), ranks, int(cap.get("admission_reserve") or 0),
    )  # fmt: skip


# The fleet answer's limits as the report names them.
NAMES = {
    CONTEXT: CONTEXT,
    PREFILL: PREFILL,
    ROUTER: "router max_concurrent_requests",
    RUNNING: "decode fleet max_running_requests",
}


def _named(memory: Memory, pools: str) -> str:
    names = {**NAMES, KV_POOL: pools}
    return " = ".join(names[k] for k in (CONTEXT, PREFILL, ROUTER, RUNNING, KV_POOL) if k in memory.bindings)


def live_fleet_summary(servers: Sequence[Server]) -> dict[str, Any]:
    """The fleet answer from the live values (fleet_summary)."""
    routers = [s.live for s in servers if s.role == "router" and s.live]
    engines = [e for s in servers if s.role in ("prefill", "decode") and (e := _capacity_engine(s)) is not None]
    return fleet_summary(engines, routers)


def fleet_summary(engines: Sequence[Engine], routers: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The fleet answer (fleet_lines prints it): parallel calls (short ones, and at the full per-call context), what
    binds each, the routers' admission and queue. `routers`: each router's live values or declared envelope
    (max_concurrent_requests, queue_size, queue_timeout_secs): the audit gives the live ones, `capacity` the
    declared."""
    decode = [e for e in engines if e.role == "decode"]
    out: dict[str, Any] = {"routers": len(routers), "decode_engines": len(decode)}
    if (queue := router_queue(routers)) is not None:
        out["router_max_concurrent_requests"] = router_admission(routers)
        out["router_queue_size"] = queue.size
        out["router_queue_timeout_secs"] = queue.longest_wait_secs  # "queued for up to"
    if not decode:
        if out.get("router_max_concurrent_requests") is not None:
            out["parallel_calls"], out["binding"] = out["router_max_concurrent_requests"], NAMES[ROUTER]
        return out
    full = answer(engines, routers).memory
    short = answer(engines, routers, 1).memory
    out["decode_running"] = full.decode_running
    out["decode_full_length_at_once"] = full.decode_calls
    out["decode_full_length_fit"] = full.decode_pool_fit
    out["context_length"] = full.per_call_context
    out["decode_pool_tokens"] = full.total_context
    out["parallel_calls"], out["binding"] = short.parallel, _named(short, "decode KV pools")
    out["parallel_calls_full_context"] = full.parallel
    out["binding_full_context"] = _named(full, "decode KV pools at full context")
    return out


# ---------------------------------------------------------------- building the report


@dataclass
class Report:
    servers: list[Server]
    fleet: dict[str, Any]
    fail_on_drift: bool = True
    risks: list[dict[str, Any]] = field(default_factory=list)
    # Per front host (group sglang_frontend): {rows: sglang_haproxy.front_rows} or {error: why it was not read}.
    fronts: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def summary(self) -> dict[str, Any]:
        counts = {s: sum(1 for x in self.servers if x.status == s) for s in ("ok", "drift", "unreachable", "error")}
        drift_items = sum(1 for s in self.servers for d in s.drift if d.get("severity") == "drift")
        # A router out of a front, missing there or unknown to the inventory, and a front that was not read.
        front_out = sum(1 if "error" in f else sum(r["state"] != "in" for r in f["rows"]) for f in self.fronts.values())
        failed = bool(
            counts["unreachable"] or counts["error"] or (self.fail_on_drift and (counts["drift"] or front_out))
        )
        fronts = {"front_out": front_out} if self.fronts else {}
        return {"servers": len(self.servers), **counts, "drift_items": drift_items, **fronts, "failed": failed}

    def as_dict(self) -> dict[str, Any]:
        servers = []
        for s in self.servers:
            entry = asdict(s)
            entry["capacity"] = {k: v for k, v in s.capacity.items() if not k.startswith("_")}
            servers.append(entry)
        fronts = {"fronts": self.fronts} if self.fronts else {}
        return {"summary": self.summary, "fleet": self.fleet, "servers": servers, "risks": self.risks, **fronts}


def live_state(servers: Sequence[Server], declared: Fleet | None) -> FleetState:
    """The fleet as it runs: each engine's effective values over its declared ones, and its live KV pool."""
    hostvars = declared.hostvars if declared else {}
    engines, routers, dsv4 = [], [], True
    for server in servers:
        live = server.live
        if server.role == "router":
            if live:
                routers.append(dict(live))
            continue
        if not all(
            isinstance(live.get(k), int) for k in ("context_length", "max_total_tokens", "max_running_requests")
        ):
            continue
        envelope = {r["key"]: r["values"].get("declared") for r in server.rows}
        envelope.update({k: v for k, v in live.items() if v is not None})
        dsv4 = dsv4 and bool(server.predicted.get("dsv4", True))
        gib = float((hostvars.get(server.host) or {}).get("sglang_gpu_memory_gib") or 0)
        e = _live_engine(server)
        engines.append(
            EngineState(
                e.host, e.role, envelope, e.pool_tokens, e.running, e.context_len, e.page_size, gib, e.ranks, e.reserve
            )
        )
    return FleetState(engines, routers, workload_of(hostvars), dsv4, "live")


def build(
    records: Sequence[Mapping[str, Any]],
    fail_on_drift: bool = True,
    declared: Fleet | None = None,
    model_config: Mapping[str, Any] | None = None,
    predicted_time: Sequence[Mapping[str, Any]] = (),
    measured_time: Mapping[str, Any] | None = None,
    time_tolerance: float = 0.5,
    time_min_requests: int = 20,
    fronts: Mapping[str, Mapping[str, Any]] | None = None,
) -> Report:
    """The report of the read `records`. `predicted_time`: the time model's predictions for the declared fleet
    (plugin_utils.sglang_perf_fleet, made on the controller), each {shape, ttft_p50, ttft_p90, itl_p50, itl_p90,
    binding} as text, or {shape, unavailable} where the model could not run. `measured_time`: the fleet's measured
    latency (sglang_latency.measure) with `at_load`, the model's prediction at the measured load
    (sglang_perf_fleet.audit_predictions); a measured TTFT or ITL p50 off the prediction by more than
    `time_tolerance`, over at least `time_min_requests` requests, is a risk (measured_time_off_model). `fronts`: per
    front host its read (sglang_frontend_info: `servers`, or `failed`/`unreachable` with `msg`), judged against the
    declared routers."""
    order = {"prefill": 0, "decode": 1, "router": 2}
    servers = sorted((server_from_record(r) for r in records), key=lambda s: (order.get(s.role, 9), s.host))
    router_cap = router_admission([s.live for s in servers if s.role == "router" and s.live])
    for server in servers:
        if server.role != "router" and server.status != "unreachable":
            server.capacity = engine_capacity(server, router_cap)
    findings = risks(live_state(servers, declared), declared, model_config)
    fleet = live_fleet_summary(servers)
    if predicted_time:
        fleet["predicted_time"] = [dict(p) for p in predicted_time]
    if measured_time:
        fleet["measured_time"] = dict(measured_time)
        at_load = measured_time.get("at_load") or {}
        findings += measured_time_risks(measured_time, at_load, time_tolerance, time_min_requests)
    routers = list((declared.groups if declared else {}).get("sglang_router", []))
    return Report(servers, fleet, fail_on_drift, [f.as_dict() for f in findings], front_state(fronts or {}, routers))


def front_state(fronts: Mapping[str, Mapping[str, Any]], routers: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each front host's routers (sglang_haproxy.front_rows), or why the front was not read."""
    out: dict[str, dict[str, Any]] = {}
    for host, read in sorted(fronts.items()):
        if read.get("unreachable") or read.get("failed") or "servers" not in read:
            out[host] = {"error": str(read.get("msg") or "not read")}
        else:
            out[host] = {"rows": front_rows(list(routers), list(read["servers"]))}
    return out


def front_lines(fronts: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One line per front host: each router in or out of it, with HAProxy's status and open sessions."""
    lines = []
    for host, front in fronts.items():
        if "error" in front:
            lines.append(f"{host}: not read ({front['error']})")
            continue
        routers = [
            f"{r['router']} {r['state'].upper() if r['state'] != 'in' else 'in'}"
            + (f" ({r['status']}, {r['sessions']} open)" if r["status"] is not None else "")
            for r in front["rows"]
        ]
        lines.append(f"{host}: " + ", ".join(routers))
    return lines


# ---------------------------------------------------------------- rendering


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return (
            ",".join(str(v) for v in value)
            if len(value) <= 4
            else f"{value[0]},{value[1]},…,{value[-1]} ({len(value)})"
        )
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def shown_rows(server: Server) -> list[dict[str, Any]]:
    """The limit rows, then every other row that drifts."""
    return [r for r in server.rows if r.get("limit") or r.get("marks")]


def cell(row: Mapping[str, Any], layer: str) -> str:
    values, marks = row["values"], row.get("marks") or {}
    text = fmt(values[layer]) if layer in values else "n/a"
    return f"{text} {MARK[marks[layer]]}" if layer in marks else text


def _heading(server: Server) -> str:
    if server.version:
        version = f"sglang {server.version}"
    else:
        version = "smg" if server.role == "router" else "version unknown"
    where = f", {server.endpoint}" if server.endpoint else ""
    return f"{server.host} {server.role} ({version}{where}): {server.status.upper()}"


def _pct(value: Any) -> str:
    return f"{float(value) * 100:.1f}%" if value is not None else "?"


def capacity_lines(server: Server) -> list[str]:
    cap = server.capacity
    if not cap:
        return []
    lines = [
        f"live KV pool {cap['pool_tokens']} tokens, effective context {cap['context_length']}: "
        f"{cap['full_length_fit']} full-length requests fit; with max_running_requests {cap['max_running_requests']}, "
        f"{cap['full_length_at_once']} run at once",
    ]
    share = cap.get("bf16_index_share")
    if cap.get("bf16_index_k") and share:
        lines.append(
            f"bf16 index keys cost {_pct(share)} of the KV pool: {cap.get('bf16_index_tokens')} tokens "
            "(fp8 index keys would hold that many more)"
        )
    elif share:
        lines.append(f"fp8 index keys; bf16 index keys would cost {_pct(share)} of the KV pool")
    return lines


def fleet_lines(fleet: Mapping[str, Any]) -> list[str]:
    lines = []
    if "parallel_calls" in fleet:
        lines.append(f"parallel calls: {fleet['parallel_calls']}, bound by {fleet['binding']}")
    if "parallel_calls_full_context" in fleet:
        lines.append(
            f"parallel calls at the full context of {fleet['context_length']} tokens: "
            f"{fleet['parallel_calls_full_context']}, bound by {fleet['binding_full_context']}"
        )
    if "router_max_concurrent_requests" in fleet:
        mcr = fleet["router_max_concurrent_requests"]
        lines.append(
            f"router: {fmt(mcr) if mcr is not None else 'no cap'} in flight, then {fleet['router_queue_size']} queued "
            f"for up to {fleet['router_queue_timeout_secs']} s, then 429"
        )
    if "decode_pool_tokens" in fleet:
        lines.append(
            f"per-call context: {fleet['context_length']} tokens; total context (decode KV pools): "
            f"{fleet['decode_pool_tokens']} tokens"
        )
    if "decode_running" in fleet:
        engines = f"{fleet['decode_engines']} engine{'' if fleet['decode_engines'] == 1 else 's'}"
        lines.append(
            f"decode fleet ({engines}): runs {fleet['decode_running']} requests at once; "
            f"{fleet['decode_full_length_at_once']} at the full context of {fleet['context_length']} tokens"
        )
    for p in fleet.get("predicted_time", []):
        if p.get("unavailable"):
            lines.append(f"predicted time, {p['shape']}: {str(p['unavailable']).removeprefix('time: ')}")
            continue
        lines.append(
            f"predicted time, {p['shape']}: TTFT p50 {p['ttft_p50']}, p90 {p['ttft_p90']}; "
            f"ITL p50 {p['itl_p50']}, p90 {p['itl_p90']}; bound by {p['binding']}"
        )
    if fleet.get("measured_time"):
        lines += measured_lines(fleet["measured_time"])
    return lines


# The measured figures printed beside the model's, as (name, sglang_latency figure, quantile, prediction key).
COMPARED = (
    ("TTFT p50", "ttft", "p50_s", "ttft_p50"),
    ("TTFT p90", "ttft", "p90_s", "ttft_p90"),
    ("ITL p50", "itl", "p50_s", "itl_p50"),
    ("ITL p90", "itl", "p90_s", "itl_p90"),
)


def measured_lines(measured: Mapping[str, Any]) -> list[str]:
    """The measured latency per engine role, then each measured TTFT / ITL beside the model's prediction at the
    measured load with their ratio and sources."""
    lines = []
    roles = measured.get("roles") or {}
    for role in ("decode", "prefill"):
        found = roles.get(role)
        if not found:
            continue
        hosts = ", ".join(found.get("engines") or [])
        head, *rest = summary_lines(found)
        lines.append(f"measured time, {role} engines ({hosts}; {found.get('source')}): {head}")
        lines += [f"  {line}" for line in rest]
    lines += [f"  note: {n}" for n in measured.get("notes") or []]
    at_load = measured.get("at_load") or {}
    decode = roles.get("decode") or {}
    if not decode:
        return lines or ["measured time: no decode engine published its latency (/metrics)"]
    if at_load.get("unavailable"):
        lines.append(f"the model at the measured load: {str(at_load['unavailable']).removeprefix('time: ')}")
        return lines
    if "ttft_p50" not in at_load:
        return [*lines, "the model at the measured load: not predicted (no finished request on the decode engines)"]
    work = at_load.get("workload") or {}
    lines.append(
        f"measured vs the model at the measured load ({work.get('concurrency')} call(s) of {work.get('isl', 0):,} in "
        f"+ {work.get('osl', 0):,} out, to two figures):"
    )
    for name, key, stat, predicted_key in COMPARED:
        figure = decode.get(key) or {}
        value = figure.get(stat)
        predicted = at_load[predicted_key]
        if value is None:
            why = f"not published ({HISTOGRAMS[key]})" if not figure else "no observation"
            lines.append(f"  {name}: measured {why}; model {predicted['text']}")
            continue
        ratio = value * 1000 / predicted["ms"] if predicted["ms"] else float("inf")
        lines.append(
            f"  {name}: measured {seconds(value)} ({decode.get('source')}), model {predicted['text']}: "
            f"ratio {ratio:.2f}"
        )
    return lines


def _server_extra(server: Server) -> list[str]:
    lines = []
    for d in server.drift:
        mark = "drift" if d.get("severity") == "drift" else "info"
        layers = ",".join(d.get("layers") or [])
        lines.append(f"{mark}: {d['key']} from {d['layer']} [{layers}]: {d.get('explanation') or ''}".rstrip(": "))
    for e in server.errors:
        lines.append(f"error: {e}")
    lines += [f"note: {n}" for n in server.notes]
    if server.load:
        load = server.load
        usage = _pct(load.get("token_usage"))
        lines.append(f"load: {load.get('running')} running, {load.get('queued')} queued, token usage {usage}")
    if server.latency:
        head, *rest = summary_lines({k: v for k, v in server.latency.items() if k != "running"})
        lines.append(f"latency ({METRICS_SOURCE.replace('each engine', 'the engine')}): {head}")
        lines += [f"  {line}" for line in rest]
    if server.router:
        r = server.router
        ready = "ready" if r.get("ready") else "NOT ready"
        lines.append(f"router: {ready}, {r.get('healthy_workers')}/{r.get('total_workers')} workers healthy")
    if server.layers.get("restart_pending"):
        lines.append("restart pending: files changed after the process started")
    if server.layers.get("edited_since_deploy"):
        by = "the interrupted deploy" if server.layers.get("in_progress") else "the last deploy"
        lines.append(f"edited since {by}: {', '.join(server.layers['edited_since_deploy'])}")
    if server.layers.get("running_source") == "files":
        lines.append("running values: from the files (the process rewrites its title; files unchanged since start)")
    return lines + capacity_lines(server)


def none_found(report: Report) -> str:
    """What an audit without a risk says: "none found" only when it read every host; else the hosts it could not
    read leave the fleet not judged."""
    unread = sum(1 for s in report.servers if s.status == "unreachable")
    return f"not judged: {unread} of {len(report.servers)} hosts unreachable" if unread else "none found"


def render_text(report: Report) -> str:
    out: list[str] = []
    for server in report.servers:
        out.append(_heading(server))
        rows = shown_rows(server)
        if rows:
            table = [["key", *(TITLES[layer] for layer in LAYERS)]]
            table += [[r["key"], *(cell(r, layer) for layer in LAYERS)] for r in rows]
            widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
            out += ["  " + "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in table]
        out += [f"  {line}" for line in _server_extra(server)]
        out.append("")
    out.append("fleet:")
    out += [f"  {line}" for line in fleet_lines(report.fleet)]
    out.append(f"risks (from the live values): {len(report.risks) or none_found(report)}")
    out += [f"  {line}" for line in render_risks(report.risks)]
    if report.fronts:
        out.append("front (HAProxy, group sglang_frontend):")
        out += [f"  {line}" for line in front_lines(report.fronts)]
    s = report.summary
    out.append(
        f"summary: {s['servers']} servers, {s['ok']} ok, {s['drift']} drifting ({s['drift_items']} items), "
        f"{s['unreachable']} unreachable, {s['error']} with errors"
        + (f", {s['front_out']} router(s) out of a front" if report.fronts else "")
    )
    out.append("legend: * drift, ~ information, - unset, n/a not reported")
    return "\n".join(out) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(report: Report, charts: Mapping[str, str] | None = None) -> str:
    charts = charts or {}
    s = report.summary
    out = [
        "# SGLang limits audit",
        "",
        f"{s['servers']} servers: {s['ok']} ok, {s['drift']} drifting ({s['drift_items']} items), "
        f"{s['unreachable']} unreachable, {s['error']} with errors.",
        "",
        "## Fleet",
        "",
        *[f"- {line}" for line in fleet_lines(report.fleet)],
        "",
        "## Risks (from the live values)",
        "",
        *([f"    {line}" for line in render_risks(report.risks)] or [none_found(report).capitalize() + "."]),
        "",
        *(["## Front", "", *[f"- {_md(line)}" for line in front_lines(report.fronts)], ""] if report.fronts else []),
    ]
    for server in report.servers:
        out += [f"## {_heading(server)}", ""]
        rows = shown_rows(server)
        if rows:
            out.append("| key | " + " | ".join(TITLES[layer] for layer in LAYERS) + " |")
            out.append("|---" * (len(LAYERS) + 1) + "|")
            for r in rows:
                cells = []
                for layer in LAYERS:
                    text = _md(fmt(r["values"][layer]) if layer in r["values"] else "n/a")
                    mark = (r.get("marks") or {}).get(layer)
                    cells.append(f"**{text}** ({mark})" if mark else text)
                out.append(f"| {r['key']} | " + " | ".join(cells) + " |")
            out.append("")
        out += [f"- {_md(line)}" for line in _server_extra(server)]
        cap = server.capacity
        if cap.get("table"):
            out += ["", "| context | fit in pool | at once | binding | fp8-index fit |", "|---|---|---|---|---|"]
            for row in cap["table"]:
                out.append(
                    f"| {row['context_len']} | {row['fit_in_pool']} | {row['concurrent']} | {row['binding']} "
                    f"| {fmt(row['fit_fp8_index'])} |"
                )
        key = chart_name(server)
        if key in charts:
            out += ["", f"![capacity of {server.host} {server.role}]({charts[key]})"]
        out.append("")
    out.append("Legend: (drift) leaves the declaration, (info) information only, - unset, n/a not reported.")
    return "\n".join(out) + "\n"


def chart_name(server: Server) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{server.host}-{server.role}") + ".svg"


def render_charts(report: Report) -> dict[str, str]:
    """SVG per engine with a live capacity table: {file name: svg}."""
    router_cap = report.fleet.get("router_max_concurrent_requests")
    out = {}
    for server in report.servers:
        rows: list[ConcurrencyRow] = server.capacity.get("_rows") or []
        if rows:
            title = f"{server.host} {server.role}: concurrent full-length requests (live pool)"
            out[chart_name(server)] = render_svg(
                rows, server.capacity["context_length"], server.capacity["max_running_requests"], router_cap, title
            )
    return out


def write(report: Report, directory: str | Path) -> dict[str, str]:
    """Write audit.json, audit.md, audit.txt and the charts into `directory`; return {kind: path}."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    charts = render_charts(report)
    paths = {"json": folder / "audit.json", "markdown": folder / "audit.md", "text": folder / "audit.txt"}
    paths["json"].write_text(json.dumps(report.as_dict(), indent=2, sort_keys=True, default=str) + "\n")
    paths["markdown"].write_text(render_markdown(report, {k: k for k in charts}))
    paths["text"].write_text(render_text(report))
    out = {k: str(v) for k, v in paths.items()}
    for name, svg in charts.items():
        (folder / name).write_text(svg)
        out[f"chart:{name}"] = str(folder / name)
    return out
