"""One SGLang server read on its host, as the info modules return it: its files and process (sglang_layers) and its
live limits (sglang_engine_live, smg_live) through Ansible's HTTP client.

sglang_layers_info and sglang_live_info read one server each; sglang_servers_info reads every server of a host in one
module run (the audit). All three return these functions' results.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Mapping
from typing import Any
from urllib.error import HTTPError

from ansible.module_utils.urls import Request, make_context

from .sglang_engine_live import read_engine
from .sglang_http import Reply, Transport, TransportError, classify, probe
from .sglang_layers import HostFiles, read_layers
from .sglang_layout import UNIT_NAMES
from .smg_live import read_router


class OpenUrlTransport:
    """HTTP GET through ansible.module_utils.urls.Request (what open_url uses).

    Request.open builds a TLS context (loading the CA store, tens of milliseconds) on every call unless it is
    given one: plain http gets an empty context it never uses, https one real context shared by all requests.
    """

    def __init__(self, validate_certs: bool) -> None:
        self.validate_certs = validate_certs
        self._plain = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self._tls: ssl.SSLContext | None = None
        self._lock = threading.Lock()

    def _context(self, url: str) -> ssl.SSLContext:
        if not url.startswith("https:"):
            return self._plain
        with self._lock:
            if self._tls is None:
                self._tls = make_context(validate_certs=self.validate_certs)
            return self._tls

    def get(self, url: str, headers: Mapping[str, str], timeout: float) -> Reply:
        try:
            resp = Request().open("GET", url, headers=dict(headers), timeout=timeout, context=self._context(url),
                                  validate_certs=self.validate_certs, follow_redirects="safe")  # fmt: skip
            return Reply(resp.getcode(), resp.read())
        except HTTPError as exc:
            return Reply(exc.code, exc.read() if exc.fp else b"")
        except TransportError:
            raise
        except Exception as exc:
            raise classify(exc) from None


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
        unit_dir=p.get("unit_dir") or "/etc/systemd/system",
        releases_dir=p.get("releases_dir"),
        keep_releases=p.get("keep_releases", 3),
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
