"""The side doors of the declared envelope: what reaches a server besides the envelope keys, and where it runs.

- `sglang_engine_extra_env` against SGLang 0.5.23's own registry of environment variables (sglang_envtable.py,
  generated from sglang/srt/environ.py): a value SGLang cannot parse is refused (SGLang would warn and run with the
  default), a variable that overrides what an envelope key declares is refused naming the key, a name SGLang 0.5.23
  no longer reads is refused, and values its runtime code refuses or silently raises (the PD transfer queues and
  threads, heartbeats, timeouts, the NIXL parameters) are refused; an unknown name is a warning.
- `sglang_router_extra_args` parsed with smg 1.13.0's argument table (smg_argtable.py): unknown flags, values of
  the wrong type or outside the choices, and flags the envelope or the inventory owns are refused.
- Ports below 1024 for the non-root service user, and the listen address of each engine against the address its
  peers (the router; for a prefill engine, the decode engines reaching its bootstrap server) connect to.

Every problem names the declared variable, the value, the rule and the fix. sglang_validate.check_fleet adds the
problems; the warnings reach the validate role through the filter sglang_sidedoor_warnings.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_argspec import SMG_ROWS, Flag, default_of, did_you_mean
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_declared import (
    GROUPS,
    declared_var,
    engine_envelope,
    router_envelope,
)
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_schema import ENGINE_ROLES, EnvelopeError, keys_for

from .sglang_envtable import DEPRECATED, ENVS

_N = TypeVar("_N", int, float)

SGLANG = "SGLang 0.5.23"
SMG = "smg 1.13.0"
REGISTRY = {row[0]: row for row in ENVS}  # name -> (name, kind, default, deprecated alias, secret)
ALIASES = {row[3]: row[0] for row in ENVS if row[3]}  # deprecated alias -> name
NO_LONGER_READ = {row[0]: row[2] for row in DEPRECATED if row[1] is None}  # name -> SGLang's note
SGLANG_DEFAULT_HOST = "127.0.0.1"  # SGLang's --host default (sglang_argtable); smg's is 0.0.0.0
SMG_DEFAULT_PORTS = {"prometheus_port": 29000}
DEFAULT_BOOTSTRAP_PORT = 8998  # SGLang's --disaggregation-bootstrap-port default
API_KEY_VAR = "SGLANG_API_KEY"

# Variables read by the libraries under SGLang, not by SGLang's registry: passed on without a warning.
THIRD_PARTY_PREFIXES = (
    "NCCL_", "CUDA_", "CUBLAS", "CUDNN_", "NVIDIA_", "TORCH", "PYTORCH_", "HF_", "TRANSFORMERS_", "HUGGINGFACE_",
    "MC_", "MOONCAKE_", "UCX_", "NIXL_", "NVSHMEM_", "OMP_", "MKL_", "TRITON_", "FLASHINFER_", "TILELANG_", "GLOO_",
    "MASTER_", "PYTHON", "TOKENIZERS_", "OTEL_", "UVICORN_", "RUST_", "LD_", "TMPDIR", "TZ", "LANG", "LC_", "XDG_",
)  # fmt: skip

# SGLang's bool parse (environ.EnvBool.parse), case-insensitive.
BOOL_TRUE, BOOL_FALSE = ("true", "1", "yes", "y"), ("false", "0", "no", "n")

# The mooncake prefill KV sender (disaggregation/mooncake/conn.py): unset SGLANG_DISAGGREGATION_THREAD_POOL_SIZE is
# min(max(4, int(0.5 * cpu_count) // 8), 12) threads, split over SGLANG_DISAGGREGATION_QUEUE_SIZE queues.
POOL_DERIVED_MAX = 12
HEARTBEAT_MIN_S = 2.0  # disaggregation/common/conn.py: max(SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL, 2.0)

# smg flags the role renders from the inventory groups, and router flags that override an envelope key.
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


def _msg(var: str, value: Any, rule: str, fix: str) -> str:
    return f"{var}={value!r}: {rule}; fix: {fix}"


class Report:
    """Problems (refusals) and warnings of the side doors."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.warnings: list[str] = []


# ------------------------------------------------------------------ the engine environment


def owned_env(role: str, hostvars: Mapping[str, Any]) -> dict[str, str]:
    """Environment variables an envelope key (or the role) already sets or decides: name -> the variable to declare
    instead."""
    owned = {key.env: declared_var(role, hostvars, key.name) for key in keys_for(role) if key.env}
    owned[API_KEY_VAR] = "sglang_api_key (the role writes it into the environment file)"
    gpus = declared_var(role, hostvars, "gpu_ids")
    owned["CUDA_VISIBLE_DEVICES"] = f"{gpus} (SGLang addresses GPUs base_gpu_id.. within the visible ones)"
    owned["CUDA_DEVICE_ORDER"] = f"{gpus} (it renumbers the GPUs the ids name)"
    backend = declared_var(role, hostvars, "disaggregation_transfer_backend")
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


def _number_of(extra: Mapping[str, str], name: str, kind: Callable[[str], _N]) -> _N | None:
    """The declared value of `name` as `kind` (int or float); None when unset or not a number of that kind."""
    text = extra.get(name)
    try:
        return kind(text) if text is not None else None
    except ValueError:
        return None


def engine_env_report(
    host: str, role: str, hostvars: Mapping[str, Any], envelope: Mapping[str, Any], known: Sequence[str] = ()
) -> Report:
    report = Report()
    extra = {str(k): "" if v is None else str(v) for k, v in (hostvars.get("sglang_engine_extra_env") or {}).items()}

    def var(name: str) -> str:
        return f"{host}: sglang_engine_extra_env.{name}"

    owned = owned_env(role, hostvars)
    key = "disaggregation_transfer_backend"
    backend = str(envelope.get(key) or default_of(role, key))
    for name, text in extra.items():
        # SGLang rewrites a legacy SGL_ prefix to SGLANG_ at import (environ._handle_deprecated_envs).
        legacy = name.startswith("SGL_") and name not in NO_LONGER_READ
        read_as = "SGLANG_" + name[len("SGL_") :] if legacy else ALIASES.get(name, name)
        if read_as in owned:
            via = f" (SGLang reads {name} as {read_as})" if read_as != name else ""
            report.problems.append(
                _msg(
                    var(name),
                    text,
                    f"overrides what the envelope declares{via}: the role sets it from {owned[read_as]}, and every "
                    "report would show the declared value while the engine runs this one",
                    f"remove it and declare {owned[read_as].split(' (')[0]}",
                )
            )
            continue
        if name in NO_LONGER_READ:
            report.problems.append(
                _msg(
                    var(name),
                    text,
                    f"{SGLANG} no longer reads {name}; it only warns ('{NO_LONGER_READ[name]}'), so the value never "
                    "runs",
                    "remove it" + (" (the flag it names is not an envelope key)" if "--" in str(NO_LONGER_READ[name])
                                   else ""),
                )
            )  # fmt: skip
            continue
        if read_as not in REGISTRY:
            if not name.startswith((*THIRD_PARTY_PREFIXES, *known)):
                hint = did_you_mean(name, [n for n in REGISTRY if n.startswith(name[:6])])
                report.warnings.append(
                    f"{var(name)}={text!r}: not a variable of {SGLANG}'s registry (sglang/srt/environ.py){hint}; "
                    "it is passed to the engine, which does not read it"
                )
            continue
        if legacy or name in ALIASES:
            report.warnings.append(
                f"{var(name)}={text!r}: a deprecated name; {SGLANG} reads it as {read_as}; fix: rename it to {read_as}"
            )
        problem = env_value_problem(read_as, text)
        if problem:
            row = REGISTRY[read_as]
            report.problems.append(_msg(var(name), text, problem, f"declare {_example(row[1], row[2])}"))
    report.problems += _transfer_env_problems(host, role, envelope, extra, backend, var)
    return report


def _transfer_env_problems(
    host: str, role: str, envelope: Mapping[str, Any], extra: Mapping[str, str], backend: str, var: Any
) -> list[str]:
    """Values the PD transfer code refuses at startup, or raises silently (sglang/srt/disaggregation/)."""
    errors: list[str] = []
    queues = _number_of(extra, "SGLANG_DISAGGREGATION_QUEUE_SIZE", int)
    pool = _number_of(extra, "SGLANG_DISAGGREGATION_THREAD_POOL_SIZE", int)
    mooncake = backend.startswith("mooncake")
    if queues is not None and queues < 1 and backend in ("mooncake", "mooncake_tcp", "nixl"):
        errors.append(
            _msg(
                var("SGLANG_DISAGGREGATION_QUEUE_SIZE"),
                extra["SGLANG_DISAGGREGATION_QUEUE_SIZE"],
                f"the {backend} KV sender starts one transfer worker per queue: with none, the first KV transfer "
                "has no queue to go to (disaggregation/mooncake/conn.py, nixl/conn.py)",
                "declare at least 1 (SGLang's default 4)",
            )
        )
    elif role == "prefill" and mooncake:
        need = queues if queues is not None else 4
        if pool is not None and pool < need:
            errors.append(
                _msg(
                    var("SGLANG_DISAGGREGATION_THREAD_POOL_SIZE"),
                    extra["SGLANG_DISAGGREGATION_THREAD_POOL_SIZE"],
                    f"the mooncake prefill KV sender asserts at startup that the thread pool is at least "
                    f"SGLANG_DISAGGREGATION_QUEUE_SIZE={need} (disaggregation/mooncake/conn.py)",
                    f"declare at least {need}, or lower SGLANG_DISAGGREGATION_QUEUE_SIZE",
                )
            )
        elif pool is None and queues is not None and queues > POOL_DERIVED_MAX:
            errors.append(
                _msg(
                    var("SGLANG_DISAGGREGATION_QUEUE_SIZE"),
                    extra["SGLANG_DISAGGREGATION_QUEUE_SIZE"],
                    f"without SGLANG_DISAGGREGATION_THREAD_POOL_SIZE the mooncake prefill KV sender derives at most "
                    f"{POOL_DERIVED_MAX} threads from the CPU count, and asserts at startup that they are at least "
                    "the queues (disaggregation/mooncake/conn.py)",
                    f"declare at most {POOL_DERIVED_MAX}, or SGLANG_DISAGGREGATION_THREAD_POOL_SIZE >= {queues}",
                )
            )
    interval = _number_of(extra, "SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL", float)
    if interval is not None and interval < HEARTBEAT_MIN_S:
        errors.append(
            _msg(
                var("SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL"),
                extra["SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL"],
                f"SGLang raises it to {HEARTBEAT_MIN_S:g} s (max(value, 2.0) in disaggregation/common/conn.py), so the "
                "declared interval never runs",
                f"declare at least {HEARTBEAT_MIN_S:g} (SGLang's default 5.0)",
            )
        )
    failures = _number_of(extra, "SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE", int)
    if failures is not None and failures < 1:
        errors.append(
            _msg(
                var("SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE"),
                extra["SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE"],
                "SGLang raises it to 1 (max(value, 1) in disaggregation/common/conn.py), so the declared value never "
                "runs",
                "declare at least 1 (SGLang's default 2)",
            )
        )
    for name in ("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", "SGLANG_DISAGGREGATION_WAITING_TIMEOUT"):
        seconds = _number_of(extra, name, int)
        if seconds is not None and seconds < 1:
            errors.append(
                _msg(
                    var(name),
                    extra[name],
                    "every PD request is timed out against it (disaggregation/common/conn.py): at 0 s or less each "
                    "one fails while every engine reports healthy",
                    "declare a positive number of seconds (SGLang's default 300)",
                )
            )
    nixl_names = [n for n in extra if n.startswith("SGLANG_DISAGGREGATION_NIXL_")]
    if backend != "nixl":
        errors += [
            _msg(
                var(name),
                extra[name],
                f"only the nixl transfer backend reads it (disaggregation/nixl/conn.py); this engine's is {backend}",
                "remove it, or declare disaggregation_transfer_backend: nixl",
            )
            for name in nixl_names
        ]
        return errors
    errors += _nixl_problems(role, envelope, extra, var)
    return errors


def _nixl_problems(role: str, envelope: Mapping[str, Any], extra: Mapping[str, str], var: Any) -> list[str]:
    errors: list[str] = []
    params_name = "SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS"
    params: Any = {}
    if params_name in extra:
        try:
            params = json.loads(extra[params_name])
        except ValueError:
            params = None
        if not isinstance(params, dict) or not all(isinstance(v, str) for v in params.values()):
            errors.append(
                _msg(
                    var(params_name),
                    extra[params_name],
                    "the nixl transfer engine refuses it at startup: 'SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS must "
                    "be a JSON object with string keys and string values' (disaggregation/nixl/conn.py)",
                    'declare a JSON object of strings, e.g. {"device_list": "mlx5_0"}',
                )
            )
            params = {}
    ib = envelope.get("disaggregation_ib_device")
    ucx = extra.get("SGLANG_DISAGGREGATION_NIXL_BACKEND", "UCX") == "UCX"
    if ib and ucx and "UCX_NET_DEVICES" in extra:
        errors.append(
            _msg(
                var("UCX_NET_DEVICES"),
                extra["UCX_NET_DEVICES"],
                f"with it set, nixl's UCX backend ignores disaggregation_ib_device={ib!r} ('UCX_NET_DEVICES is set; "
                "ignoring --disaggregation-ib-device', disaggregation/nixl/conn.py)",
                "remove it and declare the devices in disaggregation_ib_device only",
            )
        )
    elif ib and ucx and isinstance(params, dict) and "device_list" in params:
        errors.append(
            _msg(
                var(params_name),
                extra[params_name],
                f"its device_list and disaggregation_ib_device={ib!r} both select the UCX devices; nixl refuses them "
                "at startup unless they agree ('Conflicting NIXL UCX device_list')",
                "remove device_list and declare the devices in disaggregation_ib_device only",
            )
        )
    return errors


# ------------------------------------------------------------------ the router's extra arguments


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


def router_args_report(host: str, hostvars: Mapping[str, Any], envelope: Mapping[str, Any]) -> Report:
    report = Report()
    extra = hostvars.get("sglang_router_extra_args")
    if extra is None:
        return report
    var = f"{host}: sglang_router_extra_args"
    shown_extra = _redacted(extra)
    parsed, refused = parse_router_extra_args(list(extra))
    for why in refused:
        report.problems.append(
            _msg(var, shown_extra, f"{SMG}'s parser refuses it at startup ('smg launch: error: {why}')",
                 "remove the argument or correct it from `smg launch --help`")
        )  # fmt: skip
    router_keys = {k.name for k in keys_for("router")}
    for flag, values, written in parsed:
        shown = f"{written} {'<redacted>' if flag.dest == 'api_key' else ' '.join(values)}".strip()
        if flag.dest in router_keys or flag.dest in ROUTER_OVERRIDES:
            key = ROUTER_OVERRIDES.get(flag.dest, flag.dest)
            owner = "sglang_api_key" if key == "api_key" else f"sglang_router.{key}"
            extra_note = " (the key would also stand in the serve script)" if key == "api_key" else ""
            report.problems.append(
                _msg(
                    var,
                    shown_extra,
                    f"{shown!r} sets {flag.options[0]}, which the envelope declares through {owner}: smg takes the "
                    f"last one, so it runs this value while every report shows the declared one{extra_note}",
                    f"remove it and declare {owner}",
                )
            )
        elif flag.dest in GROUP_FLAGS:
            report.problems.append(
                _msg(
                    var,
                    shown_extra,
                    f"{shown!r} sets {flag.options[0]}, which the role renders from {GROUP_FLAGS[flag.dest]}",
                    "remove it; change the inventory groups instead",
                )
            )
    return report


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
        if flag.dest.endswith("_port") and flag.dest not in ("port", "prometheus_port") and values:
            try:
                ports[flag.options[0]] = int(values[0])
            except ValueError:
                continue
    return ports


# ------------------------------------------------------------------ ports and addresses


def _runs_as_root(hostvars: Mapping[str, Any]) -> tuple[bool, str]:
    user = str(hostvars.get("sglang_defaults_user") or "sglang")
    if user == "root":
        return True, user
    units = [hostvars.get(n) or {} for n in ("sglang_common_unit", "sglang_engine_unit", "sglang_router_unit")]
    granted = any("CAP_NET_BIND_SERVICE" in str((u.get("Service") or {}).get("AmbientCapabilities")) for u in units)
    return granted, user


def port_problems(host: str, hostvars: Mapping[str, Any], ports: Mapping[str, Any]) -> list[str]:
    """Ports below 1024 on a server that runs as a non-root user without CAP_NET_BIND_SERVICE."""
    allowed, user = _runs_as_root(hostvars)
    if allowed:
        return []
    return [
        _msg(
            f"{host}: {var}",
            port,
            f"a port below 1024 needs root or CAP_NET_BIND_SERVICE, and the unit runs as {user!r} without it: the "
            "bind fails with 'Permission denied' at startup",
            "use a port from 1024 to 65535",
        )
        for var, port in ports.items()
        if isinstance(port, int) and 1 <= port < 1024
    ]


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


def address_problems(
    host: str, role: str, hostvars: Mapping[str, Any], envelope: Mapping[str, Any], peers: Mapping[str, str]
) -> list[str]:
    """The engine's listen address against the address its peers connect to (peers: host -> what it reaches)."""
    listen = str(envelope.get("host") or SGLANG_DEFAULT_HOST)
    listen_var = f"{host}: {declared_var(role, hostvars, 'host')}"
    unset = f"unset, so SGLang binds its default {SGLANG_DEFAULT_HOST}: " if envelope.get("host") is None else ""
    advertise, advertise_var = advertise_of(host, hostvars)
    remote = sorted(p for p in peers if p != host)
    reached = f"{remote[0]} ({peers[remote[0]]})" if remote else ""
    errors: list[str] = []
    if listen == "::":
        return [
            _msg(
                listen_var,
                listen,
                "SGLang binds '::' IPv6-only (asyncio's create_server sets IPV6_V6ONLY), while the role's health gate "
                "and drain reach a wildcard listener at 127.0.0.1, and IPv4 peers cannot connect",
                "declare 0.0.0.0, or this host's own IPv6 address with sglang_advertise_host set to it",
            )
        ]
    if is_loopback(listen) and remote:
        errors.append(
            _msg(
                listen_var,
                envelope.get("host"),
                f"{unset}the engine listens on loopback only, and {reached} on another host connects to it at "
                f"{advertise}",
                "declare 0.0.0.0 or this host's address the peers reach",
            )
        )
    elif is_loopback(advertise) and remote:
        errors.append(
            _msg(
                advertise_var,
                advertise,
                f"{reached} runs on another host and would connect to its own loopback, not to {host}",
                f"set sglang_advertise_host of {host} to an address of it the other hosts reach",
            )
        )
    literal_listen, literal_advertise = _literal(listen), _literal(advertise)
    if errors or literal_advertise is None:
        return errors
    if listen == "0.0.0.0" and literal_advertise.version == 6:
        errors.append(
            _msg(
                advertise_var,
                advertise,
                f"an IPv6 address, and {listen_var.split(': ', 1)[1]}={listen!r} binds IPv4 only: connections fail",
                "advertise this host's IPv4 address, or bind its IPv6 address",
            )
        )
    elif literal_listen is not None and not literal_listen.is_unspecified and literal_listen != literal_advertise:
        errors.append(
            _msg(
                advertise_var,
                advertise,
                f"the engine binds only {listen} ({listen_var.split(': ', 1)[1]}), so connections to {advertise} are "
                "refused",
                f"advertise {listen}, or bind 0.0.0.0",
            )
        )
    return errors


def _peers(role: str, groups: Mapping[str, list[str]]) -> dict[str, str]:
    """Who connects to an engine of this role: the router hosts (HTTP), and for prefill the decode hosts (the
    bootstrap server)."""
    peers = {h: "the router" for h in groups.get(GROUPS["router"], [])}
    if role == "prefill":
        for h in groups.get(GROUPS["decode"], []):
            peers.setdefault(h, "a decode engine, at the bootstrap port")
    return peers


# ------------------------------------------------------------------ the fleet


def sidedoors(
    all_hostvars: Mapping[str, Mapping[str, Any]], groups: Mapping[str, list[str]], known: Sequence[str] = ()
) -> Report:
    """Every side-door problem and warning of the inventory; `known`: prefixes of extra environment variables
    another program reads (sglang_validate_extra_env_known), not warned about."""
    report = Report()
    for role in ENGINE_ROLES:
        for host in groups.get(GROUPS[role], []):
            hostvars = all_hostvars[host]
            try:
                envelope = engine_envelope(role, hostvars)
            except EnvelopeError:
                continue  # check_fleet reports it
            env = engine_env_report(host, role, hostvars, envelope, tuple(str(k) for k in known))
            report.problems += env.problems
            report.warnings += env.warnings
            ports: dict[str, Any] = {declared_var(role, hostvars, "port"): envelope.get("port")}
            if role == "prefill":
                bootstrap = envelope.get("disaggregation_bootstrap_port", DEFAULT_BOOTSTRAP_PORT)
                ports[declared_var(role, hostvars, "disaggregation_bootstrap_port")] = bootstrap
            report.problems += port_problems(host, hostvars, ports)
            report.problems += address_problems(host, role, hostvars, envelope, _peers(role, groups))
    for host in groups.get(GROUPS["router"], []):
        hostvars = all_hostvars[host]
        try:
            envelope = router_envelope(hostvars)
        except EnvelopeError:
            continue
        args = router_args_report(host, hostvars, envelope)
        report.problems += args.problems
        report.warnings += args.warnings
        ports = {
            f"sglang_router.{name}": envelope.get(name, SMG_DEFAULT_PORTS.get(name))
            for name in ("port", "prometheus_port")
        }
        extra_ports = router_extra_ports(hostvars)
        ports.update({f"sglang_router_extra_args {opt}": port for opt, port in extra_ports.items()})
        report.problems += port_problems(host, hostvars, ports)
        taken = {v: k for k, v in ports.items() if k.startswith("sglang_router.") and v is not None}
        for option, port in extra_ports.items():
            if port in taken:
                report.problems.append(
                    _msg(
                        f"{host}: sglang_router_extra_args",
                        _redacted(hostvars.get("sglang_router_extra_args") or []),
                        f"{option} {port} is the port of {taken[port]}: smg cannot bind both",
                        f"give {option} a port of its own",
                    )
                )
    # One host's engines share sglang_engine_extra_env: say each finding once.
    report.problems = list(dict.fromkeys(report.problems))
    report.warnings = list(dict.fromkeys(report.warnings))
    return report


def sidedoor_problems(all_hostvars: Mapping[str, Mapping[str, Any]], groups: Mapping[str, list[str]]) -> list[str]:
    return sidedoors(all_hostvars, groups).problems


def sidedoor_warnings(
    all_hostvars: Mapping[str, Mapping[str, Any]], groups: Mapping[str, list[str]], known: Sequence[str] = ()
) -> list[str]:
    return sidedoors(all_hostvars, groups, known).warnings
