"""The side doors (plugins/plugin_utils/sglang_sidedoors.py): what reaches a server besides the envelope keys, and
where it runs.

A corpus of envelopes that pass every other rule of the validation (and SGLang's and smg's own startup checks, which
do not look at them) and then fail on the host, silently serve something else than declared, or never run what is
declared: found in SGLang's and smg's startup and runtime code (sglang/srt/environ.py, disaggregation/*/conn.py,
entrypoints/http_server.py, the mooncake transfer engine, smg's parser). Each is refused with its declared variable
named. The router's extra arguments are parsed as smg's own parser parses them (compared with it here).
"""

from __future__ import annotations

import argparse
import copy
import json
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_sidedoors import (
    parse_router_extra_args,
    sidedoor_problems,
    sidedoors,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_validate import check_fleet
from deploytools import REPO, envelope
from flag_dump import smg_parser

CONFIG = json.loads((REPO / "models" / "deepseek-v4-flash" / "config.json").read_text())
ONE = "gpu-node-01"
_P, _D, _C, _R = "sglang_prefill", "sglang_decode", "sglang_engine_common", "sglang_router"
_ENV, _ARGS, _ADV = "sglang_engine_extra_env", "sglang_router_extra_args", "sglang_advertise_host"


def _base() -> dict[str, Any]:
    hostvars = copy.deepcopy(envelope())
    hostvars[_C]["host"] = "0.0.0.0"
    return hostvars


def fleet(topology: str, changes: dict[str, dict[str, Any]]) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The production envelope on one host ("one": inventories/production) or on three ("multi": prefill p1, decode
    d1, router r1, each advertised by its LAN address; "split": prefill and router on p1, decode on d1), with
    `changes` ({host or "*": {variable: value}}; a dict value is merged into the variable's dict)."""
    if topology == "one":
        hosts = {ONE: {_ADV: "127.0.0.1"}}
        groups = {_P: [ONE], _D: [ONE], _R: [ONE]}
    elif topology == "multi":
        hosts = {"p1": {_ADV: "10.0.0.11"}, "d1": {_ADV: "10.0.0.21"}, "r1": {_ADV: "10.0.0.31"}}
        groups = {_P: ["p1"], _D: ["d1"], _R: ["r1"]}
    else:
        hosts = {"p1": {_ADV: "10.0.0.11"}, "d1": {_ADV: "10.0.0.21"}}
        groups = {_P: ["p1"], _D: ["d1"], _R: ["p1"]}
    all_hostvars = {}
    for host, own in hosts.items():
        hostvars = {**_base(), **own}
        for target in ("*", host):
            for var, value in changes.get(target, {}).items():
                if isinstance(value, dict) and isinstance(hostvars.get(var), dict):
                    hostvars[var] = {k: v for k, v in {**hostvars[var], **value}.items() if v is not None}
                else:
                    hostvars[var] = value
        all_hostvars[host] = hostvars
    return all_hostvars, groups


def _env(**env: str) -> dict[str, dict[str, Any]]:
    return {"*": {_ENV: env}}


def _nixl(**env: str) -> dict[str, dict[str, Any]]:
    return {"*": {_ENV: env, _C: {"disaggregation_transfer_backend": "nixl", "disaggregation_ib_device": "mlx5_0"}}}


def _args(*args: str) -> dict[str, dict[str, Any]]:
    return {"*": {_ARGS: ["--disable-tokenizer-autoload", *args]}}


def _set(var: str, **changes: Any) -> dict[str, dict[str, Any]]:
    return {"*": {var: changes}}


V = f"{ONE}: {_ENV}."
A = f"{ONE}: {_ARGS}="

# (id, topology, changes, fragments of one problem: its rule id, the declared variable and the rule).
CORPUS: list[tuple[str, str, dict[str, dict[str, Any]], list[str]]] = [
    # Extra environment that overrides what an envelope key declares (the env file would win over the report).
    ("env-owns-index-k", "one", _env(SGLANG_DSV4_BF16_INDEX_K="0"),
     ["[sidedoor_env.no_envelope_override]",
      f"{V}SGLANG_DSV4_BF16_INDEX_K='0'", "overrides what the envelope declares", f"declare {_C}.bf16_index_k"]),
    ("env-legacy-prefix-owns-index-k", "one", _env(SGL_DSV4_BF16_INDEX_K="0"),
     ["[sidedoor_env.no_envelope_override]",
      f"{V}SGL_DSV4_BF16_INDEX_K='0'", "reads SGL_DSV4_BF16_INDEX_K as SGLANG_DSV4_BF16_INDEX_K"]),
    ("env-owns-gpu-list", "one", _env(CUDA_VISIBLE_DEVICES="0,1,2,3"),
     ["[sidedoor_env.no_envelope_override]", f"{V}CUDA_VISIBLE_DEVICES='0,1,2,3'", f"declare {_P}.gpu_ids"]),
    ("env-renumbers-gpus", "one", _env(CUDA_DEVICE_ORDER="FASTEST_FIRST"),
     ["[sidedoor_env.no_envelope_override]", f"{V}CUDA_DEVICE_ORDER='FASTEST_FIRST'", "renumbers the GPUs"]),
    ("env-owns-api-key", "one", _env(SGLANG_API_KEY="k"),
     ["[sidedoor_env.no_envelope_override]",
      f"{V}SGLANG_API_KEY='k'", "declare sglang_api_key"]),
    ("env-forces-tcp-transport", "one", _env(MC_FORCE_TCP="1"),
     ["[sidedoor_env.no_envelope_override]", f"{V}MC_FORCE_TCP='1'", f"declare {_C}.disaggregation_transfer_backend"]),
    # Values SGLang's registry cannot parse: SGLang warns and runs with the default.
    ("env-bool-ill-typed", "one", _env(SGLANG_DISAGGREGATION_FORCE_QUERY_PREFILL_DP_RANK="on"),
     ["[sidedoor_env.value_parses]",
      f"{V}SGLANG_DISAGGREGATION_FORCE_QUERY_PREFILL_DP_RANK='on'", "not a valid boolean value", "default False"]),
    ("env-int-ill-typed", "one", _env(SGLANG_DISAGGREGATION_WAITING_TIMEOUT="10m"),
     ["[sidedoor_env.value_parses]",
      f"{V}SGLANG_DISAGGREGATION_WAITING_TIMEOUT='10m'", "not a valid integer value", "default 300"]),
    ("env-float-ill-typed", "one", _env(SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL="5s"),
     ["[sidedoor_env.value_parses]", f"{V}SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL='5s'", "not a valid float value"]),
    ("env-no-longer-read", "one", _env(SGLANG_SCHEDULER_DECREASE_PREFILL_IDLE="1"),
     ["[sidedoor_env.still_read]",
      f"{V}SGLANG_SCHEDULER_DECREASE_PREFILL_IDLE='1'", "no longer reads", "--enable-prefill-delayer"]),
    # The PD transfer code (disaggregation/): refused at startup or at the first request, or silently raised.
    ("env-no-transfer-queue", "one", _env(SGLANG_DISAGGREGATION_QUEUE_SIZE="0"),
     ["[sidedoor_env.transfer_queues_positive]",
      f"{V}SGLANG_DISAGGREGATION_QUEUE_SIZE='0'", "one transfer worker per queue"]),
    ("env-pool-below-queues", "one", _env(SGLANG_DISAGGREGATION_THREAD_POOL_SIZE="2"),
     ["[sidedoor_env.transfer_pool_covers_queues]",
      f"{V}SGLANG_DISAGGREGATION_THREAD_POOL_SIZE='2'", "SGLANG_DISAGGREGATION_QUEUE_SIZE=4"]),
    ("env-queues-above-derived-pool", "one", _env(SGLANG_DISAGGREGATION_QUEUE_SIZE="16"),
     ["[sidedoor_env.transfer_queues_within_derived_pool]",
      f"{V}SGLANG_DISAGGREGATION_QUEUE_SIZE='16'", "derives at most 12 threads"]),
    ("env-heartbeat-below-floor", "one", _env(SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL="0.5"),
     ["[sidedoor_env.heartbeat_interval_not_raised]",
      f"{V}SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL='0.5'", "raises it to 2 s"]),
    ("env-heartbeat-no-failure", "one", _env(SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE="0"),
     ["[sidedoor_env.heartbeat_max_failure_not_raised]",
      f"{V}SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE='0'", "raises it to 1"]),
    ("env-waiting-timeout-zero", "one", _env(SGLANG_DISAGGREGATION_WAITING_TIMEOUT="0"),
     ["[sidedoor_env.pd_timeouts_positive]",
      f"{V}SGLANG_DISAGGREGATION_WAITING_TIMEOUT='0'", "every PD request is timed out"]),
    ("env-nixl-variable-on-mooncake", "one", _env(SGLANG_DISAGGREGATION_NIXL_BACKEND="LIBFABRIC"),
     ["[sidedoor_env.nixl_variables_on_nixl]",
      f"{V}SGLANG_DISAGGREGATION_NIXL_BACKEND='LIBFABRIC'", "only the nixl transfer backend reads it"]),
    ("env-nixl-params-not-an-object", "one", _nixl(SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS='["mlx5_0"]'),
     ["[sidedoor_env.nixl_params_object]",
      f"{V}SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS='[\"mlx5_0\"]'", "must be a JSON object"]),
    ("env-ucx-devices-override-ib-device", "one", _nixl(UCX_NET_DEVICES="mlx5_1:1"),
     ["[sidedoor_env.ucx_devices_without_ib_device]",
      f"{V}UCX_NET_DEVICES='mlx5_1:1'", "ignores disaggregation_ib_device='mlx5_0'"]),
    ("env-nixl-device-list-and-ib-device", "one",
     _nixl(SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS='{"device_list": "mlx5_1"}'),
     ["[sidedoor_env.nixl_device_list_without_ib_device]",
      f"{V}SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS=", "Conflicting NIXL UCX device_list"]),
    # The router's extra arguments: what smg refuses, flags the envelope or the inventory owns, and ports.
    ("args-unknown-flag", "one", _args("--bogus"),
     ["[sidedoor_args.smg_parses]", A, "unrecognized arguments: --bogus"]),
    ("args-own-port", "one", _args("--port", "9000"),
     ["[sidedoor_args.no_envelope_flag]",
      A, "'--port 9000' sets --port", "declare sglang_router.port"]),
    ("args-own-limit-abbreviated", "one", _args("--max-conc", "512"),
     ["[sidedoor_args.no_envelope_flag]",
      A, "'--max-conc 512' sets --max-concurrent-requests", "declare sglang_router.max_concurrent_requests"]),
    ("args-own-api-key", "one", _args("--api-key", "secret"),
     ["[sidedoor_args.no_envelope_flag]",
      A, "'--api-key', '<redacted>'", "'--api-key <redacted>' sets", "declare sglang_api_key", "serve script"]),
    ("args-decode-policy-overrides-policy", "one", _args("--decode-policy", "cache_aware"),
     ["[sidedoor_args.no_envelope_flag]", A, "'--decode-policy cache_aware'", "declare sglang_router.policy"]),
    ("args-own-workers", "one", _args("--worker-urls", "http://10.0.0.9:30001"),
     ["[sidedoor_args.no_group_flag]", A, "sets --worker-urls", "inventory groups"]),
    ("args-health-port-is-metrics-port", "one", _args("--health-check-port", "29000"),
     ["[sidedoor_port.extra_arg_port_free]",
      A, "--health-check-port 29000 is the port of sglang_router.prometheus_port"]),
    ("args-health-port-privileged", "one", _args("--health-check-port", "81"),
     ["[sidedoor_port.unprivileged]", f"{ONE}: sglang_router_extra_args --health-check-port=81", "below 1024"]),
    # Ports below 1024 for the sglang service user.
    ("port-engine-privileged", "one", _set(_D, port=443),
     ["[sidedoor_port.unprivileged]",
      f"{ONE}: {_D}.port=443", "Permission denied"]),
    ("port-router-privileged", "one", _set(_R, port=80),
     ["[sidedoor_port.unprivileged]",
      f"{ONE}: {_R}.port=80", "runs as 'sglang'"]),
    ("port-bootstrap-privileged", "one", _set(_P, disaggregation_bootstrap_port=998),
     ["[sidedoor_port.unprivileged]", f"{ONE}: {_P}.disaggregation_bootstrap_port=998", "below 1024"]),
    ("port-metrics-privileged", "one", _set(_R, prometheus_port=900),
     ["[sidedoor_port.unprivileged]",
      f"{ONE}: {_R}.prometheus_port=900"]),
    # Listen against advertise addresses.
    ("listen-ipv6-wildcard", "one", _set(_C, host="::"),
     ["[sidedoor_address.listen_not_ipv6_wildcard]",
      f"{ONE}: {_C}.host='::'", "IPV6_V6ONLY"]),
    ("advertise-ipv6-listen-ipv4", "one", {"*": {_ADV: "::1"}},
     ["[sidedoor_address.advertise_ip_version]", f"{ONE}: sglang_advertise_host='::1'", "binds IPv4 only"]),
    ("listen-one-address-advertise-another", "one", _set(_C, host="10.0.0.5"),
     ["[sidedoor_address.advertise_is_listen]", f"{ONE}: sglang_advertise_host='127.0.0.1'", "binds only 10.0.0.5"]),
    ("listen-loopback-router-elsewhere", "multi", _set(_C, host="127.0.0.1"),
     ["[sidedoor_address.listen_reachable]",
      "d1: sglang_engine_common.host='127.0.0.1'", "r1 (the router) on another host"]),
    ("listen-default-router-elsewhere", "multi", _set(_C, host=None),
     ["[sidedoor_address.listen_reachable]",
      "p1: sglang_prefill.host=None", "unset, so SGLang binds its default 127.0.0.1", "loopback only"]),
    ("advertise-loopback-router-elsewhere", "multi", {"d1": {_ADV: "127.0.0.1"}},
     ["[sidedoor_address.advertise_reachable]",
      "d1: sglang_advertise_host='127.0.0.1'", "r1 (the router) runs on another host"]),
    ("advertise-loopback-decode-elsewhere", "split", {"p1": {_ADV: "127.0.0.1"}},
     ["[sidedoor_address.advertise_reachable]",
      "p1: sglang_advertise_host='127.0.0.1'", "d1 (a decode engine, at the bootstrap port)"]),
]  # fmt: skip


def test_corpus_size() -> None:
    ids = [c[0] for c in CORPUS]
    assert len(set(ids)) == len(ids) and len(ids) >= 30


@pytest.mark.parametrize("topology", ["one", "multi", "split"])
def test_the_unchanged_envelopes_pass(topology: str) -> None:
    hostvars, groups = fleet(topology, {})
    assert check_fleet(hostvars, groups, CONFIG) == []
    assert sidedoors(hostvars, groups).warnings == []


def test_the_lab_passes_and_names_its_simulator_variables() -> None:
    """The lab's loopback engines and the simulator's variables: no problem; no warning once the lab declares the
    simulator's prefix (inventories/lab: sglang_validate_extra_env_known)."""
    env = {"SGLANG_SIM_GPU_MEMORY_GIB": "141", "SGLANG_SIM_STARTUP_DELAY_S": "2", "NCCL_DEBUG": "INFO"}
    hostvars, groups = fleet("one", {"*": {_ENV: env, _C: {"host": "127.0.0.1"}}})
    assert check_fleet(hostvars, groups, CONFIG) == []
    assert sidedoors(hostvars, groups, ["SGLANG_SIM_"]).warnings == []
    warned = sidedoors(hostvars, groups).warnings
    assert len(warned) == 2 and all("not a variable of SGLang 0.5.23's registry" in w for w in warned), warned
    typo = sidedoors(*fleet("one", _env(SGLANG_DISAGGREGATION_QUEU_SIZE="8"))).warnings
    assert typo and "did you mean SGLANG_DISAGGREGATION_QUEUE_SIZE?" in typo[0], typo


@pytest.mark.parametrize(("case", "topology", "changes", "fragments"), CORPUS, ids=[c[0] for c in CORPUS])
def test_refused_with_the_declared_variable_and_by_no_other_rule(
    case: str, topology: str, changes: dict[str, dict[str, Any]], fragments: list[str]
) -> None:
    hostvars, groups = fleet(topology, changes)
    problems = check_fleet(hostvars, groups, CONFIG)
    assert problems, "not refused"
    side = sidedoor_problems(hostvars, groups)
    assert set(problems) <= set(side), f"refused by another rule too: {set(problems) - set(side)}"
    assert all("; fix: " in p for p in problems), problems
    assert any(all(f in p for f in fragments) for p in problems), f"{fragments} not all in one of: {problems}"


def test_an_api_key_in_the_extra_args_is_never_shown() -> None:
    for args in (["--api-key", "s3cret"], ["--api-key=s3cret"], ["--api-k", "s3cret"], ["--bogus", "--api-key"]):
        problems = check_fleet(*fleet("one", _args(*args)), CONFIG)
        assert problems and not any("s3cret" in p for p in problems), problems


def test_a_root_service_user_or_the_capability_may_bind_low_ports() -> None:
    for extra in ({"sglang_defaults_user": "root"},
                  {"sglang_router_unit": {"Service": {"AmbientCapabilities": ["CAP_NET_BIND_SERVICE"]}}}):  # fmt: skip
        hostvars, groups = fleet("one", {"*": {**extra, _R: {"port": 80}}})
        assert sidedoor_problems(hostvars, groups) == [], extra


def test_a_pool_that_covers_the_queues_passes() -> None:
    hostvars, groups = fleet(
        "one", _env(SGLANG_DISAGGREGATION_QUEUE_SIZE="16", SGLANG_DISAGGREGATION_THREAD_POOL_SIZE="32")
    )
    assert sidedoor_problems(hostvars, groups) == []


# Extra arguments smg's own parser takes or refuses (after the role's --pd-disaggregation and workers).
ARGS = [
    ["--disable-tokenizer-autoload"],
    ["--bogus"],
    ["--log-level", "debug"],
    ["--log-level", "verbose"],
    ["--mm-processing", "AUTO"],
    ["--mm-processing", "nope"],
    ["--max-conc", "5"],
    ["--p", "1"],
    ["--queue-size", "x"],
    ["--queue-size=7"],
    ["--upstream-http2"],
    ["--upstream-http2=1"],
    ["--worker-urls"],
    ["stray"],
    ["--prometheus-duration-buckets", "0.1", "x"],
    ["--prometheus-duration-buckets", "0.1", "2.5"],
    ["--sse-keepalive-secs", "-1"],
    ["--sse-keepalive-secs", "0"],
    ["--cache-boundaries", "1,2,x"],
    ["--cache-boundaries", "1,2"],
    ["--port"],
    ["--health-check-port", "-1"],
]


@pytest.mark.parametrize("extra", ARGS, ids=[" ".join(a) for a in ARGS])
def test_router_extra_args_are_read_as_smg_reads_them(extra: list[str]) -> None:
    parser = smg_parser()

    def refuse(message: str) -> None:
        raise ValueError(message)

    parser.error = refuse  # type: ignore[method-assign]
    base = ["--pd-disaggregation", "--prefill", "http://127.0.0.1:30000", "8998", "--decode", "http://127.0.0.1:30001"]
    try:
        parser.parse_args([*base, *extra])
        smg_refuses = False
    except (ValueError, argparse.ArgumentTypeError):
        smg_refuses = True
    _parsed, refused = parse_router_extra_args(extra)
    assert bool(refused) == smg_refuses, (extra, refused)


def test_a_colon_in_the_served_name_names_what_the_operator_wrote() -> None:
    """The engines' served_model_name is derived from sglang_model.served_name: the problem names that."""
    problems = check_fleet(*fleet("one", {"*": {"sglang_model": {"served_name": "deepseek:v4"}}}), CONFIG)
    assert problems and all(p.startswith(f"{ONE}: sglang_model.served_name='deepseek:v4'") for p in problems), problems
    declared = check_fleet(*fleet("one", _set(_P, served_model_name="ds:v4")), CONFIG)
    assert declared and declared[0].startswith(f"{ONE}: {_P}.served_model_name='ds:v4'"), declared


def test_no_queue_needs_no_queue_timeout_as_smg_says(tmp_path: Any) -> None:
    """smg 1.13.0 refuses queue_timeout_secs 0 only when queue_size > 0 ('Must be > 0 when queue_size > 0'): with
    queue_size 0 the validation and smg itself (its Rust validator, started on loopback) accept it."""
    from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_deep import deep_check

    no_queue = fleet("one", _set(_R, queue_size=0, queue_timeout_secs=0))
    assert check_fleet(*no_queue, CONFIG) == []
    queued = check_fleet(*fleet("one", _set(_R, queue_timeout_secs=0)), CONFIG)
    assert queued == [
        f"{ONE}: sglang_router.queue_timeout_secs=0: queue_timeout_secs must be > 0 when queue_size > 0 (smg; "
        "queue_size=256) [router.queue_timeout_positive]; fix: declare e.g. 60"
    ]
    settings = {"mode": "auto", "parser_python": "", "smg_python": str(REPO / ".venv" / "bin" / "python"),
                "models_dir": str(REPO / "models"), "model_name": "deepseek-v4-flash", "cache_dir": ""}  # fmt: skip
    assert deep_check(*no_queue, settings)["problems"] == []
