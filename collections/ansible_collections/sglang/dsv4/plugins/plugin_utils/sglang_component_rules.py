"""Rules on the settings of the programs around the servers, over the whole inventory (check_fleet): the HAProxy front
(scope `front`), its keepalived VRRP address (`vrrp`), Prometheus and Alertmanager (`monitoring`) and the servers'
systemd units (`unit`). Each encodes what the program itself refuses, in the program's words: the render-time file
check (sglang_filecheck) runs the same program on the rendered file, this refuses the declared value before any file
is rendered."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator, Mapping
from typing import Any

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_declared import advertised

from .sglang_alerts import PROMETHEUS_DURATION, MonitoringError, Policy, policy_vars
from .sglang_fleet_rules import monitoring_host, role_default
from .sglang_rules import NO_VALUE, Finding, Rule, split_fix
from .sglang_stack_rules import StackContext

# HAProxy 2.6 (`haproxy -c`): the counts it refuses at 0, with its words, and the events of `retry-on`
# (configuration.txt, "retry-on"; any other word: "'retry-on': unknown keyword").
FRONT_POSITIVE = {
    "sglang_frontend_check_interval_ms": "invalid value 0 for argument 'inter' of server default-server",
    "sglang_frontend_check_fall": "'fall' has to be > 0",
    "sglang_frontend_check_rise": "'rise' has to be > 0",
    "sglang_frontend_buffer_bytes": "'tune.bufsize' expects a positive integer argument",
}
RETRY_ON = (
    "none", "conn-failure", "empty-response", "junk-response", "response-timeout", "0rtt-rejected",
    "401", "403", "404", "408", "425", "500", "501", "502", "503", "504", "all-retryable-errors",
)  # fmt: skip
FRONT_ADDRESSES = ("sglang_frontend_bind_address", "sglang_frontend_stats_address")
# keepalived 2.2.7 (`keepalived -t`) and Linux (net/core/dev.c: dev_valid_name, IFNAMSIZ 16).
VRID_RANGE = (1, 255)
IFNAMSIZ = 16
# Prometheus 2.42 and Alertmanager: durations of their config files and flags (prometheus/common model.ParseDuration).
MONITORING_DURATIONS = (
    "sglang_monitoring_scrape_interval",
    "sglang_monitoring_evaluation_interval",
    "sglang_monitoring_prometheus_retention",
    "sglang_monitoring_alertmanager_group_wait",
)
# systemd 252 (`systemd-analyze verify`): Restart= and Type= words, time spans (parse_sec), resource limits
# (parse_rlimit: a count, or a size for the byte limits; `infinity`; soft:hard).
UNIT_DICTS = ("sglang_common_unit", "sglang_engine_unit", "sglang_router_unit")
RESTART = ("no", "on-success", "on-failure", "on-abnormal", "on-watchdog", "on-abort", "always")
SERVICE_TYPES = ("simple", "exec", "forking", "oneshot", "dbus", "notify", "idle")
# What systemd 252 says when it cannot parse each time directive.
TIME_DIRECTIVES = {
    "RestartSec": "sec value",
    "TimeoutStartSec": "TimeoutStartSec= parameter",
    "TimeoutStopSec": "time value",
    "TimeoutSec": "TimeoutSec= parameter",
    "WatchdogSec": "sec value",
}
_TIME_UNIT = (
    "usec|us|µs|μs|msec|ms|seconds|second|sec|s|minutes|minute|min|months|month|M|m|hours|hour|hr|h|days|day|d|"
    "weeks|week|w|years|year|y"
)
_TIME_SPAN = re.compile(rf"\s*(?:\d+(?:\.\d+)?\s*(?:{_TIME_UNIT})?\s*)+|\s*infinity\s*")
COUNT_LIMITS = ("LimitNOFILE", "LimitNPROC", "LimitSIGPENDING", "LimitNICE", "LimitRTPRIO")
SIZE_LIMITS = ("LimitMEMLOCK", "LimitAS", "LimitCORE", "LimitDATA", "LimitFSIZE", "LimitRSS", "LimitSTACK")
_SIZE_FACTOR = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5, "E": 1024**6}
# Role variables the units render into a directive (roles/sglang_common, sglang_engine defaults).
UNIT_SCALARS = {
    "sglang_common_limit_nofile": "LimitNOFILE",
    "sglang_common_limit_memlock": "LimitMEMLOCK",
    "sglang_engine_timeout_start_sec": "TimeoutStartSec",
}


def _declared(value: Any) -> bool:
    """A value the inventory states itself (a Jinja expression is the role's, rendered later)."""
    return value is not None and "{{" not in str(value)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# --- front -------------------------------------------------------------------------------------------------------


def _front_settings(c: StackContext, names: tuple[str, ...]) -> Iterator[tuple[str, str, Any]]:
    for host in c.fronts:
        for name in names:
            value = c.hostvars.get(host, {}).get(name)
            if _declared(value):
                yield host, name, value


def _front_positive(c: StackContext) -> Iterator[Finding]:
    for host, name, value in _front_settings(c, tuple(FRONT_POSITIVE)):
        number = _count(value)
        if number is not None and number < 1:
            yield Finding(
                f"{host}: {name}", value, f"HAProxy refuses it (haproxy -c: {FRONT_POSITIVE[name]})",
                f"declare a positive number, e.g. the role's default {role_default('sglang_frontend', name)}",
            )  # fmt: skip


def _front_retry_on(c: StackContext) -> Iterator[Finding]:
    for host, name, value in _front_settings(c, ("sglang_frontend_retry_on",)):
        events = [value] if isinstance(value, str) else list(value)
        for event in events:
            if str(event) not in RETRY_ON:
                yield Finding(
                    f"{host}: {name}", value,
                    f"HAProxy 2.6 knows no retry-on event {event!r} (haproxy -c: 'retry-on': unknown keyword "
                    f"'{event}')",
                    f"use events of {', '.join(RETRY_ON)}",
                )  # fmt: skip


def _front_address(c: StackContext) -> Iterator[Finding]:
    for host, name, value in _front_settings(c, FRONT_ADDRESSES):
        head, sep, tail = str(value).rpartition(":")
        bracketed = head.startswith("[") and head.endswith("]")
        if sep and tail.isdigit() and (bracketed or ":" not in head):
            port = "sglang_frontend_port" if name == FRONT_ADDRESSES[0] else "sglang_frontend_stats_port"
            yield Finding(
                f"{host}: {name}", value,
                f"the role appends the port ({port}), so HAProxy reads '{value}:<port>' (haproxy -c: 'bind' : "
                f"invalid address: '{value}')",
                f"declare the address alone ({head.strip('[]')}) and the port in {port}",
            )  # fmt: skip


# --- vrrp --------------------------------------------------------------------------------------------------------


def _vip_fronts(c: StackContext) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """The front hosts that run keepalived: those with a VRRP address."""
    for host in c.fronts:
        hv = c.hostvars.get(host, {})
        if str(hv.get("sglang_frontend_vip") or ""):
            yield host, hv


def _vip_network(value: Any) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface | None:
    try:
        return ipaddress.ip_interface(str(value).strip())
    except ValueError:
        return None


def _vrrp_router_id(c: StackContext) -> Iterator[Finding]:
    for host, hv in _vip_fronts(c):
        value = hv.get("sglang_frontend_vip_router_id")
        number = _count(value)
        if number is not None and not VRID_RANGE[0] <= number <= VRID_RANGE[1]:
            yield Finding(
                f"{host}: sglang_frontend_vip_router_id", value,
                f"VRRP's virtual router id is one byte from 1 to 255 (keepalived -t: VRID '{value}' not valid - must "
                "be between 1 & 255)",
                "declare an id from 1 to 255 that no other VRRP router on the network uses",
            )  # fmt: skip


def _vrrp_vip(c: StackContext) -> Iterator[Finding]:
    for host, hv in _vip_fronts(c):
        value = hv["sglang_frontend_vip"]
        if not _declared(value) or _vip_network(value) is not None:
            continue
        address, _sep, prefix = str(value).strip().partition("/")
        bare = _vip_network(address)
        what = (
            f"a prefix length above the address's {bare.max_prefixlen} bits (keepalived -t: Invalid address prefix "
            f"len {prefix} for address {value} - using {bare.max_prefixlen}, and exits 5)"
            if bare is not None
            else f"not an IP address: keepalived holds none (keepalived -t: VRRP parsed invalid IP {value}. skipping "
            "IP...)"
        )
        yield Finding(
            f"{host}: sglang_frontend_vip", value, what,
            "declare an address like 10.0.0.100/24 (prefix up to 32, or 128 for IPv6)",
        )  # fmt: skip


def _vrrp_interface(c: StackContext) -> Iterator[Finding]:
    for host, hv in _vip_fronts(c):
        value = hv.get("sglang_frontend_vip_interface")
        if not _declared(value):
            continue
        name = str(value)
        if len(name) >= IFNAMSIZ:
            says = f"Interface name '{name}' too long - ignoring"
        elif not name or name in (".", "..") or re.search(r"[/:\s]", name):
            says = f"WARNING - interface {name} for vrrp_instance sglang_frontend doesn't exist"
        else:
            continue
        yield Finding(
            f"{host}: sglang_frontend_vip_interface", value,
            f"not a Linux interface name (1 to {IFNAMSIZ - 1} characters, no '/', ':' or space: net/core/dev.c "
            f"dev_valid_name), so no interface carries the address (keepalived -t: {says})",
            "declare the interface as `ip link` names it, e.g. eth0",
        )  # fmt: skip


def _vrrp_family(c: StackContext) -> Iterator[Finding]:
    fronts = list(_vip_fronts(c))
    for host, hv in fronts:
        vip = _vip_network(hv["sglang_frontend_vip"])
        peers = [h for h in c.fronts if h != host]  # the template's unicast_peer: every other front host
        own = _vip_network(advertised(host, hv))
        if vip is None or own is None or not peers:
            continue  # a name, or no unicast peer: keepalived picks the family from the address
        if vip.version != own.version:
            yield Finding(
                f"{host}: sglang_frontend_vip", hv["sglang_frontend_vip"],
                f"an IPv{vip.version} address in a VRRP instance whose unicast peers speak IPv{own.version} "
                f"({own.ip}): keepalived drops it (keepalived -t: address family must match VRRP instance)",
                f"declare an IPv{own.version} address, or advertise the front hosts at IPv{vip.version} addresses",
            )  # fmt: skip


# --- monitoring --------------------------------------------------------------------------------------------------


def monitoring_server(c: StackContext) -> str | None:
    """The host of Prometheus and Alertmanager (monitoring_host), None with monitoring off."""
    host = monitoring_host(c.groups)
    return None if host is None or c.hostvars.get(host, {}).get("sglang_monitoring_enabled") is False else host


def _monitoring_durations(c: StackContext) -> Iterator[Finding]:
    host = monitoring_server(c)
    for name in MONITORING_DURATIONS if host else ():
        value = c.hostvars.get(str(host), {}).get(name)
        if _declared(value) and not PROMETHEUS_DURATION.fullmatch(str(value)):
            yield Finding(
                f"{host}: {name}", value,
                f'not a Prometheus duration (promtool, amtool and prometheus\'s flags: not a valid duration string: '
                f'"{value}")',
                "write digits with units of y, w, d, h, m, s, ms, largest first without spaces, e.g. 15s or 1h30m",
            )  # fmt: skip


def _monitoring_policy(c: StackContext) -> Iterator[Finding]:
    host = monitoring_server(c)
    if not host:
        return
    try:
        Policy.from_vars(policy_vars(c.hostvars.get(host, {})))
    except MonitoringError as exc:
        rule, fix = split_fix(str(exc))
        head, sep, why = rule.partition(": ")
        yield Finding(f"{host}: {head}", NO_VALUE, why if sep else "the alert rules cannot be generated from it", fix)


def _monitoring_receiver(c: StackContext) -> Iterator[Finding]:
    host = monitoring_server(c)
    value = c.hostvars.get(str(host), {}).get("sglang_monitoring_alertmanager_receiver") if host else None
    if value is not None and not (isinstance(value, Mapping) and str(value.get("name") or "").strip()):
        yield Finding(
            f"{host}: sglang_monitoring_alertmanager_receiver", value,
            "Alertmanager's receiver needs a name, which the route sends every alert to (amtool check-config: "
            "missing name in receiver)",
            "declare a mapping with a name, e.g. {name: sglang}",
        )  # fmt: skip


# --- unit --------------------------------------------------------------------------------------------------------


def _unit_values(c: StackContext) -> Iterator[tuple[str, str, Any]]:
    """(`host: variable`, directive, value) of every directive the inventory declares for a server's unit."""
    for host in sorted({s.host for s in c.servers}):
        hv = c.hostvars.get(host, {})
        tables: list[tuple[str, Any]] = [(n, hv.get(n)) for n in UNIT_DICTS]
        tables.append(("sglang_common_hardening", {"Service": hv.get("sglang_common_hardening")}))
        overrides = hv.get("sglang_engine_unit_role_overrides")
        for role, unit in overrides.items() if isinstance(overrides, Mapping) else ():
            tables.append((f"sglang_engine_unit_role_overrides.{role}", unit))
        for name, unit in tables:
            for section, directives in unit.items() if isinstance(unit, Mapping) else ():
                for directive, value in directives.items() if isinstance(directives, Mapping) else ():
                    where = name if name == "sglang_common_hardening" else f"{name}.{section}"
                    for one in value if isinstance(value, list) else [value]:
                        if _declared(one):
                            yield f"{host}: {where}.{directive}", str(directive), one
        for name, directive in UNIT_SCALARS.items():
            if _declared(hv.get(name)):
                yield f"{host}: {name}", directive, hv[name]


def _unit_seen(c: StackContext, directives: tuple[str, ...]) -> Iterator[tuple[str, str, Any]]:
    seen = set()
    for var, directive, value in _unit_values(c):
        if directive in directives and (var, str(value)) not in seen:
            seen.add((var, str(value)))
            yield var, directive, value


def _unit_words(c: StackContext) -> Iterator[Finding]:
    for var, directive, value in _unit_seen(c, ("Restart", "Type")):
        words, what = (
            (RESTART, "service restart specifier") if directive == "Restart" else (SERVICE_TYPES, "service type")
        )
        if str(value) not in words:
            yield Finding(
                var, value,
                f"systemd 252 knows no {directive}={value} and starts the unit without it (systemd-analyze verify: "
                f"Failed to parse {what}, ignoring: {value})",
                f"use one of {', '.join(words)}",
            )  # fmt: skip


def _unit_times(c: StackContext) -> Iterator[Finding]:
    for var, directive, value in _unit_seen(c, tuple(TIME_DIRECTIVES)):
        if isinstance(value, bool) or not _TIME_SPAN.fullmatch(str(value)):
            yield Finding(
                var, value,
                f"not a systemd time span: systemd 252 ignores {directive}= (systemd-analyze verify: Failed to parse "
                f"{TIME_DIRECTIVES[directive]}, ignoring: {value})",
                "declare seconds (e.g. 120) or a span with units (2min 30s), or infinity",
            )  # fmt: skip


def _rlimit(value: Any, sizes: bool) -> float | None:
    """One side of a resource limit in systemd's terms (infinity, a count, or for a byte limit a size with a
    K, M, G, T, P or E suffix), or None when systemd cannot parse it."""
    text = str(value).strip()
    if text == "infinity":
        return float("inf")
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGTPE]?)" if sizes else r"(\d+)()", text)
    return float(match[1]) * _SIZE_FACTOR[match[2]] if match else None


def _unit_limits(c: StackContext) -> Iterator[Finding]:
    for var, directive, value in _unit_seen(c, (*COUNT_LIMITS, *SIZE_LIMITS)):
        if isinstance(value, bool):
            sides: list[float | None] = [None]
        else:
            sides = [_rlimit(side, directive in SIZE_LIMITS) for side in str(value).split(":", 1)]
        if None in sides:
            yield Finding(
                var, value,
                f"systemd 252 cannot parse the limit and starts the unit without it (systemd-analyze verify: Failed to "
                f"parse resource value, ignoring: {value})",
                "declare a number" + (" with an optional K, M or G suffix" if directive in SIZE_LIMITS else "")
                + ", infinity, or soft:hard",
            )  # fmt: skip
        elif len(sides) == 2 and float(sides[0] or 0) > float(sides[1] or 0):
            yield Finding(
                var, value,
                "the soft limit is above the hard limit: systemd 252 starts the unit without it (systemd-analyze "
                f"verify: Soft resource limit chosen higher than hard limit, ignoring: {value})",
                "declare soft <= hard, or one value for both",
            )  # fmt: skip


COMPONENT_RULES: tuple[Rule, ...] = (
    Rule(
        "front.haproxy_positive", 1, tuple(FRONT_POSITIVE),
        "HAProxy 2.6 refuses a health-check interval, fall or rise count or buffer size of 0 or less",
        "declare a positive number", _front_positive,
    ),
    Rule(
        "front.retry_on_known", 1, ("sglang_frontend_retry_on",),
        "each retry-on event is one HAProxy 2.6 knows (RETRY_ON)", "use HAProxy's retry-on events", _front_retry_on,
    ),
    Rule(
        "front.address_without_port", 1, FRONT_ADDRESSES,
        "a front address carries no port: the role appends sglang_frontend_port or sglang_frontend_stats_port",
        "declare the address alone and the port in its own variable", _front_address,
    ),
    Rule(
        "vrrp.router_id_range", 1, ("sglang_frontend_vip_router_id", "sglang_frontend_vip"),
        "with a VRRP address, the virtual router id is from 1 to 255 (keepalived)",
        "declare an id from 1 to 255", _vrrp_router_id,
    ),
    Rule(
        "vrrp.vip_is_address", 1, ("sglang_frontend_vip",),
        "the VRRP address is an IP address with an optional prefix length (keepalived)",
        "declare e.g. 10.0.0.100/24", _vrrp_vip,
    ),
    Rule(
        "vrrp.interface_name", 1, ("sglang_frontend_vip_interface", "sglang_frontend_vip"),
        f"with a VRRP address, the interface is a Linux interface name (1 to {IFNAMSIZ - 1} characters, no '/', ':' "
        "or space)",
        "declare the interface as `ip link` names it", _vrrp_interface,
    ),
    Rule(
        "vrrp.vip_family_matches_peers", 2, ("sglang_frontend_vip", "sglang_advertise_host", "ansible_host"),
        "the VRRP address is of the IP family the front hosts' unicast peers are advertised at (keepalived)",
        "declare a VRRP address of the peers' family", _vrrp_family,
    ),
    Rule(
        "monitoring.prometheus_duration", 1, MONITORING_DURATIONS,
        "a Prometheus or Alertmanager duration (prometheus/common model.ParseDuration: digits with units y, w, d, h, "
        "m, s, ms, largest first, no spaces)",
        "write e.g. 15s or 1h30m", _monitoring_durations,
    ),
    Rule(
        "monitoring.policy", 1, ("sglang_monitoring_<Policy field>",),
        "the alert policy's fractions, SLOs and durations are ones the alert rules can be generated from and "
        "promtool accepts (sglang_alerts.Policy.from_vars)",
        "as the message names it", _monitoring_policy,
    ),
    Rule(
        "monitoring.receiver_named", 1, ("sglang_monitoring_alertmanager_receiver",),
        "Alertmanager's receiver is a mapping with a name (amtool check-config)",
        "declare e.g. {name: sglang}", _monitoring_receiver,
    ),
    Rule(
        "unit.words_known", 1, (*(f"{n}.Service.Restart" for n in UNIT_DICTS), "Type"),
        "Restart= and Type= are words systemd 252 knows",
        "use one of systemd's words", _unit_words,
    ),
    Rule(
        "unit.time_span", 1, (*TIME_DIRECTIVES, "sglang_engine_timeout_start_sec"),
        "a unit's timeouts and restart delay are systemd time spans (parse_sec)",
        "declare seconds or a span with units", _unit_times,
    ),
    Rule(
        "unit.resource_limit", 1, (*COUNT_LIMITS, *SIZE_LIMITS, "sglang_common_limit_nofile",
                                   "sglang_common_limit_memlock"),
        "a unit's resource limit is one systemd 252 parses (a count, a size for the byte limits, infinity, soft:hard "
        "with soft <= hard)",
        "declare a number, infinity or soft:hard", _unit_limits,
    ),
)  # fmt: skip
