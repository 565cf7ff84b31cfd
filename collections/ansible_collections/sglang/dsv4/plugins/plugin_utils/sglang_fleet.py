"""The fleet answer: how many parallel calls of a given length the PD fleet runs at once, and what binds.

One place composes the engines' limits (the capacity model, sglang_capacity.py, or the live values) into the fleet's
figures; the validation, the planner, the risks, the audit report, the CLI, the alerts and the dashboard read them
here. Units are explicit: an engine has `ranks` (its DP ranks or replicas, each with its own KV pool and running
slots); "per rank", "per engine" (x ranks) and "per fleet" (summed over engines) say which figure is which.

Rules:
- a call is served by one prefill and one decode engine, and smg pairs any prefill with any decode, so the
  fleet's per-call context is the smallest context_length of any engine, and a call is served at most
  max_req_len - 1 tokens of it (context_length - 2; sglang_capacity.served_tokens);
- a decode engine runs, per rank, min(calls its KV pool admits, its running slots); the pool admits calls of
  whole pages plus the PD decode admission reserve of each (sglang_capacity.requests_that_fit);
- the fleet runs the sum over decode engines, capped by the routers' admission (the sum of their
  max_concurrent_requests; unbounded when one router has none), and 0 when a call is longer than the per-call
  context or no prefill pool holds one;
- total context is the sum of the decode engines' KV pools.

`FleetAnswer` holds the memory answer; a time model adds its own part beside it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_argspec import default_of
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_capacity import (
    admission_reserve,
    requests_that_fit,
    served_tokens,
)

KV_POOL = "decode KV pools"
RUNNING = "decode max_running_requests"
ROUTER = "router max_concurrent_requests"
CONTEXT = "per-call context_length"
PREFILL = "prefill KV pools"


@dataclass(frozen=True)
class Engine:
    """One engine's limits as the fleet counts them: pool and running slots per rank."""

    host: str
    role: str  # prefill | decode
    pool_tokens: int  # per rank
    running: int  # per rank
    context_len: int
    page_size: int = 1
    ranks: int = 1
    reserve: int = 0  # PD decode admission reserve per active request
    max_req_len: int | None = None  # None: context_len - 1

    @property
    def served(self) -> int:
        """Tokens (prompt + output) one call is served at most."""
        max_req_len = self.max_req_len if self.max_req_len is not None else self.context_len - 1
        return served_tokens(max_req_len)

    @classmethod
    def from_limits(cls, host: str, role: str, limits: Any) -> Engine:
        """From the capacity model's EngineLimits (per rank)."""
        resolved = getattr(limits, "resolved", None) or {}
        return cls(
            host,
            role,
            int(limits.max_total_num_tokens),
            int(limits.max_running_requests),
            int(limits.context_len),
            int(getattr(limits, "page_size", 1) or 1),
            ranks_of(resolved),
            int(getattr(limits, "admission_reserve", 0) or 0),
            getattr(limits, "max_req_len", None),
        )

    @classmethod
    def from_live(cls, host: str, role: str, live: Mapping[str, Any], ranks: int = 1) -> Engine:
        """From the live values (/server_info and /v1/loads): max_running_requests there is the whole engine's."""
        ranks = max(1, int(ranks))
        mode = live.get("disaggregation_mode") or role
        return cls(
            host,
            role,
            int(live["max_total_tokens"]),
            int(live["max_running_requests"]) // ranks,
            int(live["context_length"]),
            int(live.get("page_size") or 1),
            ranks,
            admission_reserve({**live, "disaggregation_mode": mode}),
        )


def ranks_of(resolved: Mapping[str, Any]) -> int:
    """Ranks with their own KV pool and running slots: attention DP ranks, else DP replicas."""
    return max(1, int(resolved.get("attn_dp_size") or resolved.get("dp_size") or 1))


@dataclass(frozen=True)
class EngineCalls:
    """Calls of one length one engine runs at once."""

    host: str
    role: str
    ranks: int
    pool_fit_per_rank: int  # calls the KV pool admits
    running_per_rank: int
    per_rank: int  # min of the two
    binding: str  # kv_pool | max_running_requests

    @property
    def per_engine(self) -> int:
        return self.per_rank * self.ranks

    @property
    def pool_fit_per_engine(self) -> int:
        return self.pool_fit_per_rank * self.ranks

    @property
    def running_per_engine(self) -> int:
        return self.running_per_rank * self.ranks


def engine_calls(engine: Engine, tokens: int) -> EngineCalls:
    fit = requests_that_fit(engine.pool_tokens, tokens, engine.page_size, engine.reserve)
    binding = "kv_pool" if fit < engine.running else "max_running_requests"
    return EngineCalls(engine.host, engine.role, engine.ranks, fit, engine.running, min(fit, engine.running), binding)


@dataclass(frozen=True)
class Memory:
    """What the KV pools, running slots and admission allow for calls of `tokens` tokens (per fleet unless named)."""

    tokens: int
    parallel: int
    binding: str  # the first limit at `parallel`, in the order of `bindings`
    bindings: tuple[str, ...]  # every limit at `parallel`
    decode: tuple[EngineCalls, ...]
    prefill: tuple[EngineCalls, ...]
    decode_calls: int  # per fleet: sum over decode engines of min(pool fit, running slots)
    decode_pool_fit: int  # per fleet: calls the decode KV pools admit, slots aside
    decode_running: int  # per fleet: running slots of the decode engines
    total_context: int  # per fleet: KV tokens of the decode engines
    per_call_context: int  # the smallest context_length of any engine
    served_tokens: int  # the most tokens one call is served (per-call context - 2)
    router_admits: int | None  # the routers' max_concurrent_requests summed; None: unbounded

    @property
    def decode_engines(self) -> int:
        return len(self.decode)


@dataclass(frozen=True)
class FleetAnswer:
    """The fleet's answer for calls of `tokens` tokens."""

    tokens: int
    memory: Memory


def router_admission(routers: Sequence[Mapping[str, Any]]) -> int | None:
    """The routers' admission summed; None when there is no router or one admits without bound."""
    caps = [r.get("max_concurrent_requests") for r in routers]
    if not caps or any(c is None or int(c) <= 0 for c in caps):
        return None
    return sum(int(c) for c in caps if c is not None)


@dataclass(frozen=True)
class RouterQueue:
    """The routers' queues: where a call waits once every router runs its max_concurrent_requests."""

    size: int  # queued calls, summed over the routers
    shortest_wait_secs: int  # the first router to refuse a queued call (408) does so after this long
    longest_wait_secs: int  # no queued call waits longer


def router_queue(routers: Sequence[Mapping[str, Any]]) -> RouterQueue | None:
    """The routers' queues (None: no router). A router that does not declare queue_size or queue_timeout_secs runs
    with smg's own default for it (--queue-size 100, --queue-timeout-secs 60 in smg 1.13.0)."""
    if not routers:
        return None

    def value(router: Mapping[str, Any], key: str) -> int:
        declared = router.get(key)
        return int(declared if declared is not None else default_of("router", key))

    waits = [value(r, "queue_timeout_secs") for r in routers]
    return RouterQueue(sum(value(r, "queue_size") for r in routers), min(waits), max(waits))


def per_call_context(engines: Sequence[Engine]) -> int | None:
    return min((e.context_len for e in engines), default=None)


def answer(engines: Sequence[Engine], routers: Sequence[Mapping[str, Any]], tokens: int | None = None) -> FleetAnswer:
    """The fleet answer for calls of `tokens` tokens; None: calls at the served per-call context."""
    if not engines:
        raise ValueError("the fleet has no engine; fix: declare hosts in sglang_prefill and sglang_decode")
    decode = [e for e in engines if e.role == "decode"]
    prefill = [e for e in engines if e.role == "prefill"]
    context = min(e.context_len for e in engines)
    served = min(e.served for e in engines)
    length = served if tokens is None else int(tokens)
    decode_calls = tuple(engine_calls(e, length) for e in decode)
    prefill_calls = tuple(engine_calls(e, length) for e in prefill)
    fleet_calls = sum(c.per_engine for c in decode_calls)
    pool_fit = sum(c.pool_fit_per_engine for c in decode_calls)
    running = sum(c.running_per_engine for c in decode_calls)
    router = router_admission(routers)
    bounds: dict[str, int] = {}
    if decode_calls:
        bounds[RUNNING] = running
        bounds[KV_POOL] = pool_fit
    if router is not None:
        bounds[ROUTER] = router
    if length > served:
        bounds[CONTEXT] = 0
    if prefill_calls and all(c.pool_fit_per_rank < 1 for c in prefill_calls):
        bounds[PREFILL] = 0
    parallel = min(fleet_calls, *bounds.values()) if bounds else 0
    at = tuple(k for k, v in bounds.items() if v == parallel)
    if not at:  # the engines' own mix of pools and slots binds below either sum
        at = (KV_POOL,) if any(c.binding == "kv_pool" for c in decode_calls) else (RUNNING,)
    memory = Memory(
        tokens=length,
        parallel=parallel,
        binding=_first(at),
        bindings=at,
        decode=decode_calls,
        prefill=prefill_calls,
        decode_calls=fleet_calls,
        decode_pool_fit=pool_fit,
        decode_running=running,
        total_context=sum(e.pool_tokens * e.ranks for e in decode),
        per_call_context=context,
        served_tokens=served,
        router_admits=router,
    )
    return FleetAnswer(length, memory)


# The order a tie is named in: what stops a call before it runs, then admission, then the engines.
ORDER = (CONTEXT, PREFILL, KV_POOL, RUNNING, ROUTER)


def _first(bindings: Sequence[str]) -> str:
    return min(bindings, key=ORDER.index)
