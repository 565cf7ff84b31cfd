"""Edges of the live reader (plugins/module_utils/sglang_http.py, sglang_engine_live.py): a plain-HTTP GET never builds
a TLS context, every call of one server runs in its own thread at once, and an engine's echoed request values are kept
only under keys of its role. Bodies and calls here are synthetic."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_http as live_module
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_engine_live import normalize_engine
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_http import (
    Fetched,
    Reply,
    UrllibTransport,
    fetch_concurrently,
)
from loopback import http_server


def test_a_plain_http_get_builds_no_tls_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading the CA store is left to the first https request: an http:// GET never asks for a context."""
    built: list[object] = []

    def create_default_context(*args: object, **kwargs: object) -> ssl.SSLContext:
        built.append(args)
        raise AssertionError("a TLS context was built for a plain-HTTP GET")

    monkeypatch.setattr(live_module.ssl, "create_default_context", create_default_context)
    with http_server(lambda method, path, headers, body: (200, b'{"ok": true}')) as url:
        reply = UrllibTransport().get(f"{url}/health", {}, 5)
    assert reply == Reply(200, b'{"ok": true}')
    assert built == []


def test_every_call_runs_in_its_own_thread_at_once() -> None:
    """33 calls (more than any default pool size) that each wait for all the others: all meet, none times out."""
    n = 33
    barrier = threading.Barrier(n, timeout=2)

    def meet(i: int) -> Callable[[], Fetched]:
        def call() -> Fetched:
            barrier.wait()
            return Fetched(f"/p{i}", 200)

        return call

    got = fetch_concurrently({f"c{i}": meet(i) for i in range(n)})
    assert list(got) == [f"c{i}" for i in range(n)]
    assert [f.path for f in got.values()] == [f"/p{i}" for i in range(n)]


def test_requested_values_are_kept_only_under_keys_of_the_role() -> None:
    """context_length and max_running_requests are engine keys, not router keys: a router keeps no request echo."""
    info = {"context_length": 4096, "max_running_requests": 8}
    assert normalize_engine("router", info, None, None, None).requested == {}
    assert normalize_engine("decode", info, None, None, None).requested == {
        "context_length": 4096,
        "max_total_tokens": None,
        "max_running_requests": 8,
        "max_queued_requests": None,
    }
