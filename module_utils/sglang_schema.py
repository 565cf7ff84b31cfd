"""The envelope schema: every limit key, its type, the flag or env var that carries it, and its meaning.

One envelope is a flat dict of these keys for one server (prefill engine, decode engine or router).
The same keys describe all four layers: declared, on disk, running and effective.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

ENGINE_ROLES = ("prefill", "decode")
ROLES = (*ENGINE_ROLES, "router")


@dataclass(frozen=True)
class Key:
    """One envelope key. `flag` is the CLI flag, `env` an environment variable; `kind` the value type."""

    name: str
    kind: str  # int | float | str | bool | intlist | size (human-readable int)
    roles: tuple[str, ...]
    flag: str | None = None
    env: str | None = None
    doc: str = ""
    limit: bool = False  # one of the limits the audit reports first
    secret: bool = False


_E = ENGINE_ROLES
_R = ("router",)

KEYS: tuple[Key, ...] = (
    # Shared layout keys.
    Key("model_path", "str", _E, "--model-path"),
    Key("served_model_name", "str", _E, "--served-model-name"),
    Key("host", "str", ROLES, "--host"),
    Key("port", "int", ROLES, "--port"),
    Key("api_key", "str", ROLES, "--api-key", secret=True),
    # Engine limits (SGLang 0.5.23 flag names).
    Key("context_length", "size", _E, "--context-length", doc="per-call context (tokens)", limit=True),
    Key("max_total_tokens", "size", _E, "--max-total-tokens", doc="KV pool cap: total context", limit=True),
    Key("max_running_requests", "int", _E, "--max-running-requests", doc="parallel calls run", limit=True),
    Key("max_queued_requests", "int", _E, "--max-queued-requests", doc="engine queue cap (ignored in PD mode)"),
    Key("chunked_prefill_size", "int", _E, "--chunked-prefill-size", doc="prefill chunk (tokens)", limit=True),
    Key("max_prefill_tokens", "size", _E, "--max-prefill-tokens", doc="prefill batch budget (tokens)"),
    Key("mem_fraction_static", "float", _E, "--mem-fraction-static", doc="GPU share for weights+KV", limit=True),
    Key("page_size", "int", _E, "--page-size", doc="KV page size (DeepSeek-V4: 256)"),
    Key("kv_cache_dtype", "str", _E, "--kv-cache-dtype", doc="KV cache dtype"),
    Key("swa_full_tokens_ratio", "float", _E, "--swa-full-tokens-ratio", doc="SWA pool size as share of full"),
    Key("tp_size", "int", _E, "--tp-size", doc="tensor parallel size"),
    Key("dp_size", "int", _E, "--dp-size", doc="data parallel replicas"),
    Key("base_gpu_id", "int", _E, "--base-gpu-id", doc="first GPU used"),
    Key("cuda_graph_max_bs_decode", "int", _E, "--cuda-graph-max-bs-decode", doc="largest decode cuda graph"),
    Key("cuda_graph_max_bs_prefill", "int", _E, "--cuda-graph-max-bs-prefill", doc="largest prefill graph"),
    Key("cuda_graph_bs_decode", "intlist", _E, "--cuda-graph-bs-decode", doc="decode cuda-graph batch sizes"),
    Key("cuda_graph_bs_prefill", "intlist", _E, "--cuda-graph-bs-prefill", doc="prefill cuda-graph sizes"),
    Key("disaggregation_mode", "str", _E, "--disaggregation-mode", doc="null, prefill or decode"),
    Key("disaggregation_bootstrap_port", "int", ("prefill",), "--disaggregation-bootstrap-port"),
    Key("disaggregation_transfer_backend", "str", _E, "--disaggregation-transfer-backend"),
    Key("disaggregation_ib_device", "str", _E, "--disaggregation-ib-device"),
    Key("disable_radix_cache", "bool", _E, "--disable-radix-cache"),
    Key("attention_backend", "str", _E, "--attention-backend"),
    Key("watchdog_timeout", "float", _E, "--watchdog-timeout"),
    Key("enable_metrics", "bool", _E, "--enable-metrics"),
    Key("enable_cache_report", "bool", _E, "--enable-cache-report"),
    Key("trust_remote_code", "bool", _E, "--trust-remote-code"),
    Key("log_level", "str", _E, "--log-level"),
    Key("bf16_index_k", "bool", _E, env="SGLANG_DSV4_BF16_INDEX_K", doc="bf16 indexer keys", limit=True),
    # Router limits (smg 1.13.0 flag names).
    Key("max_concurrent_requests", "int", _R, "--max-concurrent-requests", doc="router in-flight cap", limit=True),
    Key("queue_size", "int", _R, "--queue-size", doc="router wait queue", limit=True),
    Key("queue_timeout_secs", "int", _R, "--queue-timeout-secs", doc="max wait in router queue", limit=True),
    Key("request_timeout_secs", "int", _R, "--request-timeout-secs", doc="per-request timeout", limit=True),
    Key("max_payload_size", "int", _R, "--max-payload-size", doc="request body cap (bytes)", limit=True),
    Key("policy", "str", _R, "--policy"),
    Key("prometheus_host", "str", _R, "--prometheus-host"),
    Key("prometheus_port", "int", _R, "--prometheus-port"),
    Key("pd_admission_wait_secs", "int", _R, "--pd-admission-wait-secs"),
    Key("health_check_interval_secs", "int", _R, "--health-check-interval-secs"),
    Key("worker_startup_timeout_secs", "int", _R, "--worker-startup-timeout-secs"),
)

BY_NAME: dict[str, Key] = {k.name: k for k in KEYS}

# Declared-only keys: they shape the deployment but are not engine flags themselves.
DEPLOY_KEYS = {"gpu_ids": "intlist", "enabled": "bool"}

# Flags SGLang 0.5.23 removed: the replacement an operator should use.
REMOVED_FLAGS = {
    "cuda_graph_max_bs": "cuda_graph_max_bs_decode (and cuda_graph_max_bs_prefill)",
    "cuda_graph_bs": "cuda_graph_bs_decode (and cuda_graph_bs_prefill)",
    "nsa_prefill_backend": "dsa_prefill_backend",
    "nsa_decode_backend": "dsa_decode_backend",
    "disable_cuda_graph": "cuda_graph_backend_decode/prefill: disabled",
    "enable_dp_attention": "attn_dp_size",
}


class EnvelopeError(ValueError):
    """A bad envelope value; the message names the variable, the value and the fix."""


def keys_for(role: str) -> list[Key]:
    """The keys valid for one role, in schema order."""
    if role not in ROLES:
        raise EnvelopeError(f"role={role!r} is not one of {', '.join(ROLES)}")
    return [k for k in KEYS if role in k.roles]


def limit_keys(role: str) -> list[str]:
    """The keys the audit reports first for a role."""
    return [k.name for k in keys_for(role) if k.limit]


def coerce(key: Key, value: Any, where: str) -> Any:
    """Convert one declared value to the key's type, or raise naming `where`, the value and the fix."""
    if value is None:
        return None
    try:
        if key.kind == "bool":
            if isinstance(value, bool):
                return value
            raise TypeError
        if key.kind in ("int", "size"):
            if isinstance(value, bool):
                raise TypeError
            if key.kind == "size" and isinstance(value, str):
                return parse_size(value)
            if isinstance(value, float) and not value.is_integer():
                raise TypeError
            return int(value)
        if key.kind == "float":
            if isinstance(value, bool):
                raise TypeError
            return float(value)
        if key.kind == "intlist":
            if not isinstance(value, (list, tuple)):
                raise TypeError
            return [int(v) for v in value]
        return str(value)
    except (TypeError, ValueError):
        raise EnvelopeError(
            f"{where}.{key.name}={value!r} is not a valid {key.kind}; fix: declare a {key.kind} value "
            f"(it renders as {key.flag or key.env})"
        ) from None


_SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)")


def parse_size(text: str | int) -> int:
    """SGLang's human-readable ints: case-sensitive SI k/M/G/T (`128k` = 128000, decimals allowed) or IEC
    Ki/Mi/Gi/Ti (`128Ki` = 131072, integers only); plain ints as-is. Raises ValueError with SGLang's text."""
    if isinstance(text, int):
        return text
    value = text.strip()
    match = _HUMAN_INT.fullmatch(value)
    if match:
        number, suffix = match.groups()
        if suffix in _IEC:
            if "." in number:
                raise ValueError(
                    f"Decimals are not allowed with IEC suffixes like '{suffix}'. "
                    f"Use an integer IEC value such as '{int(Decimal(number))}{suffix}', "
                    f"or an SI value such as '{number}{suffix[0]}'."
                )
            return int(number) * _IEC[suffix]
        return int(Decimal(number) * _SI[suffix])
    try:
        return int(value)
    except ValueError:
        raise ValueError(
            f"Invalid integer value: '{value}'. "
            "Use a plain integer, SI suffixes (1k, 1M), or IEC suffixes (1Ki, 1Mi). "
            "Suffixes are case-sensitive."
        ) from None


def normalize(role: str, envelope: dict[str, Any], where: str) -> dict[str, Any]:
    """Check keys and types of one envelope; unknown keys are errors so typos are never ignored."""
    valid = {k.name: k for k in keys_for(role)}
    out: dict[str, Any] = {}
    for name, value in envelope.items():
        if name in REMOVED_FLAGS:
            raise EnvelopeError(f"{where}.{name} is a flag SGLang 0.5.23 removed; fix: use {REMOVED_FLAGS[name]}")
        if name in DEPLOY_KEYS:
            out[name] = value
            continue
        if name not in valid:
            near = [k for k in valid if k.split("_")[0] == name.split("_")[0]]
            hint = f" (did you mean {', '.join(near)}?)" if near else ""
            raise EnvelopeError(
                f"{where}.{name}={value!r}: not a known {role} envelope key{hint}; fix: remove it or use one of "
                f"the schema keys in module_utils/sglang_schema.py"
            )
        out[name] = coerce(valid[name], value, where)
    return out
