"""Fleet validation, rule by rule and in process: each bad envelope yields exactly the listed problems (variable,
value, rule and fix word for word), and each unusual but valid envelope, at the edge of every rule, yields none.

The base fleet is the shared envelope (group_vars/all/envelope.yml) on one 8-GPU H200 host that runs the prefill
engine, the decode engine and the router, as inventories/production declares it."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_declared import engine_envelope
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_engine_rules import divisors
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_router_rules import payload_bytes
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_rules import Finding, in_range, port_findings
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_validate import (
    check_engine,
    check_fleet,
    check_router,
    host_problems,
    model_fact_problems,
)

RULE_ID = re.compile(r" \[([a-z_]+\.[a-z0-9_]+)\](?:; fix: |$)")
MODELS = Path(__file__).resolve().parents[2] / "models"


def _model(name: str) -> dict[str, Any]:
    """models/<name>/config.json, as the validate role reads it."""
    return dict(json.loads((MODELS / name / "config.json").read_text()))


DSV4 = _model("deepseek-v4-flash")
V32 = _model("deepseek-v3.2")

_M, _C, _P, _D, _R = "sglang_model", "sglang_engine_common", "sglang_prefill", "sglang_decode", "sglang_router"
GROUPS = {"sglang_prefill": ["h"], "sglang_decode": ["h"], "sglang_router": ["h"]}

BASE: dict[str, Any] = {
    _M: {
        "name": "deepseek-v4-flash",
        "path": "/models/DeepSeek-V4-Flash",
        "served_name": "deepseek-v4",
        "params_b": 284,
        "quantization": "mxfp4",
    },
    "sglang_gpu_memory_gib": 141,
    "sglang_gpus_per_host": 8,
    _C: {
        "host": "0.0.0.0",
        "tp_size": 4,
        "context_length": 524288,
        "chunked_prefill_size": 8192,
        "max_prefill_tokens": 16384,
        "kv_cache_dtype": "fp8_e4m3",
        "page_size": 256,
        "bf16_index_k": True,
        "disaggregation_transfer_backend": "mooncake",
        "watchdog_timeout": 600,
        "enable_metrics": True,
        "trust_remote_code": True,
    },
    _P: {"gpu_ids": [0, 1, 2, 3], "port": 30000, "disaggregation_bootstrap_port": 8998, "mem_fraction_static": 0.78},
    _D: {
        "gpu_ids": [4, 5, 6, 7],
        "port": 30001,
        "mem_fraction_static": 0.83,
        "max_running_requests": 64,
        "cuda_graph_max_bs_decode": 64,
        "cuda_graph_bs_decode": [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64],
    },
    _R: {
        "host": "0.0.0.0",
        "port": 8000,
        "policy": "round_robin",
        "max_concurrent_requests": 64,
        "queue_size": 256,
        "queue_timeout_secs": 60,
        "request_timeout_secs": 1800,
        "max_payload_size": 536870912,
        "prometheus_port": 29000,
        "shutdown_grace_period_secs": 60,
        "retry_max_retries": 5,
        "retry_initial_backoff_ms": 100,
        "retry_max_backoff_ms": 2000,
    },
}


def _with(var: str, **changes: Any) -> dict[str, Any]:
    """The override of one top-level variable: its base value with `changes` applied (None deletes a key)."""
    value = {**BASE[var], **changes}
    return {var: {k: v for k, v in value.items() if v is not None}}


def _both(*overrides: dict[str, Any]) -> dict[str, Any]:
    """Overrides of several top-level variables at once."""
    merged: dict[str, Any] = {}
    for override in overrides:
        merged.update(override)
    return merged


def _hostvars(overrides: dict[str, Any], base: dict[str, Any] = BASE) -> dict[str, Any]:
    """A fresh copy of `base` with whole top-level variables replaced by `overrides`."""
    hostvars = copy.deepcopy(base)
    hostvars.update(copy.deepcopy(overrides))
    return hostvars


def rule_ids(problems: list[str]) -> set[str]:
    """The ids of the rules the problems name (`[scope.name]` before `; fix:`); other checks' problems name none."""
    return {m for p in problems for m in RULE_ID.findall(p)}


def _twice(message: str) -> list[str]:
    """A value of sglang_engine_common is checked once per engine, so both report it."""
    return [message, message]


PORT_RULE = "a port must be from 1 to 65535 [{id}]; fix: declare a free port from 1 to 65535"
NO_PORT = (
    "has no port, so it would fall back to its parser's default (SGLang and smg both take 30000, which collides with "
    "another server) [{id}]; fix: declare a port from 1 to 65535"
)
ENGINE_PORT, ROUTER_PORT = PORT_RULE.format(id="engine.port"), PORT_RULE.format(id="router.port")
ENGINE_NO_PORT, ROUTER_NO_PORT = NO_PORT.format(id="engine.port"), NO_PORT.format(id="router.port")
NO_BOUND = (
    "smg 1.13.0 reads it as no admission bound ({meaning} 'derive 1024 per core' or 'off'), so the router admits more "
    "than the decode fleet runs [router.max_concurrent_requests_bounded]; fix: declare a positive bound <= {bound}"
)
PAYLOAD = (
    "smaller than one full-context request ({tokens} tokens need up to {need} bytes at 16 bytes a token + 65536 "
    "bytes), so smg answers 413 'Request body exceeded the payload limit (max_payload_size)' "
    "[router.max_payload_size_fits_context]; fix: raise it to >= {need} (the shared envelope uses 536870912)"
)
SWA = (
    "--swa-full-tokens-ratio should be in range (0, 1.0] (SGLang) [engine.swa_full_tokens_ratio_range]; fix: remove it "
    "(DeepSeek-V4 defaults to 0.1) or declare a ratio in (0, 1]"
)
TOO_BIG = (
    "h: sglang_model.params_b={params}: the weights alone take {gib} GiB per GPU at tp_size=4 (mxfp4), more than "
    "sglang_gpu_memory_gib={mem} x mem_fraction_static allows [engine.gpu_holds_weights]; fix: check that params_b is "
    "in billions and quantization is right, or spread the model over more GPUs"
)
CONTRADICTS = (
    "contradicts models/deepseek-v4-flash/config.json, which states {field}={stated} [host.{key}_agrees]; fix: remove "
    "sglang_model.{key} (it is then taken from models/deepseek-v4-flash/config.json) or correct the one that is wrong"
)
MAX_QUEUED = (
    "SGLang ignores --max-queued-requests in PD mode [engine.max_queued_requests_unset]; fix: remove it and bound the "
    "queue with sglang_router.queue_size"
)
_MIN_PAYLOAD = 524288 * 16 + 64 * 1024
_MODEL = BASE[_M]

# (id, overrides of top-level variables, the exact problems in order)
BAD: list[tuple[str, dict[str, Any], set[str], list[str]]] = [
    # Router: smg's choices, admission bound, queue, timeouts, retries, payload size.
    (
        "router-policy-typo",
        _with(_R, policy="round_robbin"),
        {"router.choice"},
        [
            "h: sglang_router.policy='round_robbin': not one of smg 1.13.0's choices for --policy (did you mean "
            "round_robin?) [router.choice]; fix: use one of random, round_robin, passthrough, cache_aware, "
            "power_of_two, least_load, manual, consistent_hashing, prefix_hash"
        ],
    ),
    (
        "router-empty",
        {_R: {}},
        {"router.declared"},
        [
            "h: sglang_router={}: the router host declares no router envelope (port, policy, admission limits) "
            "[router.declared]; fix: declare sglang_router as in group_vars/all/envelope.yml"
        ],
    ),
    (
        "router-port-unset",
        _with(_R, port=None),
        {"router.port"},
        [f"h: sglang_router.port=None: the router {ROUTER_NO_PORT}"],
    ),
    ("router-port-zero", _with(_R, port=0), {"router.port"}, [f"h: sglang_router.port=0: {ROUTER_PORT}"]),
    ("router-port-65536", _with(_R, port=65536), {"router.port"}, [f"h: sglang_router.port=65536: {ROUTER_PORT}"]),
    (
        "router-prometheus-port-zero",
        _with(_R, prometheus_port=0),
        {"router.port"},
        [f"h: sglang_router.prometheus_port=0: {ROUTER_PORT}"],
    ),
    (
        "router-prometheus-port-65536",
        _with(_R, prometheus_port=65536),
        {"router.port"},
        [f"h: sglang_router.prometheus_port=65536: {ROUTER_PORT}"],
    ),
    (
        "router-prometheus-port-on-prefill",
        _with(_R, prometheus_port=30000),
        {"fleet.ports_free"},
        [
            "h: sglang_router.prometheus_port=30000: port already used by sglang_prefill.port [fleet.ports_free]; fix: "
            "give each server on a host its own ports"
        ],
    ),
    (
        "router-port-on-decode",
        _with(_R, port=30001),
        {"fleet.ports_free"},
        [
            "h: sglang_router.port=30001: port already used by sglang_decode.port [fleet.ports_free]; fix: give each "
            "server on a host its own ports"
        ],
    ),
    (
        "router-mcr-unset",
        _with(_R, max_concurrent_requests=None),
        {"router.max_concurrent_requests_bounded"},
        [
            "h: sglang_router.max_concurrent_requests=None: "
            + NO_BOUND.format(meaning="unset means -1, which means", bound=64)
        ],
    ),
    (
        "router-mcr-zero",
        _with(_R, max_concurrent_requests=0),
        {"router.max_concurrent_requests_bounded"},
        ["h: sglang_router.max_concurrent_requests=0: " + NO_BOUND.format(meaning="0 means no limit:", bound=64)],
    ),
    (
        "router-mcr-minus-one",
        _with(_R, max_concurrent_requests=-1),
        {"router.max_concurrent_requests_bounded"},
        ["h: sglang_router.max_concurrent_requests=-1: " + NO_BOUND.format(meaning="-1 means", bound=64)],
    ),
    (
        "router-mcr-minus-two",
        _with(_R, max_concurrent_requests=-2),
        {"router.max_concurrent_requests_bounded"},
        ["h: sglang_router.max_concurrent_requests=-2: " + NO_BOUND.format(meaning="a negative value means", bound=64)],
    ),
    (
        "router-mcr-one-above-decode",
        _with(_R, max_concurrent_requests=65),
        {"router.max_concurrent_requests_within_decode"},
        [
            "h: sglang_router.max_concurrent_requests=65: above what the decode fleet runs at once (64) "
            "[router.max_concurrent_requests_within_decode]; fix: lower it to <= 64; extra requests belong in "
            "queue_size"
        ],
    ),
    (
        "router-mcr-above-derived-running",
        _both(
            _with(_D, max_running_requests=None, cuda_graph_max_bs_decode=None, cuda_graph_bs_decode=None),
            _with(_R, max_concurrent_requests=257),
        ),
        {"router.max_concurrent_requests_within_decode"},
        [
            "h: sglang_router.max_concurrent_requests=257: above what the decode fleet runs at once (256) "
            "[router.max_concurrent_requests_within_decode]; fix: lower it to <= 256; extra requests belong in "
            "queue_size"
        ],
    ),
    (
        "router-mcr-zero-decode-refused",
        _both(_with(_D, max_queued_requests=1), _with(_R, max_concurrent_requests=0)),
        {"engine.max_queued_requests_unset", "router.max_concurrent_requests_bounded"},
        [
            f"h: sglang_decode.max_queued_requests=1: {MAX_QUEUED}",
            "h: sglang_router.max_concurrent_requests=0: "
            + NO_BOUND.format(meaning="0 means no limit:", bound="the decode engines max_running_requests"),
        ],
    ),
    (
        "router-queue-size-negative",
        _with(_R, queue_size=-1),
        {"router.queue_size_non_negative"},
        [
            "h: sglang_router.queue_size=-1: must be >= 0 (0: refuse with 429 when full) "
            "[router.queue_size_non_negative]; fix: e.g. 256"
        ],
    ),
    (
        "router-timeouts-zero",
        _with(
            _R,
            queue_timeout_secs=0,
            request_timeout_secs=0,
            health_check_interval_secs=0,
            worker_startup_timeout_secs=0,
            shutdown_grace_period_secs=0,
        ),
        {"router.queue_timeout_positive", "router.timeouts_positive"},
        [
            "h: sglang_router.queue_timeout_secs=0: queue_timeout_secs must be > 0 when queue_size > 0 (smg; "
            "queue_size=256) [router.queue_timeout_positive]; fix: declare e.g. 60",
            "h: sglang_router.request_timeout_secs=0: request_timeout_secs must be > 0 seconds (smg) "
            "[router.timeouts_positive]; fix: declare e.g. 1800",
            "h: sglang_router.health_check_interval_secs=0: health_check_interval_secs must be > 0 seconds (smg) "
            "[router.timeouts_positive]; fix: declare e.g. 60",
            "h: sglang_router.worker_startup_timeout_secs=0: worker_startup_timeout_secs must be > 0 seconds (smg) "
            "[router.timeouts_positive]; fix: declare e.g. 1800",
            "h: sglang_router.shutdown_grace_period_secs=0: shutdown_grace_period_secs must be > 0 seconds (smg) "
            "[router.timeouts_positive]; fix: declare e.g. 60",
        ],
    ),
    (
        "router-retries-below-least",
        _with(_R, retry_max_retries=0, retry_initial_backoff_ms=-1, retry_max_backoff_ms=-1),
        {"router.retries_at_least"},
        [
            "h: sglang_router.retry_max_retries=0: retry_max_retries must be >= 1 (smg) [router.retries_at_least]; "
            "fix: declare e.g. 5 (1: no retry)",
            "h: sglang_router.retry_initial_backoff_ms=-1: retry_initial_backoff_ms must be >= 0 (smg) "
            "[router.retries_at_least]; fix: declare e.g. 100",
            "h: sglang_router.retry_max_backoff_ms=-1: retry_max_backoff_ms must be >= 0 (smg) "
            "[router.retries_at_least]; fix: declare e.g. 2000",
        ],
    ),
    (
        "router-admission-wait-negative",
        _with(_R, pd_admission_wait_secs=-1),
        {"router.pd_admission_wait_non_negative"},
        [
            "h: sglang_router.pd_admission_wait_secs=-1: must be >= 0 seconds [router.pd_admission_wait_non_negative]; "
            "fix: e.g. 30"
        ],
    ),
    (
        "router-admission-wait-at-bootstrap-timeout",
        _with(_R, pd_admission_wait_secs=300),
        {"pair.admission_wait_within_bootstrap"},
        [
            "h: sglang_router.pd_admission_wait_secs=300 and h: "
            "sglang_engine_extra_env.SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT (unset: SGLang's default 300): smg holds "
            "a request's decode leg up to the admission wait while the prefill aborts it after 300 s without a decode "
            "bootstrap (SGLang's bootstrap timeout), so a full wait always fails "
            "[pair.admission_wait_within_bootstrap]; fix: keep pd_admission_wait_secs well under 300 (smg's default is "
            "30) or raise SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT on the prefill engines"
        ],
    ),
    (
        "router-payload-one-byte-short",
        _with(_R, max_payload_size=_MIN_PAYLOAD - 1),
        {"router.max_payload_size_fits_context"},
        [f"h: sglang_router.max_payload_size={_MIN_PAYLOAD - 1}: " + PAYLOAD.format(tokens=524288, need=_MIN_PAYLOAD)],
    ),
    (
        "router-payload-model-max-context",
        _both(_with(_C, context_length=None), _with(_R, max_payload_size=_MIN_PAYLOAD)),
        {"router.max_payload_size_fits_context"},
        [f"h: sglang_router.max_payload_size={_MIN_PAYLOAD}: " + PAYLOAD.format(tokens=1048576, need=16842752)],
    ),
    (
        "router-payload-declared-context-when-engines-refused",
        _both(_with(_P, max_queued_requests=1), _with(_D, max_queued_requests=1), _with(_R, max_payload_size=1)),
        {"engine.max_queued_requests_unset", "router.max_payload_size_fits_context"},
        [
            f"h: sglang_prefill.max_queued_requests=1: {MAX_QUEUED}",
            f"h: sglang_decode.max_queued_requests=1: {MAX_QUEUED}",
            "h: sglang_router.max_payload_size=1: " + PAYLOAD.format(tokens=524288, need=_MIN_PAYLOAD),
        ],
    ),
    (
        "router-payload-unknown-context-is-not-checked",
        _both(
            _with(_C, context_length=None),
            _with(_P, max_queued_requests=1),
            _with(_D, max_queued_requests=1),
            _with(_R, max_payload_size=1),
        ),
        {"engine.max_queued_requests_unset"},
        [
            f"h: sglang_prefill.max_queued_requests=1: {MAX_QUEUED}",
            f"h: sglang_decode.max_queued_requests=1: {MAX_QUEUED}",
        ],
    ),
    (
        "router-key-typo",
        _with(_R, max_concurent_requests=64),
        set(),
        [
            "h: sglang_router.max_concurent_requests=64: not a known router envelope key (did you mean "
            "max_concurrent_requests?); fix: remove it or use one of the schema keys in "
            "plugins/module_utils/sglang_schema.py"
        ],
    ),
    # Engine ports and their collisions on one host.
    ("prefill-port-zero", _with(_P, port=0), {"engine.port"}, [f"h: sglang_prefill.port=0: {ENGINE_PORT}"]),
    ("prefill-port-65536", _with(_P, port=65536), {"engine.port"}, [f"h: sglang_prefill.port=65536: {ENGINE_PORT}"]),
    (
        "decode-port-unset",
        _with(_D, port=None),
        {"engine.port"},
        [f"h: sglang_decode.port=None: the decode engine {ENGINE_NO_PORT}"],
    ),
    (
        "bootstrap-port-zero",
        _with(_P, disaggregation_bootstrap_port=0),
        {"engine.port"},
        [f"h: sglang_prefill.disaggregation_bootstrap_port=0: {ENGINE_PORT}"],
    ),
    (
        "bootstrap-port-65536",
        _with(_P, disaggregation_bootstrap_port=65536),
        {"engine.port"},
        [f"h: sglang_prefill.disaggregation_bootstrap_port=65536: {ENGINE_PORT}"],
    ),
    (
        "decode-port-on-bootstrap-port",
        _with(_P, disaggregation_bootstrap_port=30001),
        {"fleet.ports_free"},
        [
            "h: sglang_decode.port=30001: port already used by sglang_prefill.disaggregation_bootstrap_port "
            "[fleet.ports_free]; fix: give each server on a host its own ports"
        ],
    ),
    (
        "engine-ports-collide-at-65535",
        _both(_with(_P, port=65535), _with(_D, port=65535)),
        {"fleet.ports_free"},
        [
            "h: sglang_decode.port=65535: port already used by sglang_prefill.port [fleet.ports_free]; fix: give each "
            "server on a host its own ports"
        ],
    ),
    (
        "out-of-range-ports-do-not-collide",
        _both(_with(_P, port=0), _with(_D, port=0)),
        {"engine.port"},
        [f"h: sglang_prefill.port=0: {ENGINE_PORT}", f"h: sglang_decode.port=0: {ENGINE_PORT}"],
    ),
    # Choices of SGLang's parser.
    (
        "transfer-backend-typo",
        _with(_C, disaggregation_transfer_backend="mooncak"),
        {"engine.choice"},
        _twice(
            "h: sglang_engine_common.disaggregation_transfer_backend='mooncak': not one of SGLang 0.5.23's choices for "
            "--disaggregation-transfer-backend (did you mean mooncake?) [engine.choice]; fix: use one of mooncake, "
            "nixl, ascend, fake, mori, mooncake_tcp"
        ),
    ),
    (
        "kv-dtype-not-dsv4",
        _with(_C, kv_cache_dtype="fp8_e5m2"),
        {"engine.dsv4_kv_cache_dtype"},
        _twice(
            "h: sglang_engine_common.kv_cache_dtype='fp8_e5m2': DeepSeek-V4 allows only fp8_e4m3 or bfloat16 "
            "[engine.dsv4_kv_cache_dtype]; fix: use fp8_e4m3"
        ),
    ),
    (
        "decode-key-typo",
        _with(_D, max_runing_requests=64),
        set(),
        [
            "h: sglang_decode.max_runing_requests=64: not a known decode envelope key (did you mean "
            "max_running_requests?); fix: remove it or use one of the schema keys in "
            "plugins/module_utils/sglang_schema.py"
        ],
    ),
    # GPU arithmetic.
    (
        "base-gpu-id-contradicts-gpu-ids",
        _with(_P, base_gpu_id=2),
        {"engine.base_gpu_id_matches"},
        [
            "h: sglang_prefill.base_gpu_id=2: SGLang starts at base_gpu_id, but gpu_ids=[0, 1, 2, 3] start at 0 "
            "[engine.base_gpu_id_matches]; fix: remove base_gpu_id (it is derived from gpu_ids) or make them agree"
        ],
    ),
    (
        "shared-base-gpu-id-contradicts-decode",
        _with(_C, base_gpu_id=0),
        {"engine.base_gpu_id_matches"},
        [
            "h: sglang_engine_common.base_gpu_id=0: SGLang starts at base_gpu_id, but gpu_ids=[4, 5, 6, 7] start at 4 "
            "[engine.base_gpu_id_matches]; fix: remove base_gpu_id (it is derived from gpu_ids) or make them agree"
        ],
    ),
    (
        "base-gpu-id-negative",
        _with(_D, base_gpu_id=-1),
        {"engine.base_gpu_id_non_negative"},
        [
            "h: sglang_decode.base_gpu_id=-1: base_gpu_id must be non-negative (SGLang) "
            "[engine.base_gpu_id_non_negative]; fix: remove it"
        ],
    ),
    (
        "dp-times-tp-gpus",
        _with(_D, dp_size=2),
        {"engine.gpu_count_matches"},
        [
            "h: sglang_decode.gpu_ids=[4, 5, 6, 7]: tp_size=4 x dp_size=2 needs 8 GPUs [engine.gpu_count_matches]; "
            "fix: list 8 GPU ids or set tp_size to 2"
        ],
    ),
    (
        "tp-not-gpu-count",
        _with(_P, tp_size=2),
        {"engine.gpu_count_matches"},
        [
            "h: sglang_prefill.gpu_ids=[0, 1, 2, 3]: tp_size=2 needs exactly 2 GPUs [engine.gpu_count_matches]; fix: "
            "list 2 GPU ids or set tp_size to 4"
        ],
    ),
    (
        "gpu-count-not-a-valid-tp",
        _with(_D, gpu_ids=[4, 5, 6]),
        {"engine.gpu_count_matches"},
        [
            "h: sglang_decode.gpu_ids=[4, 5, 6]: tp_size=4 needs exactly 4 GPUs [engine.gpu_count_matches]; fix: list "
            "4 GPU ids"
        ],
    ),
    (
        "gpu-count-not-divisible-by-dp",
        _both(_with(_P, gpu_ids=[0, 1]), _with(_D, dp_size=4, gpu_ids=[2, 3, 4, 5, 6, 7])),
        {"engine.gpu_count_matches"},
        [
            "h: sglang_prefill.gpu_ids=[0, 1]: tp_size=4 needs exactly 4 GPUs [engine.gpu_count_matches]; fix: list 4 "
            "GPU ids or set tp_size to 2",
            "h: sglang_decode.gpu_ids=[2, 3, 4, 5, 6, 7]: tp_size=4 x dp_size=4 needs 16 GPUs "
            "[engine.gpu_count_matches]; fix: list 16 GPU ids",
        ],
    ),
    (
        "gpu-ids-empty",
        _with(_P, gpu_ids=[]),
        {"engine.gpu_count_matches"},
        [
            "h: sglang_prefill.gpu_ids=[]: tp_size=4 needs exactly 4 GPUs [engine.gpu_count_matches]; fix: list 4 GPU "
            "ids"
        ],
    ),
    (
        "tp-not-dividing-heads-and-experts",
        _with(_P, tp_size=3, gpu_ids=[0, 1, 2]),
        {"engine.tp_divides_experts", "engine.tp_divides_heads"},
        [
            "h: sglang_prefill.tp_size=3: must divide the model's 64 attention heads (models/.../config.json) "
            "[engine.tp_divides_heads]; fix: use a tp_size of 1, 2, 4, 8",
            "h: sglang_prefill.tp_size=3: must divide the model's 256 routed experts (models/.../config.json) "
            "[engine.tp_divides_experts]; fix: use a tp_size of 1, 2, 4, 8",
        ],
    ),
    (
        "tp-zero",
        _with(_C, tp_size=0),
        {"engine.positive"},
        _twice(
            "h: sglang_engine_common.tp_size=0: must be >= 1 [engine.positive]; fix: declare a positive tp_size or "
            "remove it"
        ),
    ),
    (
        "dp-zero",
        _with(_D, dp_size=0),
        {"engine.positive"},
        ["h: sglang_decode.dp_size=0: must be >= 1 [engine.positive]; fix: declare a positive dp_size or remove it"],
    ),
    (
        "gpu-sets-overlap",
        _with(_D, gpu_ids=[2, 3, 4, 5]),
        {"fleet.gpus_free"},
        [
            "h: sglang_decode.gpu_ids=[2, 3, 4, 5]: GPU 2 is already used by sglang_prefill [fleet.gpus_free]; fix: "
            "give each engine its own GPUs",
            "h: sglang_decode.gpu_ids=[2, 3, 4, 5]: GPU 3 is already used by sglang_prefill [fleet.gpus_free]; fix: "
            "give each engine its own GPUs",
        ],
    ),
    (
        "gpu-ids-not-contiguous",
        _with(_P, gpu_ids=[0, 1, 2, 8]),
        {"engine.gpu_ids_contiguous", "engine.gpu_ids_exist"},
        [
            "h: sglang_prefill.gpu_ids=[0, 1, 2, 8]: SGLang uses base_gpu_id..base_gpu_id+tp_size-1 "
            "[engine.gpu_ids_contiguous]; fix: declare contiguous GPU ids",
            "h: sglang_prefill.gpu_ids=[0, 1, 2, 8]: the host has GPUs 0..7 [engine.gpu_ids_exist]; fix: use GPU ids "
            "that exist on the host",
        ],
    ),
    (
        "gpu-id-at-gpus-per-host",
        _with(_D, gpu_ids=[5, 6, 7, 8]),
        {"engine.gpu_ids_exist"},
        [
            "h: sglang_decode.gpu_ids=[5, 6, 7, 8]: the host has GPUs 0..7 [engine.gpu_ids_exist]; fix: use GPU ids "
            "that exist on the host"
        ],
    ),
    # cuda-graph batch sizes.
    (
        "cuda-graph-bs-empty",
        _with(_D, cuda_graph_bs_decode=[]),
        {"engine.cuda_graph_bs_decode"},
        [
            "h: sglang_decode.cuda_graph_bs_decode=[]: renders a bare --cuda-graph-bs-decode, which SGLang's parser "
            "refuses (nargs '+') [engine.cuda_graph_bs_decode]; fix: list at least one batch size or remove the key"
        ],
    ),
    (
        "cuda-graph-bs-prefill-empty",
        _with(_P, cuda_graph_bs_prefill=[]),
        {"engine.cuda_graph_bs_prefill"},
        [
            "h: sglang_prefill.cuda_graph_bs_prefill=[]: renders a bare --cuda-graph-bs-prefill, which SGLang's parser "
            "refuses (nargs '+') [engine.cuda_graph_bs_prefill]; fix: list at least one batch size or remove the key"
        ],
    ),
    (
        "cuda-graph-bs-zero",
        _with(_D, cuda_graph_bs_decode=[0, 1, 2]),
        {"engine.cuda_graph_bs_decode"},
        [
            "h: sglang_decode.cuda_graph_bs_decode=[0, 1, 2]: batch sizes must be >= 1 [engine.cuda_graph_bs_decode]; "
            "fix: list positive batch sizes"
        ],
    ),
    (
        "cuda-graph-bs-prefill-zero",
        _with(_P, cuda_graph_bs_prefill=[0]),
        {"engine.cuda_graph_bs_prefill"},
        [
            "h: sglang_prefill.cuda_graph_bs_prefill=[0]: batch sizes must be >= 1 [engine.cuda_graph_bs_prefill]; "
            "fix: list positive batch sizes"
        ],
    ),
    (
        "cuda-graph-bs-one-above-max-bs",
        _with(_D, cuda_graph_bs_decode=[1, 2, 65]),
        {"engine.cuda_graph_bs_decode"},
        [
            "h: sglang_decode.cuda_graph_bs_decode=[1, 2, 65]: sizes above cuda_graph_max_bs_decode=64 are never "
            "captured [engine.cuda_graph_bs_decode]; fix: keep sizes <= 64 or raise cuda_graph_max_bs_decode"
        ],
    ),
    (
        "cuda-graph-bs-prefill-above-max-bs",
        _with(_P, cuda_graph_max_bs_prefill=8, cuda_graph_bs_prefill=[1, 9]),
        {"engine.cuda_graph_bs_prefill"},
        [
            "h: sglang_prefill.cuda_graph_bs_prefill=[1, 9]: sizes above cuda_graph_max_bs_prefill=8 are never "
            "captured [engine.cuda_graph_bs_prefill]; fix: keep sizes <= 8 or raise cuda_graph_max_bs_prefill"
        ],
    ),
    (
        "cuda-graph-bs-one-above-running",
        _with(_D, cuda_graph_max_bs_decode=None, cuda_graph_bs_decode=[1, 2, 65]),
        {"engine.cuda_graph_bs_decode"},
        [
            "h: sglang_decode.cuda_graph_bs_decode=[1, 2, 65]: sizes above max_running_requests=64 are never used by a "
            "decode batch [engine.cuda_graph_bs_decode]; fix: keep sizes <= 64"
        ],
    ),
    (
        "cuda-graph-max-bs-one-above-running",
        _with(_D, cuda_graph_max_bs_decode=65),
        {"engine.cuda_graph_max_bs_within_running"},
        [
            "h: sglang_decode.cuda_graph_max_bs_decode=65: above max_running_requests=64: no decode batch is ever that "
            "large [engine.cuda_graph_max_bs_within_running]; fix: lower it to <= 64"
        ],
    ),
    (
        "cuda-graph-max-bs-prefill-zero",
        _with(_P, cuda_graph_max_bs_prefill=0),
        {"engine.positive"},
        [
            "h: sglang_prefill.cuda_graph_max_bs_prefill=0: must be >= 1 [engine.positive]; fix: declare a positive "
            "cuda_graph_max_bs_prefill or remove it"
        ],
    ),
    # Ratios and fractions.
    (
        "swa-ratio-zero",
        _with(_C, swa_full_tokens_ratio=0.0),
        {"engine.swa_full_tokens_ratio_range"},
        _twice(f"h: sglang_engine_common.swa_full_tokens_ratio=0.0: {SWA}"),
    ),
    (
        "swa-ratio-above-one",
        _with(_D, swa_full_tokens_ratio=1.5),
        {"engine.swa_full_tokens_ratio_range"},
        [f"h: sglang_decode.swa_full_tokens_ratio=1.5: {SWA}"],
    ),
    (
        "fraction-one",
        _with(_D, mem_fraction_static=1.0),
        {"engine.mem_fraction_static_range"},
        [
            "h: sglang_decode.mem_fraction_static=1.0: must be in (0, 1) [engine.mem_fraction_static_range]; fix: use "
            "e.g. 0.83"
        ],
    ),
    (
        "fraction-zero",
        _with(_P, mem_fraction_static=0.0),
        {"engine.mem_fraction_static_range"},
        [
            "h: sglang_prefill.mem_fraction_static=0.0: must be in (0, 1) [engine.mem_fraction_static_range]; fix: use "
            "e.g. 0.83"
        ],
    ),
    (
        "fraction-below-the-weights",
        _with(_D, mem_fraction_static=0.24),
        {"engine.fraction_holds_weights"},
        [
            "h: sglang_decode.mem_fraction_static=0.24: leaves 33.8 GiB per GPU for weights and KV, and the weights "
            "alone take 35.1 GiB at tp_size=4 [engine.fraction_holds_weights]; fix: raise it above 0.25 (the shared "
            "envelope uses 0.78 to 0.83)"
        ],
    ),
    (
        "fraction-leaves-no-kv",
        _with(_D, mem_fraction_static=0.25),
        {"engine.capacity_model"},
        [
            "h: the decode engine's envelope (sglang_engine_common, sglang_decode): weights (35.1 GiB per GPU) leave "
            "no GPU memory at mem_fraction_static=0.25 on 141.0 GiB GPUs [engine.capacity_model]; fix: raise "
            "mem_fraction_static or tp_size"
        ],
    ),
    (
        "small-gpu-fractions-below-the-weights",
        {"sglang_gpu_memory_gib": 40},
        {"engine.fraction_holds_weights"},
        [
            "h: sglang_prefill.mem_fraction_static=0.78: leaves 31.2 GiB per GPU for weights and KV, and the weights "
            "alone take 35.1 GiB at tp_size=4 [engine.fraction_holds_weights]; fix: raise it above 0.88 (the shared "
            "envelope uses 0.78 to 0.83)",
            "h: sglang_decode.mem_fraction_static=0.83: leaves 33.2 GiB per GPU for weights and KV, and the weights "
            "alone take 35.1 GiB at tp_size=4 [engine.fraction_holds_weights]; fix: raise it above 0.88 (the shared "
            "envelope uses 0.78 to 0.83)",
        ],
    ),
    (
        "small-gpu-weights-above-ninety-percent",
        {"sglang_gpu_memory_gib": 39},
        {"engine.gpu_holds_weights"},
        _twice(TOO_BIG.format(params=284, gib=35, mem=39)),
    ),
    (
        "small-gpu-weights-above-default-fraction",
        _both(
            {"sglang_gpu_memory_gib": 39},
            _with(_P, mem_fraction_static=None),
            _with(_D, mem_fraction_static=None),
        ),
        {"engine.gpu_holds_weights"},
        _twice(TOO_BIG.format(params=284, gib=35, mem=39)),
    ),
    (
        "small-gpu-weights-below-default-fraction",
        _both(
            {"sglang_gpu_memory_gib": 40},
            _with(_P, mem_fraction_static=None),
            _with(_D, mem_fraction_static=None),
        ),
        {"engine.capacity_model"},
        [
            "h: the prefill engine's envelope (sglang_engine_common, sglang_prefill): weights (35.1 GiB per GPU) leave "
            "no GPU memory at mem_fraction_static=0.675 on 40.0 GiB GPUs [engine.capacity_model]; fix: raise "
            "mem_fraction_static or tp_size",
            "h: the decode engine's envelope (sglang_engine_common, sglang_decode): weights (35.1 GiB per GPU) leave "
            "no GPU memory at mem_fraction_static=0.9 on 40.0 GiB GPUs [engine.capacity_model]; fix: raise "
            "mem_fraction_static or tp_size",
        ],
    ),
    # Context length, token pools, chunking and paging.
    (
        "context-one-above-model-max",
        _with(_C, context_length=1048577),
        {"engine.context_within_model"},
        _twice(
            "h: sglang_engine_common.context_length=1048577: above the model's maximum 1048576 "
            "[engine.context_within_model]; fix: lower it to <= 1048576"
        ),
    ),
    (
        "context-zero",
        _with(_C, context_length=0),
        {"engine.positive"},
        _twice(
            "h: sglang_engine_common.context_length=0: must be >= 1 [engine.positive]; fix: declare a positive "
            "context_length or remove it"
        ),
    ),
    (
        "context-above-kv-pool",
        _with(_P, mem_fraction_static=0.29),
        {"engine.context_within_kv_pool"},
        [
            "h: sglang_engine_common.context_length=524288: above the KV pool this envelope gets (408064 tokens) "
            "[engine.context_within_kv_pool]; fix: lower context_length or raise mem_fraction_static"
        ],
    ),
    (
        "max-total-tokens-one-below-context",
        _with(_D, max_total_tokens=524287),
        {"engine.max_total_tokens_fits_context"},
        [
            "h: sglang_decode.max_total_tokens=524287: below one full-length request (context_length=524288) "
            "[engine.max_total_tokens_fits_context]; fix: raise it to >= 524288 or lower context_length"
        ],
    ),
    (
        "max-total-tokens-zero",
        _with(_D, max_total_tokens=0),
        {"engine.positive"},
        [
            "h: sglang_decode.max_total_tokens=0: must be >= 1 [engine.positive]; fix: declare a positive "
            "max_total_tokens or remove it"
        ],
    ),
    (
        "max-running-zero",
        _with(_D, max_running_requests=0),
        {"engine.positive"},
        [
            "h: sglang_decode.max_running_requests=0: must be >= 1 [engine.positive]; fix: declare a positive "
            "max_running_requests or remove it"
        ],
    ),
    (
        "max-queued-zero-in-pd",
        _with(_D, max_queued_requests=0),
        {"engine.max_queued_requests_unset"},
        [f"h: sglang_decode.max_queued_requests=0: {MAX_QUEUED}"],
    ),
    (
        "max-prefill-zero",
        _with(_C, max_prefill_tokens=0),
        {"engine.positive"},
        _twice(
            "h: sglang_engine_common.max_prefill_tokens=0: must be >= 1 [engine.positive]; fix: declare a positive "
            "max_prefill_tokens or remove it"
        ),
    ),
    (
        "chunk-one-page-above-max-prefill",
        _with(_C, chunked_prefill_size=16640),
        {"engine.chunk_within_max_prefill"},
        _twice(
            "h: sglang_engine_common.chunked_prefill_size=16640: larger than max_prefill_tokens=16384, which caps "
            "every prefill batch [engine.chunk_within_max_prefill]; fix: lower it to <= 16384 or raise "
            "max_prefill_tokens"
        ),
    ),
    (
        "chunk-not-page-multiple",
        _with(_C, chunked_prefill_size=1000),
        {"engine.chunk_page_multiple"},
        [
            "h: sglang_engine_common.chunked_prefill_size=1000: chunked_prefill_size must be divisible by page_size "
            "(256) (SGLang) [engine.chunk_page_multiple]; fix: use a multiple of 256, e.g. 768"
        ],
    ),
    (
        "chunk-below-one-page",
        _with(_C, chunked_prefill_size=100),
        {"engine.chunk_page_multiple"},
        [
            "h: sglang_engine_common.chunked_prefill_size=100: chunked_prefill_size must be divisible by page_size "
            "(256) (SGLang) [engine.chunk_page_multiple]; fix: use a multiple of 256, e.g. 256"
        ],
    ),
    (
        "chunk-zero",
        _with(_C, chunked_prefill_size=0),
        {"engine.chunked_prefill_size_valid"},
        _twice(
            "h: sglang_engine_common.chunked_prefill_size=0: must be a positive chunk size, or -1 to disable chunked "
            "prefill [engine.chunked_prefill_size_valid]; fix: declare e.g. 8192"
        ),
    ),
    (
        "chunk-minus-two",
        _with(_C, chunked_prefill_size=-2),
        {"engine.chunked_prefill_size_valid"},
        _twice(
            "h: sglang_engine_common.chunked_prefill_size=-2: must be a positive chunk size, or -1 to disable chunked "
            "prefill [engine.chunked_prefill_size_valid]; fix: declare e.g. 8192"
        ),
    ),
    (
        "page-size-not-256",
        _with(_C, page_size=64),
        {"engine.dsv4_page_size"},
        _twice(
            "h: sglang_engine_common.page_size=64: SGLang forces 256 for DeepSeek-V4 [engine.dsv4_page_size]; fix: "
            "declare 256 or leave it unset"
        ),
    ),
    (
        "page-size-zero",
        _with(_C, page_size=0),
        {"engine.positive"},
        _twice(
            "h: sglang_engine_common.page_size=0: must be >= 1 [engine.positive]; fix: declare a positive page_size or "
            "remove it"
        ),
    ),
    (
        "watchdog-zero",
        _with(_C, watchdog_timeout=0),
        {"engine.watchdog_timeout_positive"},
        _twice(
            "h: sglang_engine_common.watchdog_timeout=0.0: must be > 0 seconds [engine.watchdog_timeout_positive]; "
            "fix: declare e.g. 600"
        ),
    ),
    (
        "served-name-colon",
        _with(_C, served_model_name="deepseek:v4"),
        {"engine.served_model_name_no_colon"},
        _twice(
            "h: sglang_engine_common.served_model_name='deepseek:v4': served_model_name cannot contain a colon (':') "
            "character; SGLang reserves it for 'model:adapter' [engine.served_model_name_no_colon]; fix: declare "
            "'deepseek-v4'"
        ),
    ),
    (
        "fp4-indexer-on-h200",
        _with(_D, enable_deepseek_v4_fp4_indexer=True),
        {"engine.dsv4_fp4_indexer_off"},
        [
            "h: sglang_decode.enable_deepseek_v4_fp4_indexer=True: SGLang 0.5.23 refuses it at startup on H200 (SM90): "
            "'--enable-deepseek-v4-fp4-indexer requires SM100, SM120, or gfx95 GPUs with FP4 indexer support.' "
            "[engine.dsv4_fp4_indexer_off]; fix: remove it; bf16_index_k keeps long-context recall on H200"
        ],
    ),
    # PD pairs (checked after the engines and the router).
    (
        "pair-decode-context-shorter",
        _with(_D, context_length=262144),
        {"pair.context_length"},
        [
            "h: sglang_engine_common.context_length=524288 and h: sglang_decode.context_length=262144: the decode must "
            "accept every request the prefill accepts, and requests longer than the decode's context_length are "
            "prefilled and then refused [pair.context_length]; fix: raise the decode's context_length to >= 524288 or "
            "lower the prefill's"
        ],
    ),
    # Host and model variables.
    (
        "gpu-memory-above-1024",
        {"sglang_gpu_memory_gib": 1025},
        {"host.gpu_memory_in_gib"},
        [
            "h: sglang_gpu_memory_gib=1025: is the memory of one GPU in GiB, and no GPU has more than 1024 GiB "
            "[host.gpu_memory_in_gib]; fix: declare the GiB of one GPU (141 for an H200), not MiB or the host's total"
        ],
    ),
    (
        "params-one-billion-off",
        {_M: {**_MODEL, "params_b": 285}},
        {"host.params_b_agrees"},
        ["h: sglang_model.params_b=285: " + CONTRADICTS.format(field="num_parameters_b", stated=284, key="params_b")],
    ),
    (
        "params-off-beyond-tolerance",
        {_M: {**_MODEL, "params_b": 284.000001}},
        {"host.params_b_agrees"},
        [
            "h: sglang_model.params_b=284.000001: "
            + CONTRADICTS.format(field="num_parameters_b", stated=284, key="params_b")
        ],
    ),
    (
        "params-too-large-for-gpus",
        {_M: {**_MODEL, "params_b": 2840}},
        {"engine.gpu_holds_weights", "host.params_b_agrees"},
        [
            "h: sglang_model.params_b=2840: "
            + CONTRADICTS.format(field="num_parameters_b", stated=284, key="params_b"),
            *_twice(TOO_BIG.format(params=2840, gib=351, mem=141)),
        ],
    ),
    (
        "params-just-below-units",
        {_M: {**_MODEL, "params_b": 99999}},
        {"engine.gpu_holds_weights", "host.params_b_agrees"},
        [
            "h: sglang_model.params_b=99999: "
            + CONTRADICTS.format(field="num_parameters_b", stated=284, key="params_b"),
            *_twice(TOO_BIG.format(params=99999, gib=12369, mem=141)),
        ],
    ),
    (
        "params-zero",
        {_M: {**_MODEL, "params_b": 0}},
        {"engine.capacity_model", "host.params_b_positive"},
        [
            "h: sglang_model.params_b=0: must be > 0 (billions) [host.params_b_positive]; fix: declare e.g. 284 "
            "(billions)",
            "h: the prefill engine's envelope (sglang_engine_common, sglang_prefill): params_b=0.0 must be > 0 "
            "(billions of parameters) [engine.capacity_model]",
            "h: the decode engine's envelope (sglang_engine_common, sglang_decode): params_b=0.0 must be > 0 (billions "
            "of parameters) [engine.capacity_model]",
        ],
    ),
    (
        "quantization-contradicts-config",
        {_M: {**_MODEL, "quantization": "fp8"}},
        {"host.quantization_agrees"},
        [
            "h: sglang_model.quantization='fp8': "
            + CONTRADICTS.format(field="quantization", stated="'mxfp4'", key="quantization")
        ],
    ),
]

# A declared key the role replaces (sglang_declared.overridden_keys): the declaration would never run.
OVERRIDDEN = (
    "the deployment replaces this declared key with {instead}, so the declared value never runs [{id}]; fix: {fix}"
)
_API_KEY_INSTEAD = "sglang_api_key's value (the serve script reads ${SGLANG_API_KEY}, unset without it)"
_API_KEY_FIX = "remove it and declare the key once as sglang_api_key (in the vault)"
_MODE_FIX = "remove it; the host's inventory group (sglang_prefill or sglang_decode) sets the mode"
BAD += [
    (
        "decode-declares-prefill-mode",
        _with(_D, disaggregation_mode="prefill"),
        {"engine.not_overridden"},
        [
            "h: sglang_decode.disaggregation_mode='prefill': "
            + OVERRIDDEN.format(
                instead="'decode', the role of the inventory group sglang_decode",
                id="engine.not_overridden",
                fix=_MODE_FIX,
            )
        ],
    ),
    (
        "decode-declares-no-pd-mode",
        _with(_D, disaggregation_mode="null"),
        {"engine.not_overridden"},
        [
            "h: sglang_decode.disaggregation_mode='null': "
            + OVERRIDDEN.format(
                instead="'decode', the role of the inventory group sglang_decode",
                id="engine.not_overridden",
                fix=_MODE_FIX,
            )
        ],
    ),
    (
        "shared-mode-decode-reaches-prefill",
        _with(_C, disaggregation_mode="decode"),
        {"engine.not_overridden"},
        [
            "h: sglang_engine_common.disaggregation_mode='decode': "
            + OVERRIDDEN.format(
                instead="'prefill', the role of the inventory group sglang_prefill",
                id="engine.not_overridden",
                fix=_MODE_FIX,
            )
        ],
    ),
    (
        "engine-api-key-in-the-envelope",
        _with(_P, api_key="hunter2"),
        {"engine.not_overridden"},
        [
            "h: sglang_prefill.api_key='<redacted>': "
            + OVERRIDDEN.format(instead=_API_KEY_INSTEAD, id="engine.not_overridden", fix=_API_KEY_FIX)
        ],
    ),
    (
        "router-api-key-in-the-envelope",
        _both(_with(_R, api_key="hunter2"), {"sglang_api_key": "vault-key"}),
        {"router.not_overridden"},
        [
            "h: sglang_router.api_key='<redacted>': "
            + OVERRIDDEN.format(instead=_API_KEY_INSTEAD, id="router.not_overridden", fix=_API_KEY_FIX)
        ],
    ),
]

# (id, overrides): unusual, but at the edge of a rule on its allowed side.
GOOD: list[tuple[str, dict[str, Any]]] = [
    # Ports below 1024 need a root service user (else the side doors refuse them).
    ("ports-at-the-edges", _both(_with(_R, port=65535, prometheus_port=1), {"sglang_defaults_user": "root"})),
    (
        "engine-ports-at-the-edges",
        _both(
            _with(_P, port=1, disaggregation_bootstrap_port=65535), _with(_D, port=2), {"sglang_defaults_user": "root"}
        ),
    ),
    ("bootstrap-port-unset", _with(_P, disaggregation_bootstrap_port=None)),
    ("router-bound-one", _with(_R, max_concurrent_requests=1)),
    (
        "router-bound-derived-running",
        _with(_D, max_running_requests=None, cuda_graph_max_bs_decode=None, cuda_graph_bs_decode=None),
    ),
    ("queue-size-zero", _with(_R, queue_size=0)),
    (
        "router-timeouts-one-second",
        _with(
            _R,
            queue_timeout_secs=1,
            health_check_interval_secs=1,
            worker_startup_timeout_secs=1,
            shutdown_grace_period_secs=1,
        ),
    ),
    ("retries-at-least", _with(_R, retry_max_retries=1, retry_initial_backoff_ms=0, retry_max_backoff_ms=0)),
    ("admission-wait-zero", _with(_R, pd_admission_wait_secs=0)),
    ("admission-wait-under-bootstrap-timeout", _with(_R, pd_admission_wait_secs=299)),
    ("payload-at-minimum", _with(_R, max_payload_size=_MIN_PAYLOAD)),
    ("context-at-model-max-with-payload", _both(_with(_C, context_length=None), _with(_R, max_payload_size=16842752))),
    ("context-iec-string", _with(_C, context_length="512Ki")),
    ("context-one", _with(_C, context_length=1)),
    ("context-at-model-max", _with(_C, context_length=1048576)),
    ("kv-bfloat16", _with(_C, kv_cache_dtype="bfloat16", context_length=262144)),
    ("kv-auto", _with(_C, kv_cache_dtype="auto")),
    ("max-total-tokens-equal-context", _with(_D, max_total_tokens=524288)),
    ("decode-tp2-dp2", _with(_D, tp_size=2, dp_size=2)),
    ("engines-swap-gpus", _both(_with(_P, gpu_ids=[4, 5, 6, 7]), _with(_D, gpu_ids=[0, 1, 2, 3]))),
    ("base-gpu-id-agrees", _with(_D, base_gpu_id=4)),
    ("gpus-per-host-unset", {"sglang_gpus_per_host": None}),
    ("swa-ratio-one", _with(_C, swa_full_tokens_ratio=1.0)),
    ("swa-ratio-small", _with(_C, swa_full_tokens_ratio=0.05)),
    ("fraction-just-below-one", _with(_D, mem_fraction_static=0.99)),
    ("fraction-just-above-the-weights", _with(_D, mem_fraction_static=0.3)),
    ("gpu-memory-1024", {"sglang_gpu_memory_gib": 1024}),
    ("params-within-tolerance", {_M: {**_MODEL, "params_b": 284.0000001}}),
    ("model-facts-from-config", {_M: {k: v for k, v in _MODEL.items() if k not in ("params_b", "quantization")}}),
    ("chunked-prefill-disabled", _with(_C, chunked_prefill_size=-1)),
    ("chunk-equal-max-prefill", _with(_C, chunked_prefill_size=16384)),
    (
        "decode-chunk-not-page-multiple",
        _both(_with(_C, chunked_prefill_size=None), _with(_D, chunked_prefill_size=1000)),
    ),
    ("page-size-unset", _with(_C, page_size=None)),
    ("single-cuda-graph-size-at-max", _with(_D, cuda_graph_bs_decode=[64])),
    ("cuda-graph-bs-equal-running", _with(_D, cuda_graph_max_bs_decode=None, cuda_graph_bs_decode=[1, 64])),
    ("cuda-graph-max-bs-equal-running", _with(_D, cuda_graph_max_bs_decode=64, cuda_graph_bs_decode=None)),
    ("prefill-cuda-graph-sizes-ignore-running", _with(_P, cuda_graph_bs_prefill=[1, 512], max_running_requests=4)),
    ("fp4-indexer-off", _with(_D, enable_deepseek_v4_fp4_indexer=False)),
    # The shortest watchdog above the longest forward step (16384 tokens, timeout.watchdog_fits_longest_step).
    ("watchdog-at-the-longest-step", _with(_C, watchdog_timeout=2.08)),
    ("transfer-backend-nixl", _with(_C, disaggregation_transfer_backend="nixl")),
    # A declared mode that is the role's own runs as declared.
    (
        "modes-as-the-roles-set-them",
        _both(_with(_P, disaggregation_mode="prefill"), _with(_D, disaggregation_mode="decode")),
    ),
]


@pytest.mark.parametrize(("overrides", "rules", "expected"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_envelope_yields_exactly_its_problems(
    overrides: dict[str, Any], rules: set[str], expected: list[str]
) -> None:
    """Each broken rule is reported once per engine that breaks it, word for word, and nothing else is."""
    problems = check_fleet({"h": _hostvars(overrides)}, GROUPS, DSV4)
    assert (rule_ids(problems), problems) == (rules, expected)


@pytest.mark.parametrize("overrides", [c[1] for c in GOOD], ids=[c[0] for c in GOOD])
def test_valid_edge_envelope_passes(overrides: dict[str, Any]) -> None:
    """A value on the allowed side of a rule's boundary is not refused."""
    assert check_fleet({"h": _hostvars(overrides)}, GROUPS, DSV4) == []


def test_the_shared_envelope_passes() -> None:
    """The base fleet is deployable as declared."""
    assert check_fleet({"h": _hostvars({})}, GROUPS, DSV4) == []


def test_case_ids_are_unique() -> None:
    """Every fleet case has its own id."""
    ids = [c[0] for c in BAD] + [c[0] for c in GOOD]
    assert len(set(ids)) == len(ids)


# DeepSeek-V3.2 (not DeepSeek-V4): no forced page size, no routed-expert count, no DeepSeek-V4-only flags. 671B
# fp8 needs tp_size 8, so each engine takes 8 GPUs of a 16-GPU host.
BASE_V32: dict[str, Any] = {
    **copy.deepcopy(BASE),
    _M: {"name": "deepseek-v3.2", "path": "/models/DeepSeek-V3.2", "served_name": "deepseek-v3.2"},
    "sglang_gpus_per_host": 16,
    _C: {
        "tp_size": 8,
        "context_length": 131072,
        "chunked_prefill_size": 8192,
        "max_prefill_tokens": 16384,
        "disaggregation_transfer_backend": "mooncake",
        "enable_metrics": True,
    },
    _P: {**BASE[_P], "gpu_ids": list(range(8))},
    _D: {**BASE[_D], "gpu_ids": list(range(8, 16))},
}
V32_CASES: list[tuple[str, dict[str, Any], set[str], list[str]]] = [
    ("base", {}, set(), []),
    ("page-size-64", {_C: {**BASE_V32[_C], "page_size": 64}}, set(), []),
    ("chunk-any-size-at-page-one", {_C: {**BASE_V32[_C], "chunked_prefill_size": 1001}}, set(), []),
    ("fp4-indexer-not-refused", {_D: {**BASE_V32[_D], "enable_deepseek_v4_fp4_indexer": True}}, set(), []),
    ("kv-fp8-e5m2", {_C: {**BASE_V32[_C], "kv_cache_dtype": "fp8_e5m2"}}, set(), []),
    ("context-at-model-max", {_C: {**BASE_V32[_C], "context_length": 163840}}, set(), []),
    (
        "chunk-not-multiple-of-declared-page",
        {_C: {**BASE_V32[_C], "page_size": 64, "chunked_prefill_size": 1000}},
        {"engine.chunk_page_multiple"},
        [
            "h: sglang_engine_common.chunked_prefill_size=1000: chunked_prefill_size must be divisible by page_size "
            "(64) (SGLang) [engine.chunk_page_multiple]; fix: use a multiple of 64, e.g. 960"
        ],
    ),
    (
        "context-one-above-model-max",
        {_C: {**BASE_V32[_C], "context_length": 163841}},
        {"engine.context_within_model"},
        _twice(
            "h: sglang_engine_common.context_length=163841: above the model's maximum 163840 "
            "[engine.context_within_model]; fix: lower it to <= 163840"
        ),
    ),
    (
        "tp-not-dividing-heads-on-16-gpus",
        {_P: {**BASE_V32[_P], "tp_size": 3, "gpu_ids": [0, 1, 2]}},
        {"engine.tp_divides_heads"},
        [
            "h: sglang_prefill.tp_size=3: must divide the model's 128 attention heads (models/.../config.json) "
            "[engine.tp_divides_heads]; fix: use a tp_size of 1, 2, 4, 8, 16"
        ],
    ),
]


@pytest.mark.parametrize(("overrides", "rules", "expected"), [c[1:] for c in V32_CASES], ids=[c[0] for c in V32_CASES])
def test_rules_of_a_model_that_is_not_dsv4(overrides: dict[str, Any], rules: set[str], expected: list[str]) -> None:
    """The DeepSeek-V4 rules stay off for another model; the generic ones use its own config."""
    problems = check_fleet({"h": _hostvars(overrides, BASE_V32)}, GROUPS, V32)
    assert (rule_ids(problems), problems) == (rules, expected)


def _engine_only(role: str, **changes: Any) -> dict[str, Any]:
    """Hostvars of a host that runs one engine of the base envelope (None deletes a key)."""
    own = {k: v for k, v in {**BASE[f"sglang_{role}"], **changes}.items() if v is not None}
    return {**copy.deepcopy({k: v for k, v in BASE.items() if k not in (_P, _D, _R)}), f"sglang_{role}": own}


def test_ports_and_gpus_are_per_host() -> None:
    """Engines on different hosts may use the same GPU ids and ports."""
    router = {**_engine_only("prefill", gpu_ids=[0, 1, 2, 3], port=30000), _R: copy.deepcopy(BASE[_R])}
    hostvars = {"a": _engine_only("decode", gpu_ids=[0, 1, 2, 3], port=30000), "b": router}
    groups = {"sglang_prefill": ["b"], "sglang_decode": ["a"], "sglang_router": ["b"]}
    assert check_fleet(hostvars, groups, DSV4) == []


@pytest.mark.parametrize(
    ("bound", "expected"),
    [
        (128, []),
        (
            129,
            [
                "p: sglang_router.max_concurrent_requests=129: above what the decode fleet runs at once (128) "
                "[router.max_concurrent_requests_within_decode]; fix: lower it to <= 128; extra requests belong in "
                "queue_size"
            ],
        ),
    ],
    ids=["at-the-sum", "one-above-the-sum"],
)
def test_the_router_bound_is_the_sum_of_the_decode_engines(bound: int, expected: list[str]) -> None:
    """Two decode engines of 64 running requests each admit 128 at once."""
    prefill = {**_engine_only("prefill"), _R: {**BASE[_R], "max_concurrent_requests": bound}}
    hostvars = {"p": prefill, "d1": _engine_only("decode"), "d2": _engine_only("decode")}
    groups = {"sglang_prefill": ["p"], "sglang_decode": ["d1", "d2"], "sglang_router": ["p"]}
    assert check_fleet(hostvars, groups, DSV4) == expected


@pytest.mark.parametrize(
    ("caps", "expected"),
    [
        ((32, 32), []),
        ((40, 24), []),
        (
            (64, 64),
            [
                f"{r}: sglang_router.max_concurrent_requests=64: with the other 1 router(s)' 64, the 2 routers admit "
                "128, above what the decode fleet runs at once (64): each smg router admits its own "
                "max_concurrent_requests, the mesh shares no count [router.max_concurrent_requests_within_decode]; "
                "fix: give each of the 2 routers 32; extra requests belong in queue_size"
                for r in ("r1", "r2")
            ],
        ),
        (
            (40, 25),
            [
                "r1: sglang_router.max_concurrent_requests=40: with the other 1 router(s)' 25, the 2 routers admit "
                "65, above what the decode fleet runs at once (64): each smg router admits its own "
                "max_concurrent_requests, the mesh shares no count [router.max_concurrent_requests_within_decode]; "
                "fix: lower it to <= 39, or give each of the 2 routers 32; extra requests belong in queue_size",
                "r2: sglang_router.max_concurrent_requests=25: with the other 1 router(s)' 40, the 2 routers admit "
                "65, above what the decode fleet runs at once (64): each smg router admits its own "
                "max_concurrent_requests, the mesh shares no count [router.max_concurrent_requests_within_decode]; "
                "fix: lower it to <= 24, or give each of the 2 routers 32; extra requests belong in queue_size",
            ],
        ),
    ],
    ids=["half-each", "uneven-at-the-sum", "each-at-the-whole", "one-above-the-sum"],
)
def test_routers_together_admit_no_more_than_the_decode_fleet(caps: tuple[int, int], expected: list[str]) -> None:
    """Two routers in front of one decode engine of 64 running requests: each admits its own cap (smg's mesh shares
    no admission count), so the fleet admits their sum, and the sum is bounded."""
    engines = {"p": _engine_only("prefill"), "d": _engine_only("decode")}
    routers = {f"r{i}": {**copy.deepcopy(BASE), _R: {**BASE[_R], "max_concurrent_requests": cap}}
               for i, cap in enumerate(caps, 1)}  # fmt: skip
    groups = {"sglang_prefill": ["p"], "sglang_decode": ["d"], "sglang_router": list(routers)}
    assert check_fleet({**engines, **routers}, groups, DSV4) == expected


def test_host_problems_come_sorted_by_host() -> None:
    """Host variables are checked once per engine host, in host name order."""
    hostvars = {h: {**_engine_only("decode"), "sglang_gpu_memory_gib": 1025} for h in ("b", "a")}
    groups = {"sglang_decode": ["b", "a"]}
    rule = (
        "sglang_gpu_memory_gib=1025: is the memory of one GPU in GiB, and no GPU has more than 1024 GiB "
        "[host.gpu_memory_in_gib]; fix: declare the GiB of one GPU (141 for an H200), not MiB or the host's total"
    )
    assert check_fleet(hostvars, groups, DSV4) == [f"a: {rule}", f"b: {rule}"]


# A measured point as the production inventory declares it (inventories/production/group_vars/all/perf.yml).
MEASURED_POINT = {
    "figure": "output_tokens_per_s",
    "value": 64,
    "unit": "tokens/s",
    "calls": 1,
    "input_tokens": 16384,
    "output_tokens": 1000,
    "date": "2026-11-30",
    "source": "the deployment",
}

HOST: list[tuple[str, dict[str, Any], set[str], list[str]]] = [
    ("as-declared", {}, set(), []),
    ("gpu-memory-small-but-positive", {"sglang_gpu_memory_gib": 0.5}, set(), []),
    ("gpu-memory-1024", {"sglang_gpu_memory_gib": 1024}, set(), []),
    (
        "gpu-memory-zero",
        {"sglang_gpu_memory_gib": 0},
        {"host.gpu_memory_positive"},
        [
            "h: sglang_gpu_memory_gib=0: must be > 0 (GiB of one GPU) [host.gpu_memory_positive]; fix: declare e.g. "
            "141 for an H200"
        ],
    ),
    (
        "gpu-memory-unset",
        {"sglang_gpu_memory_gib": None},
        {"host.gpu_memory_positive"},
        [
            "h: sglang_gpu_memory_gib=None: must be > 0 (GiB of one GPU) [host.gpu_memory_positive]; fix: declare e.g. "
            "141 for an H200"
        ],
    ),
    (
        "gpu-memory-in-mib",
        {"sglang_gpu_memory_gib": 144384},
        {"host.gpu_memory_in_gib"},
        [
            "h: sglang_gpu_memory_gib=144384: is the memory of one GPU in GiB, and no GPU has more than 1024 GiB "
            "[host.gpu_memory_in_gib]; fix: declare the GiB of one GPU (141 for an H200), not MiB or the host's total"
        ],
    ),
    ("gpus-per-host-one", {"sglang_gpus_per_host": 1}, set(), []),
    (
        "gpus-per-host-zero",
        {"sglang_gpus_per_host": 0},
        {"host.gpus_per_host_positive"},
        ["h: sglang_gpus_per_host=0: must be >= 1 [host.gpus_per_host_positive]; fix: declare the host's GPU count"],
    ),
    (
        "params-counted-in-units",
        {_M: {**_MODEL, "params_b": 284000000000}},
        {"host.params_b_in_billions"},
        [
            "h: sglang_model.params_b=284000000000: is counted in billions of parameters; this looks like a count of "
            "single parameters [host.params_b_in_billions]; fix: declare params_b: 284 (billions)"
        ],
    ),
    (
        "params-at-the-units-threshold",
        {_M: {**_MODEL, "params_b": 100000}},
        {"host.params_b_in_billions"},
        [
            "h: sglang_model.params_b=100000: is counted in billions of parameters; this looks like a count of single "
            "parameters [host.params_b_in_billions]; fix: declare params_b: 0.0001 (billions)"
        ],
    ),
    (
        "params-negative-skips-the-config-comparison",
        {_M: {**_MODEL, "params_b": -1, "quantization": "fp8"}},
        {"host.params_b_positive"},
        [
            "h: sglang_model.params_b=-1: must be > 0 (billions) [host.params_b_positive]; fix: declare e.g. 284 "
            "(billions)"
        ],
    ),
    (
        "params-zero",
        {_M: {**_MODEL, "params_b": 0}},
        {"host.params_b_positive"},
        [
            "h: sglang_model.params_b=0: must be > 0 (billions) [host.params_b_positive]; fix: declare e.g. 284 "
            "(billions)"
        ],
    ),
    (
        "model-facts-unstated",
        {_M: {"name": "deepseek-v4-flash", "path": "/m"}},
        set(),
        [],
    ),
    ("interconnect-pcie", {"sglang_interconnect": "pcie"}, set(), []),
    ("interconnect-nvlink", {"sglang_interconnect": "nvlink"}, set(), []),
    (
        "interconnect-unknown",
        {"sglang_interconnect": "infiniband"},
        {"host.interconnect_known"},
        [
            "h: sglang_interconnect='infiniband': must be nvlink or pcie (the path of the TP all-reduces between "
            "this host's GPUs) [host.interconnect_known]; fix: declare pcie for GPUs without NVLink between them, "
            "else nvlink (the default)"
        ],
    ),
    (
        "perf-measured-valid",
        {"sglang_perf_measured": [MEASURED_POINT]},
        set(),
        [],
    ),
    (
        "perf-measured-not-a-list",
        {"sglang_perf_measured": MEASURED_POINT},
        {"host.perf_measured_valid"},
        [
            f"h: sglang_perf_measured={MEASURED_POINT!r}: must be a list of measured points "
            "[host.perf_measured_valid]; fix: see docs/time.md"
        ],
    ),
    (
        "perf-measured-unknown-figure",
        {"sglang_perf_measured": [MEASURED_POINT | {"figure": "tpot"}]},
        {"host.perf_measured_valid"},
        [
            "h: sglang_perf_measured[0].figure='tpot': must be one of ttft_p50, ttft_p90, prefill_pass, itl_p50, "
            "itl_p90, output_tokens_per_s, decode_step [host.perf_measured_valid]; fix: name what was measured"
        ],
    ),
    (
        "perf-measured-unit-of-another-figure",
        {"sglang_perf_measured": [MEASURED_POINT | {"unit": "ms"}]},
        {"host.perf_measured_valid"},
        [
            "h: sglang_perf_measured[0].unit='ms': output_tokens_per_s is in tokens/s [host.perf_measured_valid]; "
            "fix: unit: tokens/s"
        ],
    ),
    (
        "perf-measured-zero",
        {"sglang_perf_measured": [MEASURED_POINT | {"value": 0}]},
        {"host.perf_measured_valid"},
        [
            "h: sglang_perf_measured[0].value=0: must be a number > 0 (tokens/s) [host.perf_measured_valid]; fix: "
            "the measured figure"
        ],
    ),
    (
        "perf-measured-undated",
        {"sglang_perf_measured": [MEASURED_POINT | {"date": "last week"}]},
        {"host.perf_measured_valid"},
        [
            "h: sglang_perf_measured[0].date='last week': must be the day it was measured [host.perf_measured_valid]; "
            "fix: date: YYYY-MM-DD"
        ],
    ),
    (
        "perf-measured-no-source",
        {"sglang_perf_measured": [MEASURED_POINT | {"source": " "}]},
        {"host.perf_measured_valid"},
        [
            "h: sglang_perf_measured[0].source=' ': must say where the figure comes from [host.perf_measured_valid]; "
            "fix: source: <how it was measured>"
        ],
    ),
    (
        "perf-measured-no-shape",
        {"sglang_perf_measured": [{k: v for k, v in MEASURED_POINT.items() if k != "input_tokens"}]},
        {"host.perf_measured_valid"},
        [
            "h: sglang_perf_measured[0].input_tokens=None: must be a whole number >= 1 [host.perf_measured_valid]; "
            "fix: the input tokens measured at"
        ],
    ),
    (
        "perf-measured-decode-step-without-batch",
        {
            "sglang_perf_measured": [
                {"figure": "decode_step", "value": 15.6, "context": 16384, "date": "2026-11-30"} | {"source": "s"}
            ]
        },
        {"host.perf_measured_valid"},
        [
            "h: sglang_perf_measured[0].batch=None: must be a whole number >= 1 [host.perf_measured_valid]; fix: "
            "the batch measured at"
        ],
    ),
]


@pytest.mark.parametrize(("overrides", "rules", "expected"), [c[1:] for c in HOST], ids=[c[0] for c in HOST])
def test_host_variables(overrides: dict[str, Any], rules: set[str], expected: list[str]) -> None:
    """An engine host's own variables: GPU memory in GiB, its GPU count, the model's parameter count."""
    problems = host_problems("h", _hostvars(overrides), DSV4)
    assert (rule_ids(problems), problems) == (rules, expected)


UNSTATED_RULES = {"host.params_b_stated", "host.quantization_stated"}  # need a model config that states neither


def test_model_facts_neither_declared_nor_stated() -> None:
    """The capacity model needs params_b and quantization from the inventory or the model config."""
    config = {k: v for k, v in DSV4.items() if k not in ("num_parameters_b", "quantization")}
    hostvars = _hostvars({_M: {"name": "deepseek-v4-flash", "path": "/m"}})
    where = "models/deepseek-v4-flash/config.json"
    problems = host_problems("h", hostvars, config)
    assert rule_ids(problems) == UNSTATED_RULES
    assert problems == [
        f"h: sglang_model.params_b=None: neither sglang_model nor {where} (num_parameters_b) states it, and the "
        f"capacity model needs it [host.params_b_stated]; fix: add num_parameters_b to {where} (preferred) or declare "
        "sglang_model.params_b",
        f"h: sglang_model.quantization=None: neither sglang_model nor {where} (quantization) states it, and the "
        f"capacity model needs it [host.quantization_stated]; fix: add quantization to {where} (preferred) or declare "
        "sglang_model.quantization",
    ]


@pytest.mark.parametrize(
    ("declared", "stated", "same"),
    [
        (284, 284.0, True),
        (0.5 + 9e-10, 0.5, True),
        (0.5 + 1.1e-9, 0.5, False),
        (284.0000002, 284, True),
        (284.0000003, 284, False),
    ],
    ids=["int-and-float", "small-within-absolute-tolerance", "small-beyond", "within-relative", "beyond-relative"],
)
def test_declared_params_match_the_config_within_a_tolerance(declared: float, stated: float, same: bool) -> None:
    """params_b agrees with the config's num_parameters_b up to 1e-9 relative (1e-9 absolute below 1B)."""
    hostvars = {_M: {"name": "m", "params_b": declared, "quantization": "fp8"}}
    config = {"num_parameters_b": stated, "quantization": "fp8"}
    expected = (
        []
        if same
        else [
            f"h: sglang_model.params_b={declared!r}: contradicts models/m/config.json, which states "
            f"num_parameters_b={stated!r} [host.params_b_agrees]; fix: remove sglang_model.params_b (it is then taken "
            "from "
            "models/m/config.json) or correct the one that is wrong"
        ]
    )
    assert model_fact_problems("h", hostvars, config) == expected


ENV = {"port": 30000, "tp_size": 4, "gpu_ids": [0, 1, 2, 3]}
HV = {"sglang_gpu_memory_gib": 141, "sglang_gpus_per_host": 8}
ENGINE: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any], set[str], list[str]]] = [
    (
        "negative-gpu-id",
        {"gpu_ids": [-1, 0, 1, 2]},
        {},
        {},
        {"engine.gpu_ids_exist"},
        [
            "h: sglang_prefill.gpu_ids=[-1, 0, 1, 2]: the host has GPUs 0..7 [engine.gpu_ids_exist]; fix: use GPU ids "
            "that exist on the host"
        ],
    ),
    (
        "tp-choices-capped-by-gpus-per-host",
        {"tp_size": 3, "gpu_ids": [0, 1, 2]},
        {"sglang_gpus_per_host": 4},
        {},
        {"engine.tp_divides_experts", "engine.tp_divides_heads"},
        [
            "h: sglang_prefill.tp_size=3: must divide the model's 64 attention heads (models/.../config.json) "
            "[engine.tp_divides_heads]; fix: use a tp_size of 1, 2, 4",
            "h: sglang_prefill.tp_size=3: must divide the model's 256 routed experts (models/.../config.json) "
            "[engine.tp_divides_experts]; fix: use a tp_size of 1, 2, 4",
        ],
    ),
    (
        "tp-choices-divide-heads-and-experts",
        {"tp_size": 5, "gpu_ids": [0, 1, 2, 3, 4]},
        {"sglang_gpus_per_host": None},
        {"num_attention_heads": 48, "n_routed_experts": 64},
        {"engine.tp_divides_experts", "engine.tp_divides_heads"},
        [
            "h: sglang_prefill.tp_size=5: must divide the model's 48 attention heads (models/.../config.json) "
            "[engine.tp_divides_heads]; fix: use a tp_size of 1, 2, 4, 8",
            "h: sglang_prefill.tp_size=5: must divide the model's 64 routed experts (models/.../config.json) "
            "[engine.tp_divides_experts]; fix: use a tp_size of 1, 2, 4, 8",
        ],
    ),
    (
        "tp-choices-up-to-eight-gpus-by-default",
        {"tp_size": 5, "gpu_ids": [0, 1, 2, 3, 4]},
        {"sglang_gpus_per_host": None},
        {"num_attention_heads": 72, "n_routed_experts": 0},
        {"engine.tp_divides_heads"},
        [
            "h: sglang_prefill.tp_size=5: must divide the model's 72 attention heads (models/.../config.json) "
            "[engine.tp_divides_heads]; fix: use a tp_size of 1, 2, 3, 4, 6, 8"
        ],
    ),
    (
        "gpu-count-fix-without-head-count",
        {"gpu_ids": [0, 1, 2]},
        {},
        {"num_attention_heads": 0, "n_routed_experts": 0},
        {"engine.gpu_count_matches"},
        [
            "h: sglang_prefill.gpu_ids=[0, 1, 2]: tp_size=4 needs exactly 4 GPUs [engine.gpu_count_matches]; fix: list "
            "4 GPU ids or set tp_size to 3"
        ],
    ),
    (
        "first-checks-hide-the-rest",
        {"port": 0, "mem_fraction_static": 1.5, "gpu_ids": [0]},
        {},
        {},
        {"engine.port"},
        [f"h: sglang_prefill.port=0: {ENGINE_PORT}"],
    ),
]


@pytest.mark.parametrize(
    ("env", "hostvars", "config", "rules", "expected"), [c[1:] for c in ENGINE], ids=[c[0] for c in ENGINE]
)
def test_engine_gpu_rules(
    env: dict[str, Any], hostvars: dict[str, Any], config: dict[str, Any], rules: set[str], expected: list[str]
) -> None:
    """GPU id and tp_size rules of one engine, on hosts and models the shared envelope does not declare."""
    problems, limits = check_engine("h", "prefill", {**ENV, **env}, {**HV, **hostvars}, {**DSV4, **config})
    assert (rule_ids(problems), problems, limits) == (rules, expected, None)


def test_a_valid_engine_returns_its_capacity_limits() -> None:
    """The capacity-model limits of a valid engine feed the router checks."""
    problems, limits = check_engine("h", "decode", engine_envelope("decode", BASE), BASE, DSV4)
    assert problems == []
    assert (limits.max_running_requests, limits.context_len) == (64, 524288)


ROUTER: list[tuple[str, dict[str, Any], int, int | None, set[str], list[str]]] = [
    ("bound-without-decode-figure", {"max_concurrent_requests": 5}, 0, None, set(), []),
    ("bound-at-decode", {"max_concurrent_requests": 4}, 4, None, set(), []),
    (
        "bound-above-decode",
        {"max_concurrent_requests": 5},
        4,
        None,
        {"router.max_concurrent_requests_within_decode"},
        [
            "h: sglang_router.max_concurrent_requests=5: above what the decode fleet runs at once (4) "
            "[router.max_concurrent_requests_within_decode]; fix: lower it to <= 4; extra requests belong in queue_size"
        ],
    ),
    (
        "unbounded-without-decode-figure",
        {"max_concurrent_requests": None},
        0,
        None,
        {"router.max_concurrent_requests_bounded"},
        [
            "h: sglang_router.max_concurrent_requests=None: "
            + NO_BOUND.format(meaning="unset means -1, which means", bound="the decode engines max_running_requests")
        ],
    ),
    ("payload-without-context", {"max_concurrent_requests": 1, "max_payload_size": 1}, 0, None, set(), []),
    ("payload-at-one-token", {"max_concurrent_requests": 1, "max_payload_size": 65552}, 0, 1, set(), []),
    (
        "payload-one-byte-short-of-one-token",
        {"max_concurrent_requests": 1, "max_payload_size": 65551},
        0,
        1,
        {"router.max_payload_size_fits_context"},
        ["h: sglang_router.max_payload_size=65551: " + PAYLOAD.format(tokens=1, need=65552)],
    ),
]


@pytest.mark.parametrize(
    ("env", "running", "context", "rules", "expected"), [c[1:] for c in ROUTER], ids=[c[0] for c in ROUTER]
)
def test_router_against_the_decode_fleet(
    env: dict[str, Any], running: int, context: int | None, rules: set[str], expected: list[str]
) -> None:
    """The router's bound and payload limit against what the engines run, also when that is unknown."""
    problems = check_router("h", {"port": 8000, **env}, running, context)
    assert (rule_ids(problems), problems) == (rules, expected)


def test_number_helpers() -> None:
    """Open range sides, optional ports, tp divisors and the payload size of a request."""
    assert list(in_range("v", 5, None, None, "r", "f")) == []
    assert list(in_range("v", None, 1, 2, "r", "f")) == []
    assert list(in_range("v", 3, 1, 2, "r", "f")) == [Finding("v", 3, "r", "f")]
    assert list(in_range("v", 0, 1, None, "r", "f")) == [Finding("v", 0, "r", "f")]
    assert list(in_range("v", -7, None, 2, "r", "f")) == []
    assert list(port_findings("v", None, False, "the router")) == []
    assert list(port_findings("v", 1, True, "the router")) == list(port_findings("v", 65535, True, "the router")) == []
    assert divisors(12, 0) == [1]
    assert divisors(12, 6) == [1, 2, 3, 4, 6]
    assert divisors(7, 7) == [1, 7]
    assert payload_bytes(0) == 65536
    assert payload_bytes(10) == 65696


def test_zero_gpus_per_host_is_reported_once() -> None:
    """A host variable that is wrong by itself is reported once, not again through each engine."""
    assert check_fleet({"h": _hostvars({"sglang_gpus_per_host": 0})}, GROUPS, DSV4) == [
        "h: sglang_gpus_per_host=0: must be >= 1 [host.gpus_per_host_positive]; fix: declare the host's GPU count"
    ]


def test_zero_gpu_memory_is_reported_once() -> None:
    """A host variable that is wrong by itself is reported once, not again through each engine."""
    assert check_fleet({"h": _hostvars({"sglang_gpu_memory_gib": 0})}, GROUPS, DSV4) == [
        "h: sglang_gpu_memory_gib=0: must be > 0 (GiB of one GPU) [host.gpu_memory_positive]; fix: declare e.g. 141 "
        "for an H200"
    ]


def test_a_negative_gpu_id_is_blamed_on_gpu_ids() -> None:
    """The problem names the declared variable that holds the bad value."""
    problems = check_fleet({"h": _hostvars(_with(_P, gpu_ids=[-1, 0, 1, 2]))}, GROUPS, DSV4)
    assert problems and all(p.startswith("h: sglang_prefill.gpu_ids=[-1, 0, 1, 2]: ") for p in problems), problems
