"""The capacity planner: does a workload shape (N parallel calls of T tokens each) fit the declared fleet, and
which envelope changes make it fit.

Every figure comes from the capacity model (plugins/module_utils/sglang_capacity.py, held to SGLang 0.5.23's own sizing
by tests/component/conformance) and every option is checked by the fleet validation
(plugins/plugin_utils/sglang_validate.py): the planner only varies the declaration and asks them.

Levers, as an operator would pull them:
- more decode hosts (copies of a declared decode host's envelope);
- mem_fraction_static on decode, up to what SGLang would choose by itself on that GPU (never beyond);
- fp8 index keys (more KV tokens, at the cost of long-context recall);
- a lower context_length, so that the fleet guarantees N parallel calls at its full per-call context: calls
  shorter than asked, so such options are listed apart ("if shorter calls are acceptable"), never as answers;
- and, always, max_running_requests and the router's max_concurrent_requests raised to admit N.

What the fleet runs at once is the fleet answer (plugins/plugin_utils/sglang_fleet.py); the planner only asks it.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_capacity import (
    CapacityError,
    EngineLimits,
    activation_tokens,
    default_mem_fraction,
)
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_declared import (
    GROUPS,
    declared_in,
    engine_envelope,
    router_envelope,
)
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_schema import parse_size

from .sglang_engine_rules import engine_limits
from .sglang_fleet import Engine, FleetAnswer, answer
from .sglang_sidedoors import advertise_of, is_loopback
from .sglang_validate import check_fleet

MAX_EXTRA_DECODE_HOSTS = 16
ADMIT, AS_DECLARED = "admit more calls", "as declared"  # the titles of options that only admit, or change nothing
RECALL_COST = "fp8 index keys lose long-context recall (needles beyond about 2,000 tokens are missed)"


class PlanError(ValueError):
    """A shape or inventory the planner cannot work with; the message says what to change."""


@dataclass(frozen=True)
class Shape:
    calls: int
    tokens: int

    def __str__(self) -> str:
        return f"{self.calls} parallel calls x {self.tokens:,} tokens"


def parse_shape(text: str) -> Shape:
    """`100x200k`: N parallel calls of T tokens each (prompt + output); T as SGLang reads ints (200k = 200,000)."""
    match = re.fullmatch(r"\s*(\d+)\s*[xX*]\s*(\S+)\s*", text)
    if not match:
        raise PlanError(f"--want {text!r}: expected CALLSxTOKENS, e.g. 100x200k (100 calls of 200,000 tokens)")
    try:
        tokens = parse_size(match.group(2))
    except ValueError as exc:
        raise PlanError(f"--want {text!r}: {exc}") from None
    calls = int(match.group(1))
    if calls <= 0 or tokens <= 0:
        raise PlanError(f"--want {text!r}: calls and tokens must be > 0")
    return Shape(calls, tokens)


@dataclass
class Fleet:
    """A declared fleet: host variables and inventory groups, as the validation and the deploy read them."""

    hostvars: dict[str, dict[str, Any]]
    groups: dict[str, list[str]]

    def hosts(self, role: str) -> list[str]:
        return list(self.groups.get(GROUPS[role], []))

    def copy(self) -> Fleet:
        return Fleet(copy.deepcopy(self.hostvars), copy.deepcopy(self.groups))


@dataclass(frozen=True)
class Fit:
    """How many calls of `tokens` the fleet runs at once, and the limit that binds first."""

    tokens: int
    parallel: int
    binding: str
    decode_engines: int
    decode_pool_tokens: int
    decode_running: int
    context_length: int
    router_cap: int | None
    per_engine: tuple[int, ...] = ()
    served_tokens: int | None = None  # the most tokens one call is served (per-call context - 2)


def _limits(fleet: Fleet, role: str, model_config: Mapping[str, Any]) -> list[tuple[str, EngineLimits]]:
    out = []
    for host in fleet.hosts(role):
        hv = fleet.hostvars[host]
        out.append((host, engine_limits(model_config, engine_envelope(role, hv), hv)))
    return out


def engines(fleet: Fleet, model_config: Mapping[str, Any]) -> list[Engine]:
    """The declared engines with the limits the capacity model gives them, prefill first."""
    return [
        Engine.from_limits(host, role, limits)
        for role in ("prefill", "decode")
        for host, limits in _limits(fleet, role, model_config)
    ]


def fleet_answer(fleet: Fleet, model_config: Mapping[str, Any], tokens: int | None) -> FleetAnswer:
    """The fleet answer of the declared fleet for calls of `tokens` (None: at its served per-call context)."""
    if not fleet.hosts("decode"):
        raise PlanError("the inventory has no host in group sglang_decode; fix: declare the decode engines")
    routers = [router_envelope(fleet.hostvars[h]) for h in fleet.hosts("router")]
    return answer(engines(fleet, model_config), routers, tokens)


def fleet_fit(fleet: Fleet, model_config: Mapping[str, Any], tokens: int | None) -> Fit:
    """Calls of `tokens` the fleet runs at once and what binds (sglang_fleet's answer); None: calls at the
    served per-call context."""
    memory = fleet_answer(fleet, model_config, tokens).memory
    return Fit(
        tokens=memory.tokens,
        parallel=memory.parallel,
        binding=memory.binding,
        decode_engines=memory.decode_engines,
        decode_pool_tokens=memory.total_context,
        decode_running=memory.decode_running,
        context_length=memory.per_call_context,
        router_cap=memory.router_admits,
        per_engine=tuple(c.per_engine for c in memory.decode),
        served_tokens=memory.served_tokens,
    )


# ---------------------------------------------------------------- envelope diffs


@dataclass
class Option:
    title: str
    changes: list[tuple[str, Any, Any]] = field(default_factory=list)  # (variable, before, after)
    added_hosts: list[str] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)
    fleet: Fleet | None = None
    after: Fit | None = None
    exact: bool = True  # serves the shape as asked (False: shorter calls, at a lower per-call context)
    rank: tuple[Any, ...] = ()
    refused: list[str] = field(default_factory=list)  # the validation's problems with this change
    times: list[str] = field(default_factory=list)  # predicted TTFT / ITL lines, when a time model was asked
    meets_slo: bool | None = None  # None: no SLO asked or no time predicted
    removed_hosts: list[str] = field(default_factory=list)  # "host from group" lines of hosts leaving a role
    price: Price | None = None  # GPUs, goodput and the figures of the summary table, when a time model was asked

    def gpus(self) -> int:
        return gpus_of(self.changed_fleet())

    def changed_fleet(self) -> Fleet:
        """The fleet with this option's changes; every option the planner builds has one."""
        if self.fleet is None:
            raise PlanError(f"option {self.title!r} has no changed fleet")
        return self.fleet

    def tokens(self, shape: Shape) -> int:
        """Tokens per call this option serves: the shape's, or what the lowered context_length serves."""
        if self.exact or self.after is None or self.after.served_tokens is None:
            return shape.tokens
        return min(shape.tokens, self.after.served_tokens)

    def diff_lines(self) -> list[str]:
        lines = []
        for role in ("decode", "prefill"):
            added = [h for h in self.added_hosts if _role_of(h) == role]
            if len(added) > 3:  # many copies of one engine: one line
                first, last = added[0].partition(" ")[0], added[-1].partition(" ")[0]
                source = added[0].partition("(a copy of ")[2].partition(",")[0]
                lines.append(
                    f"inventory: add hosts {first} .. {last} to group sglang_{role} ({len(added)} copies of {source})"
                )
            else:
                lines += [f"inventory: add host {h} to group sglang_{role}" for h in added]
        lines += [f"inventory: remove {h}" for h in self.removed_hosts]
        lines += [f"{var}: {before} -> {after}" for var, before, after in self.changes]
        return lines


@dataclass(frozen=True)
class Price:
    """What a fleet costs and yields for the asked shape: GPUs its engines use, output tokens/s per GPU of the calls
    that meet the SLO (goodput; all of them when no SLO is asked), and the p90 figures (ms) behind it."""

    gpus: int
    goodput_per_gpu: float
    ttft_p90_ms: float
    itl_p90_ms: float
    meets_slo: bool | None


def gpus_of(fleet: Fleet) -> int:
    """GPUs the fleet's engines use: each prefill and decode engine's tp_size."""
    return sum(
        int(engine_envelope(role, fleet.hostvars[h]).get("tp_size") or 1)
        for role in ("prefill", "decode")
        for h in fleet.hosts(role)
    )


def _role_of(added: str) -> str:
    """The role of an added host, from its description ("name (a copy of host's <role> engine, ...)")."""
    return "prefill" if "'s prefill engine" in added else "decode"


def _set(
    fleet: Fleet,
    option: Option,
    role: str,
    key: str,
    value: Any,
    *,
    both_engines: bool = False,
    hosts: list[str] | None = None,
) -> None:
    """Set `key` of every `role` server, where the declaration keeps it: the role's own dict, or the one both engine
    roles share (sglang_engine_common) when the caller sets it for both roles alike (`both_engines`). A key of one
    role that the shared dict holds goes into the role's own dict, which SGLang's envelope reads first, so the other
    role keeps its value. A change is listed once, however many servers and roles share the dict it edits.
    `hosts`: only these servers of the role (default all)."""
    for host in hosts if hosts is not None else fleet.hosts(role):
        hv = fleet.hostvars[host]
        if role == "router":
            where, before = "sglang_router", (hv.get("sglang_router") or {}).get(key)
        else:
            where = declared_in(role, hv, key) if both_engines else f"sglang_{role}"
            before = engine_envelope(role, hv).get(key)
        hv[where] = {**(hv.get(where) or {}), key: value}
        edit = (f"{where}.{key}", before, value)
        if before != value and edit not in option.changes:
            option.changes.append(edit)


def _add_hosts(fleet: Fleet, option: Option, role: str, count: int) -> None:
    """`count` new hosts in group sglang_<role>, each a copy of the role's first host (its envelope and GPUs)."""
    template = fleet.hosts(role)[0]
    for i in range(1, count + 1):
        name = f"{template}-{role}{len(fleet.hosts(role)) + 1}"
        hv = copy.deepcopy(fleet.hostvars[template])
        hv["inventory_hostname"] = name
        for own in ("sglang_advertise_host", "ansible_host"):  # a new host is reached at its own address
            hv.pop(own, None)
        fleet.hostvars[name] = hv
        fleet.groups[GROUPS[role]].append(name)  # the group holds the template
        option.added_hosts.append(f"{name} (a copy of {template}'s {role} engine, {i} of {count})")
    _advertise_beyond_loopback(fleet, option)


def _dedicated_prefill(fleet: Fleet, option: Option, count: int, tp: int) -> None:
    """Prefill on `count` hosts of its own at tp_size `tp` (GPUs 0..tp-1 of each): the declared prefill engines leave
    the group sglang_prefill (their hosts keep their other roles), and the new hosts are copies of the first one's
    prefill engine at that tp_size."""
    template = fleet.hosts("prefill")[0]
    before = engine_envelope("prefill", fleet.hostvars[template]).get("tp_size")
    for host in fleet.hosts("prefill"):
        option.removed_hosts.append(f"{host} from group sglang_prefill (its prefill GPUs are freed)")
    fleet.groups[GROUPS["prefill"]] = []
    for i in range(1, count + 1):
        name = f"{template}-prefill-tp{tp}-{i}"
        hv = copy.deepcopy(fleet.hostvars[template])
        hv["inventory_hostname"] = name
        for own in ("sglang_advertise_host", "ansible_host"):
            hv.pop(own, None)
        hv["sglang_prefill"] = {**(hv.get("sglang_prefill") or {}), "tp_size": tp, "gpu_ids": list(range(tp))}
        hv["sglang_gpus_per_host"] = max(tp, int(hv.get("sglang_gpus_per_host") or tp))
        fleet.hostvars[name] = hv
        fleet.groups[GROUPS["prefill"]].append(name)
        option.added_hosts.append(f"{name} (a copy of {template}'s prefill engine at tp_size {tp}, {i} of {count})")
    option.changes.append((f"the new prefill hosts' sglang_prefill.tp_size (GPUs 0-{tp - 1})", before, tp))
    _advertise_beyond_loopback(fleet, option)


def _add_decode_hosts(fleet: Fleet, option: Option, count: int) -> None:
    _add_hosts(fleet, option, "decode", count)


def _add_prefill_hosts(fleet: Fleet, option: Option, count: int) -> None:
    """More prefill engines (xPyD): smg spreads the prompts over them; the decode side is unchanged."""
    _add_hosts(fleet, option, "prefill", count)


def _advertise_beyond_loopback(fleet: Fleet, option: Option) -> None:
    """Hosts that listened on or advertised loopback (one host served everything) are now reached from other hosts:
    the engines listen on every address, and each host advertises its inventory name (the operator may put an
    address there)."""
    for role in ("prefill", "decode"):
        if any(is_loopback(str(engine_envelope(role, fleet.hostvars[h]).get("host"))) for h in fleet.hosts(role)):
            _set(fleet, option, role, "host", "0.0.0.0", both_engines=True)
    for host in sorted({h for role in ("prefill", "decode", "router") for h in fleet.hosts(role)}):
        hv = fleet.hostvars[host]
        before, _variable = advertise_of(host, hv)
        if is_loopback(before):
            hv["sglang_advertise_host"] = host
            option.changes.append(
                (f"{host}: sglang_advertise_host", before, f"{host} (an address the new hosts reach)")
            )


def _admit(fleet: Fleet, option: Option, calls: int) -> None:
    """Raise decode max_running_requests and the router caps so that `calls` are admitted, where they are lower.

    Each router admits its own cap (smg's mesh shares no count), and validation holds the caps' sum to the decode
    fleet's running slots. Where a router admits without bound (no cap, or 0: validation refuses both) or below its
    share of the calls, every router gets that share, rounded up. The decode engines declared below their share of
    what the routers admit together are raised to it; one declared above keeps its slots."""
    routers = fleet.hosts("router")
    share = math.ceil(calls / len(routers)) if routers else 0
    caps = [router_envelope(fleet.hostvars[h]).get("max_concurrent_requests") for h in routers]
    raise_caps = any(c is None or int(c) < share for c in caps)
    together = share * len(routers) if raise_caps else sum(int(c) for c in caps if c is not None)
    admitted = max(calls, together)  # validation: the engines run what the routers admit together
    engines = fleet.hosts("decode")
    need = math.ceil(admitted / len(engines))
    declared = [engine_envelope("decode", fleet.hostvars[h]).get("max_running_requests") for h in engines]
    below = [h for h, d in zip(engines, declared, strict=True) if d is not None and int(d) < need]
    if below:  # an engine declared above its share keeps its slots
        _set(fleet, option, "decode", "max_running_requests", need, hosts=below)
    if raise_caps:
        _set(fleet, option, "router", "max_concurrent_requests", share)


def _safe_fraction(fleet: Fleet) -> float:
    """What SGLang would pick with --mem-fraction-static unset, on the decode engine where it picks least (its GPU
    memory, TP size and running batch): the one fraction set on every decode engine leaves each its reserve."""

    def sglang_choice(hv: Mapping[str, Any]) -> float:
        env = engine_envelope("decode", hv)
        activation = activation_tokens("decode", env.get("max_running_requests"), None)  # a decode engine: its batch
        return default_mem_fraction(float(hv["sglang_gpu_memory_gib"]), int(env.get("tp_size") or 1), activation)

    return min(sglang_choice(fleet.hostvars[h]) for h in fleet.hosts("decode"))


def _variant(base: Fleet, calls: int, *, fp8: bool, fraction: float | None, extra: int) -> Option:
    fleet = base.copy()
    parts = []
    option = Option("")
    if extra:
        _add_decode_hosts(fleet, option, extra)
        parts.append(f"add {extra} decode host{'s' if extra > 1 else ''}")
    if fraction is not None:
        _set(fleet, option, "decode", "mem_fraction_static", fraction)
        parts.append(f"decode mem_fraction_static {fraction} (SGLang's own choice on this GPU)")
        gib = min(float(fleet.hostvars[h]["sglang_gpu_memory_gib"]) for h in fleet.hosts("decode"))
        option.caveats.append(
            f"leaves {gib * (1 - fraction):.1f} GiB per GPU outside the static pool for activations and cuda graphs "
            "(SGLang's own default reserve)"
        )
    if fp8:
        _set(fleet, option, "decode", "bf16_index_k", False, both_engines=True)
        _set(fleet, option, "prefill", "bf16_index_k", False, both_engines=True)
        option.caveats.append(RECALL_COST)
        parts.append("fp8 index keys")
    _admit(fleet, option, calls)
    option.title = ", ".join(parts) or (ADMIT if option.changes else AS_DECLARED)
    option.fleet = fleet
    return option


def _title(*parts: str) -> str:
    """An option's title from its parts; "admit more calls" and "as declared" say nothing beside another lever."""
    return ", ".join(part for part in parts if part not in (ADMIT, AS_DECLARED))


def _serves(option: Option, model_config: Mapping[str, Any], tokens: int | None, calls: int) -> bool:
    """Whether the option's fleet runs `calls` calls of `tokens` at once; CapacityError where SGLang would not start
    an engine so changed (its memory check)."""
    return fleet_fit(option.changed_fleet(), model_config, tokens).parallel >= calls


def _lower_context(
    base: Fleet, model_config: Mapping[str, Any], shape: Shape, *, fp8: bool, fraction: float | None
) -> Option | None:
    """The largest per-call context (page aligned) at which the fleet, so changed, runs `shape.calls` calls at
    once, each as long as that context serves (context_length - 2 tokens)."""
    page = _limits(base, "decode", model_config)[0][1].page_size

    def fits(context: int) -> tuple[bool, Option]:
        option = _variant(base, shape.calls, fp8=fp8, fraction=fraction, extra=0)
        changed = option.changed_fleet()
        for role in ("prefill", "decode"):
            _set(changed, option, role, "context_length", context, both_engines=True)
        try:
            return _serves(option, model_config, None, shape.calls), option
        except CapacityError:  # the engines would not start so changed: a shorter context may leave them memory
            return False, option

    low, high, best, context = 1, shape.tokens // page, None, 0
    while low <= high:
        mid = (low + high) // 2
        ok, option = fits(mid * page)
        if ok:
            best, context, low = option, mid * page, mid + 1
        else:
            high = mid - 1
    if best is None:
        return None
    served = fleet_fit(best.changed_fleet(), model_config, None).served_tokens
    if any(var.endswith(".context_length") for var, _before, _after in best.changes):
        best.title = _title(f"context_length {context:,}", best.title)
    # else the declared context already: calls as long as it are 2 tokens longer than SGLang serves (context - 2)
    best.exact = False
    best.caveats.append(
        f"calls longer than {served:,} tokens are cut short or refused (the shape asked for {shape.tokens:,})"
    )
    return best


@dataclass
class Plan:
    shape: Shape
    today: Fit
    options: list[Option]  # answers: each serves the shape as asked
    refused: list[str] = field(default_factory=list)  # options the validation refused, with the first reason
    shorter: list[Option] = field(default_factory=list)  # serve the calls only shorter than asked
    today_times: list[str] = field(default_factory=list)  # predicted TTFT / ITL of today's fleet, when asked
    today_meets_slo: bool | None = None
    slo: str = ""  # the SLO asked, in words ("" none)
    today_price: Price | None = None
    arrivals: str = ""  # how the calls arrive in the time model, in words ("" no time asked)
    tried: list[str] = field(default_factory=list)  # the time levers tried, in words

    @property
    def fits_today(self) -> bool:
        return self.today.parallel >= self.shape.calls


def plan(fleet: Fleet, model_config: Mapping[str, Any], shape: Shape) -> Plan:
    """Whether `shape` fits `fleet` today and, if not, ranked envelope changes that make it fit."""
    today = fleet_fit(fleet, model_config, shape.tokens)
    result = Plan(shape, today, [])
    if result.fits_today:
        return result
    safe = _safe_fraction(fleet)
    declared = [engine_envelope("decode", fleet.hostvars[h]).get("mem_fraction_static") for h in fleet.hosts("decode")]
    fractions: list[float | None] = [None]
    if all(d is not None and float(d) < safe for d in declared):
        fractions.append(safe)
    bf16 = any(engine_envelope("decode", fleet.hostvars[h]).get("bf16_index_k") for h in fleet.hosts("decode"))
    candidates: list[Option] = []
    for fp8 in (False, True) if bf16 else (False,):
        for fraction in fractions:
            unstartable = ""
            for extra in range(MAX_EXTRA_DECODE_HOSTS + 1):
                option = _variant(fleet, shape.calls, fp8=fp8, fraction=fraction, extra=extra)
                try:
                    serves = _serves(option, model_config, shape.tokens, shape.calls)
                except CapacityError as exc:  # more hosts spread the running requests thinner: try them
                    edits = ", ".join(f"{var} {after}" for var, _before, after in option.changes)
                    unstartable = unstartable or f"{option.title} ({edits}): {exc}"
                    continue
                if serves:
                    candidates.append(option)
                    break
            else:
                if unstartable:
                    result.refused.append(unstartable)
            lowered = _lower_context(fleet, model_config, shape, fp8=fp8, fraction=fraction)
            if lowered:
                candidates.append(lowered)
    for option in candidates:
        changed = option.changed_fleet()
        problems = check_fleet(changed.hostvars, changed.groups, model_config)
        if problems:
            result.refused.append(f"{option.title}: {problems[0]}")
            continue
        option.after = fleet_fit(changed, model_config, shape.tokens if option.exact else None)
        option.rank = (
            not option.exact,
            len(option.added_hosts),
            bool(option.caveats and RECALL_COST in option.caveats),
            -option.after.tokens,
            len(option.changes),
        )
        (result.options if option.exact else result.shorter).append(option)
    result.options = _undominated(sorted(result.options, key=lambda o: o.rank))
    result.shorter = sorted(result.shorter, key=lambda o: o.rank)
    return result


def change(
    fleet: Fleet,
    model_config: Mapping[str, Any],
    title: str,
    settings: list[tuple[str, str, Any]],
    *,
    add_decode_hosts: int = 0,
    add_prefill_hosts: int = 0,
) -> Option:
    """An envelope change as an option: `settings` are (role, key, value); the result carries the validation's
    verdict in `refused` (empty when the changed fleet passes)."""
    changed = fleet.copy()
    option = Option(title)
    if add_decode_hosts:
        _add_decode_hosts(changed, option, add_decode_hosts)
    if add_prefill_hosts:
        _add_prefill_hosts(changed, option, add_prefill_hosts)
    _settle(option, changed, settings, model_config)
    return option


def _settle(
    option: Option, changed: Fleet, settings: list[tuple[str, str, Any]], model_config: Mapping[str, Any]
) -> None:
    """Set `settings` (role, key, value) on `changed`, make it the option's fleet and check it like any option."""
    for role, key, value in settings:
        _set(changed, option, role, key, value)
    option.fleet = changed
    option.refused = check_fleet(changed.hostvars, changed.groups, model_config)


def extend(
    option: Option,
    model_config: Mapping[str, Any],
    shape: Shape,
    title: str,
    settings: list[tuple[str, str, Any]],
    *,
    add_prefill_hosts: int = 0,
    prefill_tp: int | None = None,
    add_decode_hosts: int = 0,
) -> Option:
    """`option` with more changes on top (prefill hosts: `add_prefill_hosts` more copies of the declared prefill
    engine, or that many hosts of their own at tp_size `prefill_tp` in place of the declared ones; decode hosts;
    then `settings` as (role, key, value)), sized for `shape` and checked by the validation like any option."""
    changed = option.changed_fleet().copy()
    out = Option(
        _title(option.title, title),
        changes=list(option.changes),
        added_hosts=list(option.added_hosts),
        caveats=list(option.caveats),
        exact=option.exact,
        removed_hosts=list(option.removed_hosts),
    )
    if prefill_tp is not None:
        _dedicated_prefill(changed, out, add_prefill_hosts, prefill_tp)
    elif add_prefill_hosts:
        _add_prefill_hosts(changed, out, add_prefill_hosts)
    if add_decode_hosts:
        _add_decode_hosts(changed, out, add_decode_hosts)
    _settle(out, changed, settings, model_config)
    if not out.refused:
        out.after = fleet_fit(changed, model_config, option.tokens(shape))  # the shape's tokens when exact
        out.rank = (not out.exact, len(out.added_hosts), *option.rank[2:])
    return out


def _undominated(options: list[Option]) -> list[Option]:
    """Drop an option that serves the shape as asked when a kept one does too with no more hosts and no recall
    cost where it has none (compared lever by lever)."""
    kept: list[Option] = []
    for option in options:
        hosts, recall = option.rank[1], option.rank[2]
        if option.exact and any(k.exact and k.rank[1] <= hosts and k.rank[2] <= recall for k in kept):
            continue
        kept.append(option)
    return kept


# ---------------------------------------------------------------- text


def describe_fit(fit: Fit) -> str:
    router = f"{fit.router_cap}" if fit.router_cap is not None else "no cap"
    return (
        f"{fit.parallel} at once, bound by {fit.binding} (decode: {fit.decode_engines} engine(s), "
        f"{fit.decode_pool_tokens:,} KV tokens, {fit.decode_running} running requests; router admits {router}; "
        f"per-call context {fit.context_length:,})"
    )


def summary(result: Plan) -> list[str]:
    """The plan's table on top: today and each option with its GPUs (added), whether it fits, its TTFT and ITL p90,
    its goodput per GPU and its SLO verdict; empty when no time was predicted."""
    priced = [("today", result.today_price, result.fits_today)] + [
        (f"option {n}", o.price, True) for n, o in enumerate(result.options + result.shorter, 1)
    ]
    if result.today_price is None:
        return []
    today_gpus = result.today_price.gpus
    head = ("", "GPUs (added)", "fits", "TTFT p90", "ITL p90", "goodput/GPU", "SLO")
    rows = [head]
    for label, p, fits in priced:
        if p is None:
            rows.append((label, "-", "yes" if fits else "no", "-", "-", "-", "-"))
            continue
        slo = "-" if p.meets_slo is None else "met" if p.meets_slo else "missed"
        rows.append(
            (
                label,
                f"{p.gpus} (+{p.gpus - today_gpus})" if p.gpus != today_gpus else f"{p.gpus}",
                "yes" if fits else "no",
                f"{p.ttft_p90_ms / 1000:,.1f} s",
                f"{p.itl_p90_ms:,.1f} ms",
                f"{p.goodput_per_gpu:,.1f} tok/s",
                slo,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    table = [
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        for r in rows
    ]
    notes = [result.arrivals] if result.arrivals else []
    if result.tried:
        notes.append(f"levers tried for the SLO: {', '.join(result.tried)}")
    return [*table, *notes, RANKING_NOTE]


RANKING_NOTE = (
    "answers are ranked by goodput per GPU (output tokens/s per GPU of the calls that meet the SLO, all calls when "
    "none is asked), then by the GPUs they add"
)


def render(result: Plan, inventory: str) -> str:
    shape, today = result.shape, result.today
    lines = [
        f"want {shape} ({inventory})" + (f", SLO {result.slo}" if result.slo else ""),
        *summary(result),
        f"today: {describe_fit(today)}",
    ]
    lines += [f"    {line}" for line in result.today_times]
    if result.fits_today:
        if result.today_meets_slo is False:
            lines.append(f"fits in memory: {today.parallel} >= {shape.calls}; but not the SLO ({result.slo})")
        else:
            lines.append(f"fits: {today.parallel} >= {shape.calls}; nothing to change")
            return "\n".join(lines) + "\n"
    else:
        lines.append(f"does not fit: {today.parallel} < {shape.calls}")
    answers = [o for o in result.options if o.exact]
    shorter = [o for o in result.options if not o.exact] + result.shorter
    if not answers:
        see = "; see the refused options below" if result.refused else ""
        lines.append(f"no option within the planner's levers fits{see}")
    numbered = list(enumerate(answers + shorter, 1))
    for number, option in numbered:
        after = option.after
        if after is None:
            raise PlanError(f"option {option.title!r} was never sized")
        if number == len(answers) + 1:
            lines.append(
                f"if shorter calls are acceptable (these do not serve calls of {shape.tokens:,} tokens; "
                "SGLang refuses or cuts them short):"
            )
        scope = "as asked" if option.exact else f"at {after.tokens:,} tokens per call"
        label = ""
        if option.meets_slo is not None:
            label = "; meets the SLO" if option.meets_slo else "; meets memory, not the SLO"
        lines.append(f"option {number}: {option.title} ({scope}{label})")
        lines += [f"    {line}" for line in option.diff_lines()]
        lines.append(
            f"    before -> after: {today.parallel} -> {after.parallel} at once; decode KV tokens "
            f"{today.decode_pool_tokens:,} -> {after.decode_pool_tokens:,}; decode running requests "
            f"{today.decode_running} -> {after.decode_running}; router "
            f"{today.router_cap} -> {after.router_cap}; per-call context {today.context_length:,} -> "
            f"{after.context_length:,}"
        )
        lines += [f"    {line}" for line in option.times]
        lines += [f"    caveat: {c}" for c in option.caveats]
    lines += [f"refused by validation: {r}" for r in result.refused]
    return "\n".join(lines) + "\n"


def fleet_from_inventory(hostvars: Mapping[str, Any], groups: Mapping[str, list[str]]) -> Fleet:
    return Fleet({h: dict(v) for h, v in hostvars.items()}, {g: list(h) for g, h in groups.items()})


# ---------------------------------------------------------------- the rollout plan


@dataclass(frozen=True)
class Step:
    host: str
    role: str
    parallel_left: int
    binding_left: str


def without(fleet: Fleet, host: str, role: str) -> Fleet:
    out = fleet.copy()
    out.groups[GROUPS[role]] = [h for h in fleet.hosts(role) if h != host]
    return out


def rollout_plan(fleet: Fleet, model_config: Mapping[str, Any], tokens: int) -> tuple[int, list[Step]]:
    """Parallel calls of `tokens` the whole fleet carries, and per engine server (prefill hosts first, then decode,
    in inventory order: the order of the serial rollout) what it carries while that server is out."""
    whole = fleet_fit(fleet, model_config, tokens).parallel
    steps = []
    for role in ("prefill", "decode"):
        for host in fleet.hosts(role):
            rest = without(fleet, host, role)
            if not rest.hosts(role):
                steps.append(Step(host, role, 0, f"no {role} engine left"))
                continue
            try:
                fit = fleet_fit(rest, model_config, tokens)
            except PlanError as e:
                steps.append(Step(host, role, 0, str(e)))
                continue
            steps.append(Step(host, role, fit.parallel, fit.binding))
    return whole, steps


def rollout_shortfalls(steps: list[Step], min_parallel: int, tokens: int) -> list[str]:
    """The rollout steps that leave the fleet fewer than `min_parallel` parallel calls of `tokens` tokens, each
    named with what binds and how to fix it (sglang_validate_rollout_min_parallel, 0: no minimum)."""
    out = []
    for step in steps:
        if step.parallel_left >= min_parallel:
            continue
        left = "nothing (an outage)" if step.parallel_left == 0 else f"{step.parallel_left} parallel calls"
        out.append(
            f"{step.role} on {step.host}: while it restarts the rest of the fleet carries {left} of {tokens:,} "
            f"tokens ({step.binding_left}), below sglang_validate_rollout_min_parallel={min_parallel}. Fix: add a "
            f"{step.role} host or raise the limits of the others, or lower sglang_validate_rollout_min_parallel "
            "(0 only reports the plan)"
        )
    return out


def render_plan(whole: int, steps: list[Step], tokens: int, load: int | None = None) -> list[str]:
    lines = [f"rollout plan (one server at a time): the fleet carries {whole} parallel calls of {tokens:,} tokens"]
    for n, step in enumerate(steps, 1):
        if step.parallel_left == 0:
            what = f"outage: {step.binding_left}; new requests get 503 + Retry-After from the router until it is back"
        else:
            what = f"{step.parallel_left} parallel calls left (bound: {step.binding_left})"
            if load is not None and step.parallel_left < load:
                what += f", below the declared load of {load}"
        lines.append(f"  {n}. {step.role} on {step.host}: {what}")
    return lines
