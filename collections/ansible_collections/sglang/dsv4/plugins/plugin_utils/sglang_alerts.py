"""Prometheus alert rules, and a promtool test for each, generated from the declared envelope and the capacity model.

No threshold here is a typed-in limit: every figure an alert compares with is a declared envelope value
(context_length, max_running_requests, max_concurrent_requests, queue_size, the router's workers), what the
capacity model predicts for it (the KV pool, the effective running window), or a fraction of one of those
(`Policy`, the monitoring role's variables). Each alert's description names the declared limit it guards.

Metric names are SGLang 0.5.23's (`sglang:*`, observability/metrics_collector.py), smg 1.13.0's (`smg_*`, its
metrics port) and the drift exporter's (`sglang_envelope_*`, sglang_drift_export). Every series carries the scrape
labels `job` and `server` (`<inventory host>:<role>`), set by the scrape configs the monitoring role writes.

The TTFT SLO is judged on each decode engine's own `sglang:time_to_first_token_seconds`, not on smg's
`smg_pd_ttft_seconds`: smg 1.13.0 times the decode leg's response start, which misses the wait for the prefill (on
the lab, calls whose first token came 0.7-5.5 s after sending all landed in its buckets up to 0.05 s).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_declared import (
    GROUPS,
    engine_envelope,
    model_inputs,
    router_envelope,
    workers,
)
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_drift import predict
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_schema import EnvelopeError

from .sglang_fleet import Engine, Memory, answer, ranks_of

ENGINE_JOB = "sglang_engine"
ROUTER_JOB = "sglang_router"
DRIFT_JOB = "sglang_drift"  # node_exporter's textfile collector on each engine host
FRONT_JOB = "sglang_frontend"  # HAProxy's Prometheus exporter on each front host (roles/sglang_frontend)
DRIFT_METRIC = "sglang_envelope_drift"
DRIFT_RUN_METRIC = "sglang_envelope_audit_timestamp_seconds"
# The generation routes of smg whose answers count for availability (health probes and metrics do not).
GENERATION_PATHS = "/generate|/v1/chat/completions|/v1/completions"
# Burn-rate windows of the availability SLO (Google SRE workbook, multiwindow multi-burn-rate alerts).
BURN_WINDOWS = (("page", "1h", "5m", 14.4), ("page", "6h", "30m", 6.0), ("ticket", "1d", "2h", 3.0))


RULES_FILE = "sglang_rules.yml"
RULES_TEST_FILE = "sglang_rules_test.yml"
DASHBOARD_FILE = "sglang_dashboard.json"
POLICY_PREFIX = "sglang_monitoring_"
# A duration as Prometheus and Alertmanager read it (prometheus/common model.ParseDuration: "0", or digits with units
# largest first, no spaces); any other is refused ("not a valid duration string").
PROMETHEUS_DURATION = re.compile(r"0|(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?(?<=[a-z])")
# The Policy's durations: one unit of s, m, h or d, which the rule tests' timelines count in minutes (_minutes).
POLICY_DURATIONS = ("for_short", "for_long", "rate_window", "front_out_for")
_ONE_UNIT = re.compile(r"\d+[smhd]")


class MonitoringError(ValueError):
    """A monitoring setting or inventory value the rules cannot be generated from."""


@dataclass(frozen=True)
class Policy:
    """How close to a limit is worth a page: fractions of the limits, durations and SLOs (role variables)."""

    kv_usage_warning: float = 0.90
    kv_usage_critical: float = 0.97
    running_warning: float = 0.90
    admission_warning: float = 0.90
    queue_warning: float = 0.80
    for_short: str = "1m"
    for_long: str = "5m"
    rate_window: str = "5m"
    ttft_p99_slo_s: float | None = None
    availability_slo: float | None = None
    drift_period_s: int = 60
    front_out_for: str = "10m"  # a router out of the HAProxy front longer than a rolling router change takes

    @classmethod
    def from_vars(cls, values: Mapping[str, Any] | None) -> Policy:
        """A Policy from `sglang_monitoring_*` values (without the prefix); names the variable on bad input."""
        out: dict[str, Any] = {}
        for name, value in (values or {}).items():
            if name not in cls.__dataclass_fields__:
                known = ", ".join(cls.__dataclass_fields__)
                raise MonitoringError(f"sglang_monitoring_{name}: unknown setting; known: {known}")
            out[name] = value
        policy = cls(**out)
        for name in ("kv_usage_warning", "kv_usage_critical", "running_warning", "admission_warning", "queue_warning"):
            v = getattr(policy, name)
            if not isinstance(v, int | float) or not 0 < v <= 1:
                raise MonitoringError(
                    f"sglang_monitoring_{name}={v!r}: must be a fraction of the limit in (0, 1]; fix: e.g. 0.9"
                )
        for name in POLICY_DURATIONS:
            v = getattr(policy, name)
            if not isinstance(v, str) or not _ONE_UNIT.fullmatch(v) or (name == "rate_window" and int(v[:-1]) == 0):
                raise MonitoringError(
                    f"sglang_monitoring_{name}={v!r}: must be a Prometheus duration in one unit of s, m, h or d"
                    f"{', above 0 (a rate over 0s is a PromQL parse error)' if name == 'rate_window' else ''} "
                    f"(promtool check rules: not a valid duration string); fix: e.g. {getattr(cls(), name)}"
                )
        if policy.kv_usage_warning >= policy.kv_usage_critical:
            raise MonitoringError(
                f"sglang_monitoring_kv_usage_warning={policy.kv_usage_warning} must stay below "
                f"sglang_monitoring_kv_usage_critical={policy.kv_usage_critical}; fix: lower the warning"
            )
        slo = policy.availability_slo
        if slo is not None and not 0 < slo < 1:
            raise MonitoringError(f"sglang_monitoring_availability_slo={slo!r}: must lie in (0, 1); fix: e.g. 0.995")
        fastest = BURN_WINDOWS[0][3]
        if slo is not None and fastest * (1 - slo) >= 1:
            raise MonitoringError(
                f"sglang_monitoring_availability_slo={slo!r}: the {BURN_WINDOWS[0][1]} page fires at {fastest}x the "
                f"error budget, an error ratio of {_num(round(fastest * (1 - slo), 6))}: above 1, it can never fire; "
                f"fix: declare more than {_num(round(1 - 1 / fastest, 4))}"
            )
        ttft = policy.ttft_p99_slo_s
        low, high = float(TTFT_BUCKETS[0]), float(TTFT_BUCKETS[-1])
        if ttft is not None and not low <= ttft < high:
            raise MonitoringError(
                f"sglang_monitoring_ttft_p99_slo_s={ttft!r}: must be from {_num(low)} to under {_num(high)} seconds, "
                "the span of SGLang's TTFT buckets (sglang:time_to_first_token_seconds; below it no bucket lies "
                f"under the SLO; from {_num(high)} on the p99 of the last bucket reads as {_num(high)}); fix: e.g. 2"
            )
        if not isinstance(policy.drift_period_s, int) or policy.drift_period_s < 1:
            raise MonitoringError(f"sglang_monitoring_drift_period_s={policy.drift_period_s!r}: must be an int >= 1")
        return policy


def policy_vars(hostvars: Mapping[str, Any]) -> dict[str, Any]:
    """The Policy fields a host's variables set (`sglang_monitoring_<field>`)."""
    fields = Policy.__dataclass_fields__
    return {
        k[len(POLICY_PREFIX) :]: v
        for k, v in hostvars.items()
        if k.startswith(POLICY_PREFIX) and k[len(POLICY_PREFIX) :] in fields
    }


@dataclass(frozen=True)
class EngineTarget:
    """One engine as the rules see it: its scrape label, where it listens and its limits."""

    host: str
    role: str
    url: str
    declared: dict[str, Any]
    predicted: dict[str, Any]

    @property
    def server(self) -> str:
        return f"{self.host}:{self.role}"

    @property
    def context_length(self) -> int | None:
        value = self.declared.get("context_length") or self.predicted.get("context_length")
        return int(value) if value else None

    @property
    def pool(self) -> int | None:
        value = self.predicted.get("max_total_tokens")
        return int(value) if value else None

    @property
    def pool_tolerance(self) -> int | None:
        """How far the live pool may lie from the prediction: a quarter of the bf16/fp8 index-key gap (the audit's
        rule for telling the keys apart, sglang_drift.infer_index_k), else 2 % of the pool."""
        pools = self.predicted.get("pool_by_index_k")
        if pools:
            return abs(int(pools["fp8"]) - int(pools["bf16"])) // 4
        return int(self.pool * 0.02) if self.pool else None

    @property
    def max_running(self) -> int | None:
        value = self.predicted.get("max_running_requests") or self.declared.get("max_running_requests")
        return int(value) if value else None


@dataclass(frozen=True)
class RouterTarget:
    host: str
    declared: dict[str, Any]
    workers: int

    @property
    def server(self) -> str:
        return f"{self.host}:router"


@dataclass(frozen=True)
class Targets:
    """What the monitoring watches: every engine and router with its address and its declared and predicted limits
    (the fleet the alerts, the scrape configuration and the dashboard are built from)."""

    engines: list[EngineTarget]
    routers: list[RouterTarget]

    def memory(self) -> Memory | None:
        """The fleet answer (sglang_fleet) from the predicted limits, at the served per-call context."""
        engines = [
            Engine(e.host, e.role, e.pool, (e.max_running or 1) // ranks_of(e.predicted), e.context_length,
                   int(e.predicted.get("page_size") or 1), ranks_of(e.predicted))
            for e in self.engines
            if e.pool and e.context_length
        ]  # fmt: skip
        return answer(engines, [r.declared for r in self.routers]).memory if engines else None


def fleet(
    all_hostvars: Mapping[str, Mapping[str, Any]], groups: Mapping[str, Sequence[str]], model_config: Mapping[str, Any]
) -> Targets:
    """Every engine and router of the inventory with its declared and predicted limits."""
    engines: list[EngineTarget] = []
    worker_map = workers(all_hostvars, {k: list(v) for k, v in groups.items()})
    urls = {(w["host"], role): w["url"] for role in ("prefill", "decode") for w in worker_map[role]}
    for role in ("prefill", "decode"):
        for host in groups.get(GROUPS[role], []):
            hv = all_hostvars[host]
            declared = engine_envelope(role, hv)
            predicted, why = predict(model_inputs(hv, model_config), declared)
            if why:
                raise MonitoringError(f"{host} {role}: {why}; the rules need the capacity model's KV pool")
            engines.append(EngineTarget(host, role, urls[(host, role)], declared, predicted))
    n_workers = len(worker_map["prefill"]) + len(worker_map["decode"])
    routers = [RouterTarget(h, router_envelope(all_hostvars[h]), n_workers) for h in groups.get(GROUPS["router"], [])]
    if not engines:
        raise EnvelopeError("the inventory has no host in sglang_prefill or sglang_decode: nothing to monitor")
    return Targets(engines, routers)


# ---------------------------------------------------------------- rules and their tests


@dataclass
class Case:
    """One promtool test case: input series (selector, values), where to evaluate, and whether the alert fires."""

    series: list[tuple[str, str]]
    eval_time: str
    fires: bool
    labels: dict[str, str] = field(default_factory=dict)  # the alert's labels beyond its rule labels


@dataclass
class Alert:
    name: str
    severity: str
    server: str
    expr: str
    for_: str
    summary: str
    guards: str  # the declared limit the alert guards
    description: str
    cases: list[Case]
    extra_labels: dict[str, str] = field(default_factory=dict)

    @property
    def labels(self) -> dict[str, str]:
        own = {"server": self.server} if self.server else {}
        return {"severity": self.severity, "guards": self.guards, **own, **self.extra_labels}

    def rule(self) -> dict[str, Any]:
        return {
            "alert": self.name,
            "expr": self.expr,
            "for": self.for_,
            "labels": self.labels,
            "annotations": {"summary": self.summary, "description": self.description},
        }


def _sel(job: str, server: str, **labels: str) -> str:
    inner = ",".join([f'job="{job}"', f'server="{server}"', *(f'{k}="{v}"' for k, v in labels.items())])
    return "{" + inner + "}"


def _minutes(duration: str) -> int:
    """Whole minutes of a Prometheus duration (s, m or h), at least 1."""
    unit = duration[-1]
    value = float(duration[:-1])
    seconds = value * {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
    return max(1, math.ceil(seconds / 60))


def _flat(value: float, minutes: int) -> str:
    return f"{_num(value)}x{minutes}"


def _ramp(start: float, step: float, minutes: int) -> str:
    return f"{_num(start)}+{_num(step)}x{minutes}"


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _gauge_cases(
    selectors: Sequence[str], fire: Sequence[float], calm: Sequence[float], for_: str, extra_min: int = 2
) -> list[Case]:
    """A gauge alert: the firing values for longer than `for`, and the calm ones (just below the line)."""
    minutes = _minutes(for_) + extra_min
    at = f"{minutes}m"
    return [
        Case([(s, _flat(v, minutes)) for s, v in zip(selectors, fire, strict=True)], at, True),
        Case([(s, _flat(v, minutes)) for s, v in zip(selectors, calm, strict=True)], at, False),
    ]


def _counter_cases(selector: str, window: str, for_: str, others: Sequence[tuple[str, str]] = ()) -> list[Case]:
    """A counter alert: rising by one a minute fires; a flat counter does not."""
    minutes = _minutes(window) + _minutes(for_) + 2
    at = f"{minutes}m"
    return [
        Case([(selector, _ramp(0, 1, minutes)), *others], at, True),
        Case([(selector, _flat(7, minutes)), *others], at, False),
    ]


# ---------------------------------------------------------------- alerts at a share of a declared limit


@dataclass(frozen=True)
class NearLimit:
    """An alert that fires when a gauge of a server reaches a share of a declared limit: `figure`, aggregated per
    server, at or above `share` (a Policy field, sglang_monitoring_<share>) of the limit, for `hold` (a Policy
    field). With `of_live` the limit is that live series of the server: the figure's ratio to it above the share.
    `summary` and `description` are templates over the server `s`, `share`, `limit`, `line` (the figure that
    fires), `percent` and what the target adds."""

    alert: str
    severity: str
    guards: str
    figure: str
    aggregate: str
    share: str
    hold: str
    summary: str
    description: str
    of_live: str = ""


_KV_FULL = (
    "KV tokens in use on {s} stay above {share} of the live pool (sglang:max_total_num_tokens){pool_note} "
    "(mem_fraction_static {mem_fraction_static}, bf16_index_k {bf16_index_k}); new requests wait or running ones are "
    "retracted"
)
NEAR_LIMITS: dict[str, NearLimit] = {
    row.alert: row
    for row in (
        NearLimit("SGLangKVPoolNearFull", "warning", "max_total_num_tokens", "sglang:num_used_tokens", "sum",
                  "kv_usage_warning", "for_short", "{s}: KV pool {percent} % full", _KV_FULL,
                  of_live="sglang:max_total_num_tokens"),
        NearLimit("SGLangKVPoolFull", "critical", "max_total_num_tokens", "sglang:num_used_tokens", "sum",
                  "kv_usage_critical", "for_short", "{s}: KV pool {percent} % full", _KV_FULL,
                  of_live="sglang:max_total_num_tokens"),
        NearLimit("SGLangRunningNearLimit", "warning", "max_running_requests", "sglang:num_running_reqs", "sum",
                  "running_warning", "for_long", "{s}: {line}+ requests running of {limit}",
                  "Running requests on {s} reached {share} of the effective max_running_requests {limit} (declared "
                  "{var}.max_running_requests={declared}, capped by the KV pool as SGLang does); further requests "
                  "queue at the engine"),
        NearLimit("SMGAdmissionNearLimit", "warning", "max_concurrent_requests", "smg_admission_inflight", "max",
                  "admission_warning", "for_long", "{s}: {line}+ requests in flight of {limit}",
                  "Requests in flight at the router {s} reached {share} of sglang_router.max_concurrent_requests="
                  "{limit}; further requests wait in its queue"),
        NearLimit("SMGQueueNearFull", "warning", "queue_size", "smg_admission_queue_depth", "max", "queue_warning",
                  "for_short", "{s}: router queue {line}+ of {limit}",
                  "The router queue on {s} holds {share} of sglang_router.queue_size={limit}: when it is full, "
                  "requests get 429; queued ones time out after queue_timeout_secs={queue_timeout_secs}"),
    )
}  # fmt: skip


def near_limit(alert: str, s: str, sel: str, limit: int, policy: Policy, page: int = 1, **fields: Any) -> Alert:
    """The NEAR_LIMITS row `alert` for the server `s` (selector `sel`) with its declared `limit` (with `of_live`: the
    live figure its test cases use), and its promtool cases: at the line and just below it (`page` tokens each side
    of a share of a live pool)."""
    row = NEAR_LIMITS[alert]
    share, hold = float(getattr(policy, row.share)), str(getattr(policy, row.hold))
    figure = f"{row.aggregate} by (server) ({row.figure}{sel})"
    values: dict[str, Any] = {"s": s, "share": _num(share), "limit": limit, "percent": int(share * 100), **fields}
    if row.of_live:
        expr = f"{figure} / sum by (server) ({row.of_live}{sel}) > {_num(share)}"
        series = [f"{row.figure}{sel}", f"{row.of_live}{sel}"]
        fire, calm = [math.ceil(limit * share) + page, limit], [math.floor(limit * share) - page, limit]
    else:
        values["line"] = line = math.ceil(limit * share)
        expr, series, fire, calm = f"{figure} >= {line}", [f"{row.figure}{sel}"], [line], [line - 1]
    return Alert(row.alert, row.severity, s, expr, hold, row.summary.format(**values), row.guards,
                 row.description.format(**values), _gauge_cases(series, fire, calm, hold))  # fmt: skip


def engine_alerts(e: EngineTarget, policy: Policy) -> list[Alert]:
    s = e.server
    sel = _sel(ENGINE_JOB, s)
    var = f"sglang_{e.role}"
    alerts: list[Alert] = []
    pool, pool_note = e.pool, ""
    if pool:
        pool_note = f"; the capacity model predicts a pool of {pool:,} tokens for {var}"
    live_pool = pool or 1_000_000
    for name in ("SGLangKVPoolNearFull", "SGLangKVPoolFull"):
        alerts.append(near_limit(name, s, sel, live_pool, policy, e.declared.get("page_size", 1), pool_note=pool_note,
                                 mem_fraction_static=e.declared.get("mem_fraction_static"),
                                 bf16_index_k=bool(e.declared.get("bf16_index_k"))))  # fmt: skip
    if e.max_running:
        alerts.append(near_limit("SGLangRunningNearLimit", s, sel, e.max_running, policy, var=var,
                                 declared=e.declared.get("max_running_requests")))  # fmt: skip
    if e.context_length:
        declared_ctx = e.declared.get("context_length")
        source = f"{var}.context_length={declared_ctx}" if declared_ctx else "the model's own context length"
        alerts.append(
            Alert(
                "SGLangContextLengthDrift", "critical", s,
                f"max by (server) (sglang:context_len{sel}) != {e.context_length}", policy.for_short,
                f"{s}: live context length is not {e.context_length}",
                "context_length",
                f"The engine {s} runs with another context length than declared ({source}): "
                "restarted by hand or with other flags; per-call context limits differ from the envelope",
                _gauge_cases([f"sglang:context_len{sel}"], [e.context_length // 2], [e.context_length],
                             policy.for_short),
            )
        )  # fmt: skip
    if pool and e.pool_tolerance:
        pools = e.predicted.get("pool_by_index_k") or {}
        keys = ""
        if pools:
            keys = (
                f"; bf16 index keys give {int(pools['bf16']):,} tokens, fp8 keys {int(pools['fp8']):,} "
                "(a pool near the other figure means the engine lost or gained SGLANG_DSV4_BF16_INDEX_K)"
            )
        other = int(pools["fp8"] if e.declared.get("bf16_index_k") else pools["bf16"]) if pools else pool * 2
        alerts.append(
            Alert(
                "SGLangKVPoolDrift", "critical", s,
                f"abs(max by (server) (sglang:max_total_num_tokens{sel}) - {pool}) > {e.pool_tolerance}",
                policy.for_short,
                f"{s}: live KV pool is not the predicted {pool:,} tokens",
                "max_total_num_tokens",
                f"The live KV pool of {s} lies more than {e.pool_tolerance:,} tokens from the {pool:,} the capacity "
                f"model predicts for the declared {var}{keys}",
                _gauge_cases([f"sglang:max_total_num_tokens{sel}"], [other], [pool + e.pool_tolerance // 2],
                             policy.for_short),
            )
        )  # fmt: skip
    alerts.append(
        Alert(
            "SGLangEngineDown", "critical", s, f"max by (server) (up{sel}) == 0", policy.for_short,
            f"{s}: /metrics unreachable",
            "enable_metrics",
            f"Prometheus cannot scrape {e.url}/metrics ({var}.port={e.declared.get('port')}, "
            "enable_metrics=true): the engine is down, restarting or started without --enable-metrics",
            _gauge_cases([f"up{sel}"], [0], [1], policy.for_short),
        )
    )  # fmt: skip
    rw = policy.rate_window
    if e.role == "decode":
        alerts.append(
            Alert(
                "SGLangDecodeStalled", "critical", s,
                f"sum by (server) (sglang:num_running_reqs{sel}) > 0 and "
                f"sum by (server) (rate(sglang:generation_tokens_total{sel}[{rw}])) == 0",
                policy.for_short,
                f"{s}: requests running, no tokens generated",
                "watchdog_timeout",
                f"The decode engine {s} holds running requests and generated no token for {rw}, while its "
                f"watchdog ({var}.watchdog_timeout={e.declared.get('watchdog_timeout')} s) has not restarted it "
                "and /health may still answer 200",
                _stall_cases(sel, rw, policy.for_short),
            )
        )  # fmt: skip
        for metric, name, guards, what in (
            ("sglang:num_bootstrap_failed_reqs_total", "SGLangBootstrapFailures", "disaggregation_transfer_backend",
             f"KV handshakes with the prefill failed on {s} ({var}.disaggregation_transfer_backend="
             f"{e.declared.get('disaggregation_transfer_backend')}): the prefill's bootstrap port is down or "
             "unreachable"),
            ("sglang:num_retracted_requests_total", "SGLangRetractions", "max_total_num_tokens",
             f"The decode engine {s} retracted running requests: the KV pool ({pool or '?'} tokens predicted) "
             "could not grow them; lower max_running_requests or raise mem_fraction_static"),
        ):  # fmt: skip
            alerts.append(
                Alert(
                    name, "warning", s, f"sum by (server) (increase({metric}{sel}[{rw}])) > 0", "0m",
                    f"{s}: {name.removeprefix('SGLang')} in the last {rw}", guards, what,
                    _counter_cases(f"{metric}{sel}", rw, "0m"),
                )
            )  # fmt: skip
    alerts.append(
        Alert(
            "SGLangAbortedRequests", "warning", s,
            f"sum by (server) (increase(sglang:num_aborted_requests_total{sel}[{rw}])) > 0", "0m",
            f"{s}: aborted requests in the last {rw}",
            "request_timeout_secs",
            f"The engine {s} aborted requests (client gone, a failed KV transfer, or a request the router timed out "
            "after sglang_router.request_timeout_secs)",
            _counter_cases(f"sglang:num_aborted_requests_total{sel}", rw, "0m"),
        )
    )  # fmt: skip
    if e.role == "decode" and policy.ttft_p99_slo_s:
        alerts.append(_ttft_alert(s, sel, float(policy.ttft_p99_slo_s), policy))
    return alerts


def _stall_cases(sel: str, window: str, for_: str) -> list[Case]:
    minutes = _minutes(window) + _minutes(for_) + 2
    at = f"{minutes}m"
    running = (f"sglang:num_running_reqs{sel}", _flat(4, minutes))
    idle = (f"sglang:num_running_reqs{sel}", _flat(0, minutes))
    gen = f'sglang:generation_tokens_total{sel[:-1]},is_streaming="false"}}'
    return [
        Case([running, (gen, _flat(500, minutes))], at, True),
        Case([running, (gen, _ramp(500, 40, minutes))], at, False),
        Case([idle, (gen, _flat(500, minutes))], at, False),
    ]


def router_alerts(r: RouterTarget, policy: Policy) -> list[Alert]:
    s = r.server
    sel = _sel(ROUTER_JOB, s)
    d = r.declared
    alerts: list[Alert] = []
    mcr = d.get("max_concurrent_requests")
    if mcr and int(mcr) > 0:
        alerts.append(near_limit("SMGAdmissionNearLimit", s, sel, int(mcr), policy))
    qs = d.get("queue_size")
    if qs and int(qs) > 0:
        alerts.append(near_limit("SMGQueueNearFull", s, sel, int(qs), policy,
                                 queue_timeout_secs=d.get("queue_timeout_secs")))  # fmt: skip
    rw = policy.rate_window
    status = f'{sel[:-1]},path="/generate",status_code="429",error_code=""}}'
    alerts.append(
        Alert(
            "SMGRejecting429", "warning", s,
            f'sum by (server) (increase(smg_http_responses_total{sel[:-1]},status_code="429"}}[{rw}])) > 0', "0m",
            f"{s}: requests refused with 429 in the last {rw}",
            "queue_size",
            f"The router {s} refused requests with 429: max_concurrent_requests={mcr} in flight and "
            f"queue_size={qs} queued were exceeded",
            _counter_cases(f"smg_http_responses_total{status}", rw, "0m"),
        )
    )  # fmt: skip
    alerts.append(
        Alert(
            "SMGWorkersUnhealthy", "critical", s, f"sum by (server) (smg_worker_health{sel}) < {r.workers}",
            policy.for_short, f"{s}: fewer than {r.workers} healthy workers",
            "workers",
            f"The router {s} sees fewer healthy workers than the {r.workers} the inventory declares (groups "
            "sglang_prefill and sglang_decode)",
            _gauge_cases([f'smg_worker_health{sel[:-1]},worker="http://w{i}"}}' for i in range(r.workers)],
                         [1] * (r.workers - 1) + [0], [1] * r.workers, policy.for_short),
        )
    )  # fmt: skip
    alerts.append(
        Alert(
            "SMGRouterDown", "critical", s, f"max by (server) (up{sel}) == 0", policy.for_short,
            f"{s}: router metrics unreachable",
            "prometheus_port",
            f"Prometheus cannot scrape the router's metrics port (sglang_router.prometheus_port="
            f"{d.get('prometheus_port')}): the router is down",
            _gauge_cases([f"up{sel}"], [0], [1], policy.for_short),
        )
    )  # fmt: skip
    if policy.availability_slo:
        alerts += _burn_alerts(s, sel, policy.availability_slo)
    return alerts


def _ttft_alert(s: str, sel: str, slo: float, policy: Policy) -> Alert:
    """The TTFT SLO on a decode engine: its own TTFT histogram runs from the call's arrival (the router sends each
    call to the prefill and the decode together) to the first token after the prefill and the KV transfer."""
    rw = policy.rate_window
    minutes = _minutes(rw) + _minutes(policy.for_long) + 2
    calm, slow = _ttft_case_buckets(slo)

    def series(le_hit: str) -> list[tuple[str, str]]:
        # 100 calls a minute, all of them in the bucket whose upper bound is `le_hit`.
        return [
            (f'{TTFT_METRIC}_bucket{sel[:-1]},is_streaming="true",le="{le}"}}',
             _ramp(0, 100 if float(le) >= float(le_hit) else 0, minutes))
            for le in (*TTFT_BUCKETS, "+Inf")
        ]  # fmt: skip

    return Alert(
        "SGLangTTFTAboveSLO", "warning", s,
        f"histogram_quantile(0.99, sum by (server, le) (rate({TTFT_METRIC}_bucket{sel}[{rw}]))) > {_num(slo)}",
        policy.for_long, f"{s}: TTFT p99 above {_num(slo)} s",
        "ttft_p99_slo_s",
        f"The p99 time to first token of the calls the decode engine {s} serves ({TTFT_METRIC}: from the call's "
        "arrival to its first token, the wait for the prefill and the KV transfer included) stays above the "
        f"declared SLO sglang_monitoring_ttft_p99_slo_s={_num(slo)} s over {rw}",
        [Case(series(slow), f"{minutes}m", True), Case(series(calm), f"{minutes}m", False)],
    )  # fmt: skip


TTFT_METRIC = "sglang:time_to_first_token_seconds"
# SGLang 0.5.23's default bucket bounds of sglang:time_to_first_token_seconds (metrics_collector.py,
# bucket_time_to_first_token), in seconds.
TTFT_BUCKETS = ("0.1", "0.2", "0.4", "0.6", "0.8", "1", "2", "4", "6", "8", "10", "20", "40", "60", "80", "100",
                "200", "400")  # fmt: skip


def _ttft_case_buckets(slo: float) -> tuple[str, str]:
    """(calm, slow): the upper bounds of two TTFT buckets whose every p99 (interpolated inside the bucket) lies
    under the SLO, and over it. calm: the largest bound at or under the SLO; slow: the bucket right above the
    smallest bound at or over the SLO (the +Inf bucket past the last bound, whose p99 reads as that bound)."""
    bounds = (*TTFT_BUCKETS, "+Inf")
    calm = [b for b in TTFT_BUCKETS if float(b) <= slo]
    slow = [hi for lo, hi in pairwise(bounds) if float(lo) >= slo]
    return (calm[-1] if calm else TTFT_BUCKETS[0]), (slow[0] if slow else "+Inf")


def _burn_alerts(s: str, sel: str, slo: float) -> list[Alert]:
    budget = 1 - slo
    alerts = []
    for severity, long_w, short_w, factor in BURN_WINDOWS:
        name = f"SMGErrorBudgetBurn{long_w}"
        ratio = "sum by (server) (rate(smg_http_responses_total{sel_c}[{w}])) / sum by (server) (rate(" \
                "smg_http_responses_total{sel}[{w}]))"  # fmt: skip
        errors_sel = f'{sel[:-1]},path=~"{GENERATION_PATHS}",status_code=~"5.."}}'
        all_sel = f'{sel[:-1]},path=~"{GENERATION_PATHS}"}}'
        line = _num(round(factor * budget, 6))
        expr = (
            f"({ratio.format(sel_c=errors_sel, sel=all_sel, w=long_w)}) > {line} and "
            f"({ratio.format(sel_c=errors_sel, sel=all_sel, w=short_w)}) > {line}"
        )
        minutes = _minutes(long_w) + 5
        ok = f'smg_http_responses_total{sel[:-1]},path="/generate",status_code="200",error_code=""}}'
        probes = f'smg_http_responses_total{sel[:-1]},path="/readiness",status_code="200",error_code=""}}'
        bad = (
            f'smg_http_responses_total{sel[:-1]},path="/generate",status_code="503",error_code="no_available_workers"}}'
        )
        # Errors at twice the alert's burn rate (or every request) fire; at half of it they do not.
        hot = min(1000, max(1, math.ceil(1000 * factor * budget * 2)))  # at most every request fails
        cold = math.floor(1000 * factor * budget / 2)
        alerts.append(
            Alert(
                name, "critical" if severity == "page" else "warning", s, expr, "0m" if severity == "page" else "15m",
                f"{s}: error budget burning {factor}x over {long_w}",
                "availability_slo",
                f"5xx answers to generation requests at the router {s} burn the error budget of the declared "
                f"availability SLO sglang_monitoring_availability_slo={slo} at {factor}x or more over {long_w} and "
                f"{short_w}",
                [
                    # Health probes answered 200 do not count: the hot case still fires beside many of them.
                    Case([(ok, _ramp(0, 1000 - hot, minutes)), (bad, _ramp(0, hot, minutes)),
                          (probes, _ramp(0, 100_000, minutes))], f"{minutes}m", True),
                    Case([(ok, _ramp(0, 1000 - cold, minutes)), (bad, _ramp(0, cold, minutes))], f"{minutes}m",
                         False),
                ],
            )
        )  # fmt: skip
    return alerts


def drift_alerts(policy: Policy, engine_servers: Sequence[str]) -> list[Alert]:
    period = policy.drift_period_s
    server = engine_servers[0] if engine_servers else "host:decode"
    sel = f'{{job="{DRIFT_JOB}",server="{server}",key="context_length",layer="running"}}'
    drift = Alert(
        "SGLangEnvelopeDrift", "critical", "", f"max by (server, key, layer) ({DRIFT_METRIC}) > 0", "0m",
        "{{ $labels.server }}: {{ $labels.key }} drifted on the {{ $labels.layer }} layer",
        "envelope",
        "The four-layer audit (the drift exporter, every "
        f"{period} s) finds {{{{ $labels.key }}}} of {{{{ $labels.server }}}} leaving the declared envelope on the "
        "{{ $labels.layer }} layer; run audit.yml for the explanation, site.yml to restore the declaration",
        [
            Case([(f"{DRIFT_METRIC}{sel}", _flat(1, 3))], "2m", True,
                 {"server": server, "key": "context_length", "layer": "running"}),
            Case([(f"{DRIFT_METRIC}{sel}", _flat(0, 3))], "2m", False),
        ],
    )  # fmt: skip
    stale_after = 3 * period
    run_sel = f'{{job="{DRIFT_JOB}",server="{server}"}}'
    stale_min = _minutes(f"{stale_after}s")
    stale = Alert(
        "SGLangDriftAuditStale", "warning", "", f"time() - max by (server) ({DRIFT_RUN_METRIC}) > {stale_after}",
        "0m", "{{ $labels.server }}: no drift audit for " + f"{stale_after} s",
        "envelope",
        f"The drift exporter's timer (every {period} s) has not written an audit of {{{{ $labels.server }}}} for "
        f"{stale_after} s: drift would go unnoticed",
        [
            Case([(f"{DRIFT_RUN_METRIC}{run_sel}", _flat(0, stale_min + 3))], f"{stale_min + 2}m", True,
                 {"server": server}),
            Case([(f"{DRIFT_RUN_METRIC}{run_sel}", _ramp(0, 60, stale_min + 3))], f"{stale_min + 2}m", False),
        ],
    )  # fmt: skip
    return [drift, stale]


def front_alert(r: RouterTarget, policy: Policy) -> Alert:
    """A router that no HAProxy front sends new connections to (down, drained or in maintenance there) for longer
    than a rolling router change takes. HAProxy names the router's server after its inventory host."""
    s, hold = r.server, policy.front_out_for
    up = f'haproxy_server_status{{job="{FRONT_JOB}",server="{r.host}",state="UP"}}'
    return Alert(
        "SGLangRouterOutOfFront", "warning", s, f"min by (server) ({up}) == 0", hold,
        f"{s}: out of the HAProxy front for {hold}",
        "sglang_frontend",
        f"A front (group sglang_frontend) has not sent new connections to the router {s} for {hold}: its /readiness "
        "fails, or it was drained or put in maintenance and not put back. The other routers serve its share, and the "
        f"fleet admits max_concurrent_requests={r.declared.get('max_concurrent_requests')} fewer calls at once",
        _gauge_cases([up], [0], [1], hold),
    )  # fmt: skip


def all_alerts(fl: Targets, policy: Policy, fronted: bool = False) -> dict[str, list[Alert]]:
    """Alert groups: one per engine and router (with its place in the HAProxy front when `fronted`), and the drift
    group."""
    out: dict[str, list[Alert]] = {}
    for e in fl.engines:
        out[f"sglang-{e.host}-{e.role}"] = engine_alerts(e, policy)
    for r in fl.routers:
        out[f"smg-{r.host}"] = router_alerts(r, policy) + ([front_alert(r, policy)] if fronted else [])
    out["sglang-envelope-drift"] = drift_alerts(policy, [e.server for e in fl.engines])
    return out


def rule_file(groups: Mapping[str, list[Alert]]) -> dict[str, Any]:
    """The Prometheus rule file."""
    return {"groups": [{"name": name, "rules": [a.rule() for a in alerts]} for name, alerts in groups.items()]}


def expand_labels(text: str, labels: Mapping[str, str]) -> str:
    for k, v in labels.items():
        text = text.replace(f"{{{{ $labels.{k} }}}}", v)
    return text


def promtool_tests(groups: Mapping[str, list[Alert]], rule_path: str) -> dict[str, Any]:
    """promtool's unit-test file: every alert fires on its firing case and stays silent on the others."""
    tests = []
    for alerts in groups.values():
        for a in alerts:
            for case in a.cases:
                labels = case.labels or ({"server": a.server} if a.server else {})
                expected = []
                if case.fires:
                    expected.append(
                        {
                            "exp_labels": {**labels, **a.labels},
                            "exp_annotations": {
                                "summary": expand_labels(a.summary, labels),
                                "description": expand_labels(a.description, labels),
                            },
                        }
                    )
                tests.append(
                    {
                        "name": f"{a.name} {a.server} {'fires' if case.fires else 'silent'}",
                        "interval": "1m",
                        "input_series": [{"series": s, "values": v} for s, v in case.series],
                        "alert_rule_test": [{"eval_time": case.eval_time, "alertname": a.name, "exp_alerts": expected}],
                    }
                )
    return {"rule_files": [rule_path], "evaluation_interval": "1m", "tests": tests}
