"""sglang_http over real loopback HTTP servers and through a recording transport: probe, the one-GET health check
reported as ansible.builtin.uri reports it, and UrllibTransport.request with each method and a body."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_http import (
    Reply,
    TransportError,
    UrllibTransport,
    probe,
)
from loopback import Handler, closed_port, http_server


class Recording:
    """A transport that answers one scripted reply (or failure) and records each GET."""

    def __init__(self, reply: Reply | TransportError) -> None:
        self.reply = reply
        self.gets: list[tuple[str, dict[str, str], float]] = []

    def get(self, url: str, headers: Mapping[str, str], timeout: float) -> Reply:
        self.gets.append((url, dict(headers), timeout))
        if isinstance(self.reply, TransportError):
            raise self.reply
        return self.reply


@pytest.mark.parametrize(
    ("status", "body", "json"),
    [
        (200, b'{"status": "ready", "workers": 2}', {"status": "ready", "workers": 2}),
        (503, b'{"reason": "no healthy worker"}', {"reason": "no healthy worker"}),
        (200, b'["a", "b"]', None),
        (200, b"7", None),
        (200, b"OK", None),
        (200, b"", None),
    ],
)
def test_probe_reports_status_and_only_an_object_body(status: int, body: bytes, json: object) -> None:
    seen: list[tuple[str, str, str | None]] = []

    def handle(method: str, path: str, headers: dict[str, str], data: bytes) -> tuple[int, bytes]:
        seen.append((method, path, headers.get("Authorization")))
        return status, body

    with http_server(handle) as url:
        assert probe(f"{url}/health") == {"url": f"{url}/health", "status": status, "json": json}
    assert seen == [("GET", "/health", None)]


def test_probe_of_a_port_where_nothing_listens_is_status_minus_one() -> None:
    url = f"http://127.0.0.1:{closed_port()}/health"
    assert probe(url, timeout=2) == {"url": url, "status": -1, "msg": "unreachable: [Errno 111] Connection refused"}


def test_probe_asks_its_transport_with_no_headers_and_five_seconds() -> None:
    transport = Recording(Reply(200, b'{"ok": true}'))
    # a port where nothing listens: only the given transport can answer
    url = f"http://127.0.0.1:{closed_port()}/ready"
    assert probe(url, transport=transport) == {"url": url, "status": 200, "json": {"ok": True}}
    assert transport.gets == [(url, {}, 5.0)]


def test_probe_passes_its_timeout_on() -> None:
    transport = Recording(Reply(204, b""))
    assert probe("http://gpu7:30000/health", 0.5, transport) == {
        "url": "http://gpu7:30000/health",
        "status": 204,
        "json": None,
    }
    assert transport.gets == [("http://gpu7:30000/health", {}, 0.5)]


def test_probe_names_the_kind_and_reason_of_a_failure() -> None:
    transport = Recording(TransportError("timeout", "timed out"))
    assert probe("http://gpu7:30000/health", transport=transport) == {
        "url": "http://gpu7:30000/health",
        "status": -1,
        "msg": "timeout: timed out",
    }


# ---------------------------------------------------------------- any method, with a body


def recording(seen: list[tuple[str, str, str | None, bytes]]) -> Handler:
    """Answers every request with 200 and the method in X-Seen; records (method, path, content type, body)."""

    def handle(method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes, dict[str, str]]:
        seen.append((method, path, headers.get("Content-Type"), body))
        return 200, b'{"done": true}', {"X-Seen": method}

    return handle


def test_request_sends_its_method_and_body() -> None:
    seen: list[tuple[str, str, str | None, bytes]] = []
    transport = UrllibTransport()
    with http_server(recording(seen)) as url:
        posted = transport.request(
            "POST", f"{url}/workers", {"Content-Type": "application/json"}, 5, b'{"url": "http://gpu7:30001"}'
        )
        put = transport.request("PUT", f"{url}/workers/w1", {"Content-Type": "application/json"}, 5, b"{}")
        deleted = transport.request("DELETE", f"{url}/workers/w1", {}, 5)
        got = transport.get(f"{url}/workers", {}, 5)
    assert seen == [
        ("POST", "/workers", "application/json", b'{"url": "http://gpu7:30001"}'),
        ("PUT", "/workers/w1", "application/json", b"{}"),
        ("DELETE", "/workers/w1", None, b""),
        ("GET", "/workers", None, b""),
    ]
    assert [r.headers["X-Seen"] for r in (posted, put, deleted, got)] == ["POST", "PUT", "DELETE", "GET"]
    assert posted == Reply(200, b'{"done": true}')


def test_requests_never_go_through_a_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """A proxy named in the environment (here a port where nothing listens) is not used."""
    proxy = f"http://127.0.0.1:{closed_port()}"
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, proxy)
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    with http_server(lambda method, path, headers, body: (200, b"{}")) as url:
        assert UrllibTransport().get(f"{url}/health", {}, 5) == Reply(200, b"{}")
