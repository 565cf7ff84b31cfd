"""The rules on the front's, VRRP's, the monitoring's and the units' settings (plugins/plugin_utils/
sglang_component_rules.py) and the range of the other components' ports (fleet.component_port_range), through
check_fleet: each bad inventory yields exactly its problems, word for word; each unusual value the program accepts
(and the shipped inventories) yields none. The programs' own verdicts on these values are tested in
test_bad_envelope_corpus (test_the_program_refuses_the_value_and_accepts_the_fix)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_validate import check_fleet
from sglang_envelope_cli.commands import load_inventory
from shipped import REPO, SHIPPED, shipped_inventory
from test_stack_rules_exact import FRONT, _fleet
from test_validate_rules_exact import DSV4, GROUPS, rule_ids

VIP = {"sglang_frontend_vip": "10.0.0.100/24"}
TWO_FRONTS = {**GROUPS, "sglang_frontend": ["f", "g"]}

# (id, overrides of h, groups, other hosts' variables, rules, exact problems)
COMPONENT: list[tuple[str, dict[str, Any], dict[str, list[str]], dict[str, Any], set[str], list[str]]] = [
    (
        "front-check-interval-zero",
        {},
        FRONT,
        {"f": {"sglang_frontend_check_interval_ms": 0}},
        {"front.haproxy_positive"},
        [
            "f: sglang_frontend_check_interval_ms=0: HAProxy refuses it (haproxy -c: invalid value 0 for argument"
            " 'inter' of server default-server) [front.haproxy_positive]; fix: declare a positive number, e.g. "
            "the role's default 1000",
        ],
    ),
    (
        "front-fall-zero",
        {},
        FRONT,
        {"f": {"sglang_frontend_check_fall": 0}},
        {"front.haproxy_positive"},
        [
            "f: sglang_frontend_check_fall=0: HAProxy refuses it (haproxy -c: 'fall' has to be > 0) "
            "[front.haproxy_positive]; fix: declare a positive number, e.g. the role's default 2",
        ],
    ),
    (
        "front-retry-on-unknown-event",
        {},
        FRONT,
        {"f": {"sglang_frontend_retry_on": ["conn-failure", "timeout"]}},
        {"front.retry_on_known"},
        [
            "f: sglang_frontend_retry_on=['conn-failure', 'timeout']: HAProxy 2.6 knows no retry-on event "
            "'timeout' (haproxy -c: 'retry-on': unknown keyword 'timeout') [front.retry_on_known]; fix: use "
            "events of none, conn-failure, empty-response, junk-response, response-timeout, 0rtt-rejected, 401, "
            "403, 404, 408, 425, 500, 501, 502, 503, 504, all-retryable-errors",
        ],
    ),
    (
        "front-bind-address-with-port",
        {},
        FRONT,
        {"f": {"sglang_frontend_bind_address": "0.0.0.0:8080"}},
        {"front.address_without_port"},
        [
            "f: sglang_frontend_bind_address='0.0.0.0:8080': the role appends the port (sglang_frontend_port), so"
            " HAProxy reads '0.0.0.0:8080:<port>' (haproxy -c: 'bind' : invalid address: '0.0.0.0:8080') "
            "[front.address_without_port]; fix: declare the address alone (0.0.0.0) and the port in "
            "sglang_frontend_port",
        ],
    ),
    (
        "front-stats-address-ipv6-with-port",
        {},
        FRONT,
        {"f": {"sglang_frontend_stats_address": "[fd00::7]:8404"}},
        {"front.address_without_port"},
        [
            "f: sglang_frontend_stats_address='[fd00::7]:8404': the role appends the port "
            "(sglang_frontend_stats_port), so HAProxy reads '[fd00::7]:8404:<port>' (haproxy -c: 'bind' : invalid"
            " address: '[fd00::7]:8404') [front.address_without_port]; fix: declare the address alone (fd00::7) "
            "and the port in sglang_frontend_stats_port",
        ],
    ),
    (
        "front-port-above-16-bits",
        {},
        FRONT,
        {"f": {"sglang_frontend_port": 70000}},
        {"fleet.component_port_range"},
        [
            "f: sglang_frontend_port=70000: a port must be from 1 to 65535: HAProxy refuses the bind (haproxy -c:"
            " 'bind' : invalid port '70000') [fleet.component_port_range]; fix: declare a free port from 1 to "
            "65535",
        ],
    ),
    (
        "front-stats-port-zero",
        {},
        FRONT,
        {"f": {"sglang_frontend_stats_port": 0}},
        {"fleet.component_port_range"},
        [
            "f: sglang_frontend_stats_port=0: a port must be from 1 to 65535: HAProxy refuses the bind (haproxy "
            "-c: 'bind' : invalid port '0') [fleet.component_port_range]; fix: declare a free port from 1 to "
            "65535",
        ],
    ),
    (
        "prometheus-listen-above-16-bits",
        {"sglang_monitoring_prometheus_listen": "0.0.0.0:99999"},
        GROUPS,
        {},
        {"fleet.component_port_range"},
        [
            "h: sglang_monitoring_prometheus_listen=99999: a port must be from 1 to 65535: the program does not "
            "start (Go's net.Listen: listen tcp: address 99999: invalid port) [fleet.component_port_range]; fix: "
            "declare a free port from 1 to 65535",
        ],
    ),
    (
        "vrid-256",
        {},
        FRONT,
        {"f": {"sglang_frontend_vip": "10.0.0.100/24", "sglang_frontend_vip_router_id": 256}},
        {"vrrp.router_id_range"},
        [
            "f: sglang_frontend_vip_router_id=256: VRRP's virtual router id is one byte from 1 to 255 (keepalived"
            " -t: VRID '256' not valid - must be between 1 & 255) [vrrp.router_id_range]; fix: declare an id from"
            " 1 to 255 that no other VRRP router on the network uses",
        ],
    ),
    (
        "vip-prefix-33",
        {},
        FRONT,
        {"f": {"sglang_frontend_vip": "10.0.0.100/33"}},
        {"vrrp.vip_is_address"},
        [
            "f: sglang_frontend_vip='10.0.0.100/33': a prefix length above the address's 32 bits (keepalived -t: "
            "Invalid address prefix len 33 for address 10.0.0.100/33 - using 32, and exits 5) "
            "[vrrp.vip_is_address]; fix: declare an address like 10.0.0.100/24 (prefix up to 32, or 128 for IPv6)",
        ],
    ),
    (
        "vip-interface-with-a-slash",
        {},
        FRONT,
        {"f": {"sglang_frontend_vip": "10.0.0.100/24", "sglang_frontend_vip_interface": "eth0/1"}},
        {"vrrp.interface_name"},
        [
            "f: sglang_frontend_vip_interface='eth0/1': not a Linux interface name (1 to 15 characters, no '/', "
            "':' or space: net/core/dev.c dev_valid_name), so no interface carries the address (keepalived -t: "
            "WARNING - interface eth0/1 for vrrp_instance sglang_frontend doesn't exist) [vrrp.interface_name]; "
            "fix: declare the interface as `ip link` names it, e.g. eth0",
        ],
    ),
    (
        "ipv6-vip-among-ipv4-peers",
        {},
        TWO_FRONTS,
        {"f": {"sglang_frontend_vip": "fd00::5/64", "ansible_host": "10.0.0.1"}, "g": {"ansible_host": "10.0.0.2"}},
        {"vrrp.vip_family_matches_peers"},
        [
            "f: sglang_frontend_vip='fd00::5/64': an IPv6 address in a VRRP instance whose unicast peers speak "
            "IPv4 (10.0.0.1): keepalived drops it (keepalived -t: address family must match VRRP instance) "
            "[vrrp.vip_family_matches_peers]; fix: declare an IPv4 address, or advertise the front hosts at IPv6 "
            "addresses",
        ],
    ),
    (
        "group-wait-with-a-space",
        {"sglang_monitoring_alertmanager_group_wait": "30 sec"},
        GROUPS,
        {},
        {"monitoring.prometheus_duration"},
        [
            "h: sglang_monitoring_alertmanager_group_wait='30 sec': not a Prometheus duration (promtool, amtool "
            'and prometheus\'s flags: not a valid duration string: "30 sec") [monitoring.prometheus_duration]; '
            "fix: write digits with units of y, w, d, h, m, s, ms, largest first without spaces, e.g. 15s or "
            "1h30m",
        ],
    ),
    (
        "rate-window-zero",
        {"sglang_monitoring_rate_window": "0s"},
        GROUPS,
        {},
        {"monitoring.policy"},
        [
            "h: sglang_monitoring_rate_window='0s': must be a Prometheus duration in one unit of s, m, h or d, "
            "above 0 (a rate over 0s is a PromQL parse error) (promtool check rules: not a valid duration string)"
            " [monitoring.policy]; fix: e.g. 5m",
        ],
    ),
    (
        "warning-above-critical",
        {"sglang_monitoring_kv_usage_warning": 0.97, "sglang_monitoring_kv_usage_critical": 0.95},
        GROUPS,
        {},
        {"monitoring.policy"},
        [
            "h: sglang_monitoring_kv_usage_warning=0.97 must stay below sglang_monitoring_kv_usage_critical=0.95:"
            " the alert rules cannot be generated from it [monitoring.policy]; fix: lower the warning",
        ],
    ),
    (
        "receiver-a-string",
        {"sglang_monitoring_alertmanager_receiver": "sglang"},
        GROUPS,
        {},
        {"monitoring.receiver_named"},
        [
            "h: sglang_monitoring_alertmanager_receiver='sglang': Alertmanager's receiver needs a name, which the"
            " route sends every alert to (amtool check-config: missing name in receiver) "
            "[monitoring.receiver_named]; fix: declare a mapping with a name, e.g. {name: sglang}",
        ],
    ),
    (
        "role-override-type-typo",
        {"sglang_engine_unit_role_overrides": {"prefill": {}, "decode": {"Service": {"Type": "simpl"}}}},
        GROUPS,
        {},
        {"unit.words_known"},
        [
            "h: sglang_engine_unit_role_overrides.decode.Service.Type='simpl': systemd 252 knows no Type=simpl "
            "and starts the unit without it (systemd-analyze verify: Failed to parse service type, ignoring: "
            "simpl) [unit.words_known]; fix: use one of simple, exec, forking, oneshot, dbus, notify, idle",
        ],
    ),
    (
        "router-restart-sec-a-word",
        {"sglang_router_unit": {"Service": {"RestartSec": "ten"}}},
        GROUPS,
        {},
        {"unit.time_span"},
        [
            "h: sglang_router_unit.Service.RestartSec='ten': not a systemd time span: systemd 252 ignores "
            "RestartSec= (systemd-analyze verify: Failed to parse sec value, ignoring: ten) [unit.time_span]; "
            "fix: declare seconds (e.g. 120) or a span with units (2min 30s), or infinity",
        ],
    ),
    (
        "memlock-size-in-megabytes",
        {"sglang_common_limit_memlock": "8MB"},
        GROUPS,
        {},
        {"unit.resource_limit"},
        [
            "h: sglang_common_limit_memlock='8MB': systemd 252 cannot parse the limit and starts the unit without"
            " it (systemd-analyze verify: Failed to parse resource value, ignoring: 8MB) [unit.resource_limit]; "
            "fix: declare a number with an optional K, M or G suffix, infinity, or soft:hard",
        ],
    ),
    (
        "nofile-soft-above-hard",
        {"sglang_common_unit": {"Service": {"LimitNOFILE": "infinity:1024"}}},
        GROUPS,
        {},
        {"unit.resource_limit"},
        [
            "h: sglang_common_unit.Service.LimitNOFILE='infinity:1024': the soft limit is above the hard limit: "
            "systemd 252 starts the unit without it (systemd-analyze verify: Soft resource limit chosen higher "
            "than hard limit, ignoring: infinity:1024) [unit.resource_limit]; fix: declare soft <= hard, or one "
            "value for both",
        ],
    ),
]

# (id, overrides of h, groups, other hosts' variables): values the programs accept.
GOOD: list[tuple[str, dict[str, Any], dict[str, list[str]], dict[str, Any]]] = [
    (
        "front-every-retry-event",
        {},
        FRONT,
        {"f": {"sglang_frontend_retry_on": ["all-retryable-errors", "503", "0rtt-rejected"]}},
    ),
    ("front-one-retry-event-as-a-string", {}, FRONT, {"f": {"sglang_frontend_retry_on": "conn-failure"}}),
    (
        "front-ipv6-and-name-addresses",
        {},
        FRONT,
        {"f": {"sglang_frontend_bind_address": "::", "sglang_frontend_stats_address": "front-1.example"}},
    ),
    (
        "front-one-check-to-fall-or-rise",
        {},
        FRONT,
        {
            "f": {
                "sglang_frontend_check_fall": 1,
                "sglang_frontend_check_rise": 1,
                "sglang_frontend_buffer_bytes": 16384,
            }
        },
    ),
    (
        "vrid-at-both-ends",
        {},
        TWO_FRONTS,
        {"f": {**VIP, "sglang_frontend_vip_router_id": 1}, "g": {**VIP, "sglang_frontend_vip_router_id": 255}},
    ),
    (
        "vip-without-prefix-on-a-15-character-interface",
        {},
        FRONT,
        {"f": {"sglang_frontend_vip": "10.0.0.100", "sglang_frontend_vip_interface": "enp129s0f1np1.9"}},
    ),
    (
        "ipv6-vip-among-ipv6-peers",
        {},
        TWO_FRONTS,
        {"f": {"sglang_frontend_vip": "fd00::5/64", "ansible_host": "fd00::1"}, "g": {"ansible_host": "fd00::2"}},
    ),
    ("ipv6-vip-on-one-front", {}, FRONT, {"f": {"sglang_frontend_vip": "fd00::5/64", "ansible_host": "10.0.0.1"}}),
    ("router-id-out-of-range-without-a-vip", {}, FRONT, {"f": {"sglang_frontend_vip_router_id": 300}}),
    (
        "prometheus-compound-durations",
        {
            "sglang_monitoring_scrape_interval": "1m30s",
            "sglang_monitoring_evaluation_interval": "0",
            "sglang_monitoring_prometheus_retention": "2w",
            "sglang_monitoring_alertmanager_group_wait": "500ms",
        },
        GROUPS,
        {},
    ),
    (
        "policy-durations-in-seconds-and-hours",
        {
            "sglang_monitoring_for_short": "90s",
            "sglang_monitoring_for_long": "1h",
            "sglang_monitoring_rate_window": "2m",
            "sglang_monitoring_front_out_for": "1d",
        },
        GROUPS,
        {},
    ),
    (
        "monitoring-off-with-bad-settings",
        {"sglang_monitoring_enabled": False, "sglang_monitoring_scrape_interval": "15"},
        GROUPS,
        {},
    ),
    (
        "receiver-with-a-webhook",
        {
            "sglang_monitoring_alertmanager_receiver": {
                "name": "pager",
                "webhook_configs": [{"url": "http://10.0.0.9/hook"}],
            }
        },
        GROUPS,
        {},
    ),
    (
        "unit-words-and-spans-systemd-reads",
        {
            "sglang_engine_unit": {
                "Service": {
                    "Restart": "always",
                    "Type": "notify",
                    "RestartSec": "5min 30s",
                    "TimeoutStopSec": "infinity",
                }
            },
            "sglang_router_unit": {"Service": {"RestartSec": 1.5, "TimeoutStartSec": "2 weeks"}},
        },
        GROUPS,
        {},
    ),
    (
        "limits-systemd-reads",
        {
            "sglang_common_limit_nofile": "1024:infinity",
            "sglang_common_limit_memlock": "64K:1.5G",
            "sglang_common_unit": {"Service": {"LimitNOFILE": 4096, "LimitMEMLOCK": "infinity"}},
        },
        GROUPS,
        {},
    ),
    (
        "unit-values-the-role-renders",
        {
            "sglang_common_unit": {"Service": {"LimitNOFILE": "{{ sglang_common_limit_nofile }}"}},
            "sglang_engine_timeout_start_sec": 0,
        },
        GROUPS,
        {},
    ),
    (
        "component-ports-at-both-ends",
        {"sglang_monitoring_node_exporter_port": 65535, "sglang_monitoring_alertmanager_listen": "127.0.0.1:1024"},
        GROUPS,
        {},
    ),
]


@pytest.mark.parametrize(("overrides", "groups", "hosts", "rules", "expected"), [c[1:] for c in COMPONENT],
                         ids=[c[0] for c in COMPONENT])  # fmt: skip
def test_bad_inventory_yields_exactly_its_problems(
    overrides: dict[str, Any], groups: dict[str, list[str]], hosts: dict[str, Any], rules: set[str], expected: list[str]
) -> None:
    problems = check_fleet(_fleet(overrides, groups, **hosts), groups, DSV4)
    assert (rule_ids(problems), problems) == (rules, expected)


@pytest.mark.parametrize(("overrides", "groups", "hosts"), [c[1:] for c in GOOD], ids=[c[0] for c in GOOD])
def test_valid_inventory_passes(overrides: dict[str, Any], groups: dict[str, list[str]], hosts: dict[str, Any]) -> None:
    assert check_fleet(_fleet(overrides, groups, **hosts), groups, DSV4) == []


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "inventories").iterdir() if p.is_dir()))
def test_the_shipped_inventories_pass(name: str) -> None:
    hostvars, groups = shipped_inventory(name) if name in SHIPPED else load_inventory(str(REPO / "inventories" / name))
    [model] = {hv["sglang_model"]["name"] for hv in hostvars.values() if "sglang_model" in hv}
    config = json.loads((REPO / "models" / model / "config.json").read_text())
    assert check_fleet(hostvars, groups, config) == []
