"""Engine adapters of the live reader: read a running SGLang 0.5.23 engine and normalize its answers.

/server_info (fallback /get_server_info), /v1/models, /v1/loads and /metrics are fetched concurrently through
sglang_http, reduced on arrival, and turned into the effective envelope. Where several endpoints report one limit,
SOURCES says which wins: the first source in its row that answers.

The raw /server_info body holds the API key in plaintext. It is reduced to the fields below as soon as it is
parsed and never kept, returned or quoted in an error.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from .sglang_http import Fetched, ServerLive, Transport, describe, fetch, fetch_concurrently, set_status
from .sglang_latency import COUNTERS, HISTOGRAMS
from .sglang_schema import BY_NAME, keys_for

IGNORED = "<ignored>"  # effective value of a flag the engine accepts but does not apply
PD_MODES = ("prefill", "decode")

ENGINE_PATHS = {"server_info": "/server_info", "models": "/v1/models", "loads": "/v1/loads", "metrics": "/metrics"}
LEGACY_SERVER_INFO = "/get_server_info"

# Scheduler info and per-rank state kept from /server_info; everything else is dropped on arrival.
_TOP_KEEP = ("version", "status", "max_total_num_tokens", "max_req_input_len", "attn_dp_size", "cuda_graph_config")
_RANK_KEEP = (
    "effective_max_running_requests_per_dp",
    "memory_usage",
    "disaggregation_mode",
    "env_vars",
    "dsv4_index_k_dtype",
)
# The fork's engine reports the index-key dtype it stores (internal_states[i].dsv4_index_k_dtype).
INDEX_K_DTYPE_SOURCE = "/server_info internal_states[0].dsv4_index_k_dtype"
_METRICS = (
    "sglang:context_len",
    "sglang:max_total_num_tokens",
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:token_usage",
    "sglang:num_used_tokens",
)


# ---------------------------------------------------------------- reducing the answers


def reduce_server_info(body: Any) -> dict[str, Any]:
    """The fields of /server_info the audit needs (engine envelope keys, scheduler info, rank 0 state).

    Secrets (api_key, admin_api_key, launch_command) are never copied.
    """
    if not isinstance(body, dict):
        raise TypeError("server_info is not an object")
    wanted = {k.name for k in keys_for("prefill") if not k.secret} | set(_TOP_KEEP)
    out = {k: body[k] for k in wanted if k in body}
    states = body.get("internal_states")
    rank0 = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}
    kept = {k: rank0[k] for k in _RANK_KEEP if k in rank0}
    if isinstance(kept.get("env_vars"), dict):  # only the variables the envelope knows
        env_names = {k.env for k in BY_NAME.values() if k.env}
        kept["env_vars"] = {k: v for k, v in kept["env_vars"].items() if k in env_names}
    out["rank0"] = kept
    out["has_internal_states"] = bool(rank0)
    return out


def reduce_models(body: Any) -> dict[str, Any]:
    cards = body["data"]
    if not isinstance(cards, list):
        raise TypeError("data is not a list")
    first = cards[0] if cards else {}
    return {"id": first.get("id"), "max_model_len": first.get("max_model_len")}


def reduce_loads(body: Any) -> dict[str, Any]:
    loads = body["loads"]
    if not isinstance(loads, list):
        raise TypeError("loads is not a list")
    return {
        "version": body.get("version"),
        "running": sum(int(x.get("num_running_reqs") or 0) for x in loads),
        "queued": sum(int(x.get("num_waiting_reqs") or 0) for x in loads),
        "used_tokens": sum(int(x.get("num_used_tokens") or 0) for x in loads),
        "token_usage": max((float(x.get("token_usage") or 0) for x in loads), default=0.0),
        "max_total_num_tokens": _first(loads, "max_total_num_tokens"),
        "max_running_requests": _sum_or_none(loads, "max_running_requests"),
        "ranks": len(loads),
    }


def _first(items: list[dict[str, Any]], key: str) -> Any:
    return next((x[key] for x in items if x.get(key) is not None), None)


def _sum_or_none(items: list[dict[str, Any]], key: str) -> int | None:
    values = [int(x[key]) for x in items if x.get(key) is not None]
    return sum(values) if values else None


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def sample_sum(text: str, names: tuple[str, ...]) -> float:
    """The sum of every sample of the metrics `names` on a Prometheus text page, over all their label sets."""
    total = 0.0
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match and match.group(1) in names:
            total += float(match.group(3))
    return total


def parse_metrics(text: str) -> dict[str, float]:
    """The gauges the audit uses from a Prometheus text page; counts are summed over ranks, capacities not."""
    sums: dict[str, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match or match.group(1) not in _METRICS:
            continue
        name, value = match.group(1), float(match.group(3))
        if name in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:num_used_tokens"):
            sums[name] = sums.get(name, 0.0) + value
        elif name == "sglang:token_usage":
            sums[name] = max(sums.get(name, 0.0), value)
        else:
            sums.setdefault(name, value)
    return sums


_LE = re.compile(r'le="([^"]*)"')
_PARTS = {f"{metric}{suffix}": (figure, suffix) for figure, metric in HISTOGRAMS.items() for suffix in
          ("_bucket", "_count", "_sum")}  # fmt: skip
_COUNTER_OF = {metric: name for name, metric in COUNTERS.items()}


def parse_latency(text: str) -> dict[str, Any]:
    """SGLang's latency histograms and request counters (sglang_latency.HISTOGRAMS, COUNTERS) of a /metrics page,
    summed over their label sets (streaming or not, ranks): {figure: {buckets: [[le, cumulative], ...] (finite
    bounds), count, sum}, counter: total}. A histogram the engine does not publish is absent."""
    out: dict[str, Any] = {}
    buckets: dict[str, dict[float, float]] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match:
            continue
        name, value = match.group(1), float(match.group(3))
        if name in _COUNTER_OF:
            out[_COUNTER_OF[name]] = out.get(_COUNTER_OF[name], 0.0) + value
            continue
        if name not in _PARTS:
            continue
        figure, suffix = _PARTS[name]
        hist = out.setdefault(figure, {"buckets": [], "count": 0.0, "sum": 0.0})
        if suffix == "_bucket":
            le = _LE.search(match.group(2) or "")
            if le and le.group(1) != "+Inf":
                bound = float(le.group(1))
                mine = buckets.setdefault(figure, {})
                mine[bound] = mine.get(bound, 0.0) + value
        else:
            hist[suffix[1:]] += value
    for figure, found in buckets.items():
        out[figure]["buckets"] = [[bound, found[bound]] for bound in sorted(found)]
    return out


# ---------------------------------------------------------------- which source wins


@dataclass(frozen=True)
class Answers:
    """The reduced answers of one engine, as the source table reads them."""

    info: Mapping[str, Any]
    models: Mapping[str, Any]
    loads: Mapping[str, Any]
    metrics: Mapping[str, float]

    @property
    def rank0(self) -> Mapping[str, Any]:
        return self.info.get("rank0") or {}

    @property
    def memory(self) -> Mapping[str, Any]:
        found = self.rank0.get("memory_usage")
        return found if isinstance(found, dict) else {}

    @property
    def attn_dp(self) -> int:
        return int(self.info.get("attn_dp_size") or 1)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _per_dp_running(a: Answers) -> int | None:
    per_dp = a.rank0.get("effective_max_running_requests_per_dp")
    return None if per_dp is None else int(per_dp) * a.attn_dp


def _reported_index_k(a: Answers) -> bool | None:
    reported = a.rank0.get("dsv4_index_k_dtype")
    return reported == "bf16" if isinstance(reported, str) else None


def _env_index_k(a: Answers) -> bool | None:
    env_vars, name = a.rank0.get("env_vars"), BY_NAME["bf16_index_k"].env
    return str(env_vars[name]) == "1" if isinstance(env_vars, dict) and name in env_vars else None


def _context_not_passed(a: Answers) -> str | None:
    if a.info.get("context_length") is None:
        return "/server_info echoes null (not passed): the model default applies"
    return None


@dataclass(frozen=True)
class Source:
    """One place an effective value can be read: `read` gives the value or None, `note` an optional remark."""

    label: str
    read: Callable[[Answers], Any]
    note: Callable[[Answers], str | None] = lambda _a: None


# Per limit, the sources in the order SGLang 0.5.23 makes them authoritative: what the engine applies (the
# scheduler's own numbers) before what it echoes of its arguments.
SOURCES: dict[str, tuple[Source, ...]] = {
    "context_length": (
        Source("/v1/models max_model_len", lambda a: _int(a.models.get("max_model_len")), _context_not_passed),
        Source("/metrics sglang:context_len", lambda a: _int(a.metrics.get("sglang:context_len")), _context_not_passed),
        Source("/server_info context_length (echoed argument)", lambda a: _int(a.info.get("context_length"))),
    ),
    "max_total_tokens": (
        Source("/server_info max_total_num_tokens", lambda a: _int(a.info.get("max_total_num_tokens"))),
        Source(
            "/server_info internal_states[0].memory_usage.token_capacity",
            lambda a: _int(a.memory.get("token_capacity")),
        ),
        Source("/v1/loads max_total_num_tokens", lambda a: _int(a.loads.get("max_total_num_tokens"))),
        Source("/metrics sglang:max_total_num_tokens", lambda a: _int(a.metrics.get("sglang:max_total_num_tokens"))),
    ),
    "max_running_requests": (
        Source("/server_info internal_states[0].effective_max_running_requests_per_dp", _per_dp_running),
        Source("/v1/loads max_running_requests", lambda a: _int(a.loads.get("max_running_requests"))),
        Source(
            "/server_info max_running_requests (echoed argument)",
            lambda a: _int(a.info.get("max_running_requests")),
            lambda _a: "echoed argument only: the scheduler may apply less",
        ),
    ),
    "bf16_index_k": (
        Source(
            INDEX_K_DTYPE_SOURCE,
            _reported_index_k,
            lambda a: f"the engine stores {a.rank0.get('dsv4_index_k_dtype')} index keys",
        ),
        Source("/server_info internal_states[0].env_vars", _env_index_k),
    ),
}
# What the report says of a limit no source gave.
NO_SOURCE = {
    "context_length": "no source: /v1/models and /metrics gave no context length",
    "max_total_tokens": "no source reported the KV pool size",
    "bf16_index_k": "the engine does not report its index-key dtype",
}


# ---------------------------------------------------------------- normalizing


@dataclass
class EngineLive:
    """Normalized live state of one engine: the effective envelope and what explains it."""

    effective: dict[str, Any] = field(default_factory=dict)
    requested: dict[str, Any] = field(default_factory=dict)  # what /server_info echoes for the limits
    sources: dict[str, str] = field(default_factory=dict)  # where each effective limit was read
    notes: dict[str, str] = field(default_factory=dict)
    load: dict[str, Any] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)  # token capacity, attn dp size, max_req_input_len...
    version: str | None = None
    latency: dict[str, Any] = field(default_factory=dict)  # parse_latency of /metrics (sglang_latency reads it)


def _typed(name: str, value: Any) -> Any:
    """A reported value in its key's kind (sglang_schema.Kind.loose); one that is not stays as reported."""
    if value is None:
        return None
    try:
        return BY_NAME[name].type.loose(value)
    except (TypeError, ValueError):
        return value


def _apply_sources(live: EngineLive, answers: Answers) -> None:
    """Each limit of SOURCES from the first source that answers; a limit none gives is not reported."""
    for name, sources in SOURCES.items():
        for source in sources:
            value = source.read(answers)
            if value is None:
                continue
            live.effective[name] = value
            live.sources[name] = source.label
            note = source.note(answers)
            if note:
                live.notes[name] = note
            break
        else:
            live.effective.pop(name, None)
            if name in NO_SOURCE:
                live.notes[name] = NO_SOURCE[name]


def normalize_engine(
    role: str,
    info: Mapping[str, Any] | None,
    models: Mapping[str, Any] | None,
    loads: Mapping[str, Any] | None,
    metrics: Mapping[str, float] | None,
) -> EngineLive:
    """Effective values under the envelope keys, each from the source SGLang 0.5.23 actually applies."""
    live = EngineLive()
    answers = Answers(info or {}, models or {}, loads or {}, metrics or {})
    info = answers.info
    live.version = info.get("version") or answers.loads.get("version")
    role_keys = keys_for(role)
    for key in role_keys:
        if key.secret or key.env or key.name not in info:
            continue
        live.effective[key.name] = _typed(key.name, info[key.name])
    _cuda_graphs(info, live)
    mode = str(info.get("disaggregation_mode") or answers.rank0.get("disaggregation_mode") or "null")
    memory = answers.memory
    live.facts = {
        "attn_dp_size": answers.attn_dp,
        "disaggregation_mode": mode,
        "max_req_input_len": info.get("max_req_input_len"),
        "token_capacity": memory.get("token_capacity"),
        "token_capacity_swa": memory.get("token_capacity_swa"),
        "kvcache_gb": memory.get("kvcache"),
        "weight_gb": memory.get("weight"),
        "status": info.get("status"),
    }
    live.requested = {
        name: _typed(name, info.get(name))
        for name in ("context_length", "max_total_tokens", "max_running_requests", "max_queued_requests")
        if name in BY_NAME and name in {k.name for k in role_keys}
    }
    _apply_sources(live, answers)
    if "max_queued_requests" in info and mode in PD_MODES:
        live.effective["max_queued_requests"] = IGNORED
        live.sources["max_queued_requests"] = "SGLang semantics"
        live.notes["max_queued_requests"] = (
            f"/server_info echoes {info.get('max_queued_requests')}, but SGLang checks the queue limit only "
            f"when disaggregation_mode is null (this engine: {mode})"
        )
    live.load = _load(loads, answers.metrics)
    return live


def _cuda_graphs(info: Mapping[str, Any], live: EngineLive) -> None:
    config = info.get("cuda_graph_config")
    if not isinstance(config, dict):
        return
    for phase in ("decode", "prefill"):
        section = config.get(phase)
        if not isinstance(section, dict):
            continue
        # SGLang 0.5.23 echoes the top-level flags as null when unset; the applied values are in the config.
        if live.effective.get(f"cuda_graph_max_bs_{phase}") is None and section.get("max_bs") is not None:
            live.effective[f"cuda_graph_max_bs_{phase}"] = _typed(f"cuda_graph_max_bs_{phase}", section["max_bs"])
        if live.effective.get(f"cuda_graph_bs_{phase}") is None and isinstance(section.get("bs"), list):
            live.effective[f"cuda_graph_bs_{phase}"] = _typed(f"cuda_graph_bs_{phase}", section["bs"])


def _load(loads: Mapping[str, Any] | None, metrics: Mapping[str, float]) -> dict[str, Any]:
    if loads:
        return {k: loads[k] for k in ("running", "queued", "used_tokens", "token_usage")} | {"source": "/v1/loads"}
    if "sglang:num_running_reqs" in metrics:
        return {
            "running": int(metrics.get("sglang:num_running_reqs", 0)),
            "queued": int(metrics.get("sglang:num_queue_reqs", 0)),
            "used_tokens": int(metrics.get("sglang:num_used_tokens", 0)),
            "token_usage": metrics.get("sglang:token_usage", 0.0),
            "source": "/metrics",
        }
    return {}


# ---------------------------------------------------------------- reading an engine


def read_engine(
    transport: Transport,
    base_url: str,
    role: str,
    api_key: str | None = None,
    timeout: float = 10.0,
    host: str | None = None,
    metrics: bool = True,
) -> ServerLive:
    """Read one engine: all endpoints at once, then normalize. Only /server_info failing is an error."""
    host = host or socket.gethostname()
    get = partial(fetch, transport, base_url, api_key=api_key, timeout=timeout)
    calls: dict[str, Callable[[], Fetched]] = {
        "server_info": partial(get, ENGINE_PATHS["server_info"], parse=reduce_server_info),
        "models": partial(get, ENGINE_PATHS["models"], parse=reduce_models),
        "loads": partial(get, ENGINE_PATHS["loads"], parse=reduce_loads),
    }
    if metrics:
        calls["metrics"] = partial(get, ENGINE_PATHS["metrics"], as_text=True)
    got = fetch_concurrently(calls)
    if got["server_info"].problem == "absent":  # engines older than 0.5.23 have only the old name
        got["server_info"] = get(LEGACY_SERVER_INFO, parse=reduce_server_info)
    result = ServerLive()
    for name, item in got.items():
        if item.ok:
            continue
        if name == "server_info" or item.problem in ("unauthorized", "malformed", "timeout", "unreachable", "tls"):
            result.errors.append(describe(host, base_url, item))
        elif name == "metrics" and item.problem == "absent":
            result.warnings.append(f"{host}: {base_url.rstrip('/')}/metrics is not mounted (no --enable-metrics)")
        else:
            result.warnings.append(describe(host, base_url, item))
    set_status(result, list(got.values()))
    if not got["server_info"].ok:  # an error line already: set_status made the read unreachable or an error
        return result
    text = got.get("metrics")
    result.engine = normalize_engine(
        role,
        got["server_info"].data,
        got["models"].data if got["models"].ok else None,
        got["loads"].data if got["loads"].ok else None,
        parse_metrics(text.data) if text is not None and text.ok else None,
    )
    if text is not None and text.ok:
        result.engine.latency = parse_latency(text.data)
    return result
