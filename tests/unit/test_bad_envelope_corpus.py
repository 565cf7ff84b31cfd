"""Bad envelopes of new kinds, each refused by the validation (check_fleet) with the declared variable named.

Each case cites where the consuming program shows the failure (its source file and function, or this repository's
rule that encodes it). The corpus holds 16 cases: declared keys the roles replace 5, ports 5, units 3, timeouts
against time 2, what needs what 1. The families the render-time file check covers (HAProxy, keepalived,
Prometheus, Alertmanager, systemd) are not in it yet."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_validate import check_fleet
from test_stack_rules_exact import FRONT, GROUPS, _fleet
from test_validate_rules_exact import _C, _D, _P, _R, DSV4, _with, rule_ids

TWO = {"sglang_prefill": ["h"], "sglang_decode": ["h"], "sglang_router": ["r"]}

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
]  # fmt: skip


def test_corpus_size() -> None:
    ids = [c[0] for c in CORPUS]
    assert len(set(ids)) == len(ids) == 16


@pytest.mark.parametrize(("overrides", "groups", "hosts", "rule", "var", "source"), [c[1:] for c in CORPUS],
                         ids=[c[0] for c in CORPUS])  # fmt: skip
def test_refused_naming_the_declared_variable(
    overrides: dict[str, Any], groups: dict[str, list[str]], hosts: dict[str, Any], rule: str, var: str, source: str
) -> None:
    problems = check_fleet(_fleet(overrides, groups, **hosts), groups, DSV4)
    assert rule in rule_ids(problems), problems
    assert any(f": {var}=" in p and f"[{rule}]" in p for p in problems), problems
    assert source
