"""plugins/module_utils/sglang_rollout.py over a stand-in transport: the exact request each step hands the transport
(method, URL, headers, timeout, body), how a transport failure is raised, and how listed URLs are matched."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_rollout as rollout
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_http import Reply, TransportError
from fakeclock import Clock

ROUTER = "http://10.0.0.9:8080/"
DECODE = "http://10.0.0.2:30001"
KEY = "sk-router-pinned"


class Scripted:
    """Answers each request with the next scripted reply (or raises it); records every request exactly."""

    def __init__(self, *replies: Reply | TransportError) -> None:
        self.replies = list(replies)
        self.seen: list[tuple[str, str, dict[str, str], float, bytes | None]] = []

    def request(
        self, method: str, url: str, headers: Mapping[str, str], timeout: float, body: bytes | None = None
    ) -> Reply:
        self.seen.append((method, url, dict(headers), timeout, body))
        reply = self.replies.pop(0)
        if isinstance(reply, TransportError):
            raise reply
        return reply


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock(start=50.0)
    monkeypatch.setattr(rollout, "time", fake)
    return fake


def use(monkeypatch: pytest.MonkeyPatch, *replies: Reply | TransportError) -> Scripted:
    transport = Scripted(*replies)
    monkeypatch.setattr(rollout, "TRANSPORT", transport)
    return transport


def listing(*items: dict[str, Any]) -> Reply:
    return Reply(200, json.dumps({"workers": list(items)}).encode(), {})


def test_a_request_with_a_body_and_a_key_hands_the_transport_these_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    transport = use(monkeypatch, Reply(202, b'{"ok": true}', {"Retry-After": "1"}))
    answer = rollout.call("POST", ROUTER + "workers", KEY, {"url": DECODE})
    assert answer == rollout.Answer(202, {"ok": True}, {"Retry-After": "1"})
    assert transport.seen == [
        (
            "POST",
            ROUTER + "workers",
            {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"},
            10.0,
            b'{"url": "http://10.0.0.2:30001"}',
        )
    ]


def test_a_request_without_body_or_key_sends_no_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    transport = use(monkeypatch, Reply(200, b"caf\xc3\xa9 \xff", {}))
    answer = rollout.call("GET", DECODE + "/x", timeout=3.0)
    assert answer == rollout.Answer(200, "caf\u00e9 \ufffd", {})
    assert transport.seen == [("GET", DECODE + "/x", {}, 3.0, None)]


@pytest.mark.parametrize(
    ("kind", "raised"),
    [
        ("timeout", TimeoutError),
        ("unreachable", ConnectionError),
        ("tls", ConnectionError),
        ("TIMEOUT", ConnectionError),
    ],
)
def test_a_transport_failure_raises_by_its_kind_naming_the_request(
    monkeypatch: pytest.MonkeyPatch, kind: str, raised: type[OSError]
) -> None:
    use(monkeypatch, TransportError(kind, "no route to host"))
    with pytest.raises(OSError) as err:
        rollout.call("DELETE", ROUTER + "workers/w-1", KEY)
    assert type(err.value) is raised
    assert str(err.value) == f"DELETE {ROUTER}workers/w-1: no route to host"


def test_the_worker_list_is_a_get_of_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    item = {"id": "w-d", "url": DECODE}
    transport = use(monkeypatch, listing(item))
    assert rollout.workers(ROUTER, KEY) == [item]
    assert transport.seen == [("GET", "http://10.0.0.9:8080/workers", {"Authorization": f"Bearer {KEY}"}, 10.0, None)]


def test_listed_workers_sends_no_key_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    transport = use(monkeypatch, listing({"id": "w-d", "url": DECODE + "/"}))
    got = rollout.listed_workers(ROUTER, [DECODE, "http://10.0.0.3:30001"])
    assert got == {DECODE: {"id": "w-d", "url": DECODE + "/"}, "http://10.0.0.3:30001": None}
    assert transport.seen == [("GET", "http://10.0.0.9:8080/workers", {}, 10.0, None)]


def test_a_listed_worker_without_a_url_reads_as_the_empty_url(monkeypatch: pytest.MonkeyPatch) -> None:
    nameless = {"id": "w-x", "status": "ready"}
    use(monkeypatch, listing(nameless))
    got = rollout.listed_workers(ROUTER, ["", "/", "None", "XXXX"])
    assert got == {"": nameless, "/": nameless, "None": None, "XXXX": None}


def test_put_back_posts_the_spec_then_waits_until_it_serves(monkeypatch: pytest.MonkeyPatch, clock: Clock) -> None:
    ready = {"id": "w-new", "url": DECODE, "status": "ready", "is_healthy": True}
    transport = use(monkeypatch, listing(), Reply(202, b'{"status": "accepted"}', {}), listing(ready))
    spec = {"url": DECODE, "worker_type": "decode", "bootstrap_port": None}
    got = rollout.put_back(ROUTER, spec, KEY, timeout=5.0, interval=0.5)
    assert got == {"changed": True, "worker_id": "w-new", "seconds": 0.5}
    auth = {"Authorization": f"Bearer {KEY}"}
    assert transport.seen == [
        ("GET", "http://10.0.0.9:8080/workers", auth, 10.0, None),
        (
            "POST",
            "http://10.0.0.9:8080/workers",
            {"Content-Type": "application/json", **auth},
            10.0,
            b'{"url": "http://10.0.0.2:30001", "worker_type": "decode", "api_key": "sk-router-pinned"}',
        ),
        ("GET", "http://10.0.0.9:8080/workers", auth, 10.0, None),
    ]
    assert clock.sleeps == [0.5]
