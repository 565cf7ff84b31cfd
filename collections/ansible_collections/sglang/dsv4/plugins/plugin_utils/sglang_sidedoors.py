"""The side doors of the declared envelope: what reaches a server besides the envelope keys, and where it runs.

- `sglang_engine_extra_env` against SGLang 0.5.23's own registry of environment variables (sglang_envtable.py,
  generated from sglang/srt/environ.py): a value SGLang cannot parse is refused (SGLang would warn and run with the
  default), a variable that overrides what an envelope key declares is refused naming the key, a name SGLang 0.5.23
  no longer reads is refused, and values its runtime code refuses or silently raises (the PD transfer queues and
  threads, heartbeats, timeouts, the NIXL parameters) are refused; an unknown name is a warning (scope
  `sidedoor_env`, per engine).
- `sglang_router_extra_args` parsed with smg 1.13.0's argument table (smg_argtable.py): unknown flags, values of
  the wrong type or outside the choices, and flags the envelope or the inventory owns are refused (scope
  `sidedoor_args`, per router).
- Ports below 1024 for the non-root service user, and a port an extra argument opens on one of the router's (scope
  `sidedoor_port`, per server).
- The listen address of each engine against the address its peers (the router; for a prefill engine, the decode
  engines reaching its bootstrap server) connect to (scope `sidedoor_address`, per engine, in stages).

Every problem names the declared variable, the value, the rule with its id and the fix. sglang_validate.check_fleet
adds the problems; the warnings reach the validate role through the filter sglang_sidedoor_warnings.
"""

from __future__ import annotations

import functools
import ipaddress
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_argspec import SMG_ROWS, Flag, default_of, did_you_mean
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_declared import (
    GROUPS,
    declared_var,
    engine_envelope,
    router_envelope,
)
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_flags import API_KEY_VAR
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_schema import ENGINE_ROLES, EnvelopeError, keys_for

from .sglang_envtable import DEPRECATED, ENVS
from .sglang_rules import WARNING, Finding, Rule, run

_N = TypeVar("_N", int, float)

SGLANG = "SGLang 0.5.23"
SMG = "smg 1.13.0"
REGISTRY = {row[0]: row for row in ENVS}  # name -> (name, kind, default, deprecated alias, secret)
ALIASES = {row[3]: row[0] for row in ENVS if row[3]}  # deprecated alias -> name
NO_LONGER_READ = {row[0]: row[2] for row in DEPRECATED if row[1] is None}  # name -> SGLang's note
SGLANG_DEFAULT_HOST = "127.0.0.1"  # SGLang's --host default (sglang_argtable); smg's is 0.0.0.0
SMG_DEFAULT_PORTS = {"prometheus_port": 29000}
DEFAULT_BOOTSTRAP_PORT = 8998  # SGLang's --disaggregation-bootstrap-port default

# Variables read by the libraries under SGLang, not by SGLang's registry: passed on without a warning.
THIRD_PARTY_PREFIXES = (
    "NCCL_", "CUDA_", "CUBLAS", "CUDNN_", "NVIDIA_", "TORCH", "PYTORCH_", "HF_", "TRANSFORMERS_", "HUGGINGFACE_",
    "MC_", "MOONCAKE_", "UCX_", "NIXL_", "NVSHMEM_", "OMP_", "MKL_", "TRITON_", "FLASHINFER_", "TILELANG_", "GLOO_",
    "MASTER_", "PYTHON", "TOKENIZERS_", "OTEL_", "UVICORN_", "RUST_", "LD_", "TMPDIR", "TZ", "LANG", "LC_", "XDG_",
)  # fmt: skip

# SGLang's bool parse (environ.EnvBool.parse), case-insensitive.
BOOL_TRUE, BOOL_FALSE = ("true", "1", "yes", "y"), ("false", "0", "no", "n")

# The PD transfer variables (disaggregation/): the mooncake prefill KV sender splits its thread pool over the queues;
# unset, the pool is min(max(4, int(0.5 * cpu_count) // 8), 12) threads and the queues are 4.
QUEUES, POOL = "SGLANG_DISAGGREGATION_QUEUE_SIZE", "SGLANG_DISAGGREGATION_THREAD_POOL_SIZE"
QUEUES_DEFAULT = 4
POOL_DERIVED_MAX = 12
QUEUED_BACKENDS = ("mooncake", "mooncake_tcp", "nixl")  # the KV senders that start one transfer worker per queue
HEARTBEAT_INTERVAL = "SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL"
HEARTBEAT_MIN_S = 2.0  # disaggregation/common/conn.py: max(SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL, 2.0)
HEARTBEAT_MAX_FAILURE = "SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE"
PD_TIMEOUTS = ("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", "SGLANG_DISAGGREGATION_WAITING_TIMEOUT")
NIXL_PREFIX, NIXL_BACKEND = "SGLANG_DISAGGREGATION_NIXL_", "SGLANG_DISAGGREGATION_NIXL_BACKEND"
NIXL_PARAMS = "SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS"
BACKEND = "disaggregation_transfer_backend"

# The router's envelope keys, smg flags the role renders from the inventory groups, and router flags that override an
# envelope key.
ROUTER_KEYS = frozenset(k.name for k in keys_for("router") if not k.derived)  # the mesh keys are derived
GROUP_FLAGS = {
    "pd_disaggregation": "the role (every router runs --pd-disaggregation)",
    "prefill": "the inventory group sglang_prefill (worker URLs and bootstrap ports)",
    "decode": "the inventory group sglang_decode (worker URLs)",
    "worker_urls": "the inventory groups sglang_prefill and sglang_decode",
    "service_discovery": "the inventory groups sglang_prefill and sglang_decode (no service discovery)",
    "prefill_selector": "the inventory group sglang_prefill",
    "decode_selector": "the inventory group sglang_decode",
}
ROUTER_OVERRIDES = {"prefill_policy": "policy", "decode_policy": "policy"}


@dataclass
class Report:
    """Problems (refusals) and warnings of the side doors."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


# ------------------------------------------------------------------ the engine environment (scope sidedoor_env)


def owned_env(role: str, hostvars: Mapping[str, Any]) -> dict[str, str]:
    """Environment variables an envelope key (or the role) already sets or decides: name -> the variable to declare
    instead."""
    owned = {key.env: declared_var(role, hostvars, key.name) for key in keys_for(role) if key.env}
    owned[API_KEY_VAR] = "sglang_api_key (the role writes it into the environment file)"
    gpus = declared_var(role, hostvars, "gpu_ids")
    owned["CUDA_VISIBLE_DEVICES"] = f"{gpus} (SGLang addresses GPUs base_gpu_id.. within the visible ones)"
    owned["CUDA_DEVICE_ORDER"] = f"{gpus} (it renumbers the GPUs the ids name)"
    backend = declared_var(role, hostvars, BACKEND)
    owned["MC_FORCE_TCP"] = f"{backend} (mooncake_tcp is mooncake with MC_FORCE_TCP=1, mooncake uses RDMA)"
    return owned


def _typed(kind: str, text: str) -> str | None:
    """Why SGLang's parse of this kind refuses `text` (environ.py EnvBool/EnvInt/EnvFloat/EnvJSON.parse), or None."""
    if kind == "bool":
        return None if text.lower() in BOOL_TRUE + BOOL_FALSE else f'"{text.lower()}" is not a valid boolean value'
    try:
        if kind == "int":
            int(text)
        elif kind == "float":
            float(text)
        elif kind == "json" and text and not text.startswith("/"):  # a path is read on the host
            json.loads(text)
    except ValueError as exc:
        return str(exc) if kind == "json" else f'"{text}" is not a valid {"integer" if kind == "int" else kind} value'
    return None


def _example(kind: str, default: Any) -> str:
    return {
        "bool": "1 or 0 (also true/false, yes/no, y/n)",
        "int": f"an integer such as {default if isinstance(default, int) else 1}",
        "float": f"a number such as {default if isinstance(default, (int, float)) else 1.0}",
        "json": "a JSON value (or the path of a JSON file on the host)",
    }.get(kind, "a value")


def env_value_problem(name: str, text: str) -> str | None:
    """The rule a value of a registered variable breaks when SGLang's parse refuses it, or None."""
    row = REGISTRY.get(name)
    if row is None:
        return None
    refused = _typed(row[1], text)
    if refused is None:
        return None
    return (
        f"{SGLANG} reads {name} as {row[1]} (sglang/srt/environ.py) and refuses this text ({refused}): it warns "
        f"'Invalid value for {name}' and runs with the default {row[2]!r}, not the declared value"
    )


def read_as(name: str) -> str:
    """The name SGLang reads a variable as: a legacy SGL_ prefix as SGLANG_ (environ._handle_deprecated_envs), a
    deprecated alias as its current name."""
    if name.startswith("SGL_") and name not in NO_LONGER_READ:
        return "SGLANG_" + name[len("SGL_") :]
    return ALIASES.get(name, name)


@dataclass(frozen=True)
class EnvContext:
    """One engine's sglang_engine_extra_env (values as text), with the variables the envelope owns (name -> the
    variable to declare instead), its transfer backend, and the prefixes of variables another program reads."""

    host: str
    role: str
    envelope: Mapping[str, Any]
    extra: Mapping[str, str]
    owned: Mapping[str, str]
    backend: str
    known: tuple[str, ...] = ()

    def finding(self, name: str, rule: str, fix: str) -> Finding:
        return Finding(f"{self.host}: sglang_engine_extra_env.{name}", self.extra[name], rule, fix)

    def fate(self, name: str) -> str:
        """What becomes of a variable: `owned` (an envelope key sets it), `retired` (no longer read), `registered`
        (read by SGLang's registry) or `unregistered`."""
        if read_as(name) in self.owned:
            return "owned"
        if name in NO_LONGER_READ:
            return "retired"
        return "registered" if read_as(name) in REGISTRY else "unregistered"

    def named(self, fate: str) -> list[str]:
        return [name for name in self.extra if self.fate(name) == fate]

    def number(self, name: str, kind: Callable[[str], _N]) -> _N | None:
        """The declared value of `name` as `kind` (int or float); None when unset or not a number of that kind."""
        text = self.extra.get(name)
        try:
            return kind(text) if text is not None else None
        except ValueError:
            return None


def env_context(
    host: str, role: str, hostvars: Mapping[str, Any], envelope: Mapping[str, Any], known: Sequence[str] = ()
) -> EnvContext:
    extra = {str(k): "" if v is None else str(v) for k, v in (hostvars.get("sglang_engine_extra_env") or {}).items()}
    backend = str(envelope.get(BACKEND) or default_of(role, BACKEND))
    return EnvContext(host, role, envelope, extra, owned_env(role, hostvars), backend, tuple(str(k) for k in known))


def _no_envelope_override(c: EnvContext) -> Iterator[Finding]:
    for name in c.named("owned"):
        owner = c.owned[read_as(name)]
        via = f" (SGLang reads {name} as {read_as(name)})" if read_as(name) != name else ""
        yield c.finding(
            name,
            f"overrides what the envelope declares{via}: the role sets it from {owner}, and every report would show "
            "the declared value while the engine runs this one",
            f"remove it and declare {owner.split(' (')[0]}",
        )


def _still_read(c: EnvContext) -> Iterator[Finding]:
    for name in c.named("retired"):
        note = str(NO_LONGER_READ[name])
        yield c.finding(
            name,
            f"{SGLANG} no longer reads {name}; it only warns ('{note}'), so the value never runs",
            "remove it" + (" (the flag it names is not an envelope key)" if "--" in note else ""),
        )


def _value_parses(c: EnvContext) -> Iterator[Finding]:
    for name in c.named("registered"):
        problem = env_value_problem(read_as(name), c.extra[name])
        if problem:
            row = REGISTRY[read_as(name)]
            yield c.finding(name, problem, f"declare {_example(row[1], row[2])}")


def _no_queue(c: EnvContext) -> bool:
    queues = c.number(QUEUES, int)
    return queues is not None and queues < 1 and c.backend in QUEUED_BACKENDS


def _mooncake_prefill(c: EnvContext) -> bool:
    """A mooncake prefill whose queue count passed transfer_queues_positive: its pool is checked against it."""
    return c.role == "prefill" and c.backend.startswith("mooncake") and not _no_queue(c)


def _transfer_queues_positive(c: EnvContext) -> Iterator[Finding]:
    if _no_queue(c):
        yield c.finding(
            QUEUES,
            f"the {c.backend} KV sender starts one transfer worker per queue: with none, the first KV transfer has no "
            "queue to go to (disaggregation/mooncake/conn.py, nixl/conn.py)",
            f"declare at least 1 (SGLang's default {QUEUES_DEFAULT})",
        )


def _transfer_pool_covers_queues(c: EnvContext) -> Iterator[Finding]:
    need, pool = c.number(QUEUES, int), c.number(POOL, int)
    need = QUEUES_DEFAULT if need is None else need
    if _mooncake_prefill(c) and pool is not None and pool < need:
        yield c.finding(
            POOL,
            "the mooncake prefill KV sender asserts at startup that the thread pool is at least "
            f"{QUEUES}={need} (disaggregation/mooncake/conn.py)",
            f"declare at least {need}, or lower {QUEUES}",
        )


def _transfer_queues_within_derived_pool(c: EnvContext) -> Iterator[Finding]:
    queues = c.number(QUEUES, int)
    if _mooncake_prefill(c) and c.number(POOL, int) is None and queues is not None and queues > POOL_DERIVED_MAX:
        yield c.finding(
            QUEUES,
            f"without {POOL} the mooncake prefill KV sender derives at most {POOL_DERIVED_MAX} threads from the CPU "
            "count, and asserts at startup that they are at least the queues (disaggregation/mooncake/conn.py)",
            f"declare at most {POOL_DERIVED_MAX}, or {POOL} >= {queues}",
        )


def _at_least(
    c: EnvContext, names: Sequence[str], kind: Callable[[str], _N], least: float, rule: str, fix: str
) -> Iterator[Finding]:
    """A finding for each of `names` declared as a number of `kind` below `least`."""
    for name in names:
        value = c.number(name, kind)
        if value is not None and value < least:
            yield c.finding(name, rule, fix)


def _heartbeat_interval_not_raised(c: EnvContext) -> Iterator[Finding]:
    yield from _at_least(
        c,
        (HEARTBEAT_INTERVAL,),
        float,
        HEARTBEAT_MIN_S,
        f"SGLang raises it to {HEARTBEAT_MIN_S:g} s (max(value, 2.0) in disaggregation/common/conn.py), so the "
        "declared interval never runs",
        f"declare at least {HEARTBEAT_MIN_S:g} (SGLang's default 5.0)",
    )


def _heartbeat_max_failure_not_raised(c: EnvContext) -> Iterator[Finding]:
    yield from _at_least(
        c,
        (HEARTBEAT_MAX_FAILURE,),
        int,
        1,
        "SGLang raises it to 1 (max(value, 1) in disaggregation/common/conn.py), so the declared value never runs",
        "declare at least 1 (SGLang's default 2)",
    )


def _pd_timeouts_positive(c: EnvContext) -> Iterator[Finding]:
    yield from _at_least(
        c,
        PD_TIMEOUTS,
        int,
        1,
        "every PD request is timed out against it (disaggregation/common/conn.py): at 0 s or less each one fails "
        "while every engine reports healthy",
        "declare a positive number of seconds (SGLang's default 300)",
    )


def _nixl_variables_on_nixl(c: EnvContext) -> Iterator[Finding]:
    if c.backend == "nixl":
        return
    for name in (n for n in c.extra if n.startswith(NIXL_PREFIX)):
        yield c.finding(
            name,
            f"only the nixl transfer backend reads it (disaggregation/nixl/conn.py); this engine's is {c.backend}",
            "remove it, or declare disaggregation_transfer_backend: nixl",
        )


def _nixl_params(c: EnvContext) -> dict[str, Any] | None:
    """The NIXL backend parameters ({} when unset), or None when the nixl transfer engine refuses them."""
    try:
        params = json.loads(c.extra[NIXL_PARAMS]) if NIXL_PARAMS in c.extra else {}
    except ValueError:
        return None
    valid = isinstance(params, dict) and all(isinstance(v, str) for v in params.values())
    return params if valid else None


def _nixl_ucx_ib_device(c: EnvContext) -> Any:
    """disaggregation_ib_device when nixl's UCX backend runs with it, else None."""
    ucx = c.extra.get(NIXL_BACKEND, "UCX") == "UCX"
    return c.envelope.get("disaggregation_ib_device") if c.backend == "nixl" and ucx else None


def _nixl_params_object(c: EnvContext) -> Iterator[Finding]:
    if c.backend == "nixl" and NIXL_PARAMS in c.extra and _nixl_params(c) is None:
        yield c.finding(
            NIXL_PARAMS,
            f"the nixl transfer engine refuses it at startup: '{NIXL_PARAMS} must be a JSON object with string keys "
            "and string values' (disaggregation/nixl/conn.py)",
            'declare a JSON object of strings, e.g. {"device_list": "mlx5_0"}',
        )


def _ucx_devices_without_ib_device(c: EnvContext) -> Iterator[Finding]:
    ib = _nixl_ucx_ib_device(c)
    if ib and "UCX_NET_DEVICES" in c.extra:
        yield c.finding(
            "UCX_NET_DEVICES",
            f"with it set, nixl's UCX backend ignores disaggregation_ib_device={ib!r} ('UCX_NET_DEVICES is set; "
            "ignoring --disaggregation-ib-device', disaggregation/nixl/conn.py)",
            "remove it and declare the devices in disaggregation_ib_device only",
        )


def _nixl_device_list_without_ib_device(c: EnvContext) -> Iterator[Finding]:
    ib = _nixl_ucx_ib_device(c)
    if ib and "UCX_NET_DEVICES" not in c.extra and "device_list" in (_nixl_params(c) or {}):
        yield c.finding(
            NIXL_PARAMS,
            f"its device_list and disaggregation_ib_device={ib!r} both select the UCX devices; nixl refuses them at "
            "startup unless they agree ('Conflicting NIXL UCX device_list')",
            "remove device_list and declare the devices in disaggregation_ib_device only",
        )


@functools.lru_cache(maxsize=256)
def _registry_hint(name: str) -> str:
    """The registry's name closest to `name` among those sharing its first six characters, as did_you_mean says it.
    Computed once per name (the registry is fixed): the validation and every fix the risks try ask again."""
    return did_you_mean(name, [n for n in REGISTRY if n.startswith(name[:6])])


def _name_registered(c: EnvContext) -> Iterator[Finding]:
    for name in c.named("unregistered"):
        if not name.startswith((*THIRD_PARTY_PREFIXES, *c.known)):
            hint = _registry_hint(name)
            yield c.finding(
                name,
                f"not a variable of {SGLANG}'s registry (sglang/srt/environ.py){hint}; it is passed to the engine, "
                "which does not read it",
                "remove it, or add its prefix to sglang_validate_extra_env_known when another program reads it",
            )


def _name_current(c: EnvContext) -> Iterator[Finding]:
    for name in c.named("registered"):
        if read_as(name) != name:
            yield c.finding(
                name, f"a deprecated name; {SGLANG} reads it as {read_as(name)}", f"rename it to {read_as(name)}"
            )


ENV = ("sglang_engine_extra_env",)
ENV_RULES: tuple[Rule, ...] = (
    Rule(
        "sidedoor_env.no_envelope_override",
        1,
        (*ENV, "the envelope keys that set a variable", "gpu_ids", BACKEND, "sglang_api_key"),
        "a variable must not override what the envelope declares (legacy SGL_ and alias spellings included): the "
        "report would show the declared value while the engine runs this one",
        "remove it and declare the envelope variable that sets it",
        _no_envelope_override,
    ),
    Rule(
        "sidedoor_env.still_read",
        1,
        ENV,
        f"{SGLANG} still reads the variable (a retired name only warns, so its value never runs)",
        "remove it",
        _still_read,
    ),
    Rule(
        "sidedoor_env.value_parses",
        1,
        ENV,
        f"{SGLANG} parses the value as its registry's kind (bool, int, float, JSON), else warns and runs the default",
        "declare a value of that kind",
        _value_parses,
    ),
    Rule(
        "sidedoor_env.transfer_queues_positive",
        1,
        (QUEUES, BACKEND),
        "the mooncake and nixl KV senders start one transfer worker per queue, so there is at least one",
        f"declare at least 1 (SGLang's default {QUEUES_DEFAULT})",
        _transfer_queues_positive,
    ),
    Rule(
        "sidedoor_env.transfer_pool_covers_queues",
        1,
        (POOL, QUEUES, BACKEND),
        "the mooncake prefill KV sender asserts at startup that its thread pool is at least the queues",
        f"declare a pool at least the queues, or lower {QUEUES}",
        _transfer_pool_covers_queues,
    ),
    Rule(
        "sidedoor_env.transfer_queues_within_derived_pool",
        1,
        (QUEUES, POOL, BACKEND),
        f"without {POOL} the mooncake prefill KV sender derives at most {POOL_DERIVED_MAX} threads and asserts at "
        "startup that they are at least the queues",
        f"declare at most {POOL_DERIVED_MAX} queues, or a pool at least the queues",
        _transfer_queues_within_derived_pool,
    ),
    Rule(
        "sidedoor_env.heartbeat_interval_not_raised",
        1,
        (HEARTBEAT_INTERVAL,),
        f"SGLang raises an interval below {HEARTBEAT_MIN_S:g} s to {HEARTBEAT_MIN_S:g} s, so it never runs",
        f"declare at least {HEARTBEAT_MIN_S:g} (SGLang's default 5.0)",
        _heartbeat_interval_not_raised,
    ),
    Rule(
        "sidedoor_env.heartbeat_max_failure_not_raised",
        1,
        (HEARTBEAT_MAX_FAILURE,),
        "SGLang raises a value below 1 to 1, so it never runs",
        "declare at least 1 (SGLang's default 2)",
        _heartbeat_max_failure_not_raised,
    ),
    Rule(
        "sidedoor_env.pd_timeouts_positive",
        1,
        PD_TIMEOUTS,
        "every PD request is timed out against it: at 0 s or less each one fails while every engine reports healthy",
        "declare a positive number of seconds (SGLang's default 300)",
        _pd_timeouts_positive,
    ),
    Rule(
        "sidedoor_env.nixl_variables_on_nixl",
        1,
        (f"{NIXL_PREFIX}*", BACKEND),
        "only the nixl transfer backend reads them",
        "remove them, or declare disaggregation_transfer_backend: nixl",
        _nixl_variables_on_nixl,
    ),
    Rule(
        "sidedoor_env.nixl_params_object",
        1,
        (NIXL_PARAMS, BACKEND),
        "the nixl transfer engine refuses at startup a value that is not a JSON object of string values",
        'declare a JSON object of strings, e.g. {"device_list": "mlx5_0"}',
        _nixl_params_object,
    ),
    Rule(
        "sidedoor_env.ucx_devices_without_ib_device",
        1,
        ("UCX_NET_DEVICES", NIXL_BACKEND, "disaggregation_ib_device", BACKEND),
        "with UCX_NET_DEVICES set, nixl's UCX backend ignores disaggregation_ib_device",
        "remove it and declare the devices in disaggregation_ib_device only",
        _ucx_devices_without_ib_device,
    ),
    Rule(
        "sidedoor_env.nixl_device_list_without_ib_device",
        1,
        (NIXL_PARAMS, NIXL_BACKEND, "disaggregation_ib_device", BACKEND),
        "a device_list and disaggregation_ib_device both select nixl's UCX devices; nixl refuses them at startup "
        "unless they agree",
        "remove device_list and declare the devices in disaggregation_ib_device only",
        _nixl_device_list_without_ib_device,
    ),
)
ENV_WARNINGS: tuple[Rule, ...] = (
    Rule(
        "sidedoor_env.name_registered",
        1,
        (*ENV, "sglang_validate_extra_env_known"),
        f"a variable is one of {SGLANG}'s registry, of a library under SGLang (NCCL_, CUDA_, MC_, UCX_, ...) or of a "
        "prefix another program reads; else the engine does not read it",
        "remove it, or add its prefix to sglang_validate_extra_env_known",
        _name_registered,
        WARNING,
    ),
    Rule(
        "sidedoor_env.name_current",
        1,
        ENV,
        f"a variable has its current name ({SGLANG} reads a legacy SGL_ prefix or a deprecated alias as another)",
        "rename it to the name SGLang reads",
        _name_current,
        WARNING,
    ),
)


# ------------------------------------------------------------------ the router's extra arguments (scope sidedoor_args)


def _smg_flag(token: str) -> tuple[Flag | None, str]:
    """The smg flag an option string selects as argparse does (exact, else a unique prefix), and why not."""
    exact = [f for f in SMG_ROWS if token in f.options]
    if exact:
        return exact[0], ""
    prefixed = {f.dest: f for f in SMG_ROWS for opt in f.options if opt.startswith(token)}
    if len(prefixed) == 1:
        return next(iter(prefixed.values())), ""
    if prefixed:
        near = sorted(opt for f in prefixed.values() for opt in f.options if opt.startswith(token))
        return None, f"ambiguous option: {token} could match {', '.join(near[:4])}"
    options = [opt for f in SMG_ROWS for opt in f.options]
    return None, f"unrecognized arguments: {token}{did_you_mean(token, options)}"


def _values_wanted(flag: Flag) -> tuple[int, int | None]:
    """(least, most) values argparse takes after this flag."""
    nargs = flag.nargs
    if nargs is None:
        return 1, 1
    if isinstance(nargs, int):
        return nargs, nargs
    return {"?": (0, 1), "*": (0, None), "+": (1, None)}.get(str(nargs), (1, 1))


def _value_problem(flag: Flag, value: str) -> str | None:
    kind = str(flag.type)
    try:
        typed: Any = int(value) if kind in ("int", "_non_negative_int") else float(value) if kind == "float" else value
        if kind == "lower":  # smg's str.lower type, before the choices
            typed = value.lower()
        elif kind == "_parse_int_csv":
            typed = [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        return f"argument {flag.options[0]}: invalid {kind} value: {value!r}"
    if kind == "_non_negative_int" and typed < 0:
        return f"argument {flag.options[0]}: must be a non-negative integer: {value!r}"
    if flag.choices is not None and typed not in flag.choices:
        return f"argument {flag.options[0]}: invalid choice: {value!r}"
    return None


def parse_router_extra_args(extra: Sequence[Any]) -> tuple[list[tuple[Flag, list[str], str]], list[str]]:
    """smg's reading of the extra arguments: [(flag, values, option string as written)], and its refusals."""
    parsed: list[tuple[Flag, list[str], str]] = []
    refused: list[str] = []
    tokens = [str(t) for t in extra]
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token.startswith("--"):
            refused.append(f"unrecognized arguments: {token}")
            continue
        option, has_inline, inline = token.partition("=")
        flag, why = _smg_flag(option)
        if flag is None:
            refused.append(why)
            continue
        least, most = _values_wanted(flag)
        values = [inline] if has_inline else []
        while not has_inline and (most is None or len(values) < most) and i < len(tokens):
            if tokens[i].startswith("--"):
                break
            values.append(tokens[i])
            i += 1
        if len(values) < least or (has_inline and most == 0):
            refused.append(f"argument {flag.options[0]}: expected {least or 'no'} argument(s)")
            continue
        bad = next((p for v in values if (p := _value_problem(flag, v))), None)
        if bad:
            refused.append(bad)
            continue
        parsed.append((flag, values, option))
    return parsed, refused


def _redacted(extra: Sequence[Any]) -> list[str]:
    """The extra arguments as messages show them: the value of an --api-key (or an abbreviation of it) hidden."""
    shown: list[str] = []
    hide = False
    for token in (str(t) for t in extra):
        option, has_inline, _value = token.partition("=")
        secret = len(option) > len("--a") and "--api-key".startswith(option)
        shown.append(f"{option}=<redacted>" if secret and has_inline else "<redacted>" if hide else token)
        hide = secret and not has_inline
    return shown


def router_extra_ports(hostvars: Mapping[str, Any]) -> dict[str, int]:
    """Ports the router's extra arguments open (e.g. --health-check-port), by option string."""
    parsed, _refused = parse_router_extra_args(list(hostvars.get("sglang_router_extra_args") or []))
    ports: dict[str, int] = {}
    for flag, values, _written in parsed:
        if flag.dest.endswith("_port") and flag.dest != "prometheus_port" and values:
            try:
                ports[flag.options[0]] = int(values[0])
            except ValueError:
                continue
    return ports


@dataclass(frozen=True)
class ArgsContext:
    """One router's sglang_router_extra_args as smg reads them: the flags it takes (flag, values, option as written),
    its refusals, and the arguments as messages show them."""

    host: str
    parsed: Sequence[tuple[Flag, list[str], str]]
    refused: Sequence[str]
    shown: Sequence[str]

    def finding(self, rule: str, fix: str) -> Finding:
        return Finding(f"{self.host}: sglang_router_extra_args", list(self.shown), rule, fix)


def args_context(host: str, hostvars: Mapping[str, Any]) -> ArgsContext:
    extra = list(hostvars.get("sglang_router_extra_args") or [])
    parsed, refused = parse_router_extra_args(extra)
    return ArgsContext(host, parsed, refused, _redacted(extra))


def _envelope_owner(flag: Flag) -> str | None:
    """The variable that declares what this flag sets, or None when the envelope does not own it."""
    if flag.dest not in ROUTER_KEYS and flag.dest not in ROUTER_OVERRIDES:
        return None
    key = ROUTER_OVERRIDES.get(flag.dest, flag.dest)
    return "sglang_api_key" if key == "api_key" else f"sglang_router.{key}"


def _as_written(flag: Flag, values: list[str], written: str) -> str:
    return f"{written} {'<redacted>' if flag.dest == 'api_key' else ' '.join(values)}".strip()


def _smg_parses(c: ArgsContext) -> Iterator[Finding]:
    for why in c.refused:
        yield c.finding(
            f"{SMG}'s parser refuses it at startup ('smg launch: error: {why}')",
            "remove the argument or correct it from `smg launch --help`",
        )


def _no_envelope_flag(c: ArgsContext) -> Iterator[Finding]:
    for flag, values, written in c.parsed:
        owner = _envelope_owner(flag)
        if owner:
            serve_script = " (the key would also stand in the serve script)" if owner == "sglang_api_key" else ""
            yield c.finding(
                f"{_as_written(flag, values, written)!r} sets {flag.options[0]}, which the envelope declares through "
                f"{owner}: smg takes the last one, so it runs this value while every report shows the declared "
                f"one{serve_script}",
                f"remove it and declare {owner}",
            )


def _no_group_flag(c: ArgsContext) -> Iterator[Finding]:
    for flag, values, written in c.parsed:
        if not _envelope_owner(flag) and flag.dest in GROUP_FLAGS:
            yield c.finding(
                f"{_as_written(flag, values, written)!r} sets {flag.options[0]}, which the role renders from "
                f"{GROUP_FLAGS[flag.dest]}",
                "remove it; change the inventory groups instead",
            )


ARGS = ("sglang_router_extra_args",)
ARGS_RULES: tuple[Rule, ...] = (
    Rule(
        "sidedoor_args.smg_parses",
        1,
        ARGS,
        f"{SMG}'s parser takes every extra argument (no unknown or ambiguous flag, missing value, value of the wrong "
        "type or outside the choices)",
        "remove the argument or correct it from `smg launch --help`",
        _smg_parses,
    ),
    Rule(
        "sidedoor_args.no_envelope_flag",
        1,
        (*ARGS, "the sglang_router keys", "sglang_api_key"),
        "an extra argument sets no flag the envelope declares: smg takes the last one, so it would run while every "
        "report shows the declared one",
        "remove it and declare the envelope variable (sglang_router.<key>, sglang_api_key)",
        _no_envelope_flag,
    ),
    Rule(
        "sidedoor_args.no_group_flag",
        1,
        (*ARGS, "the inventory groups"),
        "an extra argument sets no flag the role renders from the inventory groups (PD mode, workers, selectors)",
        "remove it; change the inventory groups instead",
        _no_group_flag,
    ),
)


# ------------------------------------------------------------------ ports (scope sidedoor_port)


def _runs_as_root(hostvars: Mapping[str, Any]) -> tuple[bool, str]:
    user = str(hostvars.get("sglang_defaults_user") or "sglang")
    if user == "root":
        return True, user
    units = [hostvars.get(n) or {} for n in ("sglang_common_unit", "sglang_engine_unit", "sglang_router_unit")]
    granted = any("CAP_NET_BIND_SERVICE" in str((u.get("Service") or {}).get("AmbientCapabilities")) for u in units)
    return granted, user


@dataclass(frozen=True)
class PortContext:
    """One server's ports (variable -> port; a router's extra arguments' as `sglang_router_extra_args {option}`),
    with the host's variables and the ports the router's extra arguments open (option -> port)."""

    host: str
    hostvars: Mapping[str, Any]
    ports: Mapping[str, Any]
    extra_ports: Mapping[str, int] = field(default_factory=dict)


def _unprivileged(c: PortContext) -> Iterator[Finding]:
    allowed, user = _runs_as_root(c.hostvars)
    if allowed:
        return
    for var, port in c.ports.items():
        if isinstance(port, int) and 1 <= port < 1024:
            yield Finding(
                f"{c.host}: {var}",
                port,
                f"a port below 1024 needs root or CAP_NET_BIND_SERVICE, and the unit runs as {user!r} without it: the "
                "bind fails with 'Permission denied' at startup",
                "use a port from 1024 to 65535",
            )


def _extra_port_free(c: PortContext) -> Iterator[Finding]:
    taken = {v: k for k, v in c.ports.items() if k.startswith("sglang_router.") and v is not None}
    for option, port in c.extra_ports.items():
        if port in taken:
            yield Finding(
                f"{c.host}: sglang_router_extra_args",
                _redacted(c.hostvars.get("sglang_router_extra_args") or []),
                f"{option} {port} is the port of {taken[port]}: smg cannot bind both",
                f"give {option} a port of its own",
            )


PORT_RULES: tuple[Rule, ...] = (
    Rule(
        "sidedoor_port.unprivileged",
        1,
        (
            "port",
            "disaggregation_bootstrap_port",
            "prometheus_port",
            "the ports of sglang_router_extra_args",
            "sglang_defaults_user",
            "the units' AmbientCapabilities",
        ),
        "a port below 1024 needs root or CAP_NET_BIND_SERVICE, else the bind fails with 'Permission denied' at startup",
        "use a port from 1024 to 65535",
        _unprivileged,
    ),
    Rule(
        "sidedoor_port.extra_arg_port_free",
        1,
        ("sglang_router_extra_args", "sglang_router.port", "sglang_router.prometheus_port"),
        "a port an extra argument opens is neither the router's port nor its metrics port (smg cannot bind both)",
        "give the option a port of its own",
        _extra_port_free,
    ),
)


# ------------------------------------------------------------------ listen and advertise (scope sidedoor_address)


def _literal(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return None


def is_loopback(address: str) -> bool:
    """Whether an address (a literal, bracketed IPv6 too, or `localhost`) reaches only this host."""
    literal = _literal(address)
    return address == "localhost" or (literal is not None and literal.is_loopback)


def advertise_of(host: str, hostvars: Mapping[str, Any]) -> tuple[str, str]:
    """(the address peers connect to, the variable it comes from), as sglang_declared.engine_url picks it."""
    for name in ("sglang_advertise_host", "ansible_host"):
        if hostvars.get(name):
            return str(hostvars[name]), f"{host}: {name}"
    return host, f"{host}: the inventory name"


def _peers(role: str, groups: Mapping[str, list[str]]) -> dict[str, str]:
    """Who connects to an engine of this role: the router hosts (HTTP), and for prefill the decode hosts (the
    bootstrap server)."""
    peers = {h: "the router" for h in groups.get(GROUPS["router"], [])}
    if role == "prefill":
        for h in groups.get(GROUPS["decode"], []):
            peers.setdefault(h, "a decode engine, at the bootstrap port")
    return peers


@dataclass(frozen=True)
class AddressContext:
    """One engine's listen address against the address its peers connect to (peers: host -> what it reaches)."""

    host: str
    role: str
    hostvars: Mapping[str, Any]
    envelope: Mapping[str, Any]
    peers: Mapping[str, str]

    @property
    def listen(self) -> str:
        return str(self.envelope.get("host") or SGLANG_DEFAULT_HOST)

    @property
    def listen_key(self) -> str:
        """The declared variable of the listen address (e.g. sglang_engine_common.host)."""
        return declared_var(self.role, self.hostvars, "host")

    @property
    def advertise(self) -> tuple[str, str]:
        return advertise_of(self.host, self.hostvars)

    @property
    def reached(self) -> str:
        """The first peer on another host, with what it reaches there; empty when every peer is on this host."""
        remote = sorted(p for p in self.peers if p != self.host)
        return f"{remote[0]} ({self.peers[remote[0]]})" if remote else ""


def _listen_not_ipv6_wildcard(c: AddressContext) -> Iterator[Finding]:
    if c.listen == "::":
        yield Finding(
            f"{c.host}: {c.listen_key}",
            c.listen,
            "SGLang binds '::' IPv6-only (asyncio's create_server sets IPV6_V6ONLY), while the role's health gate and "
            "drain reach a wildcard listener at 127.0.0.1, and IPv4 peers cannot connect",
            "declare 0.0.0.0, or this host's own IPv6 address with sglang_advertise_host set to it",
        )


def _listen_reachable(c: AddressContext) -> Iterator[Finding]:
    if is_loopback(c.listen) and c.reached:
        unset = f"unset, so SGLang binds its default {SGLANG_DEFAULT_HOST}: " if c.envelope.get("host") is None else ""
        yield Finding(
            f"{c.host}: {c.listen_key}",
            c.envelope.get("host"),
            f"{unset}the engine listens on loopback only, and {c.reached} on another host connects to it at "
            f"{c.advertise[0]}",
            "declare 0.0.0.0 or this host's address the peers reach",
        )


def _advertise_reachable(c: AddressContext) -> Iterator[Finding]:
    advertise, var = c.advertise
    if not is_loopback(c.listen) and is_loopback(advertise) and c.reached:
        yield Finding(
            var,
            advertise,
            f"{c.reached} runs on another host and would connect to its own loopback, not to {c.host}",
            f"set sglang_advertise_host of {c.host} to an address of it the other hosts reach",
        )


def _advertise_ip_version(c: AddressContext) -> Iterator[Finding]:
    advertise, var = c.advertise
    literal = _literal(advertise)
    if c.listen == "0.0.0.0" and literal is not None and literal.version == 6:
        yield Finding(
            var,
            advertise,
            f"an IPv6 address, and {c.listen_key}={c.listen!r} binds IPv4 only: connections fail",
            "advertise this host's IPv4 address, or bind its IPv6 address",
        )


def _advertise_is_listen(c: AddressContext) -> Iterator[Finding]:
    advertise, var = c.advertise
    bound, literal = _literal(c.listen), _literal(advertise)
    if literal is not None and bound is not None and not bound.is_unspecified and bound != literal:
        yield Finding(
            var,
            advertise,
            f"the engine binds only {c.listen} ({c.listen_key}), so connections to {advertise} are refused",
            f"advertise {c.listen}, or bind 0.0.0.0",
        )


LISTEN, ADVERTISE = ("host",), ("sglang_advertise_host", "ansible_host", "the inventory name")
WILDCARD, LOOPBACK, ADDRESSES = 1, 2, 3  # the stages: `::`, loopback with a remote peer, listen vs advertise
ADDRESS_RULES: tuple[Rule, ...] = (
    Rule(
        "sidedoor_address.listen_not_ipv6_wildcard",
        WILDCARD,
        LISTEN,
        "SGLang binds '::' IPv6-only, while the role's health gate and drain reach a wildcard listener at 127.0.0.1, "
        "and IPv4 peers cannot connect",
        "declare 0.0.0.0, or this host's own IPv6 address with sglang_advertise_host set to it",
        _listen_not_ipv6_wildcard,
    ),
    Rule(
        "sidedoor_address.listen_reachable",
        LOOPBACK,
        (*LISTEN, "the peers' hosts"),
        "an engine with a peer on another host (the router; for a prefill, a decode engine) does not listen on "
        f"loopback only (unset: SGLang's {SGLANG_DEFAULT_HOST})",
        "declare 0.0.0.0 or this host's address the peers reach",
        _listen_reachable,
    ),
    Rule(
        "sidedoor_address.advertise_reachable",
        LOOPBACK,
        (*ADVERTISE, "the peers' hosts"),
        "an engine with a peer on another host is not advertised at loopback (the peer would reach itself)",
        "set sglang_advertise_host to an address of the host the other hosts reach",
        _advertise_reachable,
    ),
    Rule(
        "sidedoor_address.advertise_ip_version",
        ADDRESSES,
        (*LISTEN, *ADVERTISE),
        "an engine advertised at an IPv6 address does not bind IPv4 only (0.0.0.0)",
        "advertise this host's IPv4 address, or bind its IPv6 address",
        _advertise_ip_version,
    ),
    Rule(
        "sidedoor_address.advertise_is_listen",
        ADDRESSES,
        (*LISTEN, *ADVERTISE),
        "an engine bound to one address is advertised at that address",
        "advertise the bound address, or bind 0.0.0.0",
        _advertise_is_listen,
    ),
)
SIDEDOOR_RULES: tuple[Rule, ...] = (*ENV_RULES, *ENV_WARNINGS, *ARGS_RULES, *PORT_RULES, *ADDRESS_RULES)


# ------------------------------------------------------------------ the fleet


def _engine(
    host: str, role: str, hostvars: Mapping[str, Any], groups: Mapping[str, list[str]], known: Sequence[str]
) -> Report:
    try:
        envelope = engine_envelope(role, hostvars)
    except EnvelopeError:
        return Report()  # check_fleet reports it
    env = env_context(host, role, hostvars, envelope, known)
    ports: dict[str, Any] = {declared_var(role, hostvars, "port"): envelope.get("port")}
    if role == "prefill":
        bootstrap = envelope.get("disaggregation_bootstrap_port", DEFAULT_BOOTSTRAP_PORT)
        ports[declared_var(role, hostvars, "disaggregation_bootstrap_port")] = bootstrap
    problems = run(ENV_RULES, env) + run(PORT_RULES, PortContext(host, hostvars, ports))
    problems += run(ADDRESS_RULES, AddressContext(host, role, hostvars, envelope, _peers(role, groups)))
    return Report(problems, run(ENV_WARNINGS, env))


def _router(host: str, hostvars: Mapping[str, Any]) -> Report:
    try:
        envelope = router_envelope(hostvars)
    except EnvelopeError:
        return Report()  # check_fleet reports it
    ports = {f"sglang_router.{n}": envelope.get(n, SMG_DEFAULT_PORTS.get(n)) for n in ("port", "prometheus_port")}
    extra_ports = router_extra_ports(hostvars)
    ports.update({f"sglang_router_extra_args {opt}": port for opt, port in extra_ports.items()})
    problems = run(ARGS_RULES, args_context(host, hostvars))
    return Report(problems + run(PORT_RULES, PortContext(host, hostvars, ports, extra_ports)))


def sidedoors(
    all_hostvars: Mapping[str, Mapping[str, Any]], groups: Mapping[str, list[str]], known: Sequence[str] = ()
) -> Report:
    """Every side-door problem and warning of the inventory; `known`: prefixes of extra environment variables
    another program reads (sglang_validate_extra_env_known), not warned about."""
    reports = [
        _engine(host, role, all_hostvars[host], groups, known)
        for role in ENGINE_ROLES
        for host in groups.get(GROUPS[role], [])
    ]
    reports += [_router(host, all_hostvars[host]) for host in groups.get(GROUPS["router"], [])]
    # One host's engines share sglang_engine_extra_env: say each finding once.
    return Report(
        list(dict.fromkeys(p for r in reports for p in r.problems)),
        list(dict.fromkeys(w for r in reports for w in r.warnings)),
    )


def sidedoor_problems(all_hostvars: Mapping[str, Mapping[str, Any]], groups: Mapping[str, list[str]]) -> list[str]:
    return sidedoors(all_hostvars, groups).problems


def sidedoor_warnings(
    all_hostvars: Mapping[str, Mapping[str, Any]], groups: Mapping[str, list[str]], known: Sequence[str] = ()
) -> list[str]:
    return sidedoors(all_hostvars, groups, known).warnings
