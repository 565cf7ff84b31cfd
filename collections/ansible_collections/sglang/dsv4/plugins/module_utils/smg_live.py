"""Router adapters of the live reader: smg 1.13.0's /readiness and /workers, and the limits it applies.

smg does not expose its own limits over HTTP: they come from its argv, with its parser's defaults filling the
flags left unset (router_effective).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from functools import partial
from typing import Any

from .sglang_argspec import SMG
from .sglang_http import ServerLive, Transport, describe, fetch, fetch_concurrently, set_status

ROUTER_PATHS = {"readiness": "/readiness", "workers": "/workers"}

# smg 1.13.0's defaults for the router limits it does not report over HTTP, from its parser's table
# (plugins/module_utils/smg_argtable.py, checked against smg itself by tests/component/contract/test_flag_tables.py).
ROUTER_DEFAULTS: dict[str, Any] = {
    name: SMG[name].default
    for name in (
        "max_concurrent_requests", "queue_size", "queue_timeout_secs", "request_timeout_secs", "max_payload_size",
        "policy", "prometheus_port", "pd_admission_wait_secs", "health_check_interval_secs",
        "worker_startup_timeout_secs", "shutdown_grace_period_secs", "retry_max_retries", "retry_initial_backoff_ms",
        "retry_max_backoff_ms",
    )
}  # fmt: skip


def _norm_url(url: str) -> str:
    return str(url).rstrip("/")


def reduce_workers(body: Any) -> list[dict[str, Any]]:
    items = body.get("workers") if isinstance(body, dict) else body
    if not isinstance(items, list):
        raise TypeError("workers is not a list")
    out = []
    for w in items:
        kind = str(w.get("worker_type") or w.get("type") or "regular").lower()
        out.append({"url": _norm_url(w["url"]), "type": kind, "healthy": bool(w.get("is_healthy", True))})
    return out


def read_router(
    transport: Transport,
    base_url: str,
    api_key: str | None = None,
    timeout: float = 10.0,
    host: str | None = None,
) -> ServerLive:
    """Read the router's readiness and worker list."""
    host = host or socket.gethostname()
    get = partial(fetch, transport, base_url, api_key=api_key, timeout=timeout)
    got = fetch_concurrently(
        {
            # smg answers 503 while not ready, with the reason in the body.
            "readiness": partial(get, ROUTER_PATHS["readiness"], error_body_ok=True),
            "workers": partial(get, ROUTER_PATHS["workers"], parse=reduce_workers),
        }
    )
    result = ServerLive()
    for item in got.values():
        if not item.ok:
            result.errors.append(describe(host, base_url, item))
    set_status(result, list(got.values()))
    if result.status == "unreachable":
        return result
    ready = got["readiness"]
    body = ready.data if isinstance(ready.data, dict) else {}
    router: dict[str, Any] = {
        "ready": ready.status == 200 and body.get("status") == "ready",
        "readiness": body.get("status") or body.get("reason"),
        "healthy_workers": body.get("healthy_workers"),
        "total_workers": body.get("total_workers"),
    }
    if got["workers"].ok:
        workers = got["workers"].data
        router["workers"] = workers
        router["unhealthy_workers"] = sorted(f"{w['type']} {w['url']}" for w in workers if not w["healthy"])
    if not router["ready"]:
        result.warnings.append(f"{host}: {base_url.rstrip('/')}/readiness: not ready ({router['readiness']})")
    result.router = router
    return result


def router_effective(
    running: Mapping[str, Any] | None, cpu_count: int | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """The router limits smg applies, from its argv: smg's defaults fill unset flags.

    max_concurrent_requests -1 (the default) derives 1024 per core with a floor of 4096; 0 turns the cap off.
    Returns (effective, notes).
    """
    running = running or {}
    effective: dict[str, Any] = {}
    notes: dict[str, str] = {}
    for name, default in ROUTER_DEFAULTS.items():
        value = running.get(name)
        effective[name] = default if value is None else value
        if value is None:
            notes[name] = f"smg default {default}"
    mcr = int(effective["max_concurrent_requests"])
    if mcr < 0:
        cores = cpu_count or os.cpu_count() or 1
        effective["max_concurrent_requests"] = max(4096, 1024 * cores)
        notes["max_concurrent_requests"] = f"-1: smg derives 1024 per core ({cores}), at least 4096"
    elif mcr == 0:
        effective["max_concurrent_requests"] = None
        notes["max_concurrent_requests"] = "0: no in-flight cap"
    for name in ("host", "port"):
        if running.get(name) is not None:
            effective[name] = running[name]
    return effective, notes
