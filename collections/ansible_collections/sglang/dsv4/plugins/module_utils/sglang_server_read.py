"""One SGLang server read on its host, as the info modules return it: its files and process (sglang_layers) and its
live limits (sglang_engine_live, smg_live) through the collection's HTTP transport (sglang_http).

sglang_layers_info and sglang_live_info read one server each; sglang_servers_info reads every server of a host in one
module run (the audit). All three return these functions' results.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .sglang_engine_live import read_engine
from .sglang_http import Transport, probe
from .sglang_layers import HostFiles, read_layers
from .sglang_layout import UNIT_NAMES
from .smg_live import read_router


def read_files(p: Mapping[str, Any], host: HostFiles, name: str) -> dict[str, Any]:
    """The files and the process of the server that `p` (sglang_layers_info's options) names."""
    role = p["role"]
    unit = p.get("unit") or UNIT_NAMES[role]
    layers = read_layers(
        role,
        unit,
        p["script"],
        p["env_file"],
        p.get("facts_file") or None,
        host,
        unit_dir=p["unit_dir"],  # both modules default it, and keep_releases
        releases_dir=p.get("releases_dir"),
        keep_releases=p["keep_releases"],
        release_fact_file=p.get("release_fact_file"),
    )
    if p.get("checksums"):
        for info in layers.files.values():
            info["sha1"] = host.sha1(info["path"])
    out = layers.snapshot()
    out["unit"] = {"name": unit, **layers.unit}
    out.update(changed=False, role=role, problems=[f"{name}: {problem}" for problem in layers.problems])
    out["health"] = probe(p["health_url"]) if p.get("health_url") else None
    return out


def read_live(transport: Transport, p: Mapping[str, Any], api_key: str | None, name: str) -> dict[str, Any]:
    """The live limits of the server that `p` (sglang_live_info's options) names, read at its endpoint."""
    endpoint, role, timeout = p["endpoint"], p["role"], p.get("timeout", 10)
    if role == "router":
        live = read_router(transport, endpoint, api_key, timeout, name)
    else:
        live = read_engine(transport, endpoint, role, api_key, timeout, name, p.get("metrics", True))
    return {"changed": False, "endpoint": endpoint, "role": role, "name": name, **live.snapshot()}
