"""The declared layer: build each server's envelope from inventory variables.

Inventory shape (group_vars):
  sglang_model:          {name, path, served_name, params_b, quantization}
  sglang_gpu_memory_gib: per-GPU memory of the engine hosts
  sglang_engine_common:  envelope keys shared by prefill and decode
  sglang_prefill / sglang_decode: the role's envelope keys plus gpu_ids (host_vars may override whole dicts)
  sglang_router:         router envelope keys
Groups: sglang_prefill, sglang_decode (children of sglang_engine) and sglang_router.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .sglang_argspec import default_of
from .sglang_schema import ENGINE_ROLES, EnvelopeError, normalize

GROUPS = {"prefill": "sglang_prefill", "decode": "sglang_decode", "router": "sglang_router"}


def model_config_path(models_dir: Any, name: Any) -> str:
    """Where the controller keeps the config.json of the model `name` (sglang_model.name) under `models_dir`."""
    return f"{str(models_dir).rstrip('/')}/{name}/config.json"


def engine_envelope(role: str, hostvars: Mapping[str, Any]) -> dict[str, Any]:
    """The declared envelope of one engine on one host: common keys, then the role's, then derived keys."""
    if role not in ENGINE_ROLES:
        raise EnvelopeError(f"role={role!r} is not an engine role ({', '.join(ENGINE_ROLES)})")
    common = hostvars.get("sglang_engine_common") or {}
    own = hostvars.get(f"sglang_{role}") or {}
    where_common, where_role = "sglang_engine_common", f"sglang_{role}"
    merged = {**normalize(role, dict(common), where_common), **normalize(role, dict(own), where_role)}
    model = hostvars.get("sglang_model") or {}
    merged.setdefault("model_path", model.get("path"))
    merged.setdefault("served_model_name", model.get("served_name"))
    merged["disaggregation_mode"] = role
    gpu_ids = merged.get("gpu_ids")
    if gpu_ids:
        merged.setdefault("base_gpu_id", min(int(g) for g in gpu_ids))
    merged.pop("enabled", None)
    if role == "decode":
        merged.pop("disaggregation_bootstrap_port", None)
    return merged


def model_inputs(hostvars: Mapping[str, Any], model_config: Mapping[str, Any]) -> dict[str, Any]:
    """The capacity model's inputs for an engine host (the `model` sglang_drift.judge takes): the model's config.json
    and what the inventory declares of the GPUs and the weights."""
    model = hostvars.get("sglang_model") or {}
    return {
        "config": model_config,
        "gpu_memory_gib": hostvars.get("sglang_gpu_memory_gib") or 0,
        "params_b": model.get("params_b"),
        "quantization": model.get("quantization"),
    }


def declared_in(role: str, hostvars: Mapping[str, Any], key: str) -> str:
    """The variable a key of an engine envelope comes from: the role's own dict, else the shared one."""
    if key in (hostvars.get(f"sglang_{role}") or {}) or key not in (hostvars.get("sglang_engine_common") or {}):
        return f"sglang_{role}"
    return "sglang_engine_common"


# The shared envelope's engines bind to `{{ sglang_listen_host | default('0.0.0.0') }}` (group_vars/all/envelope.yml).
LISTEN_HOST = "sglang_listen_host"


def listens_as_declared(hostvars: Mapping[str, Any]) -> bool:
    """Whether the shared listen address (sglang_engine_common.host) is the one sglang_listen_host declares: it is
    set and the shared `host` holds its value (Ansible templated it in)."""
    common = hostvars.get("sglang_engine_common") or {}
    declared = hostvars.get(LISTEN_HOST)
    return declared is not None and "host" in common and str(common["host"]) == str(declared)


API_KEY_INSTEAD = "sglang_api_key's value (the serve script reads ${SGLANG_API_KEY}, unset without it)"


def overridden_keys(role: str, hostvars: Mapping[str, Any]) -> list[tuple[str, Any, str]]:
    """Declared keys the deployment replaces, so the declaration never runs: (declared variable, value, what runs
    instead). An engine's disaggregation_mode is its inventory group's (engine_envelope); an api_key in an envelope
    dict renders as `--api-key ${SGLANG_API_KEY}` (sglang_flags.to_argv), which the roles fill from sglang_api_key
    only. A secret value is shown redacted."""
    found: list[tuple[str, Any, str]] = []
    dicts = ("sglang_router",) if role == "router" else ("sglang_engine_common", f"sglang_{role}")
    for name in dicts:
        if "api_key" in (hostvars.get(name) or {}):
            found.append((f"{name}.api_key", "<redacted>", API_KEY_INSTEAD))
    if role in ENGINE_ROLES:
        own, common = hostvars.get(f"sglang_{role}") or {}, hostvars.get("sglang_engine_common") or {}
        mode = own.get("disaggregation_mode", common.get("disaggregation_mode"))
        if mode is not None and str(mode) != role:
            var = f"{declared_in(role, hostvars, 'disaggregation_mode')}.disaggregation_mode"
            found.append((var, mode, f"{role!r}, the role of the inventory group {GROUPS[role]}"))
    return found


def declared_var(role: str, hostvars: Mapping[str, Any], key: str) -> str:
    """The declared variable behind an engine envelope key, for messages: the dict that declares it, else the
    variable it is derived from (sglang_model.path for model_path, gpu_ids for base_gpu_id, sglang_listen_host for
    the shared host it fills, ...), else the role's dict (where an unset key would be declared)."""
    own = hostvars.get(f"sglang_{role}") or {}
    common = hostvars.get("sglang_engine_common") or {}
    if key == "host" and "host" not in own and listens_as_declared(hostvars):
        return LISTEN_HOST
    if key in own or key in common:
        return f"{declared_in(role, hostvars, key)}.{key}"
    derived = {
        "model_path": "sglang_model.path",
        "served_model_name": "sglang_model.served_name",
        "base_gpu_id": f"{declared_in(role, hostvars, 'gpu_ids')}.gpu_ids",
        "disaggregation_mode": f"the inventory group {GROUPS.get(role, role)}",
        "api_key": "sglang_api_key",
    }
    return derived.get(key, f"sglang_{role}.{key}")


def router_envelope(hostvars: Mapping[str, Any]) -> dict[str, Any]:
    """The declared router envelope (worker lists are derived separately, from the inventory groups)."""
    return normalize("router", dict(hostvars.get("sglang_router") or {}), "sglang_router")


WILDCARDS = ("0.0.0.0", "::", "")


def local_address(listen: Any) -> str:
    """The address a process on the same host uses for a server bound to `listen`: loopback for a wildcard."""
    return "127.0.0.1" if str(listen or "0.0.0.0") in WILDCARDS else str(listen)


def socket_address(address: str, port: Any) -> str:
    """`address:port`, an IPv6 address in brackets (RFC 3986; smg parses each mesh peer so)."""
    return f"[{address}]:{port}" if ":" in address and not address.startswith("[") else f"{address}:{port}"


def http_url(address: Any, port: Any) -> str:
    """`http://address:port`, an IPv6 address in brackets (RFC 3986)."""
    return f"http://{socket_address(str(address), port)}"


def local_url(listen: Any, port: Any) -> str:
    """The URL a process on the same host reaches a server bound to `listen` and `port` at."""
    return http_url(local_address(listen), port)


def engine_url(host: str, hostvars: Mapping[str, Any], envelope: Mapping[str, Any]) -> str:
    """How the router and the audit reach an engine: sglang_advertise_host, else the inventory host name."""
    return http_url(advertised(host, hostvars), envelope["port"])


def workers(all_hostvars: Mapping[str, Mapping[str, Any]], groups: Mapping[str, list[str]]) -> dict[str, Any]:
    """Prefill (url, bootstrap port) and decode urls of every engine in the inventory."""
    prefill = []
    for host in groups.get(GROUPS["prefill"], []):
        env = engine_envelope("prefill", all_hostvars[host])
        prefill.append(
            {
                "host": host,
                "url": engine_url(host, all_hostvars[host], env),
                "bootstrap_port": env.get("disaggregation_bootstrap_port", 8998),
            }
        )
    decode = []
    for host in groups.get(GROUPS["decode"], []):
        env = engine_envelope("decode", all_hostvars[host])
        decode.append({"host": host, "url": engine_url(host, all_hostvars[host], env)})
    return {"prefill": prefill, "decode": decode}


def router_worker_specs(worker_map: Mapping[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The same workers as smg's worker API registers them (`POST /workers` bodies)."""
    specs: list[dict[str, Any]] = [
        {"url": w["url"], "worker_type": "prefill", "bootstrap_port": w["bootstrap_port"]}
        for w in worker_map["prefill"]
    ]
    return specs + [{"url": w["url"], "worker_type": "decode"} for w in worker_map["decode"]]


def router_argv_workers(worker_map: Mapping[str, list[dict[str, Any]]]) -> list[str]:
    """`--prefill URL PORT ... --decode URL ...` for smg's PD mode."""
    argv: list[str] = []
    for w in worker_map["prefill"]:
        argv += ["--prefill", w["url"], str(w["bootstrap_port"])]
    for w in worker_map["decode"]:
        argv += ["--decode", w["url"]]
    return argv


def advertised(host: str, hostvars: Mapping[str, Any]) -> str:
    """The address other hosts reach this one at: sglang_advertise_host, else ansible_host, else the name."""
    return str(hostvars.get("sglang_advertise_host") or hostvars.get("ansible_host") or host)


def routers(all_hostvars: Mapping[str, Mapping[str, Any]], groups: Mapping[str, list[str]]) -> list[dict[str, Any]]:
    """Every router of the inventory: its host, the URL a process on that host reaches it at (`local_url`), and the
    address and port other hosts reach it at (the front's servers)."""
    found = []
    for host in groups.get(GROUPS["router"], []):
        env = router_envelope(all_hostvars[host])
        port = env.get("port") or default_of("router", "port")
        found.append(
            {
                "host": host,
                "local_url": local_url(env.get("host"), port),
                "address": advertised(host, all_hostvars[host]),
                "port": int(port),
            }
        )
    return found


def mesh_asked(hostvars: Mapping[str, Any]) -> bool:
    """Whether the host's `sglang_router_mesh` asks for smg's mesh (a bool, or an extra var's "true"/"false")."""
    value = hostvars.get("sglang_router_mesh", False)
    if isinstance(value, str):
        if value.strip().lower() not in ("true", "false", "yes", "no", "1", "0", ""):
            raise EnvelopeError(f"sglang_router_mesh={value!r}: not a boolean; set it to true (smg's mesh) or false")
        return value.strip().lower() in ("true", "yes", "1")
    return bool(value)


def mesh_members(all_hostvars: Mapping[str, Mapping[str, Any]], groups: Mapping[str, list[str]]) -> list[str]:
    """The routers in smg's mesh, in inventory order: those whose `sglang_router_mesh` is true, when there are at
    least two of them; none otherwise."""
    names = [name for name in groups.get(GROUPS["router"], []) if mesh_asked(all_hostvars[name])]
    return names if len(names) >= 2 else []


def router_mesh(
    all_hostvars: Mapping[str, Mapping[str, Any]], groups: Mapping[str, list[str]], host: str
) -> dict[str, Any]:
    """The smg mesh flags of router `host` as envelope keys. The mesh holds the routers whose `sglang_router_mesh` is
    true: none for fewer than two of them, nor for a router outside it; each router in it names itself, advertises
    its address and lists the other routers in it as peers (`address:mesh_port`), never a router that runs no mesh
    listener. The mesh port is smg's default: the router envelope declares no mesh key (the schema refuses them),
    the mesh is derived.

    The mesh is off by default: with the routers' static worker lists and their own admission counts it shares
    nothing this stack uses, and two smg 1.13.0 routers in a mesh exchange a stream of small frames that keeps about
    half a core of each busy while they serve nothing (docs/frontend.md)."""
    names = mesh_members(all_hostvars, groups)
    if host not in names:
        return {}
    port = int(default_of("router", "mesh_port"))
    peers = [socket_address(advertised(n, all_hostvars[n]), port) for n in names if n != host]
    return {
        "enable_mesh": True,
        "mesh_server_name": host,
        "mesh_advertise_host": advertised(host, all_hostvars[host]),
        "mesh_port": port,
        "mesh_peer_urls": peers,
    }
