"""The HTTP transport: answers and failures classified, never a body in an error.

One transport serves every HTTP call of the collection: the live readers (the engine adapters, sglang_engine_live,
and the router adapters, smg_live, one GET per endpoint; tests and the simulator pass their own Transport), the
rollout's calls to the router and the engines (sglang_rollout), and the programs that run where Ansible is not
installed (the drift exporter, the verify snapshot, benchmarks).
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

# ---------------------------------------------------------------- transport


@dataclass(frozen=True)
class Reply:
    """An HTTP answer: status, body (bytes) and headers. Error statuses are replies too."""

    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict, compare=False)  # Date and Server differ per answer


class TransportError(Exception):
    """No HTTP answer: `kind` is timeout, unreachable or tls."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


class Transport(Protocol):
    def get(self, url: str, headers: Mapping[str, str], timeout: float) -> Reply: ...


def classify(exc: BaseException) -> TransportError:
    """Map a urllib/socket/ssl failure to a TransportError."""
    reason = getattr(exc, "reason", exc)
    if isinstance(reason, (socket.timeout, TimeoutError)) or "timed out" in str(reason):
        return TransportError("timeout", "timed out")
    if isinstance(reason, ssl.SSLError):
        return TransportError("tls", f"TLS error: {reason}")
    return TransportError("unreachable", str(reason) or type(reason).__name__)


class UrllibTransport:
    """The standard library's HTTP client (Ansible's own is not installed where the drift exporter runs). It talks to
    servers on the host and in the fleet, never through a proxy."""

    def __init__(self, validate_certs: bool = True) -> None:
        self.validate_certs = validate_certs
        self._context: ssl.SSLContext | None = None

    def _tls(self) -> ssl.SSLContext:
        """Built on the first https request only: loading the CA store takes tens of milliseconds."""
        if self._context is None:
            self._context = ssl.create_default_context()
            if not self.validate_certs:
                self._context.check_hostname = False
                self._context.verify_mode = ssl.CERT_NONE
        return self._context

    def get(self, url: str, headers: Mapping[str, str], timeout: float) -> Reply:
        return self.request("GET", url, headers, timeout)

    def request(
        self, method: str, url: str, headers: Mapping[str, str], timeout: float, body: bytes | None = None
    ) -> Reply:
        request = urllib.request.Request(url, data=body, headers=dict(headers), method=method)
        context = self._tls() if url.startswith("https:") else None
        try:
            opener = urllib.request.build_opener(
                urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
            )
            with opener.open(request, timeout=timeout) as resp:
                return Reply(resp.status, resp.read(), dict(resp.headers.items()))
        except urllib.error.HTTPError as exc:
            return Reply(exc.code, exc.read() or b"", dict(exc.headers.items()) if exc.headers else {})
        except (urllib.error.URLError, OSError) as exc:
            raise classify(exc) from None
        except http.client.HTTPException as exc:  # another protocol on the port, or an answer cut short
            raise TransportError("malformed", f"not a whole HTTP answer ({type(exc).__name__})") from None


def probe(url: str, timeout: float = 5.0, transport: Transport | None = None) -> dict[str, Any]:
    """One GET of an endpoint on the host (a health or readiness check), reported as ansible.builtin.uri reports
    it: {url, status, json}; status -1 and msg when nothing answered."""
    try:
        reply = (transport or UrllibTransport()).get(url, {}, timeout)
    except TransportError as e:
        return {"url": url, "status": -1, "msg": f"{e.kind}: {e.reason}"}
    try:
        body = json.loads(reply.body) if reply.body else None
    except ValueError:
        body = None
    return {"url": url, "status": reply.status, "json": body if isinstance(body, dict) else None}


# ---------------------------------------------------------------- fetching


@dataclass
class Fetched:
    """One endpoint's outcome. `data` is parsed JSON (or text for /metrics); `problem` says what went wrong."""

    path: str
    status: int | None = None
    data: Any = None
    problem: str | None = None  # None | timeout | unreachable | tls | unauthorized | http | malformed | absent
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.problem is None


_REASONS = {401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 503: "Service Unavailable"}


def fetch(
    transport: Transport,
    base_url: str,
    path: str,
    *,
    api_key: str | None,
    timeout: float,
    as_text: bool = False,
    parse: Callable[[Any], Any] | None = None,
    error_body_ok: bool = False,
) -> Fetched:
    """GET one endpoint and parse it; `parse` reduces the JSON at once (so secrets never outlive this call).

    `error_body_ok`: a 5xx answer still carries the body to read (smg's /readiness says why it is not ready)."""
    headers = {"Accept": "text/plain" if as_text else "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    out = Fetched(path)
    try:
        reply = transport.get(base_url.rstrip("/") + path, headers, timeout)
    except TransportError as exc:
        out.problem, out.detail = exc.kind, exc.reason
        return out
    out.status = reply.status
    if reply.status in (401, 403):
        out.problem = "unauthorized"
        out.detail = f"{reply.status} {_REASONS[reply.status]}"
        return out
    if reply.status == 404:
        out.problem, out.detail = "absent", "404 Not Found"
        return out
    if reply.status >= 400 and not error_body_ok:
        out.problem, out.detail = "http", f"{reply.status} {_REASONS.get(reply.status, 'error')}"
        return out
    if as_text:
        out.data = reply.body.decode("utf-8", "replace")
        return out
    try:
        data = json.loads(reply.body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        out.problem = "malformed"
        out.detail = f"the body is not JSON ({type(exc).__name__} at {getattr(exc, 'pos', '?')})"
        return out
    try:
        out.data = parse(data) if parse else data
    except (TypeError, KeyError, AttributeError, ValueError) as exc:
        out.problem, out.detail = "malformed", f"unexpected JSON shape ({type(exc).__name__})"
    return out


def fetch_concurrently(calls: Mapping[str, Callable[[], Fetched]]) -> dict[str, Fetched]:
    """Run the fetch calls of one server in parallel threads."""
    with ThreadPoolExecutor(max_workers=max(1, len(calls))) as pool:
        futures = {name: pool.submit(call) for name, call in calls.items()}
        return {name: future.result() for name, future in futures.items()}


def describe(host: str, base_url: str, item: Fetched) -> str:
    """An error line that names the host and the endpoint; never a response body."""
    where = f"{host}: GET {base_url.rstrip('/')}{item.path}"
    hints = {
        "unauthorized": "the server requires an API key: pass api_key (the engine's --api-key)",
        "timeout": "no answer in time: raise timeout or check the server",
        "unreachable": "nothing answers there: is the unit running?",
    }
    hint = hints.get(item.problem or "", "")
    return f"{where}: {item.problem} ({item.detail})" + (f"; {hint}" if hint else "")


# ---------------------------------------------------------------- a read of one server


@dataclass
class ServerLive:
    """What one read of a server returns: reachability, errors, and the normalized live state (an engine's
    sglang_engine_live.EngineLive, or the router's readiness and workers)."""

    status: str = "ok"  # ok | unreachable | error
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    engine: Any = None
    router: dict[str, Any] | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    def snapshot(self) -> dict[str, Any]:
        """The live side of one server as the judge (sglang_drift.judge) and the report take it; `live` is the
        engine's effective envelope, null when no engine answered (and for the router, which reports no limits)."""
        engine = self.engine
        return {
            "status": self.status,
            "reachable": self.status != "unreachable",
            "version": engine.version if engine else None,
            "live": engine.effective if engine else None,
            "requested": engine.requested if engine else {},
            "sources": engine.sources if engine else {},
            "notes": engine.notes if engine else {},
            "load": engine.load if engine else {},
            "live_facts": engine.facts if engine else {},
            "latency": engine.latency if engine else {},
            "router": self.router,
            "errors": self.errors,
            "warnings_seen": self.warnings,
        }


def set_status(result: ServerLive, items: list[Fetched]) -> None:
    """Unreachable when no endpoint answered at all; error when any endpoint that matters failed."""
    problems = [i.problem for i in items if i.problem]
    if problems and all(p in ("timeout", "unreachable", "tls") for p in problems) and len(problems) == len(items):
        result.status = "unreachable"
    elif result.errors:
        result.status = "error"
