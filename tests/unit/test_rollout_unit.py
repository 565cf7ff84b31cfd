"""The drain-aware rollout steps (plugins/module_utils/sglang_rollout.py) against a scripted smg router and engine on
loopback: the exact requests each step sends, how it reads every answer, and its waits, timed on a fake clock.

The router and engine bodies below are synthetic, shaped as smg 1.13.0's worker API and SGLang 0.5.23's
/v1/loads and /generate answer them (the module's docstring; fixtures/loads_decode.json is SGLang's own body)."""

from __future__ import annotations

import copy
import json
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_rollout as rollout
from fakeclock import Clock
from loopback import closed_port, http_server, silent_port

KEY = "sk-router-unit"
PREFILL = "http://10.0.0.1:30000"
DECODE = "http://10.0.0.2:30001"
# A base path ending in X with a trailing slash: only slashes are trimmed before a path is added.
PREFIX = "/pool-X"
LOADS = Path(__file__).resolve().parent / "audit" / "fixtures" / "loads_decode.json"

# ---------------------------------------------------------------- a scripted HTTP peer and a fake clock

# status, body (bytes are sent as they are, anything else as JSON), extra response headers
Reply = tuple[int, Any, dict[str, str]]


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class Peer:
    """Answers each (method, path) from its list of replies in turn, repeating the last; anything else 404.
    Records every request."""

    def __init__(self, routes: dict[tuple[str, str], list[Reply]]) -> None:
        self.routes = {k: list(v) for k, v in routes.items()}
        self.seen: list[Seen] = []
        self.lock = threading.Lock()

    def answer(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Reply:
        with self.lock:
            self.seen.append(Seen(method, path, headers, body))
            replies = self.routes.get((method, path))
            if not replies:
                return 404, {"detail": "Not Found"}, {}
            return replies.pop(0) if len(replies) > 1 else replies[0]

    @property
    def calls(self) -> list[tuple[str, str]]:
        return [(s.method, s.path) for s in self.seen]

    def json_bodies(self, method: str) -> list[Any]:
        return [json.loads(s.body) for s in self.seen if s.method == method]


@contextmanager
def serve(peer: Peer) -> Iterator[str]:
    """`peer` on a free loopback port; yields its base URL."""

    def handle(method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes, dict[str, str]]:
        status, payload, extra = peer.answer(method, path, headers, body)
        return status, payload if isinstance(payload, bytes) else json.dumps(payload).encode(), extra

    with http_server(handle) as url:
        yield url


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(rollout, "time", fake)
    return fake


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, float]]:
    """(method, url, timeout) of every request the module opens; the request itself still goes out."""
    seen: list[tuple[str, str, float]] = []
    real = rollout.TRANSPORT.request

    def recording(method: str, url: str, headers: Any, timeout: float, body: bytes | None = None) -> Any:
        seen.append((method, url, timeout))
        return real(method, url, headers, timeout, body)

    monkeypatch.setattr(rollout.TRANSPORT, "request", recording)
    return seen


def worker(url: str, wid: str, status: str = "ready", healthy: bool = True, **extra: Any) -> dict[str, Any]:
    """One entry of smg's GET /workers list (synthetic)."""
    return {"id": wid, "url": url, "worker_type": "decode", "status": status, "is_healthy": healthy, **extra}


def listing(*items: dict[str, Any]) -> Reply:
    return 200, {"workers": list(items)}, {}


def loads_body(**patch: Any) -> dict[str, Any]:
    """SGLang's own /v1/loads body (fixtures/loads_decode.json) with rank 0's fields replaced by `patch`."""
    body = json.loads(LOADS.read_text())
    body.pop("_provenance", None)
    body["loads"][0].update(patch)
    return dict(body)


IDLE = {"num_running_reqs": 0, "num_waiting_reqs": 0}


# ---------------------------------------------------------------- one request


def test_a_plain_get_sends_no_body_and_no_key(opened: list[tuple[str, str, float]]) -> None:
    """Without body or key: no Content-Type, no Authorization; JSON answers parsed, default timeout 10 s."""
    peer = Peer({("GET", "/x"): [(200, {"a": [1, 2]}, {"X-Extra": "yes"})]})
    with serve(peer) as url:
        answer = rollout.call("GET", url + "/x")
    assert (answer.status, answer.body, answer.headers["X-Extra"]) == (200, {"a": [1, 2]}, "yes")
    assert peer.seen[0].body == b""
    assert "Content-Type" not in peer.seen[0].headers and "Authorization" not in peer.seen[0].headers
    assert opened == [("GET", url + "/x", 10.0)]


def test_a_post_sends_json_the_bearer_key_and_its_timeout(opened: list[tuple[str, str, float]]) -> None:
    peer = Peer({("POST", "/y"): [(201, {"ok": True}, {})]})
    with serve(peer) as url:
        answer = rollout.call("POST", url + "/y", KEY, {"url": DECODE, "n": 1}, 2.5)
    assert (answer.status, answer.body) == (201, {"ok": True})
    seen = peer.seen[0]
    assert json.loads(seen.body) == {"url": DECODE, "n": 1}
    assert seen.headers["Content-Type"] == "application/json"
    assert seen.headers["Authorization"] == f"Bearer {KEY}"
    assert opened == [("POST", url + "/y", 2.5)]


def test_an_empty_json_body_is_still_sent() -> None:
    """`{}` is a body (only None means none)."""
    peer = Peer({("POST", "/y"): [(200, b"", {})]})
    with serve(peer) as url:
        answer = rollout.call("POST", url + "/y", body={})
    assert peer.seen[0].body == b"{}" and peer.seen[0].headers["Content-Type"] == "application/json"
    assert answer.body is None


@pytest.mark.parametrize(
    ("status", "raw", "body"),
    [
        (503, b'{"error":"no_available_workers"}', {"error": "no_available_workers"}),
        (404, b"plain text", "plain text"),
        (500, b"\xffbad", "\ufffdbad"),
        (204, b"", None),
        (200, b"[1, 2]", [1, 2]),
    ],
    ids=["error-json", "error-text", "not-utf8", "empty", "json-list"],
)
def test_every_http_status_is_an_answer(status: int, raw: bytes, body: Any) -> None:
    """An HTTP error is returned, not raised, with its body (JSON, else text) and headers."""
    peer = Peer({("DELETE", "/z"): [(status, raw, {"Retry-After": "1"})]})
    with serve(peer) as url:
        answer = rollout.call("DELETE", url + "/z", KEY)
    assert (answer.status, answer.body, answer.headers.get("Retry-After")) == (status, body, "1")


def test_a_refused_connection_raises_os_error() -> None:
    with pytest.raises(OSError):
        rollout.call("GET", f"http://127.0.0.1:{closed_port()}/workers", timeout=0.5)


def test_a_silent_peer_times_out_after_the_given_timeout() -> None:
    with silent_port() as port, pytest.raises(OSError):
        rollout.call("GET", f"http://127.0.0.1:{port}/workers", timeout=0.05)


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("http://h:1", "http://h:1/", True),
        ("http://h:1//", "http://h:1", True),
        ("http://h:1", "http://h:2", False),
        ("http://hX", "http://h", False),
        ("http://h", "http://hX/", False),
    ],
)
def test_urls_compare_without_trailing_slashes(a: str, b: str, same: bool) -> None:
    assert rollout.same_url(a, b) is same


# ---------------------------------------------------------------- the router's worker list


def test_workers_lists_the_router_answer_with_the_key() -> None:
    items = [worker(PREFILL, "w-p", worker_type="prefill", bootstrap_port=8998), worker(DECODE, "w-d")]
    peer = Peer({("GET", PREFIX + "/workers"): [listing(*items)]})
    with serve(peer) as url:
        got = rollout.workers(url + PREFIX + "/", KEY)
    assert got == items
    assert peer.calls == [("GET", PREFIX + "/workers")]
    assert peer.seen[0].headers["Authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize(
    ("reply", "shown"),
    [
        ((500, {"workers": []}, {}), "500 {'workers': []}"),
        ((201, {"workers": []}, {}), "201 {'workers': []}"),
        ((200, [{"id": "w-d"}], {}), "200 [{'id': 'w-d'}]"),
        ((200, {"workers": {"w-d": DECODE}}, {}), f"200 {{'workers': {{'w-d': '{DECODE}'}}}}"),
        ((200, {}, {}), "200 {}"),
        ((401, b"x" * 400, {}), "401 " + "x" * 300),
    ],
    ids=["5xx", "201", "list", "workers-not-a-list", "no-workers", "long-body-cut"],
)
def test_workers_refuses_any_other_answer(reply: Reply, shown: str) -> None:
    peer = Peer({("GET", "/workers"): [reply]})
    with serve(peer) as url, pytest.raises(rollout.RolloutError) as err:
        rollout.workers(url)
    assert str(err.value) == f"GET {url}/workers answered {shown}"
    assert "Authorization" not in peer.seen[0].headers


def test_find_worker_matches_urls_loosely_and_takes_the_first() -> None:
    items = [worker(PREFILL, "w-p"), worker(DECODE + "/", "w-d1"), worker(DECODE, "w-d2"), {"id": "w-x"}]
    peer = Peer({("GET", "/workers"): [listing(*items)]})
    with serve(peer) as url:
        assert rollout.find_worker(url, DECODE, KEY) == items[1]
        assert rollout.find_worker(url, PREFILL + "/") == items[0]
        assert rollout.find_worker(url, "http://10.0.0.3:30001") is None
    assert [s.headers.get("Authorization") for s in peer.seen] == [f"Bearer {KEY}", None, None]


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        (None, False),
        ({"status": "ready", "is_healthy": True}, True),
        ({"status": "ready", "is_healthy": 1}, True),
        ({"status": "ready", "is_healthy": False}, False),
        ({"status": "ready"}, False),
        ({"status": "draining", "is_healthy": True}, False),
        ({"status": "pending", "is_healthy": False}, False),
        ({"is_healthy": True}, False),
    ],
)
def test_serving_means_ready_and_healthy(item: dict[str, Any] | None, expected: bool) -> None:
    assert rollout.serving(item) is expected


# ---------------------------------------------------------------- waiting


def test_poll_returns_the_first_true_value_and_the_seconds_taken(clock: Clock) -> None:
    answers: list[Any] = [None, 0, {"id": "w"}]
    value, seconds = rollout.poll(lambda: answers.pop(0), 10.0, 0.25, "x")
    assert (value, seconds, clock.sleeps) == ({"id": "w"}, 0.5, [0.25, 0.25])


def test_poll_answers_at_once_without_sleeping(clock: Clock) -> None:
    assert rollout.poll(lambda: "yes", 0.0, 0.25, "x") == ("yes", 0.0)
    assert clock.sleeps == []


@pytest.mark.parametrize(("timeout", "checks", "shown"), [(1.0, 3, "1"), (0.3, 2, "0.3"), (0.0, 1, "0")])
def test_poll_gives_up_once_the_timeout_is_reached(clock: Clock, timeout: float, checks: int, shown: str) -> None:
    """Checked at 0, 0.5, 1.0 s for a 1 s timeout: the check at the deadline is the last."""
    calls: list[int] = []

    def check() -> bool:
        calls.append(1)
        return False

    with pytest.raises(rollout.RolloutError) as err:
        rollout.poll(check, timeout, 0.5, "the thing happening")
    assert str(err.value) == f"the thing happening: not reached within {shown} s"
    assert len(calls) == checks and clock.sleeps == [0.5] * (checks - 1)


def test_poll_retries_connection_errors_and_names_the_last(clock: Clock) -> None:
    def check() -> bool:
        raise ConnectionRefusedError(111, "Connection refused")

    with pytest.raises(rollout.RolloutError) as err:
        rollout.poll(check, 1.0, 0.5, "up")
    assert str(err.value) == "up: not reached within 1 s (last error: [Errno 111] Connection refused)"
    assert clock.sleeps == [0.5, 0.5]


def test_poll_forgets_an_error_once_a_check_answers(clock: Clock) -> None:
    answers: list[Any] = [OSError("gone"), False]

    def check() -> Any:
        item = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(item, Exception):
            raise item
        return item

    with pytest.raises(rollout.RolloutError) as err:
        rollout.poll(check, 1.0, 0.5, "up")
    assert str(err.value) == "up: not reached within 1 s"


def test_poll_recovers_after_connection_errors(clock: Clock) -> None:
    answers: list[Any] = [OSError("gone"), TimeoutError("slow"), 7]

    def check() -> Any:
        item = answers.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    assert rollout.poll(check, 5.0, 0.5, "up") == (7, 1.0)


def test_poll_lets_other_errors_through(clock: Clock) -> None:
    def check() -> bool:
        raise rollout.RolloutError("nonsense")

    with pytest.raises(rollout.RolloutError, match=r"^nonsense$"):
        rollout.poll(check, 5.0, 0.5, "up")
    assert clock.sleeps == []


# ---------------------------------------------------------------- take out


def test_take_out_deletes_by_id_and_waits_until_the_router_dropped_it(
    clock: Clock, opened: list[tuple[str, str, float]]
) -> None:
    prefill = worker(PREFILL, "w-p", worker_type="prefill", bootstrap_port=8998)
    peer = Peer(
        {
            ("GET", PREFIX + "/workers"): [
                listing(prefill, worker(DECODE, "w-d")),
                listing(prefill, worker(DECODE, "w-d", status="draining")),
                listing(prefill, worker(DECODE, "w-d", status="draining")),
                listing(prefill),
            ],
            ("DELETE", PREFIX + "/workers/w-d"): [(202, {"status": "accepted"}, {})],
        }
    )
    with serve(peer) as url:
        out = rollout.take_out(url + PREFIX + "/", DECODE + "/", KEY, timeout=5.0, interval=0.12345)
    assert out == {"changed": True, "spec": {"url": DECODE, "worker_type": "decode"}, "seconds": 0.247}
    assert peer.calls == [
        ("GET", PREFIX + "/workers"),
        ("DELETE", PREFIX + "/workers/w-d"),
        *[("GET", PREFIX + "/workers")] * 3,
    ]
    assert all(s.headers.get("Authorization") == f"Bearer {KEY}" for s in peer.seen)
    assert peer.seen[1].body == b""
    assert clock.sleeps == [0.12345, 0.12345]
    assert {t for _, _, t in opened} == {10.0}


@pytest.mark.parametrize(
    ("listed", "spec"),
    [
        (
            worker(PREFILL, "w-1", worker_type="prefill", bootstrap_port=8998),
            {"url": PREFILL, "worker_type": "prefill", "bootstrap_port": 8998},
        ),
        (
            worker(PREFILL, "w-1", worker_type="prefill", bootstrap_port=0),
            {"url": PREFILL, "worker_type": "prefill", "bootstrap_port": 0},
        ),
        (worker(DECODE, "w-1", bootstrap_port=None), {"url": DECODE, "worker_type": "decode"}),
        ({"id": "w-1", "url": DECODE + "/"}, {"url": DECODE + "/", "worker_type": "regular"}),
    ],
    ids=["prefill-bootstrap", "bootstrap-zero", "no-bootstrap", "no-type"],
)
def test_take_out_keeps_the_spec_put_back_needs(clock: Clock, listed: dict[str, Any], spec: dict[str, Any]) -> None:
    peer = Peer({("GET", "/workers"): [listing(listed), listing()], ("DELETE", "/workers/w-1"): [(202, b"", {})]})
    with serve(peer) as url:
        out = rollout.take_out(url, str(listed["url"]), timeout=1.0, interval=0.5)
    assert out == {"changed": True, "spec": spec, "seconds": 0.0}
    assert "Authorization" not in peer.seen[1].headers


def test_take_out_of_a_worker_the_router_does_not_list_changes_nothing(clock: Clock) -> None:
    peer = Peer({("GET", "/workers"): [listing(worker(PREFILL, "w-p"))]})
    with serve(peer) as url:
        out = rollout.take_out(url, DECODE, KEY, timeout=1.0, interval=0.5)
    assert out == {"changed": False, "spec": None, "seconds": 0.0}
    assert peer.calls == [("GET", "/workers")] and clock.sleeps == []


@pytest.mark.parametrize(
    ("status", "ok"), [(200, True), (202, True), (201, False), (404, False), (409, False), (500, False)]
)
def test_take_out_accepts_only_200_or_202_to_its_delete(clock: Clock, status: int, ok: bool) -> None:
    peer = Peer(
        {
            ("GET", "/workers"): [listing(worker(DECODE, "w-d")), listing()],
            ("DELETE", "/workers/w-d"): [(status, {"error": "synthetic"}, {})],
        }
    )
    with serve(peer) as url:
        if ok:
            assert rollout.take_out(url, DECODE, KEY, timeout=1.0, interval=0.5)["changed"] is True
            return
        with pytest.raises(rollout.RolloutError) as err:
            rollout.take_out(url, DECODE, KEY, timeout=1.0, interval=0.5)
    assert str(err.value) == f"DELETE {url}/workers/w-d ({DECODE}) answered {status} {{'error': 'synthetic'}}"
    assert peer.calls == [("GET", "/workers"), ("DELETE", "/workers/w-d")]


def test_take_out_fails_when_the_router_keeps_the_worker(clock: Clock) -> None:
    peer = Peer(
        {
            ("GET", "/workers"): [listing(worker(DECODE, "w-d", status="draining"))],
            ("DELETE", "/workers/w-d"): [(202, b"", {})],
        }
    )
    with serve(peer) as url, pytest.raises(rollout.RolloutError) as err:
        rollout.take_out(url, DECODE, timeout=1.0, interval=0.5)
    assert str(err.value) == f"the router dropping worker {DECODE}: not reached within 1 s"
    assert peer.calls.count(("GET", "/workers")) == 4 and clock.sleeps == [0.5, 0.5]


def test_take_out_with_the_router_down_raises_os_error() -> None:
    with pytest.raises(OSError):
        rollout.take_out(f"http://127.0.0.1:{closed_port()}", DECODE, timeout=0.1, interval=0.05)


def test_take_out_and_put_back_wait_60_and_120_s_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default waits, every half second; the wait is named after the worker."""
    waits: list[tuple[float, float, str]] = []

    def fake_poll(check: Callable[[], Any], timeout: float, interval: float, what: str) -> tuple[Any, float]:
        waits.append((timeout, interval, what))
        return {"id": "w-d"}, 0.0

    monkeypatch.setattr(rollout, "poll", fake_poll)
    peer = Peer({("GET", "/workers"): [listing(worker(DECODE, "w-d"))], ("DELETE", "/workers/w-d"): [(202, b"", {})]})
    with serve(peer) as url:
        rollout.take_out(url, DECODE)
        rollout.put_back(url, {"url": DECODE})
    assert waits == [
        (60.0, 0.5, f"the router dropping worker {DECODE}"),
        (120.0, 0.5, f"the router reporting worker {DECODE} ready and healthy"),
    ]


# ---------------------------------------------------------------- put back


def test_put_back_registers_the_spec_and_waits_until_it_serves(
    clock: Clock, opened: list[tuple[str, str, float]]
) -> None:
    peer = Peer(
        {
            ("GET", PREFIX + "/workers"): [
                listing(),
                listing(worker(DECODE, "w-new", status="pending", healthy=False)),
                listing(worker(DECODE, "w-new", status="ready", healthy=False)),
                listing(worker(DECODE, "w-new")),
            ],
            ("POST", PREFIX + "/workers"): [(202, {"status": "accepted"}, {})],
        }
    )
    spec = {"url": DECODE, "worker_type": "decode", "bootstrap_port": None}
    with serve(peer) as url:
        out = rollout.put_back(url + PREFIX + "/", spec, KEY, timeout=5.0, interval=0.12345)
    assert out == {"changed": True, "worker_id": "w-new", "seconds": 0.37}
    assert peer.calls == [
        ("GET", PREFIX + "/workers"),
        ("POST", PREFIX + "/workers"),
        *[("GET", PREFIX + "/workers")] * 3,
    ]
    assert peer.json_bodies("POST") == [{"url": DECODE, "worker_type": "decode", "api_key": KEY}]
    assert all(s.headers["Authorization"] == f"Bearer {KEY}" for s in peer.seen)
    post = peer.seen[1]
    assert post.headers["Content-Type"] == "application/json"
    assert clock.sleeps == [0.12345] * 3
    assert {t for _, _, t in opened} == {10.0}


def test_put_back_without_a_key_sends_none() -> None:
    peer = Peer(
        {("GET", "/workers"): [listing(), listing(worker(PREFILL, "w-p"))], ("POST", "/workers"): [(200, b"", {})]}
    )
    spec = {"url": PREFILL, "worker_type": "prefill", "bootstrap_port": 8998}
    with serve(peer) as url:
        out = rollout.put_back(url, spec, timeout=1.0, interval=0.01)
    assert out["changed"] is True and out["worker_id"] == "w-p"
    assert peer.json_bodies("POST") == [spec]
    assert all("Authorization" not in s.headers for s in peer.seen)


def test_put_back_of_a_serving_worker_changes_nothing(clock: Clock) -> None:
    peer = Peer({("GET", "/workers"): [listing(worker(DECODE + "/", "w-d"))]})
    with serve(peer) as url:
        out = rollout.put_back(url, {"url": DECODE}, KEY, timeout=1.0, interval=0.5)
    assert out == {"changed": False, "worker_id": "w-d", "seconds": 0.0}
    assert peer.calls == [("GET", "/workers")]


def test_put_back_waits_out_a_draining_copy_the_router_refuses_twice(clock: Clock) -> None:
    """A draining copy is listed (no POST); once gone, 409 while the router still holds it, then 202."""
    peer = Peer(
        {
            ("GET", "/workers"): [
                listing(worker(DECODE, "w-old", status="draining")),
                listing(),
                listing(),
                listing(worker(DECODE, "w-new")),
            ],
            ("POST", "/workers"): [(409, {"error": "exists"}, {}), (202, b"", {})],
        }
    )
    with serve(peer) as url:
        out = rollout.put_back(url, {"url": DECODE, "worker_type": "decode"}, KEY, timeout=5.0, interval=0.5)
    assert out == {"changed": True, "worker_id": "w-new", "seconds": 1.5}
    assert peer.calls == [
        ("GET", "/workers"),
        ("GET", "/workers"),
        ("POST", "/workers"),
        ("GET", "/workers"),
        ("POST", "/workers"),
        ("GET", "/workers"),
    ]


@pytest.mark.parametrize(
    ("status", "ok"),
    [(200, True), (201, True), (202, True), (409, True), (203, False), (400, False), (404, False), (500, False)],
)
def test_put_back_accepts_these_answers_to_its_post(clock: Clock, status: int, ok: bool) -> None:
    peer = Peer(
        {
            ("GET", "/workers"): [listing(), listing(worker(DECODE, "w-d"))],
            ("POST", "/workers"): [(status, {"error": "synthetic"}, {})],
        }
    )
    with serve(peer) as url:
        if ok:
            assert rollout.put_back(url, {"url": DECODE}, KEY, timeout=1.0, interval=0.5)["changed"] is True
            return
        with pytest.raises(rollout.RolloutError) as err:
            rollout.put_back(url, {"url": DECODE}, KEY, timeout=1.0, interval=0.5)
    assert str(err.value) == f"POST {url}/workers ({DECODE}) answered {status} {{'error': 'synthetic'}}"
    assert clock.sleeps == []


def test_put_back_fails_when_the_worker_never_serves(clock: Clock) -> None:
    peer = Peer({("GET", "/workers"): [listing(worker(DECODE, "w-d", status="ready", healthy=False))]})
    with serve(peer) as url, pytest.raises(rollout.RolloutError) as err:
        rollout.put_back(url, {"url": DECODE}, timeout=1.0, interval=0.5)
    assert str(err.value) == f"the router reporting worker {DECODE} ready and healthy: not reached within 1 s"
    assert peer.calls == [("GET", "/workers")] * 3


# ---------------------------------------------------------------- the engine: requests in flight, a real generation


def test_in_flight_sums_running_queued_and_disaggregation_queues(opened: list[tuple[str, str, float]]) -> None:
    body = loads_body(num_running_reqs=12, num_waiting_reqs=3)
    body["loads"][0]["disaggregation"].update(decode_prealloc_queue_reqs=4, decode_transfer_queue_reqs=None)
    rank1 = copy.deepcopy(body["loads"][0]) | {"dp_rank": 1, "num_running_reqs": 1, "num_waiting_reqs": None}
    rank1["disaggregation"] = {"mode": "decode", "decode_retracted_queue_reqs": 2, "kv_transfer_latency_ms": 50.0}
    rank2 = copy.deepcopy(rank1) | {"dp_rank": 2, "num_running_reqs": 0, "disaggregation": None}
    body["loads"] += [rank1, rank2]
    path = "/v1/loads?include=core,disagg,queues"
    peer = Peer({("GET", PREFIX + path): [(200, body, {})]})
    with serve(peer) as url:
        assert rollout.in_flight(url + PREFIX + "/", KEY) == 12 + 3 + 4 + 1 + 2
    assert peer.calls == [("GET", PREFIX + path)]
    assert peer.seen[0].headers["Authorization"] == f"Bearer {KEY}"
    assert opened[0][2] == 10.0


@pytest.mark.parametrize(
    ("running", "waiting", "queue", "total"),
    [(0, 0, 0, 0), (5, 0, 0, 5), (0, 5, 0, 5), (0, 0, 5, 5), (2, 3, 4, 9)],
)
def test_in_flight_counts_each_kind(running: int, waiting: int, queue: int, total: int) -> None:
    body = loads_body(num_running_reqs=running, num_waiting_reqs=waiting)
    body["loads"][0]["disaggregation"]["prefill_inflight_queue_reqs"] = queue
    peer = Peer({("GET", "/v1/loads?include=core,disagg,queues"): [(200, body, {})]})
    with serve(peer) as url:
        assert rollout.in_flight(url) == total
    assert "Authorization" not in peer.seen[0].headers


@pytest.mark.parametrize(
    ("reply", "shown"),
    [
        ((401, {"error": "Unauthorized"}, {}), "401 {'error': 'Unauthorized'}"),
        ((503, b"y" * 400, {}), "503 " + "y" * 300),
    ],
)
def test_in_flight_refuses_an_error_answer(reply: Reply, shown: str) -> None:
    peer = Peer({("GET", "/v1/loads?include=core,disagg,queues"): [reply]})
    with serve(peer) as url, pytest.raises(rollout.RolloutError) as err:
        rollout.in_flight(url)
    assert str(err.value) == f"GET {url}/v1/loads answered {shown}"


def test_wait_idle_polls_the_engine_until_nothing_is_in_flight(clock: Clock) -> None:
    path = "/v1/loads?include=core,disagg,queues"
    busy = [(200, loads_body(num_running_reqs=n, num_waiting_reqs=0), {}) for n in (3, 2)]
    peer = Peer({("GET", path): [*busy, (200, loads_body(**IDLE), {})]})
    with serve(peer) as url:
        out = rollout.wait_idle(url, KEY, timeout=5.0, interval=0.12345)
    assert out == {"in_flight_at_start": 3, "seconds": 0.247}
    assert peer.calls == [("GET", path)] * 3 and clock.sleeps == [0.12345, 0.12345]
    assert all(s.headers["Authorization"] == f"Bearer {KEY}" for s in peer.seen)


def test_wait_idle_of_an_idle_engine_returns_at_once(clock: Clock) -> None:
    peer = Peer({("GET", "/v1/loads?include=core,disagg,queues"): [(200, loads_body(**IDLE), {})]})
    with serve(peer) as url:
        assert rollout.wait_idle(url, timeout=5.0, interval=0.5) == {"in_flight_at_start": 0, "seconds": 0.0}
    assert clock.sleeps == [] and "Authorization" not in peer.seen[0].headers


def test_wait_idle_names_what_is_left_when_the_time_is_up(clock: Clock) -> None:
    path = "/v1/loads?include=core,disagg,queues"
    busy = [(200, loads_body(num_running_reqs=n, num_waiting_reqs=0), {}) for n in (3, 2)]
    peer = Peer({("GET", path): busy})
    with serve(peer) as url, pytest.raises(rollout.RolloutError) as err:
        rollout.wait_idle(url, timeout=1.0, interval=0.5)
    assert str(err.value) == (
        f"{url} still has 2 request(s) in flight after 1 s (it had 3); raise sglang_rollout_drain_timeout or wait "
        "for the long requests to end"
    )
    assert len(peer.calls) == 3 and clock.sleeps == [0.5, 0.5]


def test_wait_idle_waits_120_s_by_default(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, str]] = []

    def busy(engine: str, key: str = "") -> int:
        asked.append((engine, key))
        return 1

    monkeypatch.setattr(rollout, "in_flight", busy)
    with pytest.raises(rollout.RolloutError, match=r"^e still has 1 request\(s\) in flight after 120 s \(it had 1\)"):
        rollout.wait_idle("e", KEY)
    assert clock.sleeps == [0.5] * 240 and asked == [("e", KEY)] * 241


GENERATE_OK = {"text": "x", "meta_info": {"completion_tokens": 1, "finish_reason": {"type": "length", "length": 1}}}


@pytest.mark.parametrize(
    ("role", "bootstrap"),
    [("decode", True), ("prefill", True), ("regular", False), ("router", False)],
)
def test_probe_generation_asks_for_one_token_through_the_engine_alone(
    monkeypatch: pytest.MonkeyPatch, opened: list[tuple[str, str, float]], role: str, bootstrap: bool
) -> None:
    """A PD engine gets SGLang's health-check bootstrap host and a room below 2**63."""
    clock = Clock(step=0.0012345)
    monkeypatch.setattr(rollout, "time", clock)
    monkeypatch.setattr(uuid, "uuid4", lambda: uuid.UUID(int=2**63 + 2**62 + 5))
    peer = Peer({("POST", PREFIX + "/generate"): [(200, GENERATE_OK, {})]})
    with serve(peer) as url:
        out = rollout.probe_generation(url + PREFIX + "/", role, KEY)
    assert out == {"status": 200, "seconds": 0.001}
    body: dict[str, Any] = {"text": "rollout probe", "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
    if bootstrap:
        body |= {"bootstrap_host": "2.2.2.2", "bootstrap_room": 2**62 + 5}
    assert peer.json_bodies("POST") == [body]
    assert peer.seen[0].headers["Authorization"] == f"Bearer {KEY}"
    assert opened == [("POST", url + PREFIX + "/generate", 60.0)]


def test_probe_generation_passes_its_timeout() -> None:
    with silent_port() as port, pytest.raises(OSError):
        rollout.probe_generation(f"http://127.0.0.1:{port}", "decode", timeout=0.05)


@pytest.mark.parametrize(
    ("role", "reply"),
    [
        ("decode", (200, {"meta_info": {"completion_tokens": 3, "finish_reason": "stop"}}, {})),
        ("decode", (200, {"meta_info": {"completion_tokens": 1, "finish_reason": None}}, {})),
        ("prefill", (200, {"meta_info": {"completion_tokens": 0, "finish_reason": {"type": "length"}}}, {})),
        ("prefill", (200, {"text": ""}, {})),
        ("prefill", (200, b"synthetic text answer", {})),
    ],
    ids=["decode-stop-string", "decode-no-finish", "prefill-no-token", "prefill-no-meta", "prefill-text"],
)
def test_probe_generation_accepts(role: str, reply: Reply) -> None:
    peer = Peer({("POST", "/generate"): [reply]})
    with serve(peer) as url:
        assert rollout.probe_generation(url, role)["status"] == 200
    assert "Authorization" not in peer.seen[0].headers


@pytest.mark.parametrize(
    ("role", "reply", "shown"),
    [
        ("decode", (503, {"error": "busy"}, {}), "answered 503 {'error': 'busy'}"),
        ("decode", (500, b"z" * 400, {}), "answered 500 " + "z" * 300),
        (
            "prefill",
            (200, {"meta_info": {"completion_tokens": 1, "finish_reason": {"type": "abort"}}}, {}),
            "answered 200 {'meta_info': {'completion_tokens': 1, 'finish_reason': {'type': 'abort'}}}",
        ),
        (
            "decode",
            (200, {"meta_info": {"completion_tokens": 0, "finish_reason": {"type": "length"}}}, {}),
            "answered 200 without a generated token: "
            "{'meta_info': {'completion_tokens': 0, 'finish_reason': {'type': 'length'}}}",
        ),
        (
            "regular",
            (200, {"meta_info": {"completion_tokens": None}}, {}),
            "answered 200 without a generated token: {'meta_info': {'completion_tokens': None}}",
        ),
        ("decode", (200, b"text", {}), "answered 200 without a generated token: text"),
    ],
    ids=["5xx", "5xx-long-cut", "abort", "decode-no-token", "no-token-count", "not-json"],
)
def test_probe_generation_refuses(role: str, reply: Reply, shown: str) -> None:
    peer = Peer({("POST", "/generate"): [reply]})
    with serve(peer) as url, pytest.raises(rollout.RolloutError) as err:
        rollout.probe_generation(url, role)
    assert str(err.value) == f"POST {url}/generate {shown}"
