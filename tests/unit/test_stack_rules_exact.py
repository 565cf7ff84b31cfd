"""The rules between the components of the stack (plugins/plugin_utils/sglang_stack_rules.py) and the one port map per
host (fleet.ports_free over every listener), through check_fleet: each bad inventory yields exactly its problems, word
for word; each unusual valid one yields none.

The base is the shared envelope of test_validate_rules_exact on host `h` (prefill, decode, router), with a HAProxy
front on host `f` (sglang_frontend) where a case adds one. The unit tests run without the time model (conftest), so
the table's longest call is the fallback: the capacity model's per-call context, 524288 tokens, at
PREFILL_TOKENS_PER_S = 7900: 66.37 s. The time model's longest call is pinned below on a stub step source, and the
fallback once more with the estimator's real availability check saying no."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_perf_fleet
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_aic import AicSteps
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_stack_rules import (
    PREFILL_TOKENS_PER_S,
    haproxy_seconds,
    longest_call_s,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_validate import check_fleet
from test_perf_fleet import Stub
from test_validate_rules_exact import _C, _D, _P, _R, BASE, DSV4, GROUPS, _hostvars, _with, rule_ids

# the real default_steps, before the unit tests' autouse fixture replaces it with "no step source"
REAL_DEFAULT_STEPS = sglang_perf_fleet.default_steps

FRONT = {**GROUPS, "sglang_frontend": ["f"]}
MESH = {**GROUPS, "sglang_router": ["h", "r2"]}
HALF = _with(_R, max_concurrent_requests=32)  # two routers share the decode fleet's 64
TWO_HOSTS = {"sglang_prefill": ["h"], "sglang_decode": ["h"], "sglang_router": ["r"], "sglang_frontend": ["f"]}
FIX_PORTS = "fix: give each server on a host its own ports"
LONGEST = (
    "a 524288-token prompt takes 66 s to prefill at 7900 tokens/s (the time model is not available, time: not "
    "predicted (make perf-venv); the capacity model's longest prompt at the stated rate instead), so the call is cut "
    "off"
)


def _fleet(overrides: dict[str, Any], groups: dict[str, list[str]], **hosts: dict[str, Any]) -> dict[str, Any]:
    """Host `h` with the base envelope and `overrides`, and the other hosts of `groups` with their own variables."""
    names = {n for members in groups.values() for n in members}
    fleet: dict[str, Any] = {n: {} for n in names}
    fleet.update({n: _hostvars(overrides) for n in names if n in ("h", "r", "r2")})
    for name, own in hosts.items():
        fleet[name] = {**fleet.get(name, {}), **own}
    return fleet


# (id, overrides of h, groups, other hosts' variables, rules, exact problems)
STACK: list[tuple[str, dict[str, Any], dict[str, list[str]], dict[str, Any], set[str], list[str]]] = [
    # One port map per host: every listener the deploy renders.
    (
        "node-exporter-on-the-prefill-port",
        {"sglang_monitoring_node_exporter_port": 30000},
        GROUPS,
        {},
        {"fleet.ports_free"},
        [
            f"h: sglang_monitoring_node_exporter_port=30000: port already used by sglang_prefill.port "
            f"[fleet.ports_free]; "
            f"{FIX_PORTS}"
        ],
    ),
    (
        "prometheus-on-the-router-port",
        {"sglang_monitoring_prometheus_listen": "0.0.0.0:8000"},
        GROUPS,
        {},
        {"fleet.ports_free"},
        [
            f"h: sglang_monitoring_prometheus_listen=8000: port already used by sglang_router.port [fleet.ports_free]; "
            f"{FIX_PORTS}"
        ],
    ),
    (
        "alertmanager-on-the-bootstrap-port",
        {"sglang_monitoring_alertmanager_listen": "127.0.0.1:8998"},
        GROUPS,
        {},
        {"fleet.ports_free"},
        [
            "h: sglang_monitoring_alertmanager_listen=8998: port already used by "
            f"sglang_prefill.disaggregation_bootstrap_port [fleet.ports_free]; {FIX_PORTS}"
        ],
    ),
    (
        "router-metrics-default-on-the-engine-port",
        {**_with(_P, port=29000), **_with(_R, prometheus_port=None)},
        GROUPS,
        {},
        {"fleet.ports_free"},
        [
            "h: sglang_router.prometheus_port (unset: its default 29000)=29000: port already used by "
            "sglang_prefill.port "
            f"[fleet.ports_free]; {FIX_PORTS}"
        ],
    ),
    (
        "front-on-the-router-host-port",
        {"sglang_frontend_port": 8000},
        {**GROUPS, "sglang_frontend": ["h"]},
        {},
        {"fleet.ports_free"},
        [f"h: sglang_frontend_port=8000: port already used by sglang_router.port [fleet.ports_free]; {FIX_PORTS}"],
    ),
    (
        "front-stats-on-the-front-port",
        {},
        FRONT,
        {"f": {"sglang_frontend_stats_port": 8080}},
        {"fleet.ports_free"},
        [
            f"f: sglang_frontend_stats_port=8080: port already used by sglang_frontend_port [fleet.ports_free]; "
            f"{FIX_PORTS}"
        ],
    ),
    (
        "mesh-port-declared-for-the-engine",
        {**_with(_P, port=39527), **HALF, "sglang_router_mesh": True},
        MESH,
        {"r2": _hostvars(HALF)},
        {"fleet.ports_free"},
        [
            f"h: smg's mesh port (two routers or more)=39527: port already used by sglang_prefill.port "
            f"[fleet.ports_free]; {FIX_PORTS}"
        ],
    ),
    (
        "engine-port-in-the-common-dict",
        {**_with(_C, port=8000), **_with(_P, port=None), **_with(_D, port=None)},
        {"sglang_prefill": ["h"], "sglang_decode": [], "sglang_router": ["h"]},
        {},
        {"fleet.ports_free"},
        [f"h: sglang_router.port=8000: port already used by sglang_engine_common.port [fleet.ports_free]; {FIX_PORTS}"],
    ),
    # Units.
    (
        "router-timeout-in-milliseconds",
        _with(_R, request_timeout_secs=1800000),
        GROUPS,
        {},
        {"units.seconds_plausible"},
        [
            "h: sglang_router.request_timeout_secs=1800000: 1.8e+06 s is more than a day: it reads like milliseconds "
            "(1800 s) [units.seconds_plausible]; fix: declare it in seconds (1800 if milliseconds were meant)"
        ],
    ),
    (
        "watchdog-in-milliseconds",
        _with(_C, watchdog_timeout=600000),
        GROUPS,
        {},
        {"units.seconds_plausible"},
        [
            "h: sglang_engine_common.watchdog_timeout=600000: 600000 s is more than a day: it reads like milliseconds "
            "(600 s) [units.seconds_plausible]; fix: declare it in seconds (600 if milliseconds were meant)"
        ],
    ),
    (
        "waiting-timeout-in-milliseconds",
        {"sglang_engine_extra_env": {"SGLANG_DISAGGREGATION_WAITING_TIMEOUT": "300000"}},
        GROUPS,
        {},
        {"units.seconds_plausible"},
        [
            "h: sglang_engine_extra_env.SGLANG_DISAGGREGATION_WAITING_TIMEOUT=300000: 300000 s is more than a day: it "
            "reads like milliseconds (300 s) [units.seconds_plausible]; fix: declare it in seconds (300 if "
            "milliseconds "
            "were meant)"
        ],
    ),
    (
        "front-connect-timeout-in-seconds",
        {},
        FRONT,
        {"f": {"sglang_frontend_timeout_connect_ms": 2}},
        {"units.milliseconds_plausible"},
        [
            "f: sglang_frontend_timeout_connect_ms=2: 2 ms is too short for a connection between hosts: it reads like "
            "seconds (2000 ms) [units.milliseconds_plausible]; fix: declare it in milliseconds (2000 if seconds were "
            "meant)"
        ],
    ),
    (
        "front-check-timeout-in-seconds",
        {},
        FRONT,
        {"f": {"sglang_frontend_check_timeout_ms": 3}},
        {"units.milliseconds_plausible"},
        [
            "f: sglang_frontend_check_timeout_ms=3: 3 ms is too short for a connection between hosts: it reads like "
            "seconds (3000 ms) [units.milliseconds_plausible]; fix: declare it in milliseconds (3000 if seconds were "
            "meant)"
        ],
    ),
    (
        "front-server-timeout-bare-number",
        {},
        FRONT,
        {"f": {"sglang_frontend_timeout_silent": 3600}},
        {"units.haproxy_time_has_unit"},
        [
            "f: sglang_frontend_timeout_silent=3600: a HAProxy time without a unit is milliseconds: 3600 "
            "reads as 3.6 s "
            "[units.haproxy_time_has_unit]; fix: write the unit (3600s if seconds were meant)"
        ],
    ),
    (
        "front-request-timeout-not-a-time",
        {},
        FRONT,
        {"f": {"sglang_frontend_timeout_http_request": "30 sec"}},
        {"units.haproxy_time_has_unit"},
        [
            "f: sglang_frontend_timeout_http_request='30 sec': not a HAProxy time (digits and one of us, ms, "
            "s, m, h, d) "
            "[units.haproxy_time_has_unit]; fix: write a number with its unit, e.g. 1h or 30s"
        ],
    ),
    # What needs what.
    (
        "front-before-a-loopback-router",
        _with(_R, host="127.0.0.1"),
        TWO_HOSTS,
        {"r": {"ansible_host": "10.0.0.5"}},
        {"needs.front_reaches_routers"},
        [
            "r: sglang_router.host='127.0.0.1': the front on f connects to this router at 10.0.0.5:8000, but "
            "it listens "
            "on loopback only [needs.front_reaches_routers]; fix: listen on 0.0.0.0 or on the address "
            "sglang_advertise_host names"
        ],
    ),
    (
        "front-before-a-localhost-router",
        _with(_R, host="localhost"),
        TWO_HOSTS,
        {},
        {"needs.front_reaches_routers"},
        [
            "r: sglang_router.host='localhost': the front on f connects to this router at r:8000, but it listens on "
            "loopback only [needs.front_reaches_routers]; fix: listen on 0.0.0.0 or on the address "
            "sglang_advertise_host "
            "names"
        ],
    ),
    (
        "metrics-off",
        _with(_C, enable_metrics=False),
        GROUPS,
        {},
        {"needs.metrics_for_monitoring"},
        [
            f"h: sglang_engine_common.enable_metrics=False: the monitoring scrapes /metrics of the {role} engine "
            "(sglang_monitoring: job sglang-engine, the near-limit alerts), which SGLang serves only with "
            "--enable-metrics (entrypoints/http_server.py: add_prometheus_middleware) [needs.metrics_for_monitoring]; "
            "fix: declare enable_metrics: true"
            for role in ("prefill",)
        ],
    ),
    # Timeouts against the longest call.
    (
        "router-timeout-below-the-longest-call",
        _with(_R, request_timeout_secs=60),
        GROUPS,
        {},
        {"timeout.router_request_fits_longest_call"},
        [
            f"h: sglang_router.request_timeout_secs=60: smg's per-request timeout (60 s) is shorter than the "
            f"longest call "
            f"the envelope admits: {LONGEST} [timeout.router_request_fits_longest_call]; fix: raise it to >= 67"
        ],
    ),
    (
        "front-timeout-below-the-longest-call",
        {},
        FRONT,
        {"f": {"sglang_frontend_timeout_silent": "1m"}},
        {"timeout.front_server_fits_longest_call"},
        [
            "f: sglang_frontend_timeout_silent='1m': HAProxy's timeout server (no answer yet) (60 s) is "
            "shorter than the "
            f"longest call the envelope admits: {LONGEST} [timeout.front_server_fits_longest_call]; fix: raise it to "
            ">= 67s"
        ],
    ),
    (
        "decode-waits-less-than-the-longest-prefill",
        {"sglang_engine_extra_env": {"SGLANG_DISAGGREGATION_WAITING_TIMEOUT": "60"}},
        GROUPS,
        {},
        {"timeout.decode_waiting_fits_longest_call"},
        [
            "h: sglang_engine_extra_env.SGLANG_DISAGGREGATION_WAITING_TIMEOUT='60': the decode engine's wait "
            "for the KV "
            "of a prompt (SGLang's default 300 when unset) (60 s) is shorter than the longest call the "
            "envelope admits: "
            f"{LONGEST} [timeout.decode_waiting_fits_longest_call]; fix: set "
            "sglang_engine_extra_env.SGLANG_DISAGGREGATION_WAITING_TIMEOUT to >= 67"
        ],
    ),
    (
        "watchdog-below-an-unchunked-prefill",
        {**_with(_C, watchdog_timeout=60, chunked_prefill_size=-1)},
        GROUPS,
        {},
        {"timeout.watchdog_fits_longest_step"},
        [
            "h: sglang_engine_common.watchdog_timeout=60.0: SGLang's watchdog (60 s) kills the engine when "
            "one forward step "
            "takes longer (managers/scheduler.py: create_scheduler_watchdog on forward_ct); its longest step prefills "
            "524288 tokens, 66.4 s at 7900 tokens/s [timeout.watchdog_fits_longest_step]; fix: raise it to >= 67, or "
            "chunk the prefill (chunked_prefill_size)"
        ],
    ),
    (
        "watchdog-one-millisecond",
        _with(_C, watchdog_timeout=0.001),
        GROUPS,
        {},
        {"timeout.watchdog_fits_longest_step"},
        [
            "h: sglang_engine_common.watchdog_timeout=0.001: SGLang's watchdog (0.001 s) kills the engine when one "
            "forward step takes longer (managers/scheduler.py: create_scheduler_watchdog on forward_ct); its longest "
            "step prefills 16384 tokens, 2.1 s at 7900 tokens/s [timeout.watchdog_fits_longest_step]; fix: raise it to "
            ">= 3, or chunk the prefill (chunked_prefill_size)"
        ],
    ),
]

GOOD: list[tuple[str, dict[str, Any], dict[str, list[str]], dict[str, Any]]] = [
    ("front-with-units", {}, FRONT, {"f": {"sglang_frontend_timeout_silent": "82s", "sglang_frontend_port": 8000}}),
    ("front-on-the-router-host-other-port", {}, {**GROUPS, "sglang_frontend": ["h"]}, {}),
    ("loopback-router-with-the-front-beside-it", _with(_R, host="127.0.0.1"), {**GROUPS, "sglang_frontend": ["h"]}, {}),
    ("router-timeout-a-day", _with(_R, request_timeout_secs=86400), GROUPS, {}),
    ("router-timeout-at-the-longest-call", _with(_R, request_timeout_secs=67), GROUPS, {}),
    ("connect-timeout-ten-ms", {}, FRONT, {"f": {"sglang_frontend_timeout_connect_ms": 10}}),
    ("two-routers-mesh-port-free", {**HALF, "sglang_router_mesh": True}, MESH, {"r2": _hostvars(HALF)}),
    ("two-routers-no-mesh-engine-on-its-port", {**_with(_P, port=39527), **HALF}, MESH, {"r2": _hostvars(HALF)}),
]


@pytest.mark.parametrize(("overrides", "groups", "hosts", "rules", "expected"), [c[1:] for c in STACK],
                         ids=[c[0] for c in STACK])  # fmt: skip
def test_bad_inventory_yields_exactly_its_problems(
    overrides: dict[str, Any], groups: dict[str, list[str]], hosts: dict[str, Any], rules: set[str], expected: list[str]
) -> None:
    problems = check_fleet(_fleet(overrides, groups, **hosts), groups, DSV4)
    assert (rule_ids(problems), problems) == (rules, expected)


@pytest.mark.parametrize(("overrides", "groups", "hosts"), [c[1:] for c in GOOD], ids=[c[0] for c in GOOD])
def test_valid_inventory_passes(overrides: dict[str, Any], groups: dict[str, list[str]], hosts: dict[str, Any]) -> None:
    assert check_fleet(_fleet(overrides, groups, **hosts), groups, DSV4) == []


def test_the_prefill_rate_is_the_slowest_chunk_of_the_step_table() -> None:
    """PREFILL_TOKENS_PER_S is AIConfigurator's slowest 8192-token chunk of a full-context prompt, rounded down."""
    table = Path(__file__).resolve().parents[2] / "sim/sglang_sim/step_tables/deepseek-ai--deepseek-v4-flash-tp4.json"
    rows = json.loads(table.read_text())["prefill"]
    chunks = [r for r in rows if r[2] == 1 and r[0] - r[1] == 8192]
    slowest = max(chunks, key=lambda r: r[3])
    assert slowest[:2] == [524288, 516096]
    assert PREFILL_TOKENS_PER_S <= 8192 / (slowest[3] / 1000) < PREFILL_TOKENS_PER_S + 100
    assert longest_call_s(524288) == pytest.approx(524288 / 7900)


def test_haproxy_times() -> None:
    assert [haproxy_seconds(v) for v in ("1h", "30s", "2000ms", "3600", "1d", "5m", "1 h", "")] == [
        3600, 30, 2, 3.6, 86400, 300, None, None
    ]  # fmt: skip
    assert haproxy_seconds("10us") == pytest.approx(1e-5)


def test_the_base_passes_with_a_front_on_its_own_host() -> None:
    assert check_fleet(_fleet({}, FRONT), FRONT, DSV4) == []
    assert BASE[_R]["request_timeout_secs"] >= longest_call_s(524288)


# The time model on a stub step source (test_perf_fleet.Stub: every prefill chunk 1,000 ms, every decode step 10 ms,
# no band of its own, so the published ones: TTFT +51 %, ITL +31 %) and the KV transfer declared free (backend fake).
# The longest call the envelope admits: 524286 served tokens, 523286 in (64 chunks of 8192) + 1000 out, alone.
# TTFT 64 x 1,000 ms = 64 s, at the band's high end 64 x 1.51 = 96.64 s; the output 999 steps of 10 ms x 1.31 =
# 13.09 s; the whole call 109.73 s. Thresholds: request_timeout_secs and the front's timeout server >= 110, the decode
# engine's waiting timeout >= 97.
MODEL = (
    "predicted for one call of 524286 tokens at the band's high end, uncalibrated (no sglang_perf_measured "
    "declared): Stub"
)
FREE_TRANSFER = _with(_C, disaggregation_transfer_backend="fake")
TIMED: list[tuple[str, dict[str, Any], dict[str, list[str]], dict[str, Any], list[str]]] = [
    (
        "router-timeout-below-the-predicted-call",
        {**FREE_TRANSFER, **_with(_R, request_timeout_secs=109)},
        GROUPS,
        {},
        [
            "h: sglang_router.request_timeout_secs=109: smg's per-request timeout (109 s) is shorter than the longest "
            f"call the envelope admits: the whole call takes 110 s, {MODEL}, so the call is cut off "
            "[timeout.router_request_fits_longest_call]; fix: raise it to >= 110"
        ],
    ),
    (
        "front-timeout-below-the-predicted-call",
        FREE_TRANSFER,
        FRONT,
        {"f": {"sglang_frontend_timeout_silent": "109s"}},
        [
            "f: sglang_frontend_timeout_silent='109s': HAProxy's timeout server (no answer yet) (109 s) is shorter "
            f"than the longest call the envelope admits: the whole call takes 110 s, {MODEL}, so the call is cut off "
            "[timeout.front_server_fits_longest_call]; fix: raise it to >= 110s"
        ],
    ),
    (
        "decode-waits-less-than-the-predicted-first-token",
        {**FREE_TRANSFER, "sglang_engine_extra_env": {"SGLANG_DISAGGREGATION_WAITING_TIMEOUT": "96"}},
        GROUPS,
        {},
        [
            "h: sglang_engine_extra_env.SGLANG_DISAGGREGATION_WAITING_TIMEOUT='96': the decode engine's wait for the "
            "KV of a prompt (SGLang's default 300 when unset) (96 s) is shorter than the longest call the envelope "
            f"admits: the prompt's prefill and KV transfer take 97 s, {MODEL}, so the call is cut off "
            "[timeout.decode_waiting_fits_longest_call]; fix: set "
            "sglang_engine_extra_env.SGLANG_DISAGGREGATION_WAITING_TIMEOUT to >= 97"
        ],
    ),
]
TIMED_GOOD: list[tuple[str, dict[str, Any], dict[str, list[str]], dict[str, Any]]] = [
    ("router-timeout-at-the-predicted-call", {**FREE_TRANSFER, **_with(_R, request_timeout_secs=110)}, GROUPS, {}),
    ("front-timeout-at-the-predicted-call", FREE_TRANSFER, FRONT, {"f": {"sglang_frontend_timeout_silent": "110s"}}),
    (
        "decode-waits-the-predicted-first-token",
        {**FREE_TRANSFER, "sglang_engine_extra_env": {"SGLANG_DISAGGREGATION_WAITING_TIMEOUT": "97"}},
        GROUPS,
        {},
    ),
]


@pytest.fixture
def stub_time_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sglang_perf_fleet, "default_steps", Stub)


@pytest.mark.usefixtures("stub_time_model")
@pytest.mark.parametrize(("overrides", "groups", "hosts", "expected"), [c[1:] for c in TIMED],
                         ids=[c[0] for c in TIMED])  # fmt: skip
def test_a_timeout_below_the_predicted_longest_call_is_refused(
    overrides: dict[str, Any], groups: dict[str, list[str]], hosts: dict[str, Any], expected: list[str]
) -> None:
    assert check_fleet(_fleet(overrides, groups, **hosts), groups, DSV4) == expected


@pytest.mark.usefixtures("stub_time_model")
@pytest.mark.parametrize(("overrides", "groups", "hosts"), [c[1:] for c in TIMED_GOOD], ids=[c[0] for c in TIMED_GOOD])
def test_a_timeout_at_the_predicted_longest_call_passes(
    overrides: dict[str, Any], groups: dict[str, list[str]], hosts: dict[str, Any]
) -> None:
    assert check_fleet(_fleet(overrides, groups, **hosts), groups, DSV4) == []


def test_the_time_model_is_asked_once_per_fleet(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three timeout rules read the longest call; the step source answers one round of queries for them."""
    rounds: list[int] = []

    class Counting(Stub):
        def prefill(self, queries: Any) -> Any:
            rounds.append(len(queries))
            return super().prefill(queries)

    monkeypatch.setattr(sglang_perf_fleet, "default_steps", Counting)
    overrides = {**FREE_TRANSFER, **_with(_R, request_timeout_secs=60)}
    hosts = {"f": {"sglang_frontend_timeout_silent": "60s"}}
    problems = check_fleet(_fleet(overrides, FRONT, **hosts), FRONT, DSV4)
    assert rule_ids(problems) == {"timeout.router_request_fits_longest_call", "timeout.front_server_fits_longest_call"}
    assert len(rounds) == 1


def test_without_the_estimator_the_rule_says_so_and_falls_back_to_the_stated_rate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The real default_steps, its venv's availability check (AicSteps.ready) saying no: the message says the time
    model is not available and the threshold is the longest prompt at PREFILL_TOKENS_PER_S."""
    monkeypatch.setattr(sglang_perf_fleet, "default_steps", REAL_DEFAULT_STEPS)
    monkeypatch.setattr(AicSteps, "ready", lambda self: False)
    problems = check_fleet(_fleet(_with(_R, request_timeout_secs=60), GROUPS), GROUPS, DSV4)
    assert problems == [
        "h: sglang_router.request_timeout_secs=60: smg's per-request timeout (60 s) is shorter than the longest call "
        f"the envelope admits: {LONGEST} [timeout.router_request_fits_longest_call]; fix: raise it to >= 67"
    ]
