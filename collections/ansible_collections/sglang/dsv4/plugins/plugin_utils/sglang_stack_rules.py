"""Rules between the components of the stack, over the whole inventory (check_fleet): the unit of each duration
setting (scope `units`), what one component needs of another (`needs`) and the timeouts on a request's path against
the longest call the envelope admits (`timeout`).

The longest call is timed by the time model at the band's high end (sglang_perf_fleet.longest_call_time: one call
of the served per-call context, calibrated to the fleet's sglang_perf_measured), once per fleet (call_need). Where
the model is not installed or cannot time the fleet, the rules say so and fall back to the capacity model's longest
prompt (its per-call context, the `context_len` check_router gets) at PREFILL_TOKENS_PER_S (longest_call_s)."""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_argspec import default_of
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_declared import advertised, declared_var

from .sglang_envtable import ENVS
from .sglang_rules import Finding, Rule

# The prefill rate the timeout rules assume, in prompt tokens a second: the time model's default step table
# (AIConfigurator 0.12.0's SGLang 0.5.14 data on H200 for DeepSeek-V4-Flash at tp 4 with the default corrections,
# sim/sglang_sim/step_tables/deepseek-ai--deepseek-v4-flash-tp4.json) gives its slowest 8192-token prefill chunk, the
# last one of a 524288-token prompt (prefix 516096), 1032.1 ms: 7937 tokens/s, rounded down. Every earlier chunk is
# faster, so a whole prompt takes at most tokens / this rate.
PREFILL_TOKENS_PER_S = 7900
DAY_S = 86400  # a seconds setting above a day reads like milliseconds
MIN_MS = 10  # a millisecond timeout or interval below this reads like seconds
LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")
WAITING_TIMEOUT = "SGLANG_DISAGGREGATION_WAITING_TIMEOUT"
_ENV_DEFAULTS = {row[0]: row[2] for row in ENVS}
_HAPROXY_TIME = re.compile(r"(\d+)(us|ms|s|m|h|d)?")
_HAPROXY_UNIT_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1e-3}
FRONT_SILENT = "sglang_frontend_timeout_silent"  # HAProxy's `timeout server` (and client)
FRONT_DURATIONS = (FRONT_SILENT, "sglang_frontend_timeout_http_request")
FRONT_MS = (
    "sglang_frontend_timeout_connect_ms",
    "sglang_frontend_check_interval_ms",
    "sglang_frontend_check_timeout_ms",
)
ROUTER_SECONDS = (
    "queue_timeout_secs",
    "request_timeout_secs",
    "pd_admission_wait_secs",
    "health_check_interval_secs",
    "worker_startup_timeout_secs",
    "shutdown_grace_period_secs",
)
ENGINE_ENV_SECONDS = (WAITING_TIMEOUT, "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT")


def longest_call_s(tokens: int) -> float:
    """Seconds the longest call the envelope admits takes, without the time model: a prompt of `tokens` (the
    capacity model's per-call context) prefilled at PREFILL_TOKENS_PER_S."""
    return tokens / PREFILL_TOKENS_PER_S


@dataclass(frozen=True)
class CallNeed:
    """What a timeout on a request's path must allow, in seconds: the longest call the envelope admits, whole
    (`call_s`) and up to its first token (`ttft_s`: the prompt's prefill and its KV transfer), and whence."""

    call_s: float
    ttft_s: float
    tokens: int
    source: str  # predicted: whose step times; else why the time model was not used
    predicted: bool

    def text(self, seconds: float, what: str) -> str:
        """`what` (a subject and its verb) takes `seconds`, with the figure's source and band."""
        if self.predicted:
            return (
                f"{what} {seconds:,.0f} s, predicted for one call of {self.tokens} tokens at the band's high end, "
                f"{self.source}"
            )
        return (
            f"a {self.tokens}-token prompt takes {seconds:,.0f} s to prefill at {PREFILL_TOKENS_PER_S} tokens/s (the "
            f"time model is not available, {self.source}; the capacity model's longest prompt at the stated rate "
            "instead)"
        )


def call_need(
    hostvars: Mapping[str, Mapping[str, Any]],
    groups: Mapping[str, Sequence[str]],
    model_config: Mapping[str, Any] | None,
    context_len: int,
) -> CallNeed:
    """The time model's longest call at the band's high end (sglang_perf_fleet.longest_call_time); where the model
    is not installed or cannot time this fleet, the capacity model's longest prompt (`context_len`) at
    PREFILL_TOKENS_PER_S, saying why."""
    # The time model imports the planner, which imports the validation: imported here, when a rule asks.
    from .sglang_perf_fleet import TimeUnavailable, longest_call_time

    try:
        if model_config is None:
            raise TimeUnavailable("time: not predicted (no model config)")
        found = longest_call_time(
            {h: dict(v) for h, v in hostvars.items()}, {g: list(m) for g, m in groups.items()}, model_config
        )
    except TimeUnavailable as exc:
        prefill = longest_call_s(context_len)
        return CallNeed(prefill, prefill, context_len, str(exc), predicted=False)
    return CallNeed(found.call_s, found.ttft_s, found.tokens, found.source, predicted=True)


def haproxy_seconds(value: Any) -> float | None:
    """A HAProxy time in seconds (`30s`, `1h`, `2000ms`; a bare number is milliseconds, HAProxy's configuration
    manual, section 2.5 "Time format"), or None when it is not one."""
    match = _HAPROXY_TIME.fullmatch(str(value).strip())
    return int(match.group(1)) * _HAPROXY_UNIT_S[match.group(2)] if match else None


def _is_loopback(host: Any) -> bool:
    text = str(host or "").strip("[]")
    if text in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Server:
    """One server of the fleet: its host, role and envelope."""

    host: str
    role: str
    env: Mapping[str, Any]


@dataclass(frozen=True)
class StackContext:
    """The inventory's variables and groups, its servers, and the capacity model's per-call context (None: unsized)."""

    hostvars: Mapping[str, Mapping[str, Any]]
    groups: Mapping[str, Sequence[str]]
    servers: Sequence[Server]
    context_len: int | None
    model_config: Mapping[str, Any] | None = None

    @cached_property
    def need(self) -> CallNeed | None:
        """The longest call's time (call_need), once per fleet; None: the fleet is not sized."""
        if not self.context_len:
            return None
        return call_need(self.hostvars, self.groups, self.model_config, self.context_len)

    @property
    def fronts(self) -> list[str]:
        return list(self.groups.get("sglang_frontend", []))

    def engines(self, *roles: str) -> Iterator[Server]:
        return (s for s in self.servers if s.role in (roles or ("prefill", "decode")))

    def var(self, server: Server, key: str) -> str:
        """`host: declared variable` of an envelope key (sglang_engine_common or the role's dict)."""
        name = (
            "sglang_router." + key
            if server.role == "router"
            else declared_var(server.role, self.hostvars[server.host], key)
        )
        return f"{server.host}: {name}"

    def extra_env(self, server: Server) -> Mapping[str, Any]:
        return self.hostvars[server.host].get("sglang_engine_extra_env") or {}


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _seconds_settings(c: StackContext) -> Iterator[tuple[str, float]]:
    """(`host: variable`, seconds) of every declared seconds setting: the router's *_secs, the engines'
    watchdog_timeout and SGLang's PD timeouts in sglang_engine_extra_env."""
    for s in c.servers:
        keys = ROUTER_SECONDS if s.role == "router" else ("watchdog_timeout",)
        for key in keys:
            value = _number(s.env.get(key))
            if value is not None:
                yield c.var(s, key), value
        if s.role != "router":
            for name in ENGINE_ENV_SECONDS:
                value = _number(c.extra_env(s).get(name))
                if value is not None:
                    yield f"{s.host}: sglang_engine_extra_env.{name}", value


def _seconds_plausible(c: StackContext) -> Iterator[Finding]:
    seen = set()
    for var, value in _seconds_settings(c):
        if value > DAY_S and var not in seen:
            seen.add(var)
            yield Finding(
                var,
                int(value) if value.is_integer() else value,
                f"{value:g} s is more than a day: it reads like milliseconds ({value / 1000:g} s)",
                f"declare it in seconds ({value / 1000:g} if milliseconds were meant)",
            )


def _front_vars(c: StackContext) -> Iterator[tuple[str, str, Any]]:
    """(front host, variable, value) of every front setting the front's hosts declare."""
    for host in c.fronts:
        hv = c.hostvars.get(host, {})
        for name in (*FRONT_DURATIONS, *FRONT_MS):
            if hv.get(name) is not None:
                yield host, name, hv[name]


def _milliseconds_plausible(c: StackContext) -> Iterator[Finding]:
    for host, name, value in _front_vars(c):
        number = _number(value)
        if name in FRONT_MS and number is not None and 0 < number < MIN_MS:
            yield Finding(
                f"{host}: {name}",
                value,
                f"{number:g} ms is too short for a connection between hosts: it reads like seconds "
                f"({number * 1000:g} ms)",
                f"declare it in milliseconds ({number * 1000:g} if seconds were meant)",
            )


def _haproxy_time_has_unit(c: StackContext) -> Iterator[Finding]:
    for host, name, value in _front_vars(c):
        if name not in FRONT_DURATIONS:
            continue
        seconds = haproxy_seconds(value)
        if seconds is None:
            yield Finding(
                f"{host}: {name}",
                value,
                "not a HAProxy time (digits and one of us, ms, s, m, h, d)",
                "write a number with its unit, e.g. 1h or 30s",
            )
        elif not re.search(r"[a-z]$", str(value).strip()):
            yield Finding(
                f"{host}: {name}",
                value,
                f"a HAProxy time without a unit is milliseconds: {value} reads as {seconds:g} s",
                f"write the unit ({value}s if seconds were meant)",
            )


def _front_reaches_routers(c: StackContext) -> Iterator[Finding]:
    for s in c.engines("router"):
        listen = s.env.get("host")
        away = [f for f in c.fronts if f != s.host]
        if away and _is_loopback(listen):
            yield Finding(
                c.var(s, "host"),
                listen,
                f"the front on {', '.join(away)} connects to this router at "
                f"{advertised(s.host, c.hostvars[s.host])}:{s.env.get('port')}, but it listens on loopback only",
                "listen on 0.0.0.0 or on the address sglang_advertise_host names",
            )


def _metrics_for_monitoring(c: StackContext) -> Iterator[Finding]:
    seen = set()
    for s in c.engines():
        var = c.var(s, "enable_metrics")
        if not s.env.get("enable_metrics") and (var, s.env.get("enable_metrics")) not in seen:
            seen.add((var, s.env.get("enable_metrics")))
            yield Finding(
                var,
                s.env.get("enable_metrics"),
                f"the monitoring scrapes /metrics of the {s.role} engine (sglang_monitoring: job sglang-engine, the "
                "near-limit alerts), which SGLang serves only with --enable-metrics (entrypoints/http_server.py: "
                "add_prometheus_middleware)",
                "declare enable_metrics: true",
            )


def _short(var: str, value: Any, seconds: float, need: float, what: str, predicted: str, fix: str) -> Finding:
    return Finding(
        var,
        value,
        f"{what} ({seconds:g} s) is shorter than the longest call the envelope admits: {predicted}, so the call is "
        "cut off",
        fix.format(need=math.ceil(need)),
    )


def _router_timeout(c: StackContext) -> Iterator[Finding]:
    need = c.need
    for s in c.engines("router"):
        value = s.env.get("request_timeout_secs")
        seconds = _number(value if value is not None else default_of("router", "request_timeout_secs"))
        if need and seconds is not None and 0 < seconds < need.call_s:
            yield _short(
                c.var(s, "request_timeout_secs"), value, seconds, need.call_s, "smg's per-request timeout",
                need.text(need.call_s, "the whole call takes"), "raise it to >= {need}",
            )  # fmt: skip


def _front_timeout(c: StackContext) -> Iterator[Finding]:
    need = c.need
    for host in c.fronts:
        value = c.hostvars.get(host, {}).get(FRONT_SILENT)
        seconds = haproxy_seconds(value) if value is not None else None
        if need and seconds is not None and seconds < need.call_s:
            yield _short(
                f"{host}: {FRONT_SILENT}", value, seconds, need.call_s, "HAProxy's timeout server (no answer yet)",
                need.text(need.call_s, "the whole call takes"), "raise it to >= {need}s",
            )  # fmt: skip


def _waiting_timeout(c: StackContext) -> Iterator[Finding]:
    need = c.need
    for s in c.engines("decode"):
        value = c.extra_env(s).get(WAITING_TIMEOUT)
        seconds = _number(value if value is not None else _ENV_DEFAULTS[WAITING_TIMEOUT])
        if need and seconds is not None and 0 < seconds < need.ttft_s:  # <= 0: sidedoor_env.pd_timeouts_positive
            var = f"{s.host}: sglang_engine_extra_env.{WAITING_TIMEOUT}"
            yield _short(
                var, value, seconds, need.ttft_s,
                "the decode engine's wait for the KV of a prompt (SGLang's default 300 when unset)",
                need.text(need.ttft_s, "the prompt's prefill and KV transfer take"),
                f"set sglang_engine_extra_env.{WAITING_TIMEOUT} to >= {{need}}",
            )  # fmt: skip


def longest_step_tokens(env: Mapping[str, Any], context_len: int) -> int:
    """Prompt tokens of the longest forward step an engine takes: one chunk (the larger of chunked_prefill_size and
    max_prefill_tokens), or the whole prompt when chunking is off (chunked_prefill_size -1)."""
    chunk = int(env.get("chunked_prefill_size") or 0)
    if chunk <= 0:
        return context_len
    return min(context_len, max(chunk, int(env.get("max_prefill_tokens") or chunk)))


def _watchdog(c: StackContext) -> Iterator[Finding]:
    if not c.context_len:
        return
    seen = set()
    for s in c.engines():
        value = s.env.get("watchdog_timeout")
        seconds = _number(value if value is not None else default_of(s.role, "watchdog_timeout"))
        tokens = longest_step_tokens(s.env, c.context_len)
        need = longest_call_s(tokens)
        var = c.var(s, "watchdog_timeout")
        if seconds is not None and 0 < seconds < need and var not in seen:  # <= 0: engine.watchdog_timeout_positive
            seen.add(var)
            yield Finding(
                var,
                value,
                f"SGLang's watchdog ({seconds:g} s) kills the engine when one forward step takes longer "
                f"(managers/scheduler.py: create_scheduler_watchdog on forward_ct); its longest step prefills "
                f"{tokens} tokens, {need:.1f} s at {PREFILL_TOKENS_PER_S} tokens/s",
                f"raise it to >= {int(need) + 1}, or chunk the prefill (chunked_prefill_size)",
            )


_ROUTER_SECONDS_READS = tuple(f"sglang_router.{k}" for k in ROUTER_SECONDS)
STACK_RULES: tuple[Rule, ...] = (
    Rule(
        "units.seconds_plausible",
        1,
        (*_ROUTER_SECONDS_READS, "watchdog_timeout", *(f"sglang_engine_extra_env.{n}" for n in ENGINE_ENV_SECONDS)),
        f"a setting in seconds is at most a day ({DAY_S} s); more reads like milliseconds",
        "declare it in seconds",
        _seconds_plausible,
    ),
    Rule(
        "units.milliseconds_plausible",
        1,
        FRONT_MS,
        f"a timeout or interval in milliseconds is at least {MIN_MS} ms; less reads like seconds",
        "declare it in milliseconds",
        _milliseconds_plausible,
    ),
    Rule(
        "units.haproxy_time_has_unit",
        1,
        FRONT_DURATIONS,
        "a HAProxy time carries its unit: HAProxy reads a bare number as milliseconds",
        "write the unit (s, m, h, ...)",
        _haproxy_time_has_unit,
    ),
    Rule(
        "needs.front_reaches_routers",
        1,
        ("sglang_router.host", "sglang_frontend"),
        "a router behind a front on another host listens on an address that host reaches, not loopback only",
        "listen on 0.0.0.0 or on the address sglang_advertise_host names",
        _front_reaches_routers,
    ),
    Rule(
        "needs.metrics_for_monitoring",
        1,
        ("enable_metrics",),
        "every engine serves the /metrics the monitoring scrapes (--enable-metrics)",
        "declare enable_metrics: true",
        _metrics_for_monitoring,
    ),
    Rule(
        "timeout.router_request_fits_longest_call",
        2,
        ("sglang_router.request_timeout_secs", "context_length"),
        "smg's per-request timeout is at least the longest call the envelope admits, whole: one call of the served "
        "per-call context, predicted by the time model at the band's high end (TTFT p90 and the output at ITL p90, "
        "calibrated by sglang_perf_measured); without the time model, the longest prompt at "
        f"{PREFILL_TOKENS_PER_S} prefill tokens/s (call_need)",
        "raise request_timeout_secs",
        _router_timeout,
    ),
    Rule(
        "timeout.front_server_fits_longest_call",
        2,
        (FRONT_SILENT, "context_length"),
        "the front's timeout server is at least the longest call the envelope admits, whole (call_need, as for "
        "smg's per-request timeout)",
        f"raise {FRONT_SILENT}",
        _front_timeout,
    ),
    Rule(
        "timeout.decode_waiting_fits_longest_call",
        2,
        (f"sglang_engine_extra_env.{WAITING_TIMEOUT}", "context_length"),
        "a decode engine waits for a prompt's KV at least as long as the longest call takes to its first token: its "
        "TTFT p90 at the band's high end in the time model (the prompt's prefill and KV transfer); without the time "
        f"model, the longest prompt at {PREFILL_TOKENS_PER_S} prefill tokens/s (call_need)",
        f"set {WAITING_TIMEOUT} in sglang_engine_extra_env",
        _waiting_timeout,
    ),
    Rule(
        "timeout.watchdog_fits_longest_step",
        2,
        ("watchdog_timeout", "chunked_prefill_size", "max_prefill_tokens", "context_length"),
        "SGLang's watchdog is at least the longest forward step: one prefill chunk, or the whole longest prompt "
        f"without chunking, at {PREFILL_TOKENS_PER_S} prefill tokens/s (longest_call_s; a step, not a call: the time "
        "model is not asked)",
        "raise watchdog_timeout or chunk the prefill",
        _watchdog,
    ),
)
