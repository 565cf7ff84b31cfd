"""The server layout, declared once: per server role its systemd unit, serve script, environment file and unit file
with the owner, group and mode of each, the local facts file, the addresses it listens on, and the URLs a process on
the same host reaches it and its health check at.

The directories, the facts files and the file modes are inputs (`places`: the sglang_defaults role declares them,
the deploy, the audit, monitoring and verify read them from there); the file and unit names, the listeners' defaults
and the health paths are the layout's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .sglang_argspec import default_of
from .sglang_declared import WILDCARDS, local_url

UNIT_NAMES = {"prefill": "sglang-dsv4-prefill", "decode": "sglang-dsv4-decode", "router": "sglang-dsv4-router"}
HEALTH_PATHS = {"prefill": "/health", "decode": "/health", "router": "/readiness"}
FILES = ("script", "env_file", "unit")


def unit_value(value: Any) -> str:
    """A systemd directive value: booleans as yes/no, everything else as text."""
    if value is True:
        return "yes"
    if value is False:
        return "no"
    return str(value)


def file_names(role: str, places: Mapping[str, Any]) -> dict[str, str]:
    """Path of each rendered file of a server (script, env_file, unit)."""
    return {
        "script": f"{places['bin_dir']}/serve_dsv4_{role}.sh",
        "env_file": f"{places['env_dir']}/dsv4-{role}.env",
        "unit": f"{places['unit_dir']}/{UNIT_NAMES[role]}.service",
    }


# The declared (address key, port key) of every socket a server listens on, in the order `listeners` gives them.
LISTENER_KEYS = {
    "prefill": (("host", "port"), ("host", "disaggregation_bootstrap_port")),
    "decode": (("host", "port"),),
    "router": (("host", "port"), ("prometheus_host", "prometheus_port")),
}
MESH_KEYS = (("mesh_host", "mesh_port"),)  # a router in smg's mesh (several routers) listens for its peers too


def listeners(role: str, envelope: Mapping[str, Any]) -> list[tuple[str, int]]:
    """(address, port) of every socket the server listens on; "*" for a wildcard address. Unset keys take the
    parser's default (SGLang binds 127.0.0.1, smg 0.0.0.0 and its metrics on their own port)."""

    def value(key: str) -> Any:
        given = envelope.get(key)
        return default_of(role, key) if given is None else given

    def address(key: str) -> str:
        return "*" if str(value(key) or "") in WILDCARDS else str(value(key))

    keys = LISTENER_KEYS[role] + (MESH_KEYS if role == "router" and envelope.get("enable_mesh") else ())
    return [(address(host), int(value(port))) for host, port in keys]


def server_layout(role: str, envelope: Mapping[str, Any], places: Mapping[str, Any]) -> dict[str, Any]:
    """Everything the deploy writes for one server and where it answers. `places`: bin_dir, env_dir, unit_dir,
    facts_file, release_fact_file and file_modes ({script, env_file, unit: {owner, group, mode}})."""
    names = file_names(role, places)
    url = local_url(envelope.get("host"), envelope.get("port") or default_of(role, "port"))
    return {
        "role": role,
        "unit": UNIT_NAMES[role],
        "script": names["script"],
        "env_file": names["env_file"],
        "unit_file": names["unit"],
        "facts_file": places["facts_file"],
        "release_fact_file": places["release_fact_file"],
        "files": {name: {"path": names[name], **dict(places["file_modes"][name])} for name in FILES},
        "listeners": [list(x) for x in listeners(role, envelope)],
        "url": url,
        "health_url": url + HEALTH_PATHS[role],
    }
