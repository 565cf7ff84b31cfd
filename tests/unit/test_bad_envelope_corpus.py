"""Bad envelopes of many kinds, each refused by the validation (check_fleet) with the declared variable named.

Each case cites where the consuming program shows the failure (its source file and function, its own words on the
value, or this repository's rule that encodes it). The corpus holds 49 cases: declared keys the roles replace 5,
ports 5, units 3, timeouts against time 2, what needs what 1, and the families the render-time file check covers:
the HAProxy front 10, its keepalived VRRP address 7, Prometheus and Alertmanager 8, the systemd units 8.

For the cases of those families, test_the_program_refuses_the_value_and_accepts_the_fix runs the program itself
(haproxy -c, keepalived -t, promtool, amtool, systemd-analyze verify) on a small file written as the role writes it:
the declared value is refused in the words the case cites, and the fix the validation accepts is accepted."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_filecheck as fc
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_validate import check_fleet
from test_stack_rules_exact import FRONT, GROUPS, _fleet
from test_validate_rules_exact import _C, _D, _P, _R, DSV4, _with, rule_ids

TWO = {"sglang_prefill": ["h"], "sglang_decode": ["h"], "sglang_router": ["r"]}
TWO_FRONTS = {**GROUPS, "sglang_frontend": ["f", "g"]}
VIP = "10.0.0.100/24"

# (id, overrides of h, groups, other hosts' variables, the rule id, the declared variable named, the source)
CORPUS: list[tuple[str, dict[str, Any], dict[str, list[str]], dict[str, Any], str, str, str]] = [
    # Declared keys the roles replace.
    ("prefill-declares-decode-mode", _with(_P, disaggregation_mode="decode"), GROUPS, {}, "engine.not_overridden",
     "sglang_prefill.disaggregation_mode", "module_utils/sglang_declared.py engine_envelope sets the group's role"),
    ("decode-declares-prefill-mode", _with(_D, disaggregation_mode="prefill"), GROUPS, {}, "engine.not_overridden",
     "sglang_decode.disaggregation_mode", "module_utils/sglang_declared.py engine_envelope sets the group's role"),
    ("shared-api-key", _with(_C, api_key="k"), GROUPS, {}, "engine.not_overridden", "sglang_engine_common.api_key",
     "module_utils/sglang_flags.py to_argv renders ${SGLANG_API_KEY}; roles/sglang_engine/tasks/deploy.yml fills it "
     "from sglang_api_key"),
    ("decode-api-key", _with(_D, api_key="k"), GROUPS, {}, "engine.not_overridden", "sglang_decode.api_key",
     "module_utils/sglang_flags.py to_argv; roles/sglang_engine/tasks/deploy.yml"),
    ("router-api-key", _with(_R, api_key="k"), GROUPS, {}, "router.not_overridden", "sglang_router.api_key",
     "module_utils/sglang_flags.py to_argv; roles/sglang_router/tasks/deploy.yml"),
    # Ports: one map per host.
    ("router-metrics-on-the-decode-port", _with(_R, prometheus_port=30001), GROUPS, {}, "fleet.ports_free",
     "sglang_router.prometheus_port", "a second bind of one port fails with EADDRINUSE (socket bind)"),
    ("router-on-the-bootstrap-port", _with(_R, port=8998), GROUPS, {}, "fleet.ports_free", "sglang_router.port",
     "SGLang's bootstrap server binds disaggregation_bootstrap_port (disaggregation/common/conn.py)"),
    ("node-exporter-on-the-router-metrics", {"sglang_monitoring_node_exporter_port": 29000}, GROUPS, {},
     "fleet.ports_free", "sglang_monitoring_node_exporter_port", "prometheus-node-exporter --web.listen-address"),
    ("decode-on-the-prefill-port", _with(_D, port=30000), GROUPS, {}, "fleet.ports_free", "sglang_decode.port",
     "uvicorn's bind in SGLang's http_server.launch_server"),
    ("router-port-above-16-bits", _with(_R, port=70000), GROUPS, {}, "router.port", "sglang_router.port",
     "smg's Rust RouterConfig port is a u16 (OverflowError in smg.launch_router)"),
    # Units.
    ("router-timeout-in-milliseconds", _with(_R, request_timeout_secs=1_800_000), GROUPS, {}, "units.seconds_plausible",
     "sglang_router.request_timeout_secs", "smg reads request_timeout_secs in seconds (smg launch --help)"),
    ("watchdog-in-milliseconds", _with(_C, watchdog_timeout=600_000), GROUPS, {}, "units.seconds_plausible",
     "sglang_engine_common.watchdog_timeout", "SGLang's watchdog_timeout is seconds (create_scheduler_watchdog)"),
    ("front-timeout-bare-number", {}, FRONT, {"f": {"sglang_frontend_timeout_silent": "3600"}},
     "units.haproxy_time_has_unit", "sglang_frontend_timeout_silent",
     "HAProxy reads a bare time in milliseconds (HAProxy 2.6 configuration.txt, 'Time format')"),
    # Timeouts against the longest call the envelope admits.
    ("router-timeout-below-the-longest-call", _with(_R, request_timeout_secs=30), GROUPS, {},
     "timeout.router_request_fits_longest_call", "sglang_router.request_timeout_secs",
     "smg cuts a PD call at request_timeout_secs, a whole-attempt deadline (docs/validation.md, timeout.*)"),
    ("watchdog-below-one-chunk", _with(_C, watchdog_timeout=1), GROUPS, {}, "timeout.watchdog_fits_longest_step",
     "sglang_engine_common.watchdog_timeout", "SGLang's create_scheduler_watchdog fires when forward_ct stalls"),
    # What needs what.
    ("loopback-router-behind-a-remote-front", _with(_R, host="127.0.0.1"), FRONT, {}, "needs.front_reaches_routers",
     "sglang_router.host", "HAProxy's server line connects to the router's address from the front host"),
    # The HAProxy front (haproxy -c, HAProxy 2.6.12).
    ("front-check-interval-zero", {}, FRONT, {"f": {"sglang_frontend_check_interval_ms": 0}}, "front.haproxy_positive",
     "sglang_frontend_check_interval_ms", "haproxy -c: invalid value 0 for argument 'inter' of server default-server"),
    ("front-fall-zero", {}, FRONT, {"f": {"sglang_frontend_check_fall": 0}}, "front.haproxy_positive",
     "sglang_frontend_check_fall", "haproxy -c: 'fall' has to be > 0"),
    ("front-rise-zero", {}, FRONT, {"f": {"sglang_frontend_check_rise": 0}}, "front.haproxy_positive",
     "sglang_frontend_check_rise", "haproxy -c: 'rise' has to be > 0"),
    ("front-buffer-zero", {}, FRONT, {"f": {"sglang_frontend_buffer_bytes": 0}}, "front.haproxy_positive",
     "sglang_frontend_buffer_bytes", "haproxy -c: 'tune.bufsize' expects a positive integer argument"),
    ("front-retry-on-unknown-event", {}, FRONT, {"f": {"sglang_frontend_retry_on": ["conn-failure", "timeout"]}},
     "front.retry_on_known", "sglang_frontend_retry_on", "haproxy -c: 'retry-on': unknown keyword 'timeout'"),
    ("front-retry-on-429", {}, FRONT, {"f": {"sglang_frontend_retry_on": ["429"]}}, "front.retry_on_known",
     "sglang_frontend_retry_on", "haproxy -c: 'retry-on': unknown keyword '429' (HAProxy 2.6 retries no 429)"),
    ("front-bind-address-with-port", {}, FRONT, {"f": {"sglang_frontend_bind_address": "0.0.0.0:8080"}},
     "front.address_without_port", "sglang_frontend_bind_address",
     "haproxy -c: 'bind' : invalid address: '0.0.0.0:8080' in '0.0.0.0:8080:8080'"),
    ("front-stats-address-with-port", {}, FRONT, {"f": {"sglang_frontend_stats_address": "10.0.0.7:8404"}},
     "front.address_without_port", "sglang_frontend_stats_address", "haproxy -c: 'bind' : invalid address"),
    ("front-port-above-16-bits", {}, FRONT, {"f": {"sglang_frontend_port": 70000}}, "fleet.component_port_range",
     "sglang_frontend_port", "haproxy -c: 'bind' : invalid port '70000'"),
    ("front-stats-port-zero", {}, FRONT, {"f": {"sglang_frontend_stats_port": 0}}, "fleet.component_port_range",
     "sglang_frontend_stats_port", "haproxy -c: 'bind' : invalid port '0'"),
    # The front's VRRP address (keepalived -t, keepalived 2.2.7).
    ("vrid-zero", {}, FRONT, {"f": {"sglang_frontend_vip": VIP, "sglang_frontend_vip_router_id": 0}},
     "vrrp.router_id_range", "sglang_frontend_vip_router_id",
     "keepalived -t: VRID '0' not valid - must be between 1 & 255"),
    ("vrid-256", {}, FRONT, {"f": {"sglang_frontend_vip": VIP, "sglang_frontend_vip_router_id": 256}},
     "vrrp.router_id_range", "sglang_frontend_vip_router_id", "keepalived -t: VRID '256' not valid"),
    ("vip-not-an-address", {}, FRONT, {"f": {"sglang_frontend_vip": "10.0.0.300/24"}}, "vrrp.vip_is_address",
     "sglang_frontend_vip", "keepalived -t: VRRP parsed invalid IP 10.0.0.300/24. skipping IP..."),
    ("vip-a-name", {}, FRONT, {"f": {"sglang_frontend_vip": "front.example"}}, "vrrp.vip_is_address",
     "sglang_frontend_vip", "keepalived -t: VRRP parsed invalid IP front.example. skipping IP..."),
    ("vip-prefix-33", {}, FRONT, {"f": {"sglang_frontend_vip": "10.0.0.100/33"}}, "vrrp.vip_is_address",
     "sglang_frontend_vip", "keepalived -t: Invalid address prefix len 33 for address 10.0.0.100/33 - using 32"),
    ("vip-interface-too-long", {}, FRONT,
     {"f": {"sglang_frontend_vip": VIP, "sglang_frontend_vip_interface": "enp129s0f1np1.100"}},
     "vrrp.interface_name", "sglang_frontend_vip_interface",
     "keepalived -t: Interface name 'enp129s0f1np1.100' too long - ignoring (Linux IFNAMSIZ 16)"),
    ("ipv6-vip-among-ipv4-peers", {}, TWO_FRONTS,
     {"f": {"sglang_frontend_vip": "fd00::5/64", "ansible_host": "10.0.0.1"}, "g": {"ansible_host": "10.0.0.2"}},
     "vrrp.vip_family_matches_peers", "sglang_frontend_vip",
     "keepalived -t: address family must match VRRP instance [fd00::5/64] - ignoring"),
    # Prometheus and Alertmanager (promtool 2.42, amtool, prometheus's flags).
    ("scrape-interval-bare-number", {"sglang_monitoring_scrape_interval": "15"}, GROUPS, {},
     "monitoring.prometheus_duration", "sglang_monitoring_scrape_interval",
     'promtool check config: not a valid duration string: "15"'),
    ("evaluation-interval-1min", {"sglang_monitoring_evaluation_interval": "1min"}, GROUPS, {},
     "monitoring.prometheus_duration", "sglang_monitoring_evaluation_interval",
     'promtool check config: not a valid duration string: "1min"'),
    ("retention-with-a-space", {"sglang_monitoring_prometheus_retention": "15 days"}, GROUPS, {},
     "monitoring.prometheus_duration", "sglang_monitoring_prometheus_retention",
     'prometheus --storage.tsdb.retention.time="15 days" exits 2: Error parsing commandline arguments: not a valid '
     'duration string: "15 days"'),
    ("group-wait-with-a-space", {"sglang_monitoring_alertmanager_group_wait": "30 sec"}, GROUPS, {},
     "monitoring.prometheus_duration", "sglang_monitoring_alertmanager_group_wait",
     'amtool check-config: not a valid duration string: "30 sec"'),
    ("receiver-without-a-name", {"sglang_monitoring_alertmanager_receiver": {"name": ""}}, GROUPS, {},
     "monitoring.receiver_named", "sglang_monitoring_alertmanager_receiver",
     "amtool check-config: missing name in receiver"),
    ("for-short-with-a-space", {"sglang_monitoring_for_short": "1 min"}, GROUPS, {}, "monitoring.policy",
     "sglang_monitoring_for_short", 'promtool check rules: not a valid duration string: "1 min"'),
    ("rate-window-zero", {"sglang_monitoring_rate_window": "0s"}, GROUPS, {}, "monitoring.policy",
     "sglang_monitoring_rate_window", "promtool check rules: parse error: duration must be greater than 0"),
    ("prometheus-listen-above-16-bits", {"sglang_monitoring_prometheus_listen": "0.0.0.0:99999"}, GROUPS, {},
     "fleet.component_port_range", "sglang_monitoring_prometheus_listen",
     'prometheus --web.listen-address=0.0.0.0:99999: "Unable to start web listener" err="listen tcp: address 99999: '
     'invalid port"'),
    # The servers' systemd units (systemd-analyze verify, systemd 252).
    ("engine-restart-unknown", {"sglang_engine_unit": {"Service": {"Restart": "sometimes"}}}, GROUPS, {},
     "unit.words_known", "sglang_engine_unit.Service.Restart",
     "systemd-analyze verify: Failed to parse service restart specifier, ignoring: sometimes"),
    ("decode-type-typo", {"sglang_engine_unit_role_overrides": {"decode": {"Service": {"Type": "simpl"}}}}, GROUPS,
     {}, "unit.words_known", "sglang_engine_unit_role_overrides.decode.Service.Type",
     "systemd-analyze verify: Failed to parse service type, ignoring: simpl"),
    ("router-restart-sec-a-word", {"sglang_router_unit": {"Service": {"RestartSec": "ten"}}}, GROUPS, {},
     "unit.time_span", "sglang_router_unit.Service.RestartSec",
     "systemd-analyze verify: Failed to parse sec value, ignoring: ten"),
    ("common-timeout-stop-bad-unit", {"sglang_common_unit": {"Service": {"TimeoutStopSec": "2x"}}}, GROUPS, {},
     "unit.time_span", "sglang_common_unit.Service.TimeoutStopSec",
     "systemd-analyze verify: Failed to parse time value, ignoring: 2x"),
    ("engine-timeout-start-negative", {"sglang_engine_timeout_start_sec": -5}, GROUPS, {}, "unit.time_span",
     "sglang_engine_timeout_start_sec",
     "systemd-analyze verify: Failed to parse TimeoutStartSec= parameter, ignoring: -5"),
    ("nofile-unlimited", {"sglang_common_limit_nofile": "unlimited"}, GROUPS, {}, "unit.resource_limit",
     "sglang_common_limit_nofile", "systemd-analyze verify: Failed to parse resource value, ignoring: unlimited"),
    ("memlock-in-megabytes", {"sglang_common_limit_memlock": "8MB"}, GROUPS, {}, "unit.resource_limit",
     "sglang_common_limit_memlock", "systemd-analyze verify: Failed to parse resource value, ignoring: 8MB"),
    ("memlock-soft-above-hard", {"sglang_common_limit_memlock": "1G:1M"}, GROUPS, {}, "unit.resource_limit",
     "sglang_common_limit_memlock",
     "systemd-analyze verify: Soft resource limit chosen higher than hard limit, ignoring: 1G:1M"),
]  # fmt: skip


def test_corpus_size() -> None:
    ids = [c[0] for c in CORPUS]
    assert len(set(ids)) == len(ids) == 49


@pytest.mark.parametrize(("overrides", "groups", "hosts", "rule", "var", "source"), [c[1:] for c in CORPUS],
                         ids=[c[0] for c in CORPUS])  # fmt: skip
def test_refused_naming_the_declared_variable(
    overrides: dict[str, Any], groups: dict[str, list[str]], hosts: dict[str, Any], rule: str, var: str, source: str
) -> None:
    problems = check_fleet(_fleet(overrides, groups, **hosts), groups, DSV4)
    assert rule in rule_ids(problems), problems
    assert any(f": {var}=" in p and f"[{rule}]" in p for p in problems), problems
    assert source


# Small files written as the roles write them (roles/sglang_frontend/templates, roles/sglang_monitoring/vars/main.yml,
# roles/sglang_common/templates/server.service.j2), each field a declared variable's place in it.
HAPROXY = """global
    maxconn 4096
    tune.bufsize {buffer}
defaults
    mode http
    timeout connect 2000ms
    timeout client 1h
    timeout server 1h
    retries 3
    option redispatch 1
    retry-on {retry_on}
frontend sglang
    bind {bind}:{port}
    default_backend routers
backend routers
    balance leastconn
    option httpchk GET /readiness
    default-server check inter {inter}ms fall {fall} rise {rise}
    server r 10.0.0.5:8000
frontend stats
    bind {stats_address}:{stats_port}
    stats enable
"""
KEEPALIVED = """vrrp_instance sglang_frontend {{
    state BACKUP
    interface {interface}
    virtual_router_id {vrid}
    priority 200
    advert_int 1
    unicast_src_ip 10.0.0.1
    unicast_peer {{
        10.0.0.2
    }}
    virtual_ipaddress {{
        {vip}
    }}
}}
"""
PROMETHEUS = "global:\n  scrape_interval: '{scrape}'\n  evaluation_interval: '{evaluation}'\n"
RULES = """groups:
  - name: sglang
    rules:
      - alert: SMGRejecting
        expr: rate(smg_http_responses_total[{window}]) > 0
        for: '{for_}'
"""
ALERTMANAGER = """route:
  receiver: '{name}'
  group_wait: '{group_wait}'
receivers:
  - name: '{name}'
"""
UNIT = """[Unit]
Description=SGLang DeepSeek-V4 router
[Service]
Type={type}
ExecStart={stub}
Restart={restart}
RestartSec={restart_sec}
TimeoutStartSec={timeout_start}
TimeoutStopSec={timeout_stop}
LimitNOFILE={nofile}
LimitMEMLOCK={memlock}
[Install]
WantedBy=multi-user.target
"""


def _interface() -> str:
    """An interface of this machine: keepalived -t refuses one it lacks."""
    return sorted(p.name for p in Path("/sys/class/net").glob("*") if p.name != "lo")[0]


# program -> (file name, text, its fields' accepted values, arguments before the file)
FILES: dict[str, tuple[str, str, dict[str, Any], list[str]]] = {
    "haproxy": ("haproxy.cfg", HAPROXY, {"buffer": 65536, "retry_on": "conn-failure empty-response", "bind": "*",
                "port": 8080, "inter": 1000, "fall": 2, "rise": 2, "stats_address": "10.0.0.7", "stats_port": 8404},
                ["-c", "-f"]),
    "keepalived": ("keepalived.conf", KEEPALIVED, {"vrid": 51, "vip": VIP}, ["-t", "-f"]),
    "promtool-config": ("prometheus.yml", PROMETHEUS, {"scrape": "15s", "evaluation": "15s"},
                        ["check", "config", "--syntax-only"]),
    "promtool-rules": ("sglang_rules.yml", RULES, {"window": "5m", "for_": "1m"}, ["check", "rules"]),
    "amtool": ("alertmanager.yml", ALERTMANAGER, {"name": "sglang", "group_wait": "30s"}, ["check-config"]),
    "systemd-analyze": ("sglang-dsv4-router.service", UNIT, {"type": "simple", "restart": "on-failure",
                        "restart_sec": 10, "timeout_start": 300, "timeout_stop": 120, "nofile": 1048576,
                        "memlock": "infinity"}, ["verify", "--man=no", "--generators=no"]),
}  # fmt: skip
# case id -> (program, field, the case's declared value, its fix (None: this machine's interface), what the program
# says of the value). The role renders a list joined by spaces (retry-on).
PROOF: dict[str, tuple[str, str, Any, Any, str]] = {
    "front-check-interval-zero": ("haproxy", "inter", 0, 1000, "invalid value 0 for argument 'inter'"),
    "front-fall-zero": ("haproxy", "fall", 0, 1, "'fall' has to be > 0"),
    "front-rise-zero": ("haproxy", "rise", 0, 1, "'rise' has to be > 0"),
    "front-buffer-zero": ("haproxy", "buffer", 0, 16384, "'tune.bufsize' expects a positive integer argument"),
    "front-retry-on-unknown-event": ("haproxy", "retry_on", ["conn-failure", "timeout"],
                                     ["conn-failure", "response-timeout"], "'retry-on': unknown keyword 'timeout'"),
    "front-retry-on-429": ("haproxy", "retry_on", ["429"], ["503"], "'retry-on': unknown keyword '429'"),
    "front-bind-address-with-port": ("haproxy", "bind", "0.0.0.0:8080", "0.0.0.0",
                                     "invalid address: '0.0.0.0:8080' in '0.0.0.0:8080:8080'"),
    "front-stats-address-with-port": ("haproxy", "stats_address", "10.0.0.7:8404", "10.0.0.7",
                                      "invalid address: '10.0.0.7:8404'"),
    "front-port-above-16-bits": ("haproxy", "port", 70000, 65535, "invalid port '70000'"),
    "front-stats-port-zero": ("haproxy", "stats_port", 0, 1, "invalid port '0'"),
    "vrid-zero": ("keepalived", "vrid", 0, 1, "VRID '0' not valid - must be between 1 & 255"),
    "vrid-256": ("keepalived", "vrid", 256, 255, "VRID '256' not valid - must be between 1 & 255"),
    "vip-not-an-address": ("keepalived", "vip", "10.0.0.300/24", VIP, "VRRP parsed invalid IP 10.0.0.300/24"),
    "vip-a-name": ("keepalived", "vip", "front.example", "10.0.0.100", "VRRP parsed invalid IP front.example"),
    "vip-prefix-33": ("keepalived", "vip", "10.0.0.100/33", "10.0.0.100/32", "Invalid address prefix len 33"),
    "vip-interface-too-long": ("keepalived", "interface", "enp129s0f1np1.100", None, "too long - ignoring"),
    "ipv6-vip-among-ipv4-peers": ("keepalived", "vip", "fd00::5/64", VIP, "address family must match VRRP instance"),
    "scrape-interval-bare-number": ("promtool-config", "scrape", "15", "15s", 'not a valid duration string: "15"'),
    "evaluation-interval-1min": ("promtool-config", "evaluation", "1min", "1m30s",
                                 'not a valid duration string: "1min"'),
    "group-wait-with-a-space": ("amtool", "group_wait", "30 sec", "500ms", 'not a valid duration string: "30 sec"'),
    "receiver-without-a-name": ("amtool", "name", "", "pager", "missing name in receiver"),
    "for-short-with-a-space": ("promtool-rules", "for_", "1 min", "90s", 'not a valid duration string: "1 min"'),
    "rate-window-zero": ("promtool-rules", "window", "0s", "2m", "duration must be greater than 0"),
    "engine-restart-unknown": ("systemd-analyze", "restart", "sometimes", "always",
                               "Failed to parse service restart specifier, ignoring: sometimes"),
    "decode-type-typo": ("systemd-analyze", "type", "simpl", "notify", "Failed to parse service type, ignoring: simpl"),
    "router-restart-sec-a-word": ("systemd-analyze", "restart_sec", "ten", "5min 30s",
                                  "Failed to parse sec value, ignoring: ten"),
    "common-timeout-stop-bad-unit": ("systemd-analyze", "timeout_stop", "2x", "infinity",
                                     "Failed to parse time value, ignoring: 2x"),
    "engine-timeout-start-negative": ("systemd-analyze", "timeout_start", -5, 0,
                                      "Failed to parse TimeoutStartSec= parameter, ignoring: -5"),
    "nofile-unlimited": ("systemd-analyze", "nofile", "unlimited", "1024:infinity",
                         "Failed to parse resource value, ignoring: unlimited"),
    "memlock-in-megabytes": ("systemd-analyze", "memlock", "8MB", "8M",
                             "Failed to parse resource value, ignoring: 8MB"),
    "memlock-soft-above-hard": ("systemd-analyze", "memlock", "1G:1M", "64K:1.5G",
                                "Soft resource limit chosen higher than hard limit, ignoring: 1G:1M"),
}  # fmt: skip
# Cases whose program reads the value from its command line, not a file (cited in the case's source instead).
FLAG_ONLY = {"retention-with-a-space", "prometheus-listen-above-16-bits"}
FAMILIES = ("front.", "vrrp.", "monitoring.", "unit.", "fleet.component_port_range")


def _says(program: str, field: str, value: Any, tmp: Path) -> tuple[int, str]:
    """(exit status, output) of the program on its file with `field` at `value` and every other field accepted."""
    name, text, fields, args = FILES[program]
    binary = program.split("-")[0] if program != "systemd-analyze" else program
    found = shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/sbin")
    if found is None or fc.version(binary) is None:
        pytest.skip(f"{binary} is not installed (make apt)")
    stub = tmp / "exec-stub"
    stub.write_text("#!/bin/sh\n")
    stub.chmod(0o755)
    values = {**fields, "interface": _interface(), "stub": stub, field: value}
    values = {k: " ".join(v) if isinstance(v, list) else v for k, v in values.items()}
    path = tmp / name
    path.write_text(text.format(**values))
    done = subprocess.run([found, *args, str(path)], capture_output=True, text=True, check=False, timeout=60)
    return done.returncode, f"{done.stdout}\n{done.stderr}"


def test_every_case_of_the_program_families_is_proven_by_the_program() -> None:
    family = {c[0] for c in CORPUS if c[4].startswith(FAMILIES)}
    assert family - FLAG_ONLY == set(PROOF) and FLAG_ONLY <= family


@pytest.mark.parametrize("case", sorted(PROOF))
def test_the_program_refuses_the_value_and_accepts_the_fix(case: str, tmp_path: Path) -> None:
    program, field, value, fix, said = PROOF[case]
    fix = _interface() if fix is None else fix
    refused_rc, refused = _says(program, field, value, tmp_path)
    assert said in refused, refused
    accepted_rc, accepted = _says(program, field, fix, tmp_path)
    assert accepted_rc == 0 and said not in accepted, accepted
    # The validation accepts the fix.
    if program == "systemd-analyze":
        assert ", ignoring" not in accepted, accepted  # systemd exits 0 and starts the unit without the directive
    elif program == "keepalived":
        assert accepted.strip() == "" and refused_rc != 0, (refused, accepted)  # any line is a refusal
    else:
        assert refused_rc != 0, refused
    [entry] = [c for c in CORPUS if c[0] == case]
    overrides, groups, hosts = entry[1:4]
    fixed = {h: _fixed(v, value, fix) for h, v in hosts.items()}
    assert check_fleet(_fleet(_fixed(overrides, value, fix), groups, **fixed), groups, DSV4) == []


def _fixed(declared: Any, value: Any, fix: Any) -> Any:
    """The case's variables with its value replaced by the fix."""
    if declared == value and type(declared) is type(value):
        return fix
    return {k: _fixed(v, value, fix) for k, v in declared.items()} if isinstance(declared, dict) else declared
