"""Preflight of the servers of one host, before any of them restarts: what each server's process will meet when it
starts, checked as that process will run. A transient unit (systemd-run) gets the rendered unit's User, Group,
sandbox and limits, and the environment file the deploy is about to write; in it, PROBE (sglang_preflight_probe.py)
binds every listener the server will own, reads the paths it reads, finds the modules it imports in its release's
Python, and counts the GPUs it can open. A listener already taken is then looked up as root: held by the same
server's unit, it is fine (that server restarts in place); held by anything else, the server could not bind it.

The problems name the declared variable; `server_problems` turns the probe's answer into them.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from . import sglang_preflight_probe
from .sglang_layout import LISTENER_KEYS, MESH_KEYS, unit_value

# Directives of the unit's [Service] section that say when and how systemd runs the process, not what it may do:
# the transient unit gets everything else.
LIFECYCLE = frozenset(
    {
        "Type",
        "Restart",
        "RestartSec",
        "TimeoutStartSec",
        "TimeoutStopSec",
        "ExecStart",
        "ExecStartPre",
        "ExecStartPost",
        "ExecStop",
        "ExecReload",
        "SyslogIdentifier",
        "EnvironmentFile",
        "RemainAfterExit",
        "WatchdogSec",
        "KillMode",
        "KillSignal",
    }
)

# What a PD transfer backend needs in the release: the module SGLang 0.5.23 imports when the engine starts and the
# package that provides it, pinned. `mooncake.engine` (srt/distributed/device_communicators/
# mooncake_transfer_engine.py; mooncake_tcp is mooncake with MC_FORCE_TCP=1, arg_groups/pd_disaggregation_hook.py) and
# `nixl._api` (srt/disaggregation/nixl/conn.py); neither package is a dependency of the sglang wheel.
# mooncake-transfer-engine 0.3.11.post1 is the newest release with a CPython 3.11 wheel for glibc 2.35 (Debian 12,
# Ubuntu 22.04); nixl 1.5.2 pulls its CUDA builds (nixl-cu12, nixl-cu13).
TRANSFER_PACKAGES = {
    "mooncake": ("mooncake.engine", "mooncake-transfer-engine==0.3.11.post1"),
    "mooncake_tcp": ("mooncake.engine", "mooncake-transfer-engine==0.3.11.post1"),
    "nixl": ("nixl._api", "nixl==1.5.2"),
}


def engine_imports(command: list[str], backend: str | None) -> dict[str, str]:
    """Module -> why the engine imports it: the program its command runs (`python -m X`, or the sglang entry point)
    and its transfer backend's module."""
    argv = [str(a) for a in command]
    program = argv[argv.index("-m") + 1].split(".")[0] if "-m" in argv[:-1] else "sglang"
    return {program: f"the engine's command runs {program}", **transfer_needs([backend])["imports"]}


def transfer_needs(backends: list[str | None]) -> dict[str, Any]:
    """What the release needs for these PD transfer backends: `requirements` (pip specs, pinned) and `imports`
    (module -> why the engine imports it)."""
    requirements: list[str] = []
    imports: dict[str, str] = {}
    for backend in backends:
        if backend not in TRANSFER_PACKAGES:
            continue
        module, requirement = TRANSFER_PACKAGES[backend]
        requirements += [] if requirement in requirements else [requirement]
        imports.setdefault(module, f"disaggregation_transfer_backend {backend} imports it (package {requirement})")
    return {"requirements": requirements, "imports": imports}


# The probe's text, run by the host's python3 under the transient unit (sglang_preflight_probe.py; shipped with the
# module as every module_utils file is).
PROBE = inspect.getsource(sglang_preflight_probe)


def systemd_run_argv(name: str, service: Mapping[str, Any], env_file: str, argv: list[str]) -> list[str]:
    """systemd-run of `argv` in a transient service `name` with the [Service] directives of the rendered unit that
    bound what its process may do (user, group, sandbox, limits, devices, working directory) and `env_file`."""
    out = ["systemd-run", "--quiet", "--wait", "--pipe", "--collect", "--service-type=exec", f"--unit={name}"]
    for key, value in service.items():
        if key in LIFECYCLE or value is None:
            continue
        for one in value if isinstance(value, list) else [value]:
            out.append(f"--property={key}={unit_value(one)}")
    out.append(f"--property=EnvironmentFile={env_file}")
    return [*out, "--", *argv]


def probe_argv(python: str, spec: Mapping[str, Any]) -> list[str]:
    return [python, "-I", "-c", PROBE, json.dumps(dict(spec))]


def server_problems(
    server: Mapping[str, Any], answer: Mapping[str, Any], holders: Callable[[int], list[dict[str, Any]]]
) -> list[str]:
    """The problems of one server from the probe's answer. A problem names the host's server, the declared
    variable and the value, and says what to change. A listener held by the same server's unit is fine: its row
    gets `held_by`."""
    role, unit, user = server["role"], server["unit"], server["user"]
    var = f"sglang_{role}"
    problems: list[str] = []
    keys = LISTENER_KEYS[role] + (MESH_KEYS if role == "router" else ())  # a router's third: its mesh port
    for n, row in enumerate(answer["listeners"]):
        host_key, key = (f"{var}.{k}" for k in keys[n])
        where = f"{row['host']}:{row['port']}"
        if row["result"] == "bound":
            continue
        if row["result"] == "EADDRINUSE":
            held = holders(int(row["port"]))
            others = [h for h in held if h["unit"] != unit]
            if held and not others:  # the same server, which restarts in place
                row["held_by"] = f"{unit} (pid {held[0]['pid']})"
                continue
            who = (
                ", ".join(f"pid {h['pid']} ({h['comm']}, unit {h['unit'] or 'none'})" for h in others)
                or "another process"
            )
            problems.append(
                f"{unit}: port {row['port']} ({key} = {row['port']}) is already in use on this host by {who}; "
                f"{unit} could not bind it. Declare a free port in {key} or stop what holds it."
            )
        elif row["result"] == "EACCES":
            problems.append(
                f"{unit}: the unit's user {user} may not bind {where} ({key} = {row['port']}): ports below 1024 need "
                f"root or CAP_NET_BIND_SERVICE. Declare a port of 1024 or above in {key}."
            )
        elif row["result"] in ("EADDRNOTAVAIL", "unresolved"):
            problems.append(
                f"{unit}: the listen address {row['host']} ({host_key}) is not an address of this host "
                f"({row.get('error', row['result'])}). Declare an address the host has, or 0.0.0.0 / ::."
            )
        else:
            problems.append(f"{unit}: binding {where} ({key}) failed: {row.get('error', row['result'])}")
    denied = (
        f"is not readable by the unit's user {user} (the file modes, or the unit's sandbox: ProtectHome= makes /home, "
        f"/root and /run/user inaccessible)"
    )
    for row, declared in zip(answer["paths"], server.get("path_vars", []), strict=False):
        if row["result"] == "read":
            continue
        reason = {
            "ENOENT": "does not exist as the unit sees it (ProtectHome= hides /home, /root and /run/user; "
            "PrivateTmp= gives it its own /tmp)",
            "EACCES": denied,
            "EPERM": denied,
        }.get(row["result"], row.get("error", row["result"]))
        problems.append(
            f"{unit}: {row['path']} ({declared}) {reason}. Put it where the unit can read it, with read access for "
            f"{user}, and declare that path in {declared}."
        )
    for name, result in answer.get("imports", {}).items():
        if result != "found":
            problems.append(
                f"{unit}: module {name} is {result} in the release's Python {server.get('python')}, and "
                f"{server.get('import_reasons', {}).get(name, 'the server imports it')}. Install it into the release "
                f"(sglang_build_requirements; sglang_engine_requirements for a wheelhouse release) or declare another "
                f"{var}.disaggregation_transfer_backend."
            )
    check = answer.get("sglang_check") or {}
    if check and not check.get("skipped") and not check.get("ok"):
        named = ", ".join(check.get("culprits") or []) or "none named"
        problems.append(
            f"{unit}: SGLang's own startup checks, run in the release's Python {server.get('python')} as the unit "
            f"runs (its user, sandbox and environment file), refuse its command line: {check.get('error')} (flags "
            f"and variables it names: {named}). The deep check ran the same checks on the controller; what differs "
            f"is the release's SGLang or this host's environment. Fix the declared value behind them ({var}.*, "
            f"sglang_engine_extra_env) or the release."
        )
    wanted = len(server.get("gpu_ids") or [])
    if wanted and (answer.get("gpus") or 0) < wanted:
        problems.append(
            f"{unit}: the unit can open {answer.get('gpus') or 0} of the {wanted} GPU(s) in {var}.gpu_ids "
            f"{list(server['gpu_ids'])} (/dev/nvidia<id> under its DeviceAllow=). Declare GPUs this host has in "
            f"{var}.gpu_ids, or let the unit open them (sglang_engine_gpu_access, sglang_engine_device_allow)."
        )
    return problems


# The release check, run by a new release's Python before the release is marked complete: each module imported as
# the engine imports it (a real import: an extension's missing system library shows, which a lookup does not see).
# SGLang imports torch long before a transfer backend, and torch loads the CUDA runtime that mooncake's engine links
# (libcudart.so.12): the preloads come first where the release has them.
RELEASE_CHECK = r"""
import importlib, importlib.util, json, sys
preload, modules = json.loads(sys.argv[1]), json.loads(sys.argv[2])
out = {}
def load(name):
    try:
        importlib.import_module(name)
        return "ok"
    except BaseException as e:
        return "%s: %s" % (type(e).__name__, e)
for name in preload:
    try:
        there = importlib.util.find_spec(name) is not None
    except Exception:
        there = False
    if there:
        out[name] = load(name)
for name in modules:
    out[name] = load(name)
print(json.dumps(out))
"""
RELEASE_PRELOAD = ["torch"]

# System libraries that a backend's extension links and no wheel provides, and where a host gets them.
SYSTEM_LIBRARIES = {
    "libibverbs.so.1": "the RDMA verbs library (Debian and Ubuntu: apt install libibverbs1, from rdma-core)",
    "libcuda.so.1": "the NVIDIA driver's library (the host has no NVIDIA driver)",
    "libcudart.so.12": "the CUDA 12 runtime, which torch loads first (the release has no CUDA build of torch)",
    "libnuma.so.1": "libnuma (apt install libnuma1)",
}


def release_check_argv(python: str, imports: Mapping[str, str], preload: list[str]) -> list[str]:
    return [python, "-I", "-c", RELEASE_CHECK, json.dumps(preload), json.dumps(list(imports))]


def release_problems(python: str, answer: Mapping[str, str], imports: Mapping[str, str], fix: str) -> list[str]:
    """One problem per module that did not import in the release's Python (a preload included), with why the engine
    needs it and, for a missing system library, where the host gets it."""
    problems = []
    for name, result in answer.items():
        if result == "ok":
            continue
        why = imports.get(name, "imported first, as SGLang does")
        library = next((f" {lib} is {where}." for lib, where in SYSTEM_LIBRARIES.items() if lib in result), "")
        message = f"module {name} does not import in the new release's Python {python} ({result}); {why}.{library}"
        problems.append(f"{message} {fix}".rstrip())
    return problems


# One server of sglang_preflight's option `servers` (servers_as_checked normalizes the deploy's servers with it).
SERVER_OPTIONS = {
    "role": {"type": "str", "required": True, "choices": ["prefill", "decode", "router"]},
    "unit": {"type": "str", "required": True},
    "service": {"type": "dict", "required": True},
    "environment": {"type": "str", "required": True, "no_log": True},
    "env_file": {"type": "str", "default": ""},
    "listeners": {"type": "list", "elements": "list", "required": True},
    "paths": {"type": "list", "elements": "str", "default": []},
    "path_vars": {"type": "list", "elements": "str", "default": []},
    "python": {"type": "str"},
    "imports": {"type": "dict", "default": {}},
    "gpu_ids": {"type": "list", "elements": "int", "default": []},
    "sglang_argv": {"type": "list", "elements": "str", "default": []},
}

# Passed preflights, one file per unit holding the digest of the inputs that passed. Under /run: a boot forgets them.
PASSED_DIR = "/run/sglang-preflight"


def unit_active(unit: str) -> bool:
    return subprocess.run(["systemctl", "is-active", "--quiet", unit], check=False).returncode == 0


def servers_as_checked(servers: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The servers as sglang_preflight's own options normalize them (defaults, types): what inputs_digest covers."""
    spec = {"servers": {"type": "list", "elements": "dict", "options": SERVER_OPTIONS}}
    result = ArgumentSpecValidator(spec).validate({"servers": list(servers)})
    if result.error_messages:
        raise ValueError("; ".join(result.error_messages))
    return list(result.validated_parameters["servers"])


def stamp_of(server: Mapping[str, Any]) -> dict[str, Any]:
    """What passed_before compares on the host for one server (as checked): its unit, its environment file and the
    content about to be written there, and the digest of its inputs. The deploy's read of the host (sglang_host_info
    preflight_stamps) takes these, built on the controller, so that a host whose servers all passed with these very
    inputs makes no call to sglang_preflight."""
    return {"unit": server["unit"], "env_file": server.get("env_file") or "", "environment": server["environment"],
            "digest": inputs_digest(server)}  # fmt: skip


def inputs_digest(server: Mapping[str, Any]) -> str:
    """sha256 of everything the check of one server reads from the deploy (its module options)."""
    return hashlib.sha256(json.dumps(server, sort_keys=True, default=str).encode()).hexdigest()


def passed_before(server: Mapping[str, Any], active: Callable[[str], bool], passed_dir: str = PASSED_DIR) -> bool:
    """The server's check would repeat a verdict: its unit runs, with the environment file about to be written
    already on disk, and these very inputs passed the preflight since the host booted. Nothing of it restarts, so
    nothing is checked again."""
    return stamp_repeats(stamp_of(server), active, passed_dir)


def stamp_repeats(stamp: Mapping[str, Any], active: Callable[[str], bool], passed_dir: str = PASSED_DIR) -> bool:
    """passed_before of the server whose stamp_of this is."""
    try:
        with open(os.path.join(passed_dir, f"{stamp['unit']}.sha256"), encoding="ascii") as passed_file:
            passed = passed_file.read().strip()
        with open(str(stamp.get("env_file") or ""), encoding="utf-8") as written:
            same_environment = written.read() == stamp["environment"]
    except OSError:
        return False
    return passed == stamp["digest"] and same_environment and active(str(stamp["unit"]))


def remember_pass(server: Mapping[str, Any], passed_dir: str = PASSED_DIR) -> None:
    """Records that these inputs passed (root only: the digest covers the environment, the API key included)."""
    os.makedirs(passed_dir, mode=0o700, exist_ok=True)
    path = os.path.join(passed_dir, f"{server['unit']}.sha256")
    fd = os.open(path + ".new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as stamp:
        stamp.write(inputs_digest(server) + "\n")
    os.replace(path + ".new", path)
