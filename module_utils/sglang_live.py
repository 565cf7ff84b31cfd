"""The live reader: query a running SGLang 0.5.23 engine or smg router over HTTP and normalize the answers.

Engines: /server_info (fallback /get_server_info), /v1/models, /v1/loads and /metrics, fetched concurrently.
Routers: /readiness and /workers. smg does not expose its own limits over HTTP: they come from its argv
(see router_effective).

The raw /server_info body holds the API key in plaintext. It is reduced to the fields below as soon as it is
parsed and never kept, returned or quoted in an error.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

try:
    from ansible.module_utils.sglang_argspec import SMG
    from ansible.module_utils.sglang_schema import BY_NAME, keys_for
except ImportError:
    from .sglang_argspec import SMG
    from .sglang_schema import BY_NAME, keys_for

IGNORED = "<ignored>"  # effective value of a flag the engine accepts but does not apply
PD_MODES = ("prefill", "decode")

ENGINE_PATHS = {"server_info": "/server_info", "models": "/v1/models", "loads": "/v1/loads", "metrics": "/metrics"}
LEGACY_SERVER_INFO = "/get_server_info"
ROUTER_PATHS = {"readiness": "/readiness", "workers": "/workers"}

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

# smg 1.13.0's defaults for the router limits it does not report over HTTP, from its parser's table
# (module_utils/smg_argtable.py, checked against smg itself by tests/deploy/test_flag_tables.py).
ROUTER_DEFAULTS: dict[str, Any] = {
    name: SMG[name].default
    for name in (
        "max_concurrent_requests", "queue_size", "queue_timeout_secs", "request_timeout_secs", "max_payload_size",
        "policy", "prometheus_port", "pd_admission_wait_secs", "health_check_interval_secs",
        "worker_startup_timeout_secs", "shutdown_grace_period_secs", "retry_max_retries", "retry_initial_backoff_ms",
        "retry_max_backoff_ms",
    )
}  # fmt: skip


# ---------------------------------------------------------------- transport


@dataclass(frozen=True)
class Reply:
    """An HTTP answer: status and body (bytes). Error statuses are replies too."""

    status: int
    body: bytes


class TransportError(Exception):
    """No HTTP answer: `kind` is timeout, unreachable or tls."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


class Transport(Protocol):
    def get(self, url: str, headers: Mapping[str, str], timeout: float) -> Reply: ...


def classify(exc: BaseException) -> TransportError:
    """Map a urllib/socket/ssl failure to a TransportError."""
    reason = getattr(exc, "reason", exc)
    if isinstance(reason, (socket.timeout, TimeoutError)) or "timed out" in str(reason):
        return TransportError("timeout", "timed out")
    if isinstance(reason, ssl.SSLError):
        return TransportError("tls", f"TLS error: {reason}")
    return TransportError("unreachable", str(reason) or type(reason).__name__)


class UrllibTransport:
    """Standard-library transport, for use outside Ansible (benchmarks, scripts)."""

    def __init__(self, validate_certs: bool = True) -> None:
        self.validate_certs = validate_certs
        self._context: ssl.SSLContext | None = None

    def _tls(self) -> ssl.SSLContext:
        """Built on the first https request only: loading the CA store takes tens of milliseconds."""
        if self._context is None:
            self._context = ssl.create_default_context()
            if not self.validate_certs:
                self._context.check_hostname = False
                self._context.verify_mode = ssl.CERT_NONE
        return self._context

    def get(self, url: str, headers: Mapping[str, str], timeout: float) -> Reply:
        request = urllib.request.Request(url, headers=dict(headers), method="GET")
        context = self._tls() if url.startswith("https:") else None
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:
                return Reply(resp.status, resp.read())
        except urllib.error.HTTPError as exc:
            return Reply(exc.code, exc.read() or b"")
        except (urllib.error.URLError, OSError) as exc:
            raise classify(exc) from None
        except http.client.HTTPException as exc:  # another protocol on the port, or an answer cut short
            raise TransportError("malformed", f"not a whole HTTP answer ({type(exc).__name__})") from None


# ---------------------------------------------------------------- fetching


@dataclass
class Fetched:
    """One endpoint's outcome. `data` is parsed JSON (or text for /metrics); `problem` says what went wrong."""

    path: str
    status: int | None = None
    data: Any = None
    problem: str | None = None  # None | timeout | unreachable | tls | unauthorized | http | malformed | absent
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.problem is None


_REASONS = {401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 503: "Service Unavailable"}


def fetch(
    transport: Transport,
    base_url: str,
    path: str,
    *,
    api_key: str | None,
    timeout: float,
    as_text: bool = False,
    parse: Callable[[Any], Any] | None = None,
) -> Fetched:
    """GET one endpoint and parse it; `parse` reduces the JSON at once (so secrets never outlive this call)."""
    headers = {"Accept": "text/plain" if as_text else "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    out = Fetched(path)
    try:
        reply = transport.get(base_url.rstrip("/") + path, headers, timeout)
    except TransportError as exc:
        out.problem, out.detail = exc.kind, exc.reason
        return out
    out.status = reply.status
    if reply.status in (401, 403):
        out.problem = "unauthorized"
        out.detail = f"{reply.status} {_REASONS[reply.status]}"
        return out
    if reply.status == 404:
        out.problem, out.detail = "absent", "404 Not Found"
        return out
    if reply.status >= 400 and path != ROUTER_PATHS["readiness"]:
        out.problem, out.detail = "http", f"{reply.status} {_REASONS.get(reply.status, 'error')}"
        return out
    if as_text:
        out.data = reply.body.decode("utf-8", "replace")
        return out
    try:
        data = json.loads(reply.body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        out.problem = "malformed"
        out.detail = f"the body is not JSON ({type(exc).__name__} at {getattr(exc, 'pos', '?')})"
        return out
    try:
        out.data = parse(data) if parse else data
    except (TypeError, KeyError, AttributeError, ValueError) as exc:
        out.problem, out.detail = "malformed", f"unexpected JSON shape ({type(exc).__name__})"
    return out


def fetch_concurrently(calls: Mapping[str, Callable[[], Fetched]]) -> dict[str, Fetched]:
    """Run the fetch calls of one server in parallel threads."""
    with ThreadPoolExecutor(max_workers=max(1, len(calls))) as pool:
        futures = {name: pool.submit(call) for name, call in calls.items()}
        return {name: future.result() for name, future in futures.items()}


def describe(host: str, base_url: str, item: Fetched) -> str:
    """An error line that names the host and the endpoint; never a response body."""
    where = f"{host}: GET {base_url.rstrip('/')}{item.path}"
    hints = {
        "unauthorized": "the server requires an API key: pass api_key (the engine's --api-key)",
        "timeout": "no answer in time: raise timeout or check the server",
        "unreachable": "nothing answers there: is the unit running?",
    }
    hint = hints.get(item.problem or "", "")
    return f"{where}: {item.problem} ({item.detail})" + (f"; {hint}" if hint else "")


# ---------------------------------------------------------------- engine normalization


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


def _typed(name: str, value: Any) -> Any:
    """A reported value in its key's kind (sglang_schema.Kind.loose); one that is not stays as reported."""
    if value is None:
        return None
    try:
        return BY_NAME[name].type.loose(value)
    except (TypeError, ValueError):
        return value


def normalize_engine(
    role: str,
    info: Mapping[str, Any] | None,
    models: Mapping[str, Any] | None,
    loads: Mapping[str, Any] | None,
    metrics: Mapping[str, float] | None,
) -> EngineLive:
    """Effective values under the envelope keys, each from the source SGLang 0.5.23 actually applies."""
    live = EngineLive()
    info = info or {}
    rank0: Mapping[str, Any] = info.get("rank0") or {}
    metrics = metrics or {}
    live.version = info.get("version") or (loads or {}).get("version")
    for key in keys_for(role):
        if key.secret or key.env or key.name not in info:
            continue
        live.effective[key.name] = _typed(key.name, info[key.name])
    _cuda_graphs(info, live)
    mode = str(info.get("disaggregation_mode") or rank0.get("disaggregation_mode") or "null")
    attn_dp = int(info.get("attn_dp_size") or 1)
    found = rank0.get("memory_usage")
    memory: Mapping[str, Any] = found if isinstance(found, dict) else {}
    live.facts = {
        "attn_dp_size": attn_dp,
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
        if name in BY_NAME and name in {k.name for k in keys_for(role)}
    }
    _effective_context(live, info, models, metrics)
    _effective_pool(live, info, memory, loads, metrics)
    _effective_running(live, info, rank0, loads, attn_dp)
    if "max_queued_requests" in info and mode in PD_MODES:
        live.effective["max_queued_requests"] = IGNORED
        live.sources["max_queued_requests"] = "SGLang semantics"
        live.notes["max_queued_requests"] = (
            f"/server_info echoes {info.get('max_queued_requests')}, but SGLang checks the queue limit only "
            f"when disaggregation_mode is null (this engine: {mode})"
        )
    _effective_index_k(live, rank0)
    live.load = _load(loads, metrics)
    return live


def _effective_index_k(live: EngineLive, rank0: Mapping[str, Any]) -> None:
    """The engine's own report first, then its exposed environment; else the audit infers it from the pool."""
    reported = rank0.get("dsv4_index_k_dtype")
    env_vars = rank0.get("env_vars")
    bf16 = BY_NAME["bf16_index_k"]
    if isinstance(reported, str):
        live.effective["bf16_index_k"] = reported == "bf16"
        live.sources["bf16_index_k"] = INDEX_K_DTYPE_SOURCE
        live.notes["bf16_index_k"] = f"the engine stores {reported} index keys"
    elif isinstance(env_vars, dict) and bf16.env in env_vars:
        live.effective["bf16_index_k"] = str(env_vars[bf16.env]) == "1"
        live.sources["bf16_index_k"] = "/server_info internal_states[0].env_vars"
    else:
        live.notes["bf16_index_k"] = "the engine does not report its index-key dtype"


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


def _effective_context(
    live: EngineLive, info: Mapping[str, Any], models: Mapping[str, Any] | None, metrics: Mapping[str, float]
) -> None:
    echoed = info.get("context_length")
    if models and models.get("max_model_len") is not None:
        live.effective["context_length"] = int(models["max_model_len"])
        live.sources["context_length"] = "/v1/models max_model_len"
    elif "sglang:context_len" in metrics:
        live.effective["context_length"] = int(metrics["sglang:context_len"])
        live.sources["context_length"] = "/metrics sglang:context_len"
    elif echoed is not None:
        live.effective["context_length"] = int(echoed)
        live.sources["context_length"] = "/server_info context_length (echoed argument)"
    else:
        live.effective.pop("context_length", None)
        live.notes["context_length"] = "no source: /v1/models and /metrics gave no context length"
        return
    if echoed is None:
        live.notes["context_length"] = "/server_info echoes null (not passed): the model default applies"


def _effective_pool(
    live: EngineLive,
    info: Mapping[str, Any],
    memory: Mapping[str, Any],
    loads: Mapping[str, Any] | None,
    metrics: Mapping[str, float],
) -> None:
    candidates = (
        (info.get("max_total_num_tokens"), "/server_info max_total_num_tokens"),
        (memory.get("token_capacity"), "/server_info internal_states[0].memory_usage.token_capacity"),
        ((loads or {}).get("max_total_num_tokens"), "/v1/loads max_total_num_tokens"),
        (metrics.get("sglang:max_total_num_tokens"), "/metrics sglang:max_total_num_tokens"),
    )
    live.effective.pop("max_total_tokens", None)
    for value, source in candidates:
        if value is not None:
            live.effective["max_total_tokens"] = int(value)
            live.sources["max_total_tokens"] = source
            return
    live.notes["max_total_tokens"] = "no source reported the KV pool size"


def _effective_running(
    live: EngineLive,
    info: Mapping[str, Any],
    rank0: Mapping[str, Any],
    loads: Mapping[str, Any] | None,
    attn_dp: int,
) -> None:
    per_dp = rank0.get("effective_max_running_requests_per_dp")
    if per_dp is not None:
        live.effective["max_running_requests"] = int(per_dp) * attn_dp
        live.sources["max_running_requests"] = "/server_info internal_states[0].effective_max_running_requests_per_dp"
        return
    if loads and loads.get("max_running_requests") is not None:
        live.effective["max_running_requests"] = int(loads["max_running_requests"])
        live.sources["max_running_requests"] = "/v1/loads max_running_requests"
        return
    if info.get("max_running_requests") is not None:
        live.sources["max_running_requests"] = "/server_info max_running_requests (echoed argument)"
        live.notes["max_running_requests"] = "echoed argument only: the scheduler may apply less"
        return
    live.effective.pop("max_running_requests", None)


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


# ---------------------------------------------------------------- reading a server


@dataclass
class ServerLive:
    """What one read of a server returns: reachability, errors, and the normalized live state."""

    status: str = "ok"  # ok | unreachable | error
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    engine: EngineLive | None = None
    router: dict[str, Any] | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    def snapshot(self) -> dict[str, Any]:
        """The live side of one server as the judge (sglang_drift.judge) and the report take it; `live` is the
        engine's effective envelope, null when no engine answered (and for the router, which reports no limits)."""
        engine = self.engine
        return {
            "status": self.status,
            "reachable": self.status != "unreachable",
            "version": engine.version if engine else None,
            "live": engine.effective if engine else None,
            "requested": engine.requested if engine else {},
            "sources": engine.sources if engine else {},
            "notes": engine.notes if engine else {},
            "load": engine.load if engine else {},
            "live_facts": engine.facts if engine else {},
            "router": self.router,
            "errors": self.errors,
            "warnings_seen": self.warnings,
        }


def _set_status(result: ServerLive, items: list[Fetched]) -> None:
    problems = [i.problem for i in items if i.problem]
    if problems and all(p in ("timeout", "unreachable", "tls") for p in problems) and len(problems) == len(items):
        result.status = "unreachable"
    elif result.errors:
        result.status = "error"


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
    _set_status(result, list(got.values()))
    if not got["server_info"].ok:
        if result.status == "ok":
            result.status = "error"
        return result
    text = got.get("metrics")
    result.engine = normalize_engine(
        role,
        got["server_info"].data,
        got["models"].data if got["models"].ok else None,
        got["loads"].data if got["loads"].ok else None,
        parse_metrics(text.data) if text is not None and text.ok else None,
    )
    return result


# ---------------------------------------------------------------- router


def _norm_url(url: str) -> str:
    return str(url).rstrip("/")


def reduce_workers(body: Any) -> list[dict[str, Any]]:
    items = body.get("workers") if isinstance(body, dict) else body
    if not isinstance(items, list):
        raise TypeError("workers is not a list")
    out = []
    for w in items:
        kind = str(w.get("worker_type") or w.get("type") or "regular").lower()
        out.append({"url": _norm_url(w["url"]), "type": kind, "healthy": bool(w.get("is_healthy", True))})
    return out


def read_router(
    transport: Transport,
    base_url: str,
    api_key: str | None = None,
    timeout: float = 10.0,
    host: str | None = None,
) -> ServerLive:
    """Read the router's readiness and worker list."""
    host = host or socket.gethostname()
    get = partial(fetch, transport, base_url, api_key=api_key, timeout=timeout)
    got = fetch_concurrently(
        {
            "readiness": partial(get, ROUTER_PATHS["readiness"]),
            "workers": partial(get, ROUTER_PATHS["workers"], parse=reduce_workers),
        }
    )
    result = ServerLive()
    for item in got.values():
        if not item.ok:
            result.errors.append(describe(host, base_url, item))
    _set_status(result, list(got.values()))
    if result.status == "unreachable":
        return result
    ready = got["readiness"]
    body = ready.data if isinstance(ready.data, dict) else {}
    router: dict[str, Any] = {
        "ready": ready.status == 200 and body.get("status") == "ready",
        "readiness": body.get("status") or body.get("reason"),
        "healthy_workers": body.get("healthy_workers"),
        "total_workers": body.get("total_workers"),
    }
    if got["workers"].ok:
        workers = got["workers"].data
        router["workers"] = workers
        router["unhealthy_workers"] = sorted(f"{w['type']} {w['url']}" for w in workers if not w["healthy"])
    if not router["ready"]:
        result.warnings.append(f"{host}: {base_url.rstrip('/')}/readiness: not ready ({router['readiness']})")
    result.router = router
    return result


def router_effective(
    running: Mapping[str, Any] | None, cpu_count: int | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """The router limits smg applies, from its argv: smg's defaults fill unset flags.

    max_concurrent_requests -1 (the default) derives 1024 per core with a floor of 4096; 0 turns the cap off.
    Returns (effective, notes).
    """
    running = running or {}
    effective: dict[str, Any] = {}
    notes: dict[str, str] = {}
    for name, default in ROUTER_DEFAULTS.items():
        value = running.get(name)
        effective[name] = default if value is None else value
        if value is None:
            notes[name] = f"smg default {default}"
    mcr = int(effective["max_concurrent_requests"])
    if mcr < 0:
        cores = cpu_count or os.cpu_count() or 1
        effective["max_concurrent_requests"] = max(4096, 1024 * cores)
        notes["max_concurrent_requests"] = f"-1: smg derives 1024 per core ({cores}), at least 4096"
    elif mcr == 0:
        effective["max_concurrent_requests"] = None
        notes["max_concurrent_requests"] = "0: no in-flight cap"
    for name in ("host", "port"):
        if running.get(name) is not None:
            effective[name] = running[name]
    return effective, notes
