"""Risks beside the answer: combinations in an envelope that will hurt under load, with the numbers and a fix.

One function, `risks(state, fleet, model_config)`, judges a fleet as it is declared (validation, the capacity
command, the planner) or as it runs (the audit, from live values). A finding is never an error: a risk is not a
mistake. Each carries an id, a severity (info, warn, critical), the numbers that show it, the servers it affects
and fixes: envelope diffs built by the planner's `change`, each checked by the fleet validation.

Operator measurements make more findings possible; they are declared, optionally, in `sglang_workload`:
  p90_context_tokens      the 90th-percentile per-call context of the traffic
  prefill_tokens_per_sec  one prefill engine's prefill speed
  requests_per_sec        requests the fleet completes per second at full load
  model_load_secs         how long an engine takes from start to healthy
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_argspec import default_of
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_capacity import (
    activation_tokens,
    default_mem_fraction,
    is_dsv4,
)
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_declared import (
    engine_envelope,
    mesh_members,
    router_envelope,
)

from .sglang_engine_rules import engine_limits
from .sglang_fleet import Engine, Memory, answer, ranks_of
from .sglang_plan import Fleet, Option, Shape, change, plan

SEVERITIES = ("info", "warn", "critical")
WORKLOAD_KEYS = ("p90_context_tokens", "prefill_tokens_per_sec", "requests_per_sec", "model_load_secs")


@dataclass(frozen=True)
class EngineState:
    """One engine as declared or as it runs: its envelope and what the KV pool gives it."""

    host: str
    role: str
    envelope: Mapping[str, Any]
    pool_tokens: int  # per rank
    running: int  # per rank
    context_len: int
    page_size: int
    gpu_memory_gib: float
    ranks: int = 1
    reserve: int = 0  # PD decode admission reserve per active request
    max_req_len: int | None = None

    def engine(self) -> Engine:
        """This engine as the fleet answer counts it."""
        return Engine(
            self.host, self.role, self.pool_tokens, self.running, self.context_len, self.page_size, self.ranks,
            self.reserve, self.max_req_len,
        )  # fmt: skip


@dataclass(frozen=True)
class FleetState:
    engines: list[EngineState]
    routers: Sequence[Mapping[str, Any]]
    workload: Mapping[str, Any] = field(default_factory=dict)
    dsv4: bool = True
    source: str = "declared"  # declared | live

    def role(self, role: str) -> list[EngineState]:
        return [e for e in self.engines if e.role == role]

    def memory(self, tokens: int | None = None) -> Memory:
        """The fleet answer (memory) for calls of `tokens`; None: at the served per-call context."""
        return answer([e.engine() for e in self.engines], self.routers, tokens).memory


@dataclass
class Finding:
    id: str
    severity: str
    summary: str
    numbers: dict[str, Any]
    servers: list[str]
    fixes: list[dict[str, Any]] = field(default_factory=list)  # {title, diff: [lines], valid, refused}

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def fix_of(option: Option) -> dict[str, Any]:
    """A finding's fix: the option's title, its diff lines and the validation's verdict."""
    return {"title": option.title, "diff": option.diff_lines(), "valid": not option.refused, "refused": option.refused}


class _Judge:
    """Collects findings; builds fixes only when a declared fleet is there to change."""

    def __init__(self, state: FleetState, fleet: Fleet | None, model_config: Mapping[str, Any] | None) -> None:
        self.state, self.fleet, self.model_config = state, fleet, model_config
        self.findings: list[Finding] = []

    def add(self, finding: Finding, *fixes: Option | None) -> None:
        finding.fixes = [fix_of(f) for f in fixes if f is not None]
        self.findings.append(finding)

    def change(self, title: str, settings: list[tuple[str, str, Any]], add_decode_hosts: int = 0) -> Option | None:
        if self.fleet is None or self.model_config is None:
            return None
        return change(self.fleet, self.model_config, title, settings, add_decode_hosts=add_decode_hosts)

    def planned(self, calls: int, tokens: int) -> Option | None:
        if self.fleet is None or self.model_config is None:
            return None
        options = plan(self.fleet, self.model_config, Shape(calls, tokens)).options
        return options[0] if options else None


def _names(engines: Sequence[EngineState]) -> list[str]:
    return [f"{e.host} {e.role}" for e in engines]


def _admission(judge: _Judge, tokens: int | None, label: str) -> None:
    """The router admits more calls of `tokens` (None: the longest served) than the decode fleet holds."""
    state = judge.state
    decode = state.role("decode")
    if not decode:
        return
    memory = state.memory(tokens)
    cap, holds, tokens = memory.router_admits, memory.decode_calls, memory.tokens
    if cap is None or cap <= holds:
        return
    judge.add(
        Finding(
            f"router_admits_beyond_{label}",
            "warn",
            f"the router admits {cap} parallel calls, but the decode fleet holds {holds} at {tokens:,} tokens each "
            f"({label.replace('_', ' ')}): the rest wait or are retracted inside the engines, where the router "
            "cannot see them",
            {"router_max_concurrent_requests": cap, "decode_holds": holds, "tokens_per_call": tokens},
            _names(decode),
        ),
        judge.planned(cap, tokens),
        judge.change(
            f"admit only what the decode fleet holds at {tokens:,} tokens",
            # each router admits its own cap: the decode fleet's calls split over the routers
            [("router", "max_concurrent_requests", max(1, holds // max(1, len(state.routers))))],
        ),
    )


def _prefill_pool(judge: _Judge) -> None:
    for engine in judge.state.role("prefill"):
        chunk = int(engine.envelope.get("chunked_prefill_size") or 0)
        need = engine.context_len + max(chunk, 0)
        if engine.pool_tokens >= need:
            continue
        lowered = max(engine.page_size, (engine.pool_tokens - max(chunk, 0)) // engine.page_size * engine.page_size)
        judge.add(
            Finding(
                "prefill_pool_below_prompt_plus_chunk",
                "critical",
                f"{engine.host} prefill holds {engine.pool_tokens:,} KV tokens, less than one maximal prompt "
                f"({engine.context_len:,}) plus a chunk ({chunk:,}): a full-length prompt cannot be prefilled",
                {"pool_tokens": engine.pool_tokens, "context_length": engine.context_len, "chunk": chunk},
                [f"{engine.host} prefill"],
            ),
            judge.change("lower the per-call context to what the prefill pool holds", [
                ("prefill", "context_length", lowered), ("decode", "context_length", lowered)]),
        )  # fmt: skip


def _headroom(judge: _Judge) -> None:
    for engine in judge.state.engines:
        env = engine.envelope
        fraction = env.get("mem_fraction_static")
        if fraction is None or engine.gpu_memory_gib <= 0:  # GPU memory unknown (a live fleet without its declaration)
            continue
        tp = int(env.get("tp_size") or 1)
        activation = activation_tokens(engine.role, engine.running, env.get("chunked_prefill_size"))
        sglang_choice = default_mem_fraction(engine.gpu_memory_gib, tp, activation)
        if float(fraction) <= sglang_choice:
            continue
        outside = engine.gpu_memory_gib * (1 - float(fraction))
        needed = engine.gpu_memory_gib * (1 - sglang_choice)
        judge.add(
            Finding(
                "headroom_outside_static_pool",
                "critical" if outside < needed / 2 else "warn",
                f"{engine.host} {engine.role}: mem_fraction_static {fraction} leaves {outside:.1f} GiB per GPU for "
                f"cuda graphs and activations; SGLang itself reserves {needed:.1f} GiB for this envelope "
                f"({activation} activation tokens): an OOM at startup or under the first long prefill",
                {"outside_gib": round(outside, 2), "sglang_reserve_gib": round(needed, 2), "fraction": fraction},
                [f"{engine.host} {engine.role}"],
            ),
            judge.change("SGLang's own memory fraction", [(engine.role, "mem_fraction_static", sglang_choice)]),
        )


def _cuda_graphs(judge: _Judge) -> None:
    for engine in judge.state.role("decode"):
        env = engine.envelope
        sizes = [int(b) for b in env.get("cuda_graph_bs_decode") or []]
        largest = int(env.get("cuda_graph_max_bs_decode") or (max(sizes) if sizes else 0))
        if not largest or largest == engine.running:
            continue
        below = largest < engine.running
        judge.add(
            Finding(
                "cuda_graph_batch_sizes",
                "warn" if below else "info",
                f"{engine.host} decode runs up to {engine.running} requests, its largest cuda graph is for {largest}: "
                + (
                    f"batches above {largest} decode without a graph (slower steps at full load)"
                    if below
                    else f"graphs above {engine.running} are captured and never replayed (memory for nothing)"
                ),
                {"max_running_requests": engine.running, "cuda_graph_max_bs_decode": largest, "sizes": sizes},
                [f"{engine.host} decode"],
            ),
            judge.change(
                "capture graphs up to the running batch",
                [("decode", "cuda_graph_max_bs_decode", engine.running)]
                + ([("decode", "cuda_graph_bs_decode", _ladder(sizes, engine.running))] if sizes else []),
            ),
        )


def _ladder(sizes: list[int], top: int) -> list[int]:
    kept = [b for b in sorted(set(sizes)) if b < top]
    return [*kept, top]


def _timeouts(judge: _Judge) -> None:
    state, work = judge.state, judge.state.workload
    speed = work.get("prefill_tokens_per_sec")
    if speed and state.engines:
        context = state.memory().per_call_context  # the longest call the fleet serves: its shortest engine's
        seconds = context / float(speed)
        # the front sends a call to any router: the smallest timeout is the one a call meets first
        declared = [r["request_timeout_secs"] for r in state.routers if r.get("request_timeout_secs") is not None]
        timeout = min(declared, key=float, default=None)
        if timeout is not None and float(timeout) < seconds:
            judge.add(
                Finding(
                    "request_timeout_below_full_prefill",
                    "warn",
                    f"a full-context prefill ({context:,} tokens at {speed} tokens/s) takes {seconds:.0f} s, the "
                    f"router's request_timeout_secs is {timeout}: the longest calls time out before their first "
                    "token",
                    {"prefill_secs": round(seconds, 1), "request_timeout_secs": timeout},
                    ["router"],
                ),
                judge.change("a timeout above one full prefill",
                             [("router", "request_timeout_secs", math.ceil(seconds * 1.5))]),
            )  # fmt: skip
    load = work.get("model_load_secs")
    if load:
        late = [e for e in state.engines if e.envelope.get("watchdog_timeout") is not None]
        late = [e for e in late if float(e.envelope["watchdog_timeout"]) < float(load)]
        for role in sorted({e.role for e in late}):
            engines = [e for e in late if e.role == role]
            watchdog = min((e.envelope["watchdog_timeout"] for e in engines), key=float)  # the first to fire
            judge.add(
                Finding(
                    "watchdog_below_model_load",
                    "warn",
                    f"{role} engines load in {load} s, their watchdog_timeout is {watchdog} s: the watchdog can kill "
                    "an engine that is only slow to come up",
                    {"model_load_secs": load, "watchdog_timeout": watchdog},
                    _names(engines),
                ),
                judge.change(
                    "a watchdog above the load time", [(role, "watchdog_timeout", math.ceil(float(load) * 1.5))]
                ),
            )


def _index_keys(judge: _Judge) -> None:
    if not judge.state.dsv4:
        return
    fp8 = [e for e in judge.state.engines if not e.envelope.get("bf16_index_k")]
    if not fp8:
        return
    judge.add(
        Finding(
            "fp8_index_keys",
            "warn",
            "fp8 index keys: DeepSeek-V4's sparse attention misses needles beyond about 2,000 tokens (the "
            "long-context recall bug); bf16 keys fix it for about 8 % of the KV pool",
            {"engines_with_fp8_keys": len(fp8)},
            _names(fp8),
        ),
        judge.change("bf16 index keys", [(role, "bf16_index_k", True) for role in sorted({e.role for e in fp8})]),
    )


def _single_decode(judge: _Judge) -> None:
    decode = judge.state.role("decode")
    if len(decode) != 1:
        return
    judge.add(
        Finding(
            "single_decode_engine",
            "warn",
            "one decode engine: it cannot be drained, so any change of an engine limit is an outage for the fleet",
            {"decode_engines": 1},
            _names(decode),
        ),
        judge.change("a second decode engine", [], add_decode_hosts=1),
    )


def _queue(judge: _Judge) -> None:
    rate = judge.state.workload.get("requests_per_sec")
    if not rate:
        return
    for router in judge.state.routers:
        size, wait = router.get("queue_size"), router.get("queue_timeout_secs")
        if not size or not wait:
            continue
        drain = float(size) / float(rate)
        if drain <= float(wait):
            continue
        judge.add(
            Finding(
                "router_queue_outlasts_timeout",
                "warn",
                f"a full router queue of {size} drains in {drain:.0f} s at {rate} requests/s, but queue_timeout_secs "
                f"is {wait}: the back of the queue times out instead of being served",
                {"queue_size": size, "drain_secs": round(drain, 1), "queue_timeout_secs": wait},
                ["router"],
            ),
            judge.change("a queue that drains within its timeout",
                         [("router", "queue_size", max(1, int(float(rate) * float(wait))))]),
        )  # fmt: skip
        break


def risks(
    state: FleetState, fleet: Fleet | None = None, model_config: Mapping[str, Any] | None = None
) -> list[Finding]:
    """Every risk of `state`, most severe first. `fleet` (the declaration) and `model_config` let each finding
    carry fixes as validated envelope diffs; without them the findings come without fixes."""
    judge = _Judge(state, fleet, model_config)
    decode = state.role("decode")
    if decode:
        _admission(judge, None, "full_context")
        p90 = state.workload.get("p90_context_tokens")
        if p90:
            _admission(judge, int(p90), "p90_context")
    _prefill_pool(judge)
    _headroom(judge)
    _cuda_graphs(judge)
    _timeouts(judge)
    _index_keys(judge)
    _single_decode(judge)
    _queue(judge)
    return sorted(judge.findings, key=lambda f: -SEVERITIES.index(f.severity))


# The measured figures judged against the model, as (name, sglang_latency figure, prediction key).
MEASURED_TIME_FIGURES = (("TTFT p50", "ttft", "ttft_p50"), ("ITL p50", "itl", "itl_p50"))


def measured_time_risks(
    measured: Mapping[str, Any], at_load: Mapping[str, Any], tolerance: float, min_requests: int
) -> list[Finding]:
    """measured_time_off_model: the decode engines' measured TTFT or ITL p50 (sglang_latency.measure) lies more than
    `tolerance` (0.5: +-50 %) from the time model's prediction at the measured load (`at_load`: the prediction as
    sglang_perf_fleet.as_dict gives it, with its workload), judged once the figure counts `min_requests` finished
    requests. The hardware is the truth: a finding says to recalibrate, it never fails the audit."""
    decode = (measured.get("roles") or {}).get("decode") or {}
    if not decode or "ttft_p50" not in at_load:
        return []
    findings = []
    work = at_load.get("workload") or {}
    load = f"{work.get('concurrency')} call(s) of {work.get('isl', 0):,} in + {work.get('osl', 0):,} out"
    servers = [f"{h} decode" for h in decode.get("engines") or []]
    for name, key, predicted_key in MEASURED_TIME_FIGURES:
        figure = decode.get(key) or {}
        requests = int(figure.get("count") or 0) if key == "ttft" else int(decode.get("requests") or 0)
        predicted = float(at_load[predicted_key]["ms"])
        if figure.get("p50_s") is None or requests < min_requests or predicted <= 0:
            continue
        measured_ms = float(figure["p50_s"]) * 1000
        ratio = measured_ms / predicted
        if abs(ratio - 1) <= tolerance:
            continue
        findings.append(
            Finding(
                "measured_time_off_model",
                "warn",
                f"measured {name} {measured_ms:,.1f} ms ({decode.get('source')}) is {ratio:.2f} x the time model's "
                f"{predicted:,.1f} ms at the measured load ({load}), beyond +-{tolerance:.0%}: the hardware is the "
                "truth: recalibrate with plan --from-live",
                {
                    "figure": name,
                    "measured_ms": round(measured_ms, 1),
                    "predicted_ms": round(predicted, 1),
                    "ratio": round(ratio, 2),
                    "tolerance": tolerance,
                    "requests": requests,
                    "source": decode.get("source"),
                },
                servers,
            )
        )
    return findings


# What smg's mesh costs at rest, as measured on the multi-host lab (docs/frontend.md).
MESH_AT_REST = (
    "two smg 1.13.0 routers in a mesh that serve nothing exchange about 2,700 frames of 49 bytes a second and keep "
    "0.57 CPU cores each busy (measured on the multi-host lab)"
)


def mesh_risks(hostvars: Mapping[str, Mapping[str, Any]], groups: Mapping[str, list[str]]) -> list[Finding]:
    """router_mesh_busy_at_rest: routers that sglang_router_mesh joins in smg's mesh. The mesh shares the workers a
    router learns at run time and the cache-aware policy's tree, never an admission count; with the inventory's
    static worker lists it serves the cache-aware policy only, so a mesh under another policy is a warning and under
    cache_aware a note of its cost."""
    meshed = mesh_members(hostvars, groups)
    if not meshed:
        return []
    policies = sorted(
        {str(router_envelope(hostvars[h]).get("policy") or default_of("router", "policy")) for h in meshed}
    )
    useful = policies == ["cache_aware"]
    summary = (
        f"smg's mesh joins the routers {', '.join(meshed)} (sglang_router_mesh: true): {MESH_AT_REST}; "
        + ("the cache-aware policy shares its tree over it"
           if useful else
           f"under policy {', '.join(policies)} it shares nothing the routers use: set sglang_router_mesh: false")
    )  # fmt: skip
    numbers = {"routers": len(meshed), "policy": ",".join(policies)}
    return [Finding("router_mesh_busy_at_rest", "info" if useful else "warn", summary, numbers,
                    [f"{h} router" for h in meshed])]  # fmt: skip


def render(findings: Sequence[Mapping[str, Any]]) -> list[str]:
    """Text lines for findings (as Finding.as_dict gives them): each with its numbers and its fixes."""
    lines = []
    for f in findings:
        numbers = ", ".join(f"{k}={v}" for k, v in f["numbers"].items())
        lines.append(f"{f['severity']}: {f['id']}: {f['summary']} [{numbers}]")
        for fix in f["fixes"]:
            verdict = "passes validation" if fix["valid"] else f"refused by validation: {fix['refused'][0]}"
            lines.append(f"  fix ({fix['title']}, {verdict}):")
            lines += [f"    {line}" for line in fix["diff"]]
    return lines


def declared_state(fleet: Fleet, model_config: Mapping[str, Any]) -> FleetState:
    """The fleet as declared, each engine with the pool the capacity model gives it."""
    engines = []
    for role in ("prefill", "decode"):
        for host in fleet.hosts(role):
            hv = fleet.hostvars[host]
            env = engine_envelope(role, hv)
            lim = engine_limits(model_config, env, hv)
            pool, running, context = lim.max_total_num_tokens, lim.max_running_requests, lim.context_len
            gib = float(hv["sglang_gpu_memory_gib"])
            engines.append(
                EngineState(
                    host, role, env, pool, running, context, lim.page_size, gib,
                    ranks_of(lim.resolved), lim.admission_reserve, lim.max_req_len,
                )
            )  # fmt: skip
    routers = [router_envelope(fleet.hostvars[h]) for h in fleet.hosts("router")]
    return FleetState(engines, routers, workload_of(fleet.hostvars), is_dsv4(model_config), "declared")


def workload_of(hostvars: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The declared sglang_workload (the first host that has one; it is a group variable)."""
    for hv in hostvars.values():
        work = hv.get("sglang_workload")
        if isinstance(work, Mapping):
            return {k: work[k] for k in WORKLOAD_KEYS if work.get(k) is not None}
    return {}
