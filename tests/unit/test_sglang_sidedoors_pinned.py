"""The side doors (plugins/plugin_utils/sglang_sidedoors.py) function by function, with hand-written answers.

The value checks follow SGLang 0.5.23's environ.py parse (EnvBool takes true/1/yes/y and false/0/no/n after lower(),
EnvInt int(), EnvFloat float(), EnvJSON json.loads, an invalid text warns 'Invalid value for NAME' and runs the
default) and argparse as smg 1.13.0 uses it (exact option, else a unique prefix; `invalid <type> value: 'x'`,
`invalid choice: 'x'`, `expected N argument(s)`). Each message is compared whole: variable, value, rule and fix."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_argspec import SMG, Flag
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_sidedoors as sd
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_rules import Finding, run

V = "h: sglang_engine_extra_env."


def flag(nargs: int | str | None) -> Flag:
    return Flag(("--x",), "x", None, nargs, None, None, "_StoreAction")


def ctx(extra: dict[str, str], backend: str = "mooncake", role: str = "prefill", **envelope: Any) -> sd.EnvContext:
    """One engine's extra environment, owning only SGLANG_DSV4_BF16_INDEX_K (declared in sglang_engine_common)."""
    owned = {"SGLANG_DSV4_BF16_INDEX_K": "sglang_engine_common.bf16_index_k"}
    return sd.EnvContext("h", role, envelope, extra, owned, backend, ("ACME_",))


def parsed(extra: list[Any]) -> tuple[list[tuple[str, list[str], str]], list[str]]:
    flags, refused = sd.parse_router_extra_args(extra)
    return [(f.dest, values, written) for f, values, written in flags], refused


# ------------------------------------------------------------------ the environment's values


@pytest.mark.parametrize(
    ("kind", "text", "expected"),
    [
        ("bool", "1", None),
        ("bool", "0", None),
        ("bool", "TRUE", None),
        ("bool", "False", None),
        ("bool", "Yes", None),
        ("bool", "no", None),
        ("bool", "Y", None),
        ("bool", "n", None),
        ("bool", "ON", '"on" is not a valid boolean value'),
        ("bool", "2", '"2" is not a valid boolean value'),
        ("bool", "", '"" is not a valid boolean value'),
        ("int", "12", None),
        ("int", "-3", None),
        ("int", "1.5", '"1.5" is not a valid integer value'),
        ("int", "X", '"X" is not a valid integer value'),
        ("int", "", '"" is not a valid integer value'),
        ("float", "0.25", None),
        ("float", "1e3", None),
        ("float", "-1", None),
        ("float", "fast", '"fast" is not a valid float value'),
        ("json", '{"a": 1}', None),
        ("json", "[1, 2]", None),
        ("json", "", None),
        ("json", "/etc/sglang/quant.json", None),
        ("json", "nope", "Expecting value: line 1 column 1 (char 0)"),
        ("json", "{bad", "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
        ("json", "etc/quant.json", "Expecting value: line 1 column 1 (char 0)"),
        ("str", "anything", None),
        ("tuple", "a,b", None),
    ],
)
def test_typed_refuses_as_sglang_parses(kind: str, text: str, expected: str | None) -> None:
    assert sd._typed(kind, text) == expected


@pytest.mark.parametrize(
    ("kind", "default", "expected"),
    [
        ("bool", False, "1 or 0 (also true/false, yes/no, y/n)"),
        ("int", 4, "an integer such as 4"),
        ("int", None, "an integer such as 1"),
        ("int", "4", "an integer such as 1"),
        ("float", 0.5, "a number such as 0.5"),
        ("float", -1, "a number such as -1"),
        ("float", None, "a number such as 1.0"),
        ("json", None, "a JSON value (or the path of a JSON file on the host)"),
        ("str", "asm", "a value"),
        ("tuple", [], "a value"),
    ],
)
def test_example_of_each_kind(kind: str, default: Any, expected: str) -> None:
    assert sd._example(kind, default) == expected


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("NOT_A_SGLANG_VARIABLE", "x", None),
        ("SGLANG_AITER_MLA_DECODE_BACKEND", "anything", None),
        ("SGLANG_WARMUP_TIMEOUT", "30", None),
        (
            "SGLANG_WARMUP_TIMEOUT",
            "soon",
            "SGLang 0.5.23 reads SGLANG_WARMUP_TIMEOUT as float (sglang/srt/environ.py) and refuses this text "
            "(\"soon\" is not a valid float value): it warns 'Invalid value for SGLANG_WARMUP_TIMEOUT' and runs with "
            "the default -1, not the declared value",
        ),
        (
            "SGLANG_TIMEOUT_KEEP_ALIVE",
            "5s",
            "SGLang 0.5.23 reads SGLANG_TIMEOUT_KEEP_ALIVE as int (sglang/srt/environ.py) and refuses this text "
            "(\"5s\" is not a valid integer value): it warns 'Invalid value for SGLANG_TIMEOUT_KEEP_ALIVE' and runs "
            "with the default 5, not the declared value",
        ),
        (
            "SGLANG_HUMMING_ONLINE_QUANT_CONFIG",
            "{",
            "SGLang 0.5.23 reads SGLANG_HUMMING_ONLINE_QUANT_CONFIG as json (sglang/srt/environ.py) and refuses this "
            "text (Expecting property name enclosed in double quotes: line 1 column 2 (char 1)): it warns 'Invalid "
            "value for SGLANG_HUMMING_ONLINE_QUANT_CONFIG' and runs with the default None, not the declared value",
        ),
        (
            "SGLANG_ROLE_NAMESPACES",
            "on",
            None,
        ),
    ],
)
def test_env_value_problem(name: str, text: str, expected: str | None) -> None:
    assert sd.env_value_problem(name, text) == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("SGL_DISAGGREGATION_QUEUE_SIZE", "SGLANG_DISAGGREGATION_QUEUE_SIZE"),
        ("SGL_", "SGLANG_"),
        ("SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW", "SGLANG_OPT_RELEASE_PREFILL_SWA"),
        ("SGLANG_EPLB_ROCM_P2P_BATCH_CHUNK_SIZE", "SGLANG_EPLB_P2P_BATCH_CHUNK_SIZE"),
        ("SGLANG_DISAGGREGATION_QUEUE_SIZE", "SGLANG_DISAGGREGATION_QUEUE_SIZE"),
        ("SGLANG_ENABLE_CP_V2", "SGLANG_ENABLE_CP_V2"),
        ("NCCL_DEBUG", "NCCL_DEBUG"),
        ("XSGL_FOO", "XSGL_FOO"),
    ],
)
def test_read_as(name: str, expected: str) -> None:
    assert sd.read_as(name) == expected


# ------------------------------------------------------------------ what the envelope owns, the context


def test_owned_env_names_the_declared_variables() -> None:
    hostvars = {
        "sglang_engine_common": {"bf16_index_k": True, "disaggregation_transfer_backend": "mooncake"},
        "sglang_prefill": {"gpu_ids": [0, 1]},
    }
    assert sd.owned_env("prefill", hostvars) == {
        "SGLANG_DSV4_BF16_INDEX_K": "sglang_engine_common.bf16_index_k",
        "SGLANG_API_KEY": "sglang_api_key (the role writes it into the environment file)",
        "CUDA_VISIBLE_DEVICES": "sglang_prefill.gpu_ids (SGLang addresses GPUs base_gpu_id.. within the visible ones)",
        "CUDA_DEVICE_ORDER": "sglang_prefill.gpu_ids (it renumbers the GPUs the ids name)",
        "MC_FORCE_TCP": "sglang_engine_common.disaggregation_transfer_backend (mooncake_tcp is mooncake with "
        "MC_FORCE_TCP=1, mooncake uses RDMA)",
    }


def test_env_context_reads_values_as_text_and_the_default_backend() -> None:
    hostvars = {"sglang_engine_extra_env": {"A": None, "B": 3, "C": "x"}}
    assert sd.env_context("h", "decode", hostvars, {}, ["ACME_"]) == sd.EnvContext(
        "h",
        "decode",
        {},
        {"A": "", "B": "3", "C": "x"},
        {
            "SGLANG_DSV4_BF16_INDEX_K": "sglang_decode.bf16_index_k",
            "SGLANG_API_KEY": "sglang_api_key (the role writes it into the environment file)",
            "CUDA_VISIBLE_DEVICES": "sglang_decode.gpu_ids (SGLang addresses GPUs base_gpu_id.. within the visible "
            "ones)",
            "CUDA_DEVICE_ORDER": "sglang_decode.gpu_ids (it renumbers the GPUs the ids name)",
            "MC_FORCE_TCP": "sglang_decode.disaggregation_transfer_backend (mooncake_tcp is mooncake with "
            "MC_FORCE_TCP=1, mooncake uses RDMA)",
        },
        "mooncake",
        ("ACME_",),
    )


def test_env_context_without_extra_env_and_with_a_declared_backend() -> None:
    context = sd.env_context(
        "h", "prefill", {"sglang_engine_extra_env": None}, {"disaggregation_transfer_backend": "nixl"}
    )
    assert (context.extra, context.backend, context.known) == ({}, "nixl", ())
    empty = sd.env_context("h", "prefill", {}, {"disaggregation_transfer_backend": ""})
    assert (empty.extra, empty.backend) == ({}, "mooncake")


def test_fate_of_each_kind_of_name() -> None:
    context = ctx(
        {
            "SGL_DSV4_BF16_INDEX_K": "1",
            "SGLANG_DSV4_BF16_INDEX_K": "1",
            "SGLANG_ENABLE_CP_V2": "1",
            "SGLANG_WARMUP_TIMEOUT": "1",
            "SGL_WARMUP_TIMEOUT": "1",
            "SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW": "1",
            "FOO": "1",
        }
    )
    assert {name: context.fate(name) for name in context.extra} == {
        "SGL_DSV4_BF16_INDEX_K": "owned",
        "SGLANG_DSV4_BF16_INDEX_K": "owned",
        "SGLANG_ENABLE_CP_V2": "retired",
        "SGLANG_WARMUP_TIMEOUT": "registered",
        "SGL_WARMUP_TIMEOUT": "registered",
        "SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW": "registered",
        "FOO": "unregistered",
    }
    assert context.named("registered") == [
        "SGLANG_WARMUP_TIMEOUT",
        "SGL_WARMUP_TIMEOUT",
        "SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW",
    ]
    assert context.named("owned") == ["SGL_DSV4_BF16_INDEX_K", "SGLANG_DSV4_BF16_INDEX_K"]


def test_number_as_int_and_float() -> None:
    context = ctx({"I": "7", "F": "2.5", "E": "", "W": "seven"})
    assert [context.number(n, int) for n in ("I", "F", "E", "W", "UNSET")] == [7, None, None, None, None]
    assert [context.number(n, float) for n in ("I", "F", "E", "W", "UNSET")] == [7.0, 2.5, None, None, None]


def test_finding_names_the_extra_env_entry() -> None:
    assert ctx({"X": "v"}).finding("X", "rule", "fix") == Finding(f"{V}X", "v", "rule", "fix")


# ------------------------------------------------------------------ the environment's rules


def test_env_rules_override_alias_retired_and_ill_typed() -> None:
    context = ctx(
        {
            "SGL_DSV4_BF16_INDEX_K": "1",
            "SGLANG_ENABLE_CP_V2": "1",
            "SGLANG_EPLB_ROCM_P2P_BATCH_CHUNK_SIZE": "many",
            "SGLANG_WARMUP_TIMEOUT": "10",
        }
    )
    assert run(sd.ENV_RULES, context) == [
        f"{V}SGL_DSV4_BF16_INDEX_K='1': overrides what the envelope declares (SGLang reads SGL_DSV4_BF16_INDEX_K as "
        "SGLANG_DSV4_BF16_INDEX_K): the role sets it from sglang_engine_common.bf16_index_k, and every report would "
        "show the declared value while the engine runs this one [sidedoor_env.no_envelope_override]; fix: remove it "
        "and declare sglang_engine_common.bf16_index_k",
        f"{V}SGLANG_ENABLE_CP_V2='1': SGLang 0.5.23 no longer reads SGLANG_ENABLE_CP_V2; it only warns "
        "('Strategy-based prefill context parallelism is now the only generic implementation.'), so the value never "
        "runs [sidedoor_env.still_read]; fix: remove it",
        f"{V}SGLANG_EPLB_ROCM_P2P_BATCH_CHUNK_SIZE='many': SGLang 0.5.23 reads SGLANG_EPLB_P2P_BATCH_CHUNK_SIZE as "
        'int (sglang/srt/environ.py) and refuses this text ("many" is not a valid integer value): it warns \'Invalid '
        "value for SGLANG_EPLB_P2P_BATCH_CHUNK_SIZE' and runs with the default 32, not the declared value "
        "[sidedoor_env.value_parses]; fix: declare an integer such as 32",
    ]


def test_retired_variable_naming_a_flag() -> None:
    assert run(sd.ENV_RULES, ctx({"SGLANG_PREFILL_DELAYER_MAX_DELAY_PASSES": "3"})) == [
        f"{V}SGLANG_PREFILL_DELAYER_MAX_DELAY_PASSES='3': SGLang 0.5.23 no longer reads "
        "SGLANG_PREFILL_DELAYER_MAX_DELAY_PASSES; it only warns ('Please use '--prefill-delayer-max-delay-passes' "
        "instead.'), so the value never runs [sidedoor_env.still_read]; fix: remove it (the flag it names is not an "
        "envelope key)"
    ]


def test_env_override_of_a_role_owned_variable_names_the_variable_to_declare() -> None:
    context = sd.env_context(
        "h",
        "decode",
        {"sglang_decode": {"gpu_ids": [4]}, "sglang_engine_extra_env": {"CUDA_VISIBLE_DEVICES": "4"}},
        {},
    )
    assert run(sd.ENV_RULES, context) == [
        f"{V}CUDA_VISIBLE_DEVICES='4': overrides what the envelope declares: the role sets it from "
        "sglang_decode.gpu_ids (SGLang addresses GPUs base_gpu_id.. within the visible ones), and every report would "
        "show the declared value while the engine runs this one [sidedoor_env.no_envelope_override]; fix: remove it "
        "and declare sglang_decode.gpu_ids"
    ]


NO_QUEUE = (
    "the {b} KV sender starts one transfer worker per queue: with none, the first KV transfer has no queue to go to "
    "(disaggregation/mooncake/conn.py, nixl/conn.py) [sidedoor_env.transfer_queues_positive]; fix: declare at least 1 "
    "(SGLang's default 4)"
)
POOL_BELOW = (
    "the mooncake prefill KV sender asserts at startup that the thread pool is at least "
    "SGLANG_DISAGGREGATION_QUEUE_SIZE={n} (disaggregation/mooncake/conn.py) "
    "[sidedoor_env.transfer_pool_covers_queues]; fix: declare at least {n}, or lower SGLANG_DISAGGREGATION_QUEUE_SIZE"
)
ABOVE_DERIVED = (
    "without SGLANG_DISAGGREGATION_THREAD_POOL_SIZE the mooncake prefill KV sender derives at most 12 threads from "
    "the CPU count, and asserts at startup that they are at least the queues (disaggregation/mooncake/conn.py) "
    "[sidedoor_env.transfer_queues_within_derived_pool]; fix: declare at most 12, or "
    "SGLANG_DISAGGREGATION_THREAD_POOL_SIZE >= {n}"
)
Q, P = "SGLANG_DISAGGREGATION_QUEUE_SIZE", "SGLANG_DISAGGREGATION_THREAD_POOL_SIZE"


@pytest.mark.parametrize(
    ("extra", "backend", "role", "expected"),
    [
        ({Q: "0"}, "mooncake_tcp", "decode", [f"{V}{Q}='0': " + NO_QUEUE.format(b="mooncake_tcp")]),
        ({Q: "0"}, "nixl", "prefill", [f"{V}{Q}='0': " + NO_QUEUE.format(b="nixl")]),
        ({Q: "0"}, "mooncake", "prefill", [f"{V}{Q}='0': " + NO_QUEUE.format(b="mooncake")]),
        ({Q: "0"}, "ascend", "prefill", []),
        ({Q: "1"}, "mooncake", "prefill", []),
        ({Q: "0", P: "0"}, "mooncake", "prefill", [f"{V}{Q}='0': " + NO_QUEUE.format(b="mooncake")]),
        ({P: "3"}, "mooncake", "prefill", [f"{V}{P}='3': " + POOL_BELOW.format(n=4)]),
        ({P: "3"}, "mooncake_tcp", "prefill", [f"{V}{P}='3': " + POOL_BELOW.format(n=4)]),
        ({P: "4"}, "mooncake", "prefill", []),
        ({P: "3"}, "mooncake", "decode", []),
        ({P: "3"}, "nixl", "prefill", []),
        ({Q: "2", P: "1"}, "mooncake", "prefill", [f"{V}{P}='1': " + POOL_BELOW.format(n=2)]),
        ({Q: "2", P: "2"}, "mooncake", "prefill", []),
        ({Q: "13"}, "mooncake", "prefill", [f"{V}{Q}='13': " + ABOVE_DERIVED.format(n=13)]),
        ({Q: "12"}, "mooncake", "prefill", []),
        ({Q: "13"}, "mooncake", "decode", []),
        ({Q: "13", P: "13"}, "mooncake", "prefill", []),
        ({Q: "13", P: "many"}, "mooncake", "prefill", [f"{V}{Q}='13': " + ABOVE_DERIVED.format(n=13)]),
    ],
)
def test_transfer_queues_and_pool(extra: dict[str, str], backend: str, role: str, expected: list[str]) -> None:
    messages = run(sd.ENV_RULES, ctx(extra, backend, role))
    assert [m for m in messages if "[sidedoor_env.value_parses]" not in m] == expected


HEARTBEAT = (
    "SGLang raises it to 2 s (max(value, 2.0) in disaggregation/common/conn.py), so the declared interval never runs "
    "[sidedoor_env.heartbeat_interval_not_raised]; fix: declare at least 2 (SGLang's default 5.0)"
)
MAX_FAILURE = (
    "SGLang raises it to 1 (max(value, 1) in disaggregation/common/conn.py), so the declared value never runs "
    "[sidedoor_env.heartbeat_max_failure_not_raised]; fix: declare at least 1 (SGLang's default 2)"
)
TIMEOUT = (
    "every PD request is timed out against it (disaggregation/common/conn.py): at 0 s or less each one fails while "
    "every engine reports healthy [sidedoor_env.pd_timeouts_positive]; fix: declare a positive number of seconds "
    "(SGLang's default 300)"
)
HB, MF = "SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL", "SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE"
BT, WT = "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", "SGLANG_DISAGGREGATION_WAITING_TIMEOUT"


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({HB: "1.99"}, [f"{V}{HB}='1.99': {HEARTBEAT}"]),
        ({HB: "2.0"}, []),
        ({HB: "2.01"}, []),
        ({MF: "0"}, [f"{V}{MF}='0': {MAX_FAILURE}"]),
        ({MF: "1"}, []),
        ({BT: "0", WT: "0"}, [f"{V}{BT}='0': {TIMEOUT}", f"{V}{WT}='0': {TIMEOUT}"]),
        ({BT: "1", WT: "1"}, []),
    ],
)
def test_heartbeats_and_timeouts(extra: dict[str, str], expected: list[str]) -> None:
    assert run(sd.ENV_RULES, ctx(extra)) == expected


NIXL_ELSEWHERE = (
    "only the nixl transfer backend reads it (disaggregation/nixl/conn.py); this engine's is {b} "
    "[sidedoor_env.nixl_variables_on_nixl]; fix: remove it, or declare disaggregation_transfer_backend: nixl"
)
PARAMS = "SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS"
NOT_OBJECT = (
    "the nixl transfer engine refuses it at startup: 'SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS must be a JSON object "
    "with string keys and string values' (disaggregation/nixl/conn.py) [sidedoor_env.nixl_params_object]; fix: "
    'declare a JSON object of strings, e.g. {"device_list": "mlx5_0"}'
)
UCX_IGNORES = (
    "with it set, nixl's UCX backend ignores disaggregation_ib_device='mlx5_0' ('UCX_NET_DEVICES is set; ignoring "
    "--disaggregation-ib-device', disaggregation/nixl/conn.py) [sidedoor_env.ucx_devices_without_ib_device]; fix: "
    "remove it and declare the devices in disaggregation_ib_device only"
)
DEVICE_LIST = (
    "its device_list and disaggregation_ib_device='mlx5_0' both select the UCX devices; nixl refuses them at startup "
    "unless they agree ('Conflicting NIXL UCX device_list') [sidedoor_env.nixl_device_list_without_ib_device]; fix: "
    "remove device_list and declare the devices in disaggregation_ib_device only"
)
IB = {"disaggregation_ib_device": "mlx5_0"}


@pytest.mark.parametrize(
    ("extra", "backend", "envelope", "expected"),
    [
        (
            {"SGLANG_DISAGGREGATION_NIXL_BACKEND": "UCX", PARAMS: "{}"},
            "mooncake_tcp",
            {},
            [
                f"{V}SGLANG_DISAGGREGATION_NIXL_BACKEND='UCX': " + NIXL_ELSEWHERE.format(b="mooncake_tcp"),
                f"{V}{PARAMS}='{{}}': " + NIXL_ELSEWHERE.format(b="mooncake_tcp"),
            ],
        ),
        ({PARAMS: "[1]"}, "mooncake", IB, [f"{V}{PARAMS}='[1]': " + NIXL_ELSEWHERE.format(b="mooncake")]),
        ({PARAMS: "[1]"}, "nixl", {}, [f"{V}{PARAMS}='[1]': {NOT_OBJECT}"]),
        ({PARAMS: "{"}, "nixl", {}, [f"{V}{PARAMS}='{{': {NOT_OBJECT}"]),
        ({PARAMS: '{"a": 1}'}, "nixl", {}, [f"{V}{PARAMS}='{{\"a\": 1}}': {NOT_OBJECT}"]),
        ({PARAMS: '{"a": "1"}'}, "nixl", {}, []),
        ({PARAMS: "{}"}, "nixl", {}, []),
        ({"UCX_NET_DEVICES": "mlx5_1:1"}, "nixl", IB, [f"{V}UCX_NET_DEVICES='mlx5_1:1': {UCX_IGNORES}"]),
        (
            {"UCX_NET_DEVICES": "mlx5_1:1", "SGLANG_DISAGGREGATION_NIXL_BACKEND": "UCX"},
            "nixl",
            IB,
            [f"{V}UCX_NET_DEVICES='mlx5_1:1': {UCX_IGNORES}"],
        ),
        ({"UCX_NET_DEVICES": "mlx5_1:1", "SGLANG_DISAGGREGATION_NIXL_BACKEND": "LIBFABRIC"}, "nixl", IB, []),
        ({"UCX_NET_DEVICES": "mlx5_1:1"}, "nixl", {}, []),
        ({"UCX_NET_DEVICES": "mlx5_1:1"}, "mooncake", IB, []),
        (
            {PARAMS: '{"device_list": "mlx5_1"}'},
            "nixl",
            IB,
            [f'{V}{PARAMS}=\'{{"device_list": "mlx5_1"}}\': {DEVICE_LIST}'],
        ),
        ({PARAMS: '{"device_list": "mlx5_1"}'}, "nixl", {}, []),
        (
            {"UCX_NET_DEVICES": "mlx5_1:1", PARAMS: '{"device_list": "mlx5_1"}'},
            "nixl",
            IB,
            [f"{V}UCX_NET_DEVICES='mlx5_1:1': {UCX_IGNORES}"],
        ),
        ({PARAMS: '{"num_threads": "4"}'}, "nixl", IB, []),
        ({PARAMS: '{"device_list": 5}'}, "nixl", IB, [f"{V}{PARAMS}='{{\"device_list\": 5}}': {NOT_OBJECT}"]),
    ],
)
def test_nixl_variables(extra: dict[str, str], backend: str, envelope: dict[str, Any], expected: list[str]) -> None:
    assert run(sd.ENV_RULES, ctx(extra, backend, **envelope)) == expected


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({}, {}),
        ({PARAMS: '{"device_list": "mlx5_0"}'}, {"device_list": "mlx5_0"}),
        ({PARAMS: "not json"}, None),
        ({PARAMS: '["device_list"]'}, None),
        ({PARAMS: '{"n": 4}'}, None),
    ],
)
def test_nixl_params(extra: dict[str, str], expected: dict[str, str] | None) -> None:
    assert sd._nixl_params(ctx(extra, "nixl")) == expected


UNREGISTERED = (
    "not a variable of SGLang 0.5.23's registry (sglang/srt/environ.py){hint}; it is passed to the engine, which does "
    "not read it [sidedoor_env.name_registered]; fix: remove it, or add its prefix to sglang_validate_extra_env_known "
    "when another program reads it"
)


def test_env_warnings_unregistered_and_deprecated_names() -> None:
    context = ctx(
        {
            "SGLANG_WARMUP_TIMEOT": "1",
            "SGLANGWARMUP_TIMEOUT": "1",
            "FOO_BAR": "1",
            "NCCL_DEBUG": "INFO",
            "TZ": "UTC",
            "ACME_MODE": "1",
            "SGL_WARMUP_TIMEOUT": "10",
            "SGLANG_WARMUP_TIMEOUT": "10",
        }
    )
    assert run(sd.ENV_RULES, context) == []
    assert run(sd.ENV_WARNINGS, context) == [
        f"{V}SGLANG_WARMUP_TIMEOT='1': " + UNREGISTERED.format(hint=" (did you mean SGLANG_WARMUP_TIMEOUT?)"),
        f"{V}SGLANGWARMUP_TIMEOUT='1': " + UNREGISTERED.format(hint=" (did you mean SGLANG_WARMUP_TIMEOUT?)"),
        f"{V}FOO_BAR='1': " + UNREGISTERED.format(hint=""),
        f"{V}SGL_WARMUP_TIMEOUT='10': a deprecated name; SGLang 0.5.23 reads it as SGLANG_WARMUP_TIMEOUT "
        "[sidedoor_env.name_current]; fix: rename it to SGLANG_WARMUP_TIMEOUT",
    ]


# ------------------------------------------------------------------ smg's reading of the router's extra arguments


@pytest.mark.parametrize(
    ("token", "dest", "why"),
    [
        ("--port", "port", ""),
        ("--cache-match-threshold", "cache_threshold", ""),
        ("--cache-thr", "cache_threshold", ""),
        ("--no-", "remove_unhealthy_workers", ""),
        ("--health-check-po", "health_check_port", ""),
        (
            "--cache-",
            None,
            "ambiguous option: --cache- could match --cache-boundaries, --cache-index, --cache-match-threshold, "
            "--cache-threshold",
        ),
        (
            "--p",
            None,
            "ambiguous option: --p could match --parser, --pd-admission-wait-secs, --pd-disaggregation, --policy",
        ),
        ("--polcy", None, "unrecognized arguments: --polcy (did you mean --policy?)"),
        ("--zzzzzz", None, "unrecognized arguments: --zzzzzz"),
    ],
)
def test_smg_flag_as_argparse_selects_it(token: str, dest: str | None, why: str) -> None:
    found, reason = sd._smg_flag(token)
    assert (found.dest if found else None, reason) == (dest, why)


@pytest.mark.parametrize(
    ("nargs", "expected"),
    [(None, (1, 1)), (0, (0, 0)), (1, (1, 1)), (3, (3, 3)), ("?", (0, 1)), ("*", (0, None)), ("+", (1, None))],
)
def test_values_wanted(nargs: int | str | None, expected: tuple[int, int | None]) -> None:
    assert sd._values_wanted(flag(nargs)) == expected


def test_values_wanted_of_an_unknown_nargs_is_one() -> None:
    assert sd._values_wanted(flag("weird")) == (1, 1)


@pytest.mark.parametrize(
    ("dest", "value", "expected"),
    [
        ("queue_size", "12", None),
        ("queue_size", "-1", None),
        ("queue_size", "1.5", "argument --queue-size: invalid int value: '1.5'"),
        ("sse_keepalive_secs", "0", None),
        ("sse_keepalive_secs", "-1", "argument --sse-keepalive-secs: must be a non-negative integer: '-1'"),
        ("sse_keepalive_secs", "x", "argument --sse-keepalive-secs: invalid _non_negative_int value: 'x'"),
        ("cache_threshold", "0.5", None),
        ("cache_threshold", "high", "argument --cache-threshold: invalid float value: 'high'"),
        ("policy", "random", None),
        ("policy", "RANDOM", "argument --policy: invalid choice: 'RANDOM'"),
        ("policy", "bucket", "argument --policy: invalid choice: 'bucket'"),
        ("prefill_policy", "bucket", None),
        ("mm_processing", "AUTO", None),
        ("mm_processing", "Nope", "argument --mm-processing: invalid choice: 'Nope'"),
        ("cache_boundaries", "1,2, 3", None),
        ("cache_boundaries", "1,,2", None),
        ("cache_boundaries", "1,a", "argument --cache-boundaries: invalid _parse_int_csv value: '1,a'"),
        ("log_level", "warn", None),
        ("log_level", "warning", "argument --log-level: invalid choice: 'warning'"),
        ("host", "anything", None),
        ("prefill", "http://p:30000", None),
        ("mm_allowed_media_domains", "a.example,b.example", None),
    ],
)
def test_value_problem(dest: str, value: str, expected: str | None) -> None:
    assert sd._value_problem(SMG[dest], value) == expected


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ([], ([], [])),
        (["stray"], ([], ["unrecognized arguments: stray"])),
        (["-v"], ([], ["unrecognized arguments: -v"])),
        (["--log-level=debug"], ([("log_level", ["debug"], "--log-level")], [])),
        (["--log-l", "debug"], ([("log_level", ["debug"], "--log-l")], [])),
        (
            ["--disable-tokenizer-autoload", "--queue-size", 5],
            (
                [
                    ("disable_tokenizer_autoload", [], "--disable-tokenizer-autoload"),
                    ("queue_size", ["5"], "--queue-size"),
                ],
                [],
            ),
        ),
        (
            ["--disable-tokenizer-autoload=1"],
            ([], ["argument --disable-tokenizer-autoload: expected no argument(s)"]),
        ),
        (
            ["--disable-tokenizer-autoload", "x"],
            ([("disable_tokenizer_autoload", [], "--disable-tokenizer-autoload")], ["unrecognized arguments: x"]),
        ),
        (["--queue-size"], ([], ["argument --queue-size: expected 1 argument(s)"])),
        (
            ["--queue-size", "--log-level", "info"],
            ([("log_level", ["info"], "--log-level")], ["argument --queue-size: expected 1 argument(s)"]),
        ),
        (["--queue-size", "-1"], ([("queue_size", ["-1"], "--queue-size")], [])),
        (["--queue-size", "x"], ([], ["argument --queue-size: invalid int value: 'x'"])),
        (["--queue-size", "1", "2"], ([("queue_size", ["1"], "--queue-size")], ["unrecognized arguments: 2"])),
        (
            ["--selector", "a=b", "c=d", "--log-level", "info"],
            ([("selector", ["a=b", "c=d"], "--selector"), ("log_level", ["info"], "--log-level")], []),
        ),
        (["--selector"], ([], ["argument --selector: expected 1 argument(s)"])),
        (["--cors-allowed-origins"], ([("cors_allowed_origins", [], "--cors-allowed-origins")], [])),
        (["--cors-allowed-origins=a"], ([("cors_allowed_origins", ["a"], "--cors-allowed-origins")], [])),
        (["--selector=app=router"], ([("selector", ["app=router"], "--selector")], [])),
        (
            ["--prometheus-duration-buckets", "0.1", "x"],
            ([], ["argument --prometheus-duration-buckets: invalid float value: 'x'"]),
        ),
        (["--decode", "a", "b"], ([("decode", ["a"], "--decode")], ["unrecognized arguments: b"])),
        (
            ["--cache-", "1", "--polcy", "x"],
            (
                [],
                [
                    "ambiguous option: --cache- could match --cache-boundaries, --cache-index, "
                    "--cache-match-threshold, --cache-threshold",
                    "unrecognized arguments: 1",
                    "unrecognized arguments: --polcy (did you mean --policy?)",
                    "unrecognized arguments: x",
                ],
            ),
        ),
    ],
)
def test_parse_router_extra_args(
    extra: list[Any], expected: tuple[list[tuple[str, list[str], str]], list[str]]
) -> None:
    assert parsed(extra) == expected


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--api-key", "s3cret", "--port", 1], ["--api-key", "<redacted>", "--port", "1"]),
        (["--api-key=s3cret", "x"], ["--api-key=<redacted>", "x"]),
        (["--api-key="], ["--api-key=<redacted>"]),
        (["--api-key=a=b"], ["--api-key=<redacted>"]),
        (["--ap", "s3cret"], ["--ap", "<redacted>"]),
        (["--a", "s3cret"], ["--a", "s3cret"]),
        (["--api-keys", "s3cret"], ["--api-keys", "s3cret"]),
        (["--api-key"], ["--api-key"]),
        (["--host", "x", "--api-k=s"], ["--host", "x", "--api-k=<redacted>"]),
    ],
)
def test_redacted(extra: list[Any], expected: list[str]) -> None:
    assert sd._redacted(extra) == expected


@pytest.mark.parametrize(
    ("hostvars", "expected"),
    [
        ({}, {}),
        ({"sglang_router_extra_args": None}, {}),
        (
            {
                "sglang_router_extra_args": [
                    "--health-check-port",
                    "8081",
                    "--mesh-port=39527",
                    "--port",
                    "9000",
                    "--prometheus-port",
                    "9100",
                    "--queue-size",
                    "4",
                ]
            },
            {"--health-check-port": 8081, "--mesh-port": 39527},
        ),
        ({"sglang_router_extra_args": ["--health-check-po", "81"]}, {"--health-check-port": 81}),
        ({"sglang_router_extra_args": ["--health-check-port", "x"]}, {}),
    ],
)
def test_router_extra_ports(hostvars: dict[str, Any], expected: dict[str, int]) -> None:
    assert sd.router_extra_ports(hostvars) == expected


def test_args_context_and_its_finding() -> None:
    context = sd.args_context("r", {"sglang_router_extra_args": ["--api-key", "s", "stray"]})
    assert (context.host, [f.dest for f, _v, _w in context.parsed], list(context.refused), list(context.shown)) == (
        "r",
        ["api_key"],
        ["unrecognized arguments: stray"],
        ["--api-key", "<redacted>", "stray"],
    )
    assert context.finding("rule", "fix") == Finding(
        "r: sglang_router_extra_args", ["--api-key", "<redacted>", "stray"], "rule", "fix"
    )
    assert sd.args_context("r", {}).shown == []


@pytest.mark.parametrize(
    ("dest", "expected"),
    [
        ("port", "sglang_router.port"),
        ("prometheus_port", "sglang_router.prometheus_port"),
        ("decode_policy", "sglang_router.policy"),
        ("prefill_policy", "sglang_router.policy"),
        ("api_key", "sglang_api_key"),
        ("log_level", None),
        ("worker_urls", None),
    ],
)
def test_envelope_owner(dest: str, expected: str | None) -> None:
    assert sd._envelope_owner(SMG[dest]) == expected


def test_as_written() -> None:
    assert sd._as_written(SMG["port"], ["9000"], "--po") == "--po 9000"
    assert sd._as_written(SMG["api_key"], ["s3cret"], "--api-key") == "--api-key <redacted>"
    assert sd._as_written(SMG["selector"], ["a=b", "c=d"], "--selector") == "--selector a=b c=d"
    assert sd._as_written(SMG["pd_disaggregation"], [], "--pd-disaggregation") == "--pd-disaggregation"


ARGS = "r: sglang_router_extra_args="


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            ["--polcy", "random"],
            [
                f"{ARGS}['--polcy', 'random']: smg 1.13.0's parser refuses it at startup ('smg launch: error: "
                "unrecognized arguments: --polcy (did you mean --policy?)') [sidedoor_args.smg_parses]; fix: remove "
                "the argument or correct it from `smg launch --help`",
                f"{ARGS}['--polcy', 'random']: smg 1.13.0's parser refuses it at startup ('smg launch: error: "
                "unrecognized arguments: random') [sidedoor_args.smg_parses]; fix: remove the argument or correct it "
                "from `smg launch --help`",
            ],
        ),
        (
            ["--api-k=s3cret"],
            [
                f"{ARGS}['--api-k=<redacted>']: '--api-k <redacted>' sets --api-key, which the envelope declares "
                "through sglang_api_key: smg takes the last one, so it runs this value while every report shows the "
                "declared one (the key would also stand in the serve script) [sidedoor_args.no_envelope_flag]; fix: "
                "remove it and declare sglang_api_key"
            ],
        ),
        (
            ["--prefill-policy", "bucket"],
            [
                f"{ARGS}['--prefill-policy', 'bucket']: '--prefill-policy bucket' sets --prefill-policy, which the "
                "envelope declares through sglang_router.policy: smg takes the last one, so it runs this value while "
                "every report shows the declared one [sidedoor_args.no_envelope_flag]; fix: remove it and declare "
                "sglang_router.policy"
            ],
        ),
        (
            ["--pd-disaggregation", "--prefill-selector", "app=p"],
            [
                f"{ARGS}['--pd-disaggregation', '--prefill-selector', 'app=p']: '--pd-disaggregation' sets "
                "--pd-disaggregation, which the role renders from the role (every router runs --pd-disaggregation) "
                "[sidedoor_args.no_group_flag]; fix: remove it; change the inventory groups instead",
                f"{ARGS}['--pd-disaggregation', '--prefill-selector', 'app=p']: '--prefill-selector app=p' sets "
                "--prefill-selector, which the role renders from the inventory group sglang_prefill "
                "[sidedoor_args.no_group_flag]; fix: remove it; change the inventory groups instead",
            ],
        ),
        (["--log-level", "debug", "--health-check-port", "8081"], []),
    ],
)
def test_args_rules(extra: list[str], expected: list[str]) -> None:
    assert run(sd.ARGS_RULES, sd.args_context("r", {"sglang_router_extra_args": extra})) == expected


# ------------------------------------------------------------------ ports


@pytest.mark.parametrize(
    ("hostvars", "expected"),
    [
        ({}, (False, "sglang")),
        ({"sglang_defaults_user": ""}, (False, "sglang")),
        ({"sglang_defaults_user": "root"}, (True, "root")),
        ({"sglang_defaults_user": "svc"}, (False, "svc")),
        ({"sglang_common_unit": {"Service": {"AmbientCapabilities": "CAP_NET_BIND_SERVICE"}}}, (True, "sglang")),
        ({"sglang_engine_unit": {"Service": {"AmbientCapabilities": ["CAP_NET_BIND_SERVICE"]}}}, (True, "sglang")),
        ({"sglang_router_unit": {"Service": {"AmbientCapabilities": "CAP_SYS_NICE"}}}, (False, "sglang")),
        ({"sglang_router_unit": {"Service": {"AmbientCapabilities": "CAP_NET_BIND_SERVICE"}}}, (True, "sglang")),
        ({"sglang_router_unit": {"Service": None}, "sglang_engine_unit": None}, (False, "sglang")),
        ({"sglang_router_unit": {"Unit": {"AmbientCapabilities": "CAP_NET_BIND_SERVICE"}}}, (False, "sglang")),
    ],
)
def test_runs_as_root(hostvars: dict[str, Any], expected: tuple[bool, str]) -> None:
    assert sd._runs_as_root(hostvars) == expected


def privileged(host: str, var: str, port: int, user: str = "sglang") -> str:
    return (
        f"{host}: {var}={port!r}: a port below 1024 needs root or CAP_NET_BIND_SERVICE, and the unit runs as {user!r} "
        "without it: the bind fails with 'Permission denied' at startup [sidedoor_port.unprivileged]; fix: use a port "
        "from 1024 to 65535"
    )


def test_unprivileged_bounds() -> None:
    ports = {"a": 0, "b": 1, "c": 1023, "d": 1024, "e": "80", "f": None}
    assert run(sd.PORT_RULES, sd.PortContext("h", {"sglang_defaults_user": "svc"}, ports)) == [
        privileged("h", "b", 1, "svc"),
        privileged("h", "c", 1023, "svc"),
    ]
    assert run(sd.PORT_RULES, sd.PortContext("h", {"sglang_defaults_user": "root"}, ports)) == []


def test_extra_port_free_against_the_router_ports_only() -> None:
    hostvars = {"sglang_router_extra_args": ["--api-key", "k", "--health-check-port", "8000", "--mesh-port", "9100"]}
    ports = {
        "sglang_router.port": 8000,
        "sglang_router.prometheus_port": None,
        "sglang_router_extra_args --health-check-port": 8000,
        "sglang_router_extra_args --mesh-port": 9100,
        "other.port": 9100,
    }
    extra = {"--health-check-port": 8000, "--mesh-port": 9100}
    assert run(sd.PORT_RULES, sd.PortContext("r", hostvars, ports, extra)) == [
        "r: sglang_router_extra_args=['--api-key', '<redacted>', '--health-check-port', '8000', '--mesh-port', "
        "'9100']: --health-check-port 8000 is the port of sglang_router.port: smg cannot bind both "
        "[sidedoor_port.extra_arg_port_free]; fix: give --health-check-port a port of its own"
    ]
    assert sd.PortContext("r", {}, {}).extra_ports == {}


# ------------------------------------------------------------------ listen and advertise addresses


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("LOCALHOST", False),
        ("0.0.0.0", False),
        ("10.0.0.1", False),
        ("[fe80::1]", False),
        ("localhost.localdomain", False),
        ("", False),
    ],
)
def test_is_loopback(address: str, loopback: bool) -> None:
    assert sd.is_loopback(address) is loopback


def test_literal() -> None:
    assert [str(sd._literal(a)) for a in ("[::1]", "10.0.0.1", "::")] == ["::1", "10.0.0.1", "::"]
    assert [sd._literal(a) for a in ("host.example", "X127.0.0.1", "[10.0.0.1]X")] == [None, None, None]


@pytest.mark.parametrize(
    ("hostvars", "expected"),
    [
        ({"sglang_advertise_host": "10.0.0.5", "ansible_host": "10.0.0.6"}, ("10.0.0.5", "h: sglang_advertise_host")),
        ({"sglang_advertise_host": "", "ansible_host": "10.0.0.6"}, ("10.0.0.6", "h: ansible_host")),
        ({"ansible_host": None}, ("h", "h: the inventory name")),
        ({}, ("h", "h: the inventory name")),
    ],
)
def test_advertise_of(hostvars: dict[str, Any], expected: tuple[str, str]) -> None:
    assert sd.advertise_of("h", hostvars) == expected


def test_peers_of_each_role() -> None:
    groups = {"sglang_router": ["r", "d2"], "sglang_decode": ["d1", "d2"], "sglang_prefill": ["p"]}
    assert sd._peers("prefill", groups) == {
        "r": "the router",
        "d2": "the router",
        "d1": "a decode engine, at the bootstrap port",
    }
    assert sd._peers("decode", groups) == {"r": "the router", "d2": "the router"}
    assert sd._peers("prefill", {}) == {}


def address(
    envelope: dict[str, Any], peers: dict[str, str], role: str = "decode", **hostvars: Any
) -> sd.AddressContext:
    return sd.AddressContext("h", role, {"sglang_engine_common": {"host": "x"}, **hostvars}, envelope, peers)


def test_address_context_properties() -> None:
    c = address({"host": ""}, {"h": "the router", "z": "the router", "b": "a decode engine, at the bootstrap port"})
    assert (c.listen, c.listen_key, c.advertise, c.reached) == (
        "127.0.0.1",
        "sglang_engine_common.host",
        ("h", "h: the inventory name"),
        "b (a decode engine, at the bootstrap port)",
    )
    alone = sd.AddressContext("h", "prefill", {}, {"host": "10.0.0.5"}, {"h": "the router"})
    assert (alone.listen, alone.listen_key, alone.reached) == ("10.0.0.5", "sglang_prefill.host", "")


LISTEN_LOOPBACK = (
    "{unset}the engine listens on loopback only, and r (the router) on another host connects to it at {at} "
    "[sidedoor_address.listen_reachable]; fix: declare 0.0.0.0 or this host's address the peers reach"
)
ROUTER = {"r": "the router"}


@pytest.mark.parametrize(
    ("envelope", "peers", "hostvars", "expected"),
    [
        (
            {"host": "::"},
            ROUTER,
            {"sglang_advertise_host": "127.0.0.1"},
            [
                "h: sglang_engine_common.host='::': SGLang binds '::' IPv6-only (asyncio's create_server sets "
                "IPV6_V6ONLY), while the role's health gate and drain reach a wildcard listener at 127.0.0.1, and "
                "IPv4 peers cannot connect [sidedoor_address.listen_not_ipv6_wildcard]; fix: declare 0.0.0.0, or "
                "this host's own IPv6 address with sglang_advertise_host set to it"
            ],
        ),
        (
            {"host": "localhost"},
            ROUTER,
            {"ansible_host": "10.0.0.5"},
            ["h: sglang_engine_common.host='localhost': " + LISTEN_LOOPBACK.format(unset="", at="10.0.0.5")],
        ),
        (
            {},
            ROUTER,
            {},
            [
                "h: sglang_engine_common.host=None: "
                + LISTEN_LOOPBACK.format(unset="unset, so SGLang binds its default 127.0.0.1: ", at="h")
            ],
        ),
        ({"host": "127.0.0.1"}, {"h": "the router"}, {}, []),
        (
            {"host": "0.0.0.0"},
            ROUTER,
            {"ansible_host": "localhost"},
            [
                "h: ansible_host='localhost': r (the router) runs on another host and would connect to its own "
                "loopback, not to h [sidedoor_address.advertise_reachable]; fix: set sglang_advertise_host of h to an "
                "address of it the other hosts reach"
            ],
        ),
        ({"host": "0.0.0.0"}, {}, {"ansible_host": "localhost"}, []),
        (
            {"host": "0.0.0.0"},
            ROUTER,
            {"sglang_advertise_host": "fd00::5"},
            [
                "h: sglang_advertise_host='fd00::5': an IPv6 address, and sglang_engine_common.host='0.0.0.0' binds "
                "IPv4 only: connections fail [sidedoor_address.advertise_ip_version]; fix: advertise this host's IPv4 "
                "address, or bind its IPv6 address"
            ],
        ),
        ({"host": "0.0.0.0"}, ROUTER, {"sglang_advertise_host": "10.0.0.5"}, []),
        ({"host": "0.0.0.0"}, ROUTER, {"sglang_advertise_host": "node-1"}, []),
        (
            {"host": "10.0.0.5"},
            ROUTER,
            {"sglang_advertise_host": "10.0.0.6"},
            [
                "h: sglang_advertise_host='10.0.0.6': the engine binds only 10.0.0.5 (sglang_engine_common.host), so "
                "connections to 10.0.0.6 are refused [sidedoor_address.advertise_is_listen]; fix: advertise 10.0.0.5, "
                "or bind 0.0.0.0"
            ],
        ),
        ({"host": "10.0.0.5"}, ROUTER, {"sglang_advertise_host": "10.0.0.5"}, []),
        ({"host": "10.0.0.5"}, ROUTER, {"sglang_advertise_host": "node-1"}, []),
        ({"host": "fd00::5"}, ROUTER, {"sglang_advertise_host": "[fd00::5]"}, []),
        ({"host": "node-1"}, ROUTER, {"sglang_advertise_host": "10.0.0.6"}, []),
    ],
)
def test_address_rules(
    envelope: dict[str, Any], peers: dict[str, str], hostvars: dict[str, Any], expected: list[str]
) -> None:
    assert run(sd.ADDRESS_RULES, address(envelope, peers, **hostvars)) == expected


# ------------------------------------------------------------------ the fleet


PRIVILEGED_BOOTSTRAP = privileged("p", "sglang_prefill.disaggregation_bootstrap_port", 80)


def test_sidedoors_over_a_fleet_says_each_finding_once() -> None:
    shared_env = {"SGLANG_WARMUP_TIMEOUT": "soon", "FOO_BAR": "1"}
    hostvars: dict[str, dict[str, Any]] = {
        "p": {
            "sglang_prefill": {"host": "0.0.0.0", "port": 30000, "disaggregation_bootstrap_port": 80},
            "sglang_decode": {"host": "0.0.0.0", "port": 30001},
            "sglang_engine_extra_env": shared_env,
        },
        "r": {"sglang_router": {"port": 8000}, "sglang_router_extra_args": ["--health-check-port", "29000"]},
    }
    groups = {"sglang_prefill": ["p"], "sglang_decode": ["p"], "sglang_router": ["r"]}
    ill_typed = (
        "p: sglang_engine_extra_env.SGLANG_WARMUP_TIMEOUT='soon': SGLang 0.5.23 reads SGLANG_WARMUP_TIMEOUT as float "
        '(sglang/srt/environ.py) and refuses this text ("soon" is not a valid float value): it warns \'Invalid value '
        "for SGLANG_WARMUP_TIMEOUT' and runs with the default -1, not the declared value [sidedoor_env.value_parses]; "
        "fix: declare a number such as -1"
    )
    metrics = (
        "r: sglang_router_extra_args=['--health-check-port', '29000']: --health-check-port 29000 is the port of "
        "sglang_router.prometheus_port: smg cannot bind both [sidedoor_port.extra_arg_port_free]; fix: give "
        "--health-check-port a port of its own"
    )
    warning = "p: sglang_engine_extra_env.FOO_BAR='1': " + UNREGISTERED.format(hint="")
    assert sd.sidedoors(hostvars, groups) == sd.Report([ill_typed, PRIVILEGED_BOOTSTRAP, metrics], [warning])
    assert sd.sidedoor_problems(hostvars, groups) == [ill_typed, PRIVILEGED_BOOTSTRAP, metrics]
    assert sd.sidedoor_warnings(hostvars, groups) == [warning]
    assert sd.sidedoor_warnings(hostvars, groups, ["FOO_"]) == []
    assert sd.sidedoors(hostvars, groups, ["FOO_"]).warnings == []


def test_prefill_bootstrap_port_defaults_to_8998_and_engine_ports_are_checked() -> None:
    hostvars = {"p": {"sglang_prefill": {"host": "0.0.0.0", "port": 443}}}
    assert sd.sidedoor_problems(hostvars, {"sglang_prefill": ["p"]}) == [privileged("p", "sglang_prefill.port", 443)]
    decode = {"d": {"sglang_decode": {"host": "0.0.0.0", "port": 1023}}}
    assert sd.sidedoor_problems(decode, {"sglang_decode": ["d"]}) == [privileged("d", "sglang_decode.port", 1023)]


def test_router_ports_fall_back_to_smg_defaults() -> None:
    hostvars = {"r": {"sglang_router": {"prometheus_port": 9100}, "sglang_router_extra_args": ["--mesh-port", "30000"]}}
    assert sd.sidedoor_problems(hostvars, {"sglang_router": ["r"]}) == []
    hostvars["r"]["sglang_router_extra_args"] = ["--mesh-port", "900"]
    assert sd.sidedoor_problems(hostvars, {"sglang_router": ["r"]}) == [
        privileged("r", "sglang_router_extra_args --mesh-port", 900)
    ]


def test_router_port_is_checked_against_privilege_and_extra_ports() -> None:
    hostvars = {"r": {"sglang_router": {"port": 443}, "sglang_router_extra_args": ["--mesh-port", "443"]}}
    assert sd.sidedoor_problems(hostvars, {"sglang_router": ["r"]}) == [
        privileged("r", "sglang_router.port", 443),
        privileged("r", "sglang_router_extra_args --mesh-port", 443),
        "r: sglang_router_extra_args=['--mesh-port', '443']: --mesh-port 443 is the port of sglang_router.port: smg "
        "cannot bind both [sidedoor_port.extra_arg_port_free]; fix: give --mesh-port a port of its own",
    ]


def test_a_broken_envelope_is_left_to_check_fleet() -> None:
    hostvars: dict[str, dict[str, Any]] = {
        "p": {"sglang_prefill": {"bogus_key": 1, "port": 80}, "sglang_engine_extra_env": {"FOO": "1"}},
        "r": {"sglang_router": {"bogus_key": 1}, "sglang_router_extra_args": ["stray"]},
    }
    groups = {"sglang_prefill": ["p"], "sglang_router": ["r"]}
    assert sd.sidedoors(hostvars, groups) == sd.Report([], [])
    assert sd.Report() == sd.Report([], [])
