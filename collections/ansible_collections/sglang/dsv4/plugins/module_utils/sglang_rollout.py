"""The drain-aware rollout: take one engine out of the smg router, wait until it has no request in flight, and,
once it has been restarted and really generates, put it back and wait until the router routes to it again.

smg 1.13.0's worker API (its own source, model_gateway/src/server.rs and worker/service.rs; checked against the
installed router in tests/component/sim/test_rollout.py):
- `GET /workers` lists `{"workers": [{"id", "url", "worker_type", "bootstrap_port", "status", "is_healthy", ...}]}`;
- `DELETE /workers/{id}` answers 202: the worker turns `draining` (no new request is routed to it) for its
  drain settle window (5 s by default), then leaves the list;
- `POST /workers` `{"url", "worker_type", "bootstrap_port", "api_key"}` answers 202 and registers it again
  (409 while a worker with that URL is still listed); it serves once `status` is `ready` and `is_healthy`.
With no worker of a role left, the router answers new requests 503 `no_available_workers` with `Retry-After: 1`.

The rollout plan (what the fleet carries while each server is out) is the planner's: sglang_plan.rollout_plan.

Only the standard library: the Ansible modules run this on the hosts; HTTP goes through the collection's one
transport (sglang_http).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .sglang_http import TransportError, UrllibTransport

TRANSPORT = UrllibTransport()

# The argument spec of the options every module that waits on a server shares (sglang_engine_gate,
# sglang_router_worker; documented by the doc fragment sglang.wait).
WAIT_ARGS: dict[str, dict[str, Any]] = {
    "api_key": {"type": "str", "default": "", "no_log": True},
    "timeout": {"type": "float", "default": 120.0},
    "interval": {"type": "float", "default": 0.5},
}

# SGLang's own health-check bootstrap host: a PD engine generates without a partner (fake KV sender/receiver).
FAKE_BOOTSTRAP_HOST = "2.2.2.2"
PD_ROLES = ("prefill", "decode")


class RolloutError(RuntimeError):
    """A rollout step that did not reach its state in time, or an answer that makes no sense."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any
    headers: Mapping[str, str]


def call(method: str, url: str, key: str = "", body: Any = None, timeout: float = 10.0) -> Answer:
    """One HTTP request; an HTTP error status is an answer, a connection failure raises OSError."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"} if data is not None else {}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    try:
        reply = TRANSPORT.request(method, url, headers, timeout, data)
    except TransportError as e:
        raise (TimeoutError if e.kind == "timeout" else ConnectionError)(f"{method} {url}: {e.reason}") from None
    try:
        parsed = json.loads(reply.body) if reply.body else None
    except ValueError:
        parsed = reply.body.decode("utf-8", "replace")
    return Answer(reply.status, parsed, reply.headers)


def same_url(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


def workers(router: str, key: str = "") -> list[dict[str, Any]]:
    answer = call("GET", router.rstrip("/") + "/workers", key)
    if answer.status != 200 or not isinstance(answer.body, dict) or not isinstance(answer.body.get("workers"), list):
        raise RolloutError(f"GET {router}/workers answered {answer.status} {str(answer.body)[:300]}")
    return list(answer.body["workers"])


def find_worker(router: str, url: str, key: str = "") -> dict[str, Any] | None:
    return listed_workers(router, [url], key)[url]


def listed_workers(router: str, urls: Sequence[str], key: str = "") -> dict[str, dict[str, Any] | None]:
    """What one GET /workers lists for each of `urls` (None: not listed)."""
    found = workers(router, key)
    return {url: next((w for w in found if same_url(str(w.get("url", "")), url)), None) for url in urls}


def serving(worker: Mapping[str, Any] | None) -> bool:
    return worker is not None and worker.get("status") == "ready" and bool(worker.get("is_healthy"))


def poll(check: Callable[[], Any], timeout: float, interval: float, what: str) -> tuple[Any, float]:
    """Call `check` until it returns something true, at most `timeout` seconds; returns it and the seconds taken."""
    started = time.monotonic()
    last: Any = None
    while True:
        error: OSError | None
        try:
            last = check()
        except OSError as e:
            last = None
            error = e
        else:
            error = None
        if last:
            return last, time.monotonic() - started
        if time.monotonic() - started >= timeout:
            detail = f" (last error: {error})" if error else ""
            raise RolloutError(f"{what}: not reached within {timeout:g} s{detail}")
        time.sleep(interval)


def take_out(router: str, url: str, key: str = "", timeout: float = 60.0, interval: float = 0.5) -> dict[str, Any]:
    """Remove the worker at `url` from the router and wait until it is gone (the router drains it first).
    Returns what put_back needs (its spec), whether anything changed and the seconds it took."""
    worker = find_worker(router, url, key)
    if worker is None:
        return {"changed": False, "spec": None, "seconds": 0.0}
    spec = {"url": worker["url"], "worker_type": worker.get("worker_type", "regular")}
    if worker.get("bootstrap_port") is not None:
        spec["bootstrap_port"] = worker["bootstrap_port"]
    answer = call("DELETE", f"{router.rstrip('/')}/workers/{worker['id']}", key)
    if answer.status not in (200, 202):
        raise RolloutError(f"DELETE {router}/workers/{worker['id']} ({url}) answered {answer.status} {answer.body}")
    _answer, seconds = poll(
        lambda: find_worker(router, url, key) is None, timeout, interval, f"the router dropping worker {url}"
    )
    return {"changed": True, "spec": spec, "seconds": round(seconds, 3)}


def put_back(
    router: str, spec: Mapping[str, Any], key: str = "", timeout: float = 120.0, interval: float = 0.5
) -> dict[str, Any]:
    """Register the worker again whenever the router does not list it (also once a draining copy, which the router
    refuses to register twice, has left) and wait until the router reports it ready and healthy."""
    url = str(spec["url"])
    body = {k: v for k, v in spec.items() if v is not None}
    if key:
        body["api_key"] = key
    posted: list[int] = []

    def registered_and_serving() -> dict[str, Any] | None:
        worker = find_worker(router, url, key)
        if worker is None:
            answer = call("POST", router.rstrip("/") + "/workers", key, body)
            if answer.status not in (200, 201, 202, 409):
                raise RolloutError(f"POST {router}/workers ({url}) answered {answer.status} {answer.body}")
            posted.append(answer.status)
            return None
        return worker if serving(worker) else None

    worker, seconds = poll(
        registered_and_serving, timeout, interval, f"the router reporting worker {url} ready and healthy"
    )
    return {"changed": bool(posted), "worker_id": worker["id"], "seconds": round(seconds, 3)}


def in_flight(engine: str, key: str = "") -> int:
    """Requests the engine runs or queues now (its /v1/loads, summed over DP ranks)."""
    # Imported here: the readers that probe a URL (sglang_host_info) need none of the engine adapters.
    from .sglang_engine_live import reduce_loads

    answer = call("GET", engine.rstrip("/") + "/v1/loads?include=core,disagg,queues", key)
    if answer.status != 200:
        raise RolloutError(f"GET {engine}/v1/loads answered {answer.status} {str(answer.body)[:300]}")
    loads = reduce_loads(answer.body)
    disagg = sum(
        int(v or 0)
        for x in answer.body["loads"]
        for k, v in (x.get("disaggregation") or {}).items()
        if k.endswith("_queue_reqs")
    )
    return int(loads["running"]) + int(loads["queued"]) + disagg


def wait_idle(engine: str, key: str = "", timeout: float = 120.0, interval: float = 0.5) -> dict[str, Any]:
    """Wait until the engine has no request in flight; fails naming how many are left when the time is up."""
    started = time.monotonic()
    first = left = in_flight(engine, key)
    while left:
        if time.monotonic() - started >= timeout:
            raise RolloutError(
                f"{engine} still has {left} request(s) in flight after {timeout:g} s (it had {first}); raise "
                "sglang_rollout_drain_timeout or wait for the long requests to end"
            )
        time.sleep(interval)
        left = in_flight(engine, key)
    return {"in_flight_at_start": first, "seconds": round(time.monotonic() - started, 3)}


def probe_generation(engine: str, role: str, key: str = "", timeout: float = 60.0) -> dict[str, Any]:
    """A real generation through this engine alone: /generate, one new token; a PD engine gets SGLang's own
    health-check bootstrap host so it needs no partner. Raises unless the engine answers 200 with a token."""
    body: dict[str, Any] = {"text": "rollout probe", "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
    if role in PD_ROLES:
        body.update(bootstrap_host=FAKE_BOOTSTRAP_HOST, bootstrap_room=uuid.uuid4().int % (2**63))
    started = time.monotonic()
    answer = call("POST", engine.rstrip("/") + "/generate", key, body, timeout)
    meta = answer.body.get("meta_info", {}) if isinstance(answer.body, dict) else {}
    finish = meta.get("finish_reason") or {}
    if answer.status != 200 or (isinstance(finish, dict) and finish.get("type") == "abort"):
        raise RolloutError(f"POST {engine}/generate answered {answer.status} {str(answer.body)[:300]}")
    if role != "prefill" and int(meta.get("completion_tokens") or 0) < 1:
        raise RolloutError(f"POST {engine}/generate answered 200 without a generated token: {answer.body}")
    return {"status": answer.status, "seconds": round(time.monotonic() - started, 3)}
