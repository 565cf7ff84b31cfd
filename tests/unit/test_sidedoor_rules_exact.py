"""The side-door rules (plugins/plugin_utils/sglang_sidedoors.py) rule by rule: each bad envelope yields exactly the
listed problems (rule id, variable, value, rule and fix word for word) and no other rule's, and each warning case
exactly its warnings.

The fleets: the base fleet of test_validate_rules_exact on one host `h` (prefill, decode and router; the engines share
sglang_engine_extra_env, so a finding of it is said once), or that envelope on three hosts, prefill `p`, decode `d` and
router `r`, each reached at its inventory name unless a case advertises another address."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_sidedoors import sidedoors
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_validate import check_fleet
from test_validate_rules_exact import DSV4, GROUPS, _hostvars, _with, rule_ids

_C, _D, _R = "sglang_engine_common", "sglang_decode", "sglang_router"
_ENV, _ARGS, _ADV = "sglang_engine_extra_env", "sglang_router_extra_args", "sglang_advertise_host"
THREE = {"sglang_prefill": ["p"], "sglang_decode": ["d"], "sglang_router": ["r"]}
Fleet = tuple[dict[str, Any], dict[str, list[str]]]


def one(**overrides: Any) -> Fleet:
    """The base fleet on host h with whole top-level variables replaced."""
    return {"h": _hostvars(overrides)}, GROUPS


def three(common: dict[str, Any] | None = None, **per_host: dict[str, Any]) -> Fleet:
    """The base envelope on p, d and r: `common` overrides on each host, then each host's own."""
    return {h: _hostvars({**(common or {}), **per_host.get(h, {})}) for h in ("p", "d", "r")}, THREE


def env(**extra: str) -> Fleet:
    return one(**{_ENV: extra})


def nixl(**extra: str) -> Fleet:
    """The nixl transfer backend pinned to mlx5_0, with these extra variables."""
    return one(**_with(_C, disaggregation_transfer_backend="nixl", disaggregation_ib_device="mlx5_0"), **{_ENV: extra})


def args(*extra: str) -> Fleet:
    return one(**{_ARGS: list(extra)})


V = f"h: {_ENV}."
OVERRIDE = (
    "overrides what the envelope declares{via}: the role sets it from {owner}, and every report would show the "
    "declared value while the engine runs this one [sidedoor_env.no_envelope_override]; fix: remove it and declare "
    "{declare}"
)
PRIVILEGED = (
    "a port below 1024 needs root or CAP_NET_BIND_SERVICE, and the unit runs as 'sglang' without it: the bind fails "
    "with 'Permission denied' at startup [sidedoor_port.unprivileged]; fix: use a port from 1024 to 65535"
)
SMG_REFUSES = (
    "smg 1.13.0's parser refuses it at startup ('smg launch: error: {why}') [sidedoor_args.smg_parses]; fix: remove "
    "the argument or correct it from `smg launch --help`"
)
OWNED_FLAG = (
    "{shown} sets {flag}, which the envelope declares through {owner}: smg takes the last one, so it runs this value "
    "while every report shows the declared one{note} [sidedoor_args.no_envelope_flag]; fix: remove it and declare "
    "{owner}"
)
WILDCARD = (
    "SGLang binds '::' IPv6-only (asyncio's create_server sets IPV6_V6ONLY), while the role's health gate and drain "
    "reach a wildcard listener at 127.0.0.1, and IPv4 peers cannot connect "
    "[sidedoor_address.listen_not_ipv6_wildcard]; fix: declare 0.0.0.0, or this host's own IPv6 address with "
    "sglang_advertise_host set to it"
)
LOOPBACK_LISTEN = (
    "{unset}the engine listens on loopback only, and {peer} on another host connects to it at {at} "
    "[sidedoor_address.listen_reachable]; fix: declare 0.0.0.0 or this host's address the peers reach"
)
NO_QUEUE = (
    "the {backend} KV sender starts one transfer worker per queue: with none, the first KV transfer has no queue to "
    "go to (disaggregation/mooncake/conn.py, nixl/conn.py) [sidedoor_env.transfer_queues_positive]; fix: declare at "
    "least 1 (SGLang's default 4)"
)
POOL_BELOW = (
    "the mooncake prefill KV sender asserts at startup that the thread pool is at least "
    "SGLANG_DISAGGREGATION_QUEUE_SIZE={need} (disaggregation/mooncake/conn.py) "
    "[sidedoor_env.transfer_pool_covers_queues]; fix: declare at least {need}, or lower "
    "SGLANG_DISAGGREGATION_QUEUE_SIZE"
)
PD_TIMEOUT = (
    "every PD request is timed out against it (disaggregation/common/conn.py): at 0 s or less each one fails while "
    "every engine reports healthy [sidedoor_env.pd_timeouts_positive]; fix: declare a positive number of seconds "
    "(SGLang's default 300)"
)

# (id, fleet, the rule ids, the exact problems of check_fleet in order)
SIDEDOOR: list[tuple[str, Fleet, set[str], list[str]]] = [
    # sglang_engine_extra_env: what the envelope owns, what SGLang no longer reads, values it cannot parse.
    (
        "env-overrides-bf16-index-k",
        env(SGLANG_DSV4_BF16_INDEX_K="0"),
        {"sidedoor_env.no_envelope_override"},
        [
            f"{V}SGLANG_DSV4_BF16_INDEX_K='0': "
            + OVERRIDE.format(via="", owner=f"{_C}.bf16_index_k", declare=f"{_C}.bf16_index_k")
        ],
    ),
    (
        "env-legacy-prefix-overrides-bf16-index-k",
        env(SGL_DSV4_BF16_INDEX_K="1"),
        {"sidedoor_env.no_envelope_override"},
        [
            f"{V}SGL_DSV4_BF16_INDEX_K='1': "
            + OVERRIDE.format(
                via=" (SGLang reads SGL_DSV4_BF16_INDEX_K as SGLANG_DSV4_BF16_INDEX_K)",
                owner=f"{_C}.bf16_index_k",
                declare=f"{_C}.bf16_index_k",
            )
        ],
    ),
    (
        "env-overrides-api-key",
        env(SGLANG_API_KEY="k"),
        {"sidedoor_env.no_envelope_override"},
        [
            f"{V}SGLANG_API_KEY='k': "
            + OVERRIDE.format(
                via="",
                owner="sglang_api_key (the role writes it into the environment file)",
                declare="sglang_api_key",
            )
        ],
    ),
    (
        "env-no-longer-read",
        env(SGLANG_SCHEDULER_DECREASE_PREFILL_IDLE="1"),
        {"sidedoor_env.still_read"},
        [
            f"{V}SGLANG_SCHEDULER_DECREASE_PREFILL_IDLE='1': SGLang 0.5.23 no longer reads "
            "SGLANG_SCHEDULER_DECREASE_PREFILL_IDLE; it only warns ('Please use '--enable-prefill-delayer' instead.'), "
            "so the value never runs [sidedoor_env.still_read]; fix: remove it (the flag it names is not an envelope "
            "key)"
        ],
    ),
    (
        "env-bool-ill-typed",
        env(SGLANG_DISAGGREGATION_FORCE_QUERY_PREFILL_DP_RANK="on"),
        {"sidedoor_env.value_parses"},
        [
            f"{V}SGLANG_DISAGGREGATION_FORCE_QUERY_PREFILL_DP_RANK='on': SGLang 0.5.23 reads "
            "SGLANG_DISAGGREGATION_FORCE_QUERY_PREFILL_DP_RANK as bool (sglang/srt/environ.py) and refuses this text "
            '("on" is not a valid boolean value): it warns \'Invalid value for '
            "SGLANG_DISAGGREGATION_FORCE_QUERY_PREFILL_DP_RANK' and runs with the default False, not the declared "
            "value [sidedoor_env.value_parses]; fix: declare 1 or 0 (also true/false, yes/no, y/n)"
        ],
    ),
    (
        "env-legacy-prefix-int-ill-typed",
        env(SGL_DISAGGREGATION_QUEUE_SIZE="x"),
        {"sidedoor_env.value_parses"},
        [
            f"{V}SGL_DISAGGREGATION_QUEUE_SIZE='x': SGLang 0.5.23 reads SGLANG_DISAGGREGATION_QUEUE_SIZE as int "
            '(sglang/srt/environ.py) and refuses this text ("x" is not a valid integer value): it warns \'Invalid '
            "value for SGLANG_DISAGGREGATION_QUEUE_SIZE' and runs with the default 4, not the declared value "
            "[sidedoor_env.value_parses]; fix: declare an integer such as 4"
        ],
    ),
    # The PD transfer code: queues and threads, heartbeats, timeouts.
    (
        "env-no-transfer-queue",
        env(SGLANG_DISAGGREGATION_QUEUE_SIZE="0"),
        {"sidedoor_env.transfer_queues_positive"},
        [f"{V}SGLANG_DISAGGREGATION_QUEUE_SIZE='0': " + NO_QUEUE.format(backend="mooncake")],
    ),
    (
        "env-no-transfer-queue-on-nixl",
        nixl(SGLANG_DISAGGREGATION_QUEUE_SIZE="-1"),
        {"sidedoor_env.transfer_queues_positive"},
        [f"{V}SGLANG_DISAGGREGATION_QUEUE_SIZE='-1': " + NO_QUEUE.format(backend="nixl")],
    ),
    (
        "env-pool-below-default-queues",
        env(SGLANG_DISAGGREGATION_THREAD_POOL_SIZE="3"),
        {"sidedoor_env.transfer_pool_covers_queues"},
        [f"{V}SGLANG_DISAGGREGATION_THREAD_POOL_SIZE='3': " + POOL_BELOW.format(need=4)],
    ),
    (
        "env-pool-below-declared-queues",
        env(SGLANG_DISAGGREGATION_QUEUE_SIZE="8", SGLANG_DISAGGREGATION_THREAD_POOL_SIZE="7"),
        {"sidedoor_env.transfer_pool_covers_queues"},
        [f"{V}SGLANG_DISAGGREGATION_THREAD_POOL_SIZE='7': " + POOL_BELOW.format(need=8)],
    ),
    (
        "env-queues-above-derived-pool",
        env(SGLANG_DISAGGREGATION_QUEUE_SIZE="13"),
        {"sidedoor_env.transfer_queues_within_derived_pool"},
        [
            f"{V}SGLANG_DISAGGREGATION_QUEUE_SIZE='13': without SGLANG_DISAGGREGATION_THREAD_POOL_SIZE the mooncake "
            "prefill KV sender derives at most 12 threads from the CPU count, and asserts at startup that they are at "
            "least the queues (disaggregation/mooncake/conn.py) [sidedoor_env.transfer_queues_within_derived_pool]; "
            "fix: declare at most 12, or SGLANG_DISAGGREGATION_THREAD_POOL_SIZE >= 13"
        ],
    ),
    (
        "env-heartbeat-below-floor",
        env(SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL="1.5"),
        {"sidedoor_env.heartbeat_interval_not_raised"},
        [
            f"{V}SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL='1.5': SGLang raises it to 2 s (max(value, 2.0) in "
            "disaggregation/common/conn.py), so the declared interval never runs "
            "[sidedoor_env.heartbeat_interval_not_raised]; fix: declare at least 2 (SGLang's default 5.0)"
        ],
    ),
    (
        "env-heartbeat-no-failure",
        env(SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE="0"),
        {"sidedoor_env.heartbeat_max_failure_not_raised"},
        [
            f"{V}SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE='0': SGLang raises it to 1 (max(value, 1) in "
            "disaggregation/common/conn.py), so the declared value never runs "
            "[sidedoor_env.heartbeat_max_failure_not_raised]; fix: declare at least 1 (SGLang's default 2)"
        ],
    ),
    (
        "env-waiting-timeout-negative",
        env(SGLANG_DISAGGREGATION_WAITING_TIMEOUT="-1"),
        {"sidedoor_env.pd_timeouts_positive"},
        [f"{V}SGLANG_DISAGGREGATION_WAITING_TIMEOUT='-1': " + PD_TIMEOUT],
    ),
    # NIXL: its variables on another backend, its parameters, its UCX devices beside disaggregation_ib_device.
    (
        "env-nixl-variable-on-mooncake",
        env(SGLANG_DISAGGREGATION_NIXL_BACKEND="LIBFABRIC"),
        {"sidedoor_env.nixl_variables_on_nixl"},
        [
            f"{V}SGLANG_DISAGGREGATION_NIXL_BACKEND='LIBFABRIC': only the nixl transfer backend reads it "
            "(disaggregation/nixl/conn.py); this engine's is mooncake [sidedoor_env.nixl_variables_on_nixl]; fix: "
            "remove it, or declare disaggregation_transfer_backend: nixl"
        ],
    ),
    (
        "env-nixl-params-with-a-number",
        nixl(SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS='{"num_threads": 4}'),
        {"sidedoor_env.nixl_params_object"},
        [
            f"{V}SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS='{{\"num_threads\": 4}}': the nixl transfer engine refuses "
            "it at startup: 'SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS must be a JSON object with string keys and "
            "string values' (disaggregation/nixl/conn.py) [sidedoor_env.nixl_params_object]; fix: declare a JSON "
            'object of strings, e.g. {"device_list": "mlx5_0"}'
        ],
    ),
    (
        "env-ucx-devices-override-ib-device",
        nixl(UCX_NET_DEVICES="mlx5_1:1"),
        {"sidedoor_env.ucx_devices_without_ib_device"},
        [
            f"{V}UCX_NET_DEVICES='mlx5_1:1': with it set, nixl's UCX backend ignores disaggregation_ib_device='mlx5_0' "
            "('UCX_NET_DEVICES is set; ignoring --disaggregation-ib-device', disaggregation/nixl/conn.py) "
            "[sidedoor_env.ucx_devices_without_ib_device]; fix: remove it and declare the devices in "
            "disaggregation_ib_device only"
        ],
    ),
    (
        "env-nixl-device-list-and-ib-device",
        nixl(SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS='{"device_list": "mlx5_1"}'),
        {"sidedoor_env.nixl_device_list_without_ib_device"},
        [
            f'{V}SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS=\'{{"device_list": "mlx5_1"}}\': its device_list and '
            "disaggregation_ib_device='mlx5_0' both select the UCX devices; nixl refuses them at startup unless they "
            "agree ('Conflicting NIXL UCX device_list') [sidedoor_env.nixl_device_list_without_ib_device]; fix: "
            "remove device_list and declare the devices in disaggregation_ib_device only"
        ],
    ),
    (
        "env-ucx-devices-and-device-list-name-the-devices-once",
        nixl(UCX_NET_DEVICES="mlx5_1:1", SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS='{"device_list": "mlx5_1"}'),
        {"sidedoor_env.ucx_devices_without_ib_device"},
        [
            f"{V}UCX_NET_DEVICES='mlx5_1:1': with it set, nixl's UCX backend ignores disaggregation_ib_device='mlx5_0' "
            "('UCX_NET_DEVICES is set; ignoring --disaggregation-ib-device', disaggregation/nixl/conn.py) "
            "[sidedoor_env.ucx_devices_without_ib_device]; fix: remove it and declare the devices in "
            "disaggregation_ib_device only"
        ],
    ),
    # sglang_router_extra_args: what smg refuses, flags the envelope or the inventory owns.
    (
        "args-stray-value",
        args("stray"),
        {"sidedoor_args.smg_parses"},
        [f"h: {_ARGS}=['stray']: " + SMG_REFUSES.format(why="unrecognized arguments: stray")],
    ),
    (
        "args-missing-value",
        args("--queue-size"),
        {"sidedoor_args.smg_parses"},
        [f"h: {_ARGS}=['--queue-size']: " + SMG_REFUSES.format(why="argument --queue-size: expected 1 argument(s)")],
    ),
    (
        "args-own-port",
        args("--port", "9000"),
        {"sidedoor_args.no_envelope_flag"},
        [
            f"h: {_ARGS}=['--port', '9000']: "
            + OWNED_FLAG.format(shown="'--port 9000'", flag="--port", owner="sglang_router.port", note="")
        ],
    ),
    (
        "args-decode-policy-overrides-policy",
        args("--decode-policy", "cache_aware"),
        {"sidedoor_args.no_envelope_flag"},
        [
            f"h: {_ARGS}=['--decode-policy', 'cache_aware']: "
            + OWNED_FLAG.format(
                shown="'--decode-policy cache_aware'", flag="--decode-policy", owner="sglang_router.policy", note=""
            )
        ],
    ),
    (
        "args-own-api-key-redacted",
        args("--api-key", "s3cret"),
        {"sidedoor_args.no_envelope_flag"},
        [
            f"h: {_ARGS}=['--api-key', '<redacted>']: "
            + OWNED_FLAG.format(
                shown="'--api-key <redacted>'",
                flag="--api-key",
                owner="sglang_api_key",
                note=" (the key would also stand in the serve script)",
            )
        ],
    ),
    (
        "args-own-workers",
        args("--worker-urls", "http://10.0.0.9:30001"),
        {"sidedoor_args.no_group_flag"},
        [
            f"h: {_ARGS}=['--worker-urls', 'http://10.0.0.9:30001']: '--worker-urls http://10.0.0.9:30001' sets "
            "--worker-urls, which the role renders from the inventory groups sglang_prefill and sglang_decode "
            "[sidedoor_args.no_group_flag]; fix: remove it; change the inventory groups instead"
        ],
    ),
    # Ports: below 1024 for the sglang service user; an extra argument's port on one of the router's.
    (
        "port-engine-privileged",
        one(**_with(_D, port=443)),
        {"sidedoor_port.unprivileged"},
        [f"h: {_D}.port=443: {PRIVILEGED}"],
    ),
    (
        "port-metrics-privileged",
        one(**_with(_R, prometheus_port=900)),
        {"sidedoor_port.unprivileged"},
        [f"h: {_R}.prometheus_port=900: {PRIVILEGED}"],
    ),
    (
        "port-extra-arg-privileged",
        args("--health-check-port", "81"),
        {"sidedoor_port.unprivileged"},
        [f"h: {_ARGS} --health-check-port=81: {PRIVILEGED}"],
    ),
    (
        "port-extra-arg-is-the-router-port",
        args("--health-check-port", "8000"),
        {"sidedoor_port.extra_arg_port_free"},
        [
            f"h: {_ARGS}=['--health-check-port', '8000']: --health-check-port 8000 is the port of sglang_router.port: "
            "smg cannot bind both [sidedoor_port.extra_arg_port_free]; fix: give --health-check-port a port of its own"
        ],
    ),
    # Listen against advertise addresses, in stages: `::`, then loopback with a remote peer, then the addresses.
    (
        "listen-ipv6-wildcard",
        one(**_with(_C, host="::")),
        {"sidedoor_address.listen_not_ipv6_wildcard"},
        [f"h: {_C}.host='::': {WILDCARD}"],
    ),
    (
        "listen-ipv6-wildcard-before-a-loopback-advertise",
        three(_with(_C, host="::"), d={_ADV: "127.0.0.1"}),
        {"sidedoor_address.listen_not_ipv6_wildcard"},
        [f"p: {_C}.host='::': {WILDCARD}", f"d: {_C}.host='::': {WILDCARD}"],
    ),
    (
        "listen-loopback-peers-elsewhere",
        three(_with(_C, host="127.0.0.1")),
        {"sidedoor_address.listen_reachable"},
        [
            f"p: {_C}.host='127.0.0.1': "
            + LOOPBACK_LISTEN.format(unset="", peer="d (a decode engine, at the bootstrap port)", at="p"),
            f"d: {_C}.host='127.0.0.1': " + LOOPBACK_LISTEN.format(unset="", peer="r (the router)", at="d"),
        ],
    ),
    # The shared envelope fills sglang_engine_common.host from sglang_listen_host (group_vars/all/envelope.yml):
    # the refusal names the variable the operator wrote.
    (
        "listen-host-loopback-peers-elsewhere",
        three({**_with(_C, host="127.0.0.1"), "sglang_listen_host": "127.0.0.1"}),
        {"sidedoor_address.listen_reachable"},
        [
            "p: sglang_listen_host='127.0.0.1': "
            + LOOPBACK_LISTEN.format(unset="", peer="d (a decode engine, at the bootstrap port)", at="p"),
            "d: sglang_listen_host='127.0.0.1': " + LOOPBACK_LISTEN.format(unset="", peer="r (the router)", at="d"),
        ],
    ),
    (
        "listen-host-ipv6-wildcard",
        one(**_with(_C, host="::"), sglang_listen_host="::"),
        {"sidedoor_address.listen_not_ipv6_wildcard"},
        [f"h: sglang_listen_host='::': {WILDCARD}"],
    ),
    (
        "listen-host-overridden-by-the-role",
        one(**_with(_C, host="0.0.0.0"), **_with("sglang_prefill", host="::"), sglang_listen_host="0.0.0.0"),
        {"sidedoor_address.listen_not_ipv6_wildcard"},
        [f"h: sglang_prefill.host='::': {WILDCARD}"],
    ),
    (
        "listen-default-before-a-listen-advertise-mismatch",
        three(_with(_C, host=None), d={_ADV: "10.0.0.21"}),
        {"sidedoor_address.listen_reachable"},
        [
            "p: sglang_prefill.host=None: "
            + LOOPBACK_LISTEN.format(
                unset="unset, so SGLang binds its default 127.0.0.1: ",
                peer="d (a decode engine, at the bootstrap port)",
                at="p",
            ),
            "d: sglang_decode.host=None: "
            + LOOPBACK_LISTEN.format(
                unset="unset, so SGLang binds its default 127.0.0.1: ", peer="r (the router)", at="10.0.0.21"
            ),
        ],
    ),
    (
        "advertise-loopback-router-elsewhere",
        three(d={_ADV: "127.0.0.1"}),
        {"sidedoor_address.advertise_reachable"},
        [
            "d: sglang_advertise_host='127.0.0.1': r (the router) runs on another host and would connect to its own "
            "loopback, not to d [sidedoor_address.advertise_reachable]; fix: set sglang_advertise_host of d to an "
            "address of it the other hosts reach"
        ],
    ),
    (
        "advertise-ipv6-listen-ipv4",
        one(**{_ADV: "::1"}),
        {"sidedoor_address.advertise_ip_version"},
        [
            "h: sglang_advertise_host='::1': an IPv6 address, and sglang_engine_common.host='0.0.0.0' binds IPv4 only: "
            "connections fail [sidedoor_address.advertise_ip_version]; fix: advertise this host's IPv4 address, or "
            "bind its IPv6 address"
        ],
    ),
    (
        "listen-one-address-advertise-another",
        one(**_with(_C, host="10.0.0.5"), **{_ADV: "127.0.0.1"}),
        {"sidedoor_address.advertise_is_listen"},
        [
            "h: sglang_advertise_host='127.0.0.1': the engine binds only 10.0.0.5 (sglang_engine_common.host), so "
            "connections to 127.0.0.1 are refused [sidedoor_address.advertise_is_listen]; fix: advertise 10.0.0.5, "
            "or bind 0.0.0.0"
        ],
    ),
]

# Side doors used as they may be: no problem, no warning.
GOOD: list[tuple[str, Fleet]] = [
    ("env-third-party-variable", env(NCCL_DEBUG="INFO")),
    (
        "env-pool-covers-declared-queues",
        env(SGLANG_DISAGGREGATION_QUEUE_SIZE="16", SGLANG_DISAGGREGATION_THREAD_POOL_SIZE="16"),
    ),
    ("env-queues-at-derived-pool", env(SGLANG_DISAGGREGATION_QUEUE_SIZE="12")),
    ("env-heartbeat-at-floor", env(SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL="2")),
    ("env-one-heartbeat-failure", env(SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE="1")),
    # The shortest wait that still covers the longest prompt's prefill (timeout.decode_waiting_fits_longest_call).
    ("env-waiting-timeout-at-the-longest-prefill", env(SGLANG_DISAGGREGATION_WAITING_TIMEOUT="67")),
    ("env-nixl-params-of-strings", nixl(SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS='{"num_threads": "4"}')),
    (
        "env-nixl-device-list-off-ucx",
        nixl(
            SGLANG_DISAGGREGATION_NIXL_BACKEND="LIBFABRIC",
            SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS='{"device_list": "mlx5_1"}',
        ),
    ),
    ("args-a-flag-of-its-own", args("--disable-tokenizer-autoload", "--log-level", "debug")),
    ("port-extra-arg-of-its-own", args("--health-check-port", "8081")),
    ("port-privileged-as-root", one(**_with(_R, port=80), sglang_defaults_user="root")),
    (
        "port-privileged-with-the-capability",
        one(**_with(_R, port=80), sglang_router_unit={"Service": {"AmbientCapabilities": ["CAP_NET_BIND_SERVICE"]}}),
    ),
    ("listen-loopback-all-on-one-host", one(**_with(_C, host="127.0.0.1"), **{_ADV: "127.0.0.1"})),
    ("listen-wildcard-advertise-lan", three(p={_ADV: "10.0.0.11"}, d={_ADV: "10.0.0.21"})),
    ("listen-and-advertise-one-address", one(**_with(_C, host="10.0.0.5"), **{_ADV: "10.0.0.5"})),
]

# (id, fleet, known prefixes, the rule ids, the exact warnings in order)
WARNINGS: list[tuple[str, Fleet, list[str], set[str], list[str]]] = [
    (
        "env-not-in-the-registry",
        env(FOO_BAR="1"),
        [],
        {"sidedoor_env.name_registered"},
        [
            f"{V}FOO_BAR='1': not a variable of SGLang 0.5.23's registry (sglang/srt/environ.py); it is passed to the "
            "engine, which does not read it [sidedoor_env.name_registered]; fix: remove it, or add its prefix to "
            "sglang_validate_extra_env_known when another program reads it"
        ],
    ),
    ("env-known-prefix", env(FOO_BAR="1"), ["FOO_"], set(), []),
    (
        "env-legacy-prefix",
        env(SGL_DISAGGREGATION_QUEUE_SIZE="4"),
        [],
        {"sidedoor_env.name_current"},
        [
            f"{V}SGL_DISAGGREGATION_QUEUE_SIZE='4': a deprecated name; SGLang 0.5.23 reads it as "
            "SGLANG_DISAGGREGATION_QUEUE_SIZE [sidedoor_env.name_current]; fix: rename it to "
            "SGLANG_DISAGGREGATION_QUEUE_SIZE"
        ],
    ),
    (
        "env-deprecated-alias",
        env(SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW="1"),
        [],
        {"sidedoor_env.name_current"},
        [
            f"{V}SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW='1': a deprecated name; SGLang 0.5.23 reads it as "
            "SGLANG_OPT_RELEASE_PREFILL_SWA [sidedoor_env.name_current]; fix: rename it to "
            "SGLANG_OPT_RELEASE_PREFILL_SWA"
        ],
    ),
]


@pytest.mark.parametrize(("fleet", "rules", "expected"), [c[1:] for c in SIDEDOOR], ids=[c[0] for c in SIDEDOOR])
def test_bad_side_door_yields_exactly_its_problems(fleet: Fleet, rules: set[str], expected: list[str]) -> None:
    """Each broken side-door rule is reported once, word for word, and nothing else is."""
    problems = check_fleet(*fleet, DSV4)
    assert (rule_ids(problems), problems) == (rules, expected)


@pytest.mark.parametrize("fleet", [c[1] for c in GOOD], ids=[c[0] for c in GOOD])
def test_side_door_used_as_it_may_be_passes(fleet: Fleet) -> None:
    assert check_fleet(*fleet, DSV4) == []
    assert sidedoors(*fleet).warnings == []


@pytest.mark.parametrize(
    ("fleet", "known", "rules", "expected"), [c[1:] for c in WARNINGS], ids=[c[0] for c in WARNINGS]
)
def test_side_door_warnings(fleet: Fleet, known: list[str], rules: set[str], expected: list[str]) -> None:
    """A warning refuses nothing: check_fleet passes, and the warning names its rule."""
    assert check_fleet(*fleet, DSV4) == []
    warnings = sidedoors(*fleet, known).warnings
    assert (rule_ids(warnings), warnings) == (rules, expected)


def test_case_ids_are_unique() -> None:
    ids = [c[0] for c in SIDEDOOR] + [c[0] for c in GOOD] + [c[0] for c in WARNINGS]
    assert len(set(ids)) == len(ids)
