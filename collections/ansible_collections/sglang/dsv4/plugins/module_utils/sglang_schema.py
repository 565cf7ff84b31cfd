"""The envelope schema: every limit key, its type, the flag or env var that carries it, and its meaning.

One envelope is a flat dict of these keys for one server (prefill engine, decode engine or router).
The same keys describe all four layers: declared, on disk, running and effective.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from .sglang_argspec import SGLANG, SMG, Flag, did_you_mean

ENGINE_ROLES = ("prefill", "decode")
ROLES = (*ENGINE_ROLES, "router")


# ---------------------------------------------------------------- value kinds


def truthy(value: Any) -> bool:
    """A bool as the layers write it: True, "1", "true"; unset, False, "0" and "false" are false."""
    return bool(value) and value not in ("0", "false", "False")


class Kind:
    """How the values of one kind are checked when declared, parsed from argv and the environment, rendered, read
    from a live answer and compared. The one place that switches on a key's kind; this base is `str`."""

    name = "str"
    nargs: int | str = 1  # argv tokens after the flag: 0 (a switch), 1, or "+" (one or more)

    def coerce(self, value: Any) -> Any:
        """A declared value in this kind; TypeError or ValueError when it is not one."""
        return str(value)

    def parse(self, tokens: Sequence[str]) -> Any:
        """The value of the argv tokens after the flag."""
        return tokens[0]

    def render(self, flag: str, value: Any) -> list[str]:
        """The argv tokens that set `value`."""
        return [flag, str(value)]

    def to_env(self, value: Any) -> str:
        return str(value)

    def from_env(self, raw: str | None) -> Any:
        return raw

    def loose(self, value: Any) -> Any:
        """A value an engine reports (JSON), in this kind; TypeError or ValueError when it is not one."""
        return str(value)

    def same(self, a: Any, b: Any) -> bool:
        """Whether two values mean the same setting; unset equals only unset."""
        if a is None or b is None:
            return a is None and b is None
        return self._equal(a, b)

    def _equal(self, a: Any, b: Any) -> bool:
        return str(a) == str(b)


class _Int(Kind):
    name = "int"

    def coerce(self, value: Any) -> Any:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise TypeError(value)
        return int(value)

    def parse(self, tokens: Sequence[str]) -> Any:
        return int(tokens[0])

    def loose(self, value: Any) -> Any:
        return int(value)

    def _equal(self, a: Any, b: Any) -> bool:
        return int(a) == int(b)


class _Size(_Int):
    """SGLang's human-readable ints (`128k`, `1Mi`), parsed with its rules (parse_size)."""

    name = "size"

    def coerce(self, value: Any) -> Any:
        return parse_size(value) if isinstance(value, str) else super().coerce(value)

    def parse(self, tokens: Sequence[str]) -> Any:
        return parse_size(tokens[0])


class _Float(Kind):
    name = "float"

    def coerce(self, value: Any) -> Any:
        if isinstance(value, bool):
            raise TypeError(value)
        return float(value)

    def parse(self, tokens: Sequence[str]) -> Any:
        return float(tokens[0])

    def render(self, flag: str, value: Any) -> list[str]:
        return [flag, repr(float(value))]

    def loose(self, value: Any) -> Any:
        return float(value)

    def _equal(self, a: Any, b: Any) -> bool:
        return math.isclose(float(a), float(b), rel_tol=1e-6)


class _Bool(Kind):
    """A switch: the flag alone sets it; unset means false, in every layer."""

    name, nargs = "bool", 0

    def coerce(self, value: Any) -> Any:
        if not isinstance(value, bool):
            raise TypeError(value)
        return value

    def parse(self, tokens: Sequence[str]) -> Any:
        return True

    def render(self, flag: str, value: Any) -> list[str]:
        return [flag] if value else []

    def to_env(self, value: Any) -> str:
        return "1" if value else "0"

    def from_env(self, raw: str | None) -> Any:
        return raw == "1"

    def loose(self, value: Any) -> Any:
        return bool(value)

    def same(self, a: Any, b: Any) -> bool:
        return truthy(a) == truthy(b)


class _IntList(Kind):
    name, nargs = "intlist", "+"

    def coerce(self, value: Any) -> Any:
        if not isinstance(value, (list, tuple)):
            raise TypeError(value)
        return [int(v) for v in value]

    def parse(self, tokens: Sequence[str]) -> Any:
        return [int(v) for v in tokens]

    def render(self, flag: str, value: Any) -> list[str]:
        return [flag, *(str(v) for v in value)]

    def loose(self, value: Any) -> Any:
        return [int(v) for v in value]

    def _equal(self, a: Any, b: Any) -> bool:
        return [int(x) for x in a] == [int(x) for x in b]


class _StrList(Kind):
    """Several string tokens after one flag (smg's `--mesh-peer-urls a:39527 b:39527`)."""

    name, nargs = "strlist", "+"

    def coerce(self, value: Any) -> Any:
        if not isinstance(value, (list, tuple)):
            raise TypeError(value)
        return [str(v) for v in value]

    def parse(self, tokens: Sequence[str]) -> Any:
        return list(tokens)

    def render(self, flag: str, value: Any) -> list[str]:
        return [flag, *(str(v) for v in value)] if value else []

    def loose(self, value: Any) -> Any:
        return [str(v) for v in value]

    def _equal(self, a: Any, b: Any) -> bool:
        return [str(x) for x in a] == [str(x) for x in b]


def ib_devices(value: Any) -> Any:
    """An IB device setting in SGLang 0.5.23's normal form (arg_groups/validation_hook.py validate_ib_devices, after
    mooncake_transfer_engine.parse_ib_device_config): each comma list stripped and deduplicated in order, a per-GPU
    JSON map written compactly with its GPU ids as ints. A value it would refuse, or a JSON file's path, as is."""
    text = str(value).strip()

    def group(devices: Any) -> str:
        return ",".join(dict.fromkeys(d.strip() for d in str(devices).split(",") if d.strip()))

    if not text.startswith("{"):
        return text if text.endswith(".json") else group(text)
    try:
        mapping = json.loads(text)
    except ValueError:
        return value
    if not isinstance(mapping, dict) or not all(str(k).isdigit() and isinstance(v, str) for k, v in mapping.items()):
        return value
    return json.dumps({str(int(k)): group(v) for k, v in mapping.items()}, separators=(",", ":"))


# Keys whose consumer rewrites a value into an equivalent form: both sides are compared in that form.
NORMAL_FORMS = {"disaggregation_ib_device": ib_devices}


def normal_form(key: str, value: Any) -> Any:
    """`value` of envelope key `key` as its consumer writes it back (NORMAL_FORMS); other keys and None as is."""
    form = NORMAL_FORMS.get(key)
    return form(value) if form and value is not None else value


KINDS: dict[str, Kind] = {k.name: k for k in (Kind(), _Int(), _Size(), _Float(), _Bool(), _IntList(), _StrList())}


@dataclass(frozen=True)
class Key:
    """One envelope key: the CLI flag of the same dest (or an environment variable) and its value type.

    `flag` and `kind` come from the parsers' own argument tables (sglang_argspec): SGLang's for engine keys,
    smg's for router keys; a key both carry must agree in both."""

    name: str
    roles: tuple[str, ...]
    kind: str = ""  # int | float | str | bool | intlist | size (human-readable int); from the table
    env: str | None = None
    doc: str = ""
    limit: bool = False  # one of the limits the audit reports first
    secret: bool = False
    derived: str = ""  # set by the deployment from this source, never declared (normalize refuses it)
    flag: str | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.kind:  # declared-only and environment keys carry their own type
            return
        found = {(t[self.name].options[0], t[self.name].kind) for t in _tables(self.roles)}
        if len(found) != 1:
            raise ImportError(f"envelope key {self.name}: the parsers' tables give {found or 'nothing'}")
        flag, kind = found.pop()
        object.__setattr__(self, "flag", flag)
        object.__setattr__(self, "kind", kind)

    @property
    def type(self) -> Kind:
        """How this key's values are checked, parsed, rendered and compared."""
        return KINDS[self.kind]


def _tables(roles: tuple[str, ...]) -> list[dict[str, Flag]]:
    """The argument tables a key of these roles must be found in."""
    return [t for t in (SGLANG if set(roles) & set(ENGINE_ROLES) else None, SMG if "router" in roles else None) if t]


_E = ENGINE_ROLES
_R = ("router",)

KEYS: tuple[Key, ...] = (
    # Shared layout keys.
    Key("model_path", _E),
    Key("served_model_name", _E),
    Key("host", ROLES),
    Key("port", ROLES),
    Key("api_key", ROLES, secret=True),
    # Engine limits (SGLang 0.5.23 flag names).
    Key("context_length", _E, doc="per-call context (tokens)", limit=True),
    Key("max_total_tokens", _E, doc="KV pool cap: total context", limit=True),
    Key("max_running_requests", _E, doc="parallel calls run", limit=True),
    Key("max_queued_requests", _E, doc="engine queue cap (ignored in PD mode)"),
    Key("chunked_prefill_size", _E, doc="prefill chunk (tokens)", limit=True),
    Key("max_prefill_tokens", _E, doc="prefill batch budget (tokens)"),
    Key("mem_fraction_static", _E, doc="GPU share for weights+KV", limit=True),
    Key("page_size", _E, doc="KV page size (DeepSeek-V4: 256)"),
    Key("kv_cache_dtype", _E, doc="KV cache dtype"),
    Key("swa_full_tokens_ratio", _E, doc="SWA pool size as share of full"),
    Key("tp_size", _E, doc="tensor parallel size"),
    Key("dp_size", _E, doc="data parallel replicas"),
    Key("base_gpu_id", _E, doc="first GPU used"),
    Key("cuda_graph_max_bs_decode", _E, doc="largest decode cuda graph"),
    Key("cuda_graph_max_bs_prefill", _E, doc="largest prefill graph"),
    Key("cuda_graph_bs_decode", _E, doc="decode cuda-graph batch sizes"),
    Key("cuda_graph_bs_prefill", _E, doc="prefill cuda-graph sizes"),
    Key("disaggregation_mode", _E, doc="null, prefill or decode"),
    Key("disaggregation_bootstrap_port", ("prefill",)),
    Key("disaggregation_transfer_backend", _E),
    Key("disaggregation_ib_device", _E),
    Key("disable_radix_cache", _E),
    Key("attention_backend", _E),
    Key("watchdog_timeout", _E),
    Key("enable_metrics", _E),
    Key("enable_cache_report", _E),
    Key("trust_remote_code", _E),
    Key("log_level", _E),
    Key("enable_deepseek_v4_fp4_indexer", _E, doc="fp4 indexer keys (SM100/SM120 GPUs only)"),
    Key("bf16_index_k", _E, kind="bool", env="SGLANG_DSV4_BF16_INDEX_K", doc="bf16 indexer keys", limit=True),
    # Router limits (smg 1.13.0 flag names).
    Key("max_concurrent_requests", _R, doc="router in-flight cap", limit=True),
    Key("queue_size", _R, doc="router wait queue", limit=True),
    Key("queue_timeout_secs", _R, doc="max wait in router queue", limit=True),
    Key("request_timeout_secs", _R, doc="per-request timeout", limit=True),
    Key("max_payload_size", _R, doc="request body cap (bytes)", limit=True),
    Key("policy", _R),
    Key("prometheus_host", _R),
    Key("prometheus_port", _R),
    Key("pd_admission_wait_secs", _R),
    Key("health_check_interval_secs", _R),
    Key("worker_startup_timeout_secs", _R),
    Key("shutdown_grace_period_secs", _R, doc="in-flight drain on SIGTERM"),
    Key("retry_max_retries", _R, doc="attempts for a failed request"),
    Key("retry_initial_backoff_ms", _R, doc="first retry backoff"),
    Key("retry_max_backoff_ms", _R, doc="longest retry backoff"),
    # smg's HA mesh between several routers: derived from the inventory (sglang_declared.router_mesh).
    Key("enable_mesh", _R, derived="the inventory group sglang_router (two routers or more)"),
    Key("mesh_server_name", _R, derived="the router's inventory host name"),
    Key("mesh_advertise_host", _R, derived="sglang_advertise_host"),
    Key("mesh_port", _R, derived="smg's default mesh port"),
    Key("mesh_peer_urls", _R, derived="sglang_advertise_host of the other routers"),
)

BY_NAME: dict[str, Key] = {k.name: k for k in KEYS}

# Declared-only keys: they shape the deployment but are not engine flags themselves.
DEPLOY_KEYS = {"gpu_ids": "intlist", "enabled": "bool"}

# Flags SGLang 0.5.23 removed or deprecated: what became of each, and the fix an operator should apply.
_REMOVED = "removed"
REMOVED_FLAGS: dict[str, tuple[str, str]] = {
    "cuda_graph_max_bs": (_REMOVED, "use cuda_graph_max_bs_decode (and cuda_graph_max_bs_prefill)"),
    "cuda_graph_bs": (_REMOVED, "use cuda_graph_bs_decode (and cuda_graph_bs_prefill)"),
    "nsa_prefill_backend": (_REMOVED, "use dsa_prefill_backend"),
    "nsa_decode_backend": (_REMOVED, "use dsa_decode_backend"),
    "disable_cuda_graph": (_REMOVED, "use cuda_graph_backend_decode/prefill: disabled"),
    # SGLang's replacement, --attn-dp-size, is not an envelope key: the engines run attention tensor-parallel.
    "enable_dp_attention": (
        "deprecated for --attn-dp-size, which the envelope does not declare (its engines run attention "
        "tensor-parallel over tp_size)",
        "remove {where}.enable_dp_attention",
    ),
}


def _removed_flag_error(name: str, where: str) -> str:
    """The refusal of a flag SGLang 0.5.23 removed or deprecated: the declared variable, what SGLang did, the fix."""
    what, fix = REMOVED_FLAGS[name]
    return f"{where}.{name} is a flag SGLang 0.5.23 {what}; fix: {fix.format(where=where)}"


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
        return key.type.coerce(value)
    except (TypeError, ValueError):
        raise EnvelopeError(
            f"{where}.{key.name}={value!r} is not a valid {key.kind}; fix: declare a {key.kind} value"
            + (f" (it renders as {key.flag or key.env})" if key.flag or key.env else "")
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
            raise EnvelopeError(_removed_flag_error(name, where))
        if name in DEPLOY_KEYS:
            out[name] = coerce(Key(name, (role,), kind=DEPLOY_KEYS[name]), value, where)
            continue
        if name in valid and valid[name].derived:
            raise EnvelopeError(
                f"{where}.{name}={value!r}: the deployment derives {name} from {valid[name].derived}; "
                f"fix: remove {where}.{name}"
            )
        if name not in valid:
            hint = did_you_mean(name, [*(n for n, k in valid.items() if not k.derived), *DEPLOY_KEYS])
            raise EnvelopeError(
                f"{where}.{name}={value!r}: not a known {role} envelope key{hint}; fix: remove it or use one of "
                f"the schema keys in plugins/module_utils/sglang_schema.py"
            )
        out[name] = coerce(valid[name], value, where)
    return out
