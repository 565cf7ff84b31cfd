"""The live reader's rules, value by value: what goes over the wire, how each HTTP outcome is classified, which
source wins for each effective limit, how multi-rank bodies are summed, and the smg defaults for router limits.

Bodies said to be SGLang's come from fixtures/ (made by SGLang 0.5.23's code, see fixtures/README.md). Every
other body here is synthetic: written by hand in the shape of those fixtures (or of smg's, which is Rust and
never ran), and marked as such where it is built.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import ipaddress
import json
import socket
import ssl
import threading
import urllib.error
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils import smg_live as live_module
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_drift import worker_drift
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_engine_live import (
    IGNORED,
    INDEX_K_DTYPE_SOURCE,
    _typed,
    normalize_engine,
    parse_metrics,
    read_engine,
    reduce_loads,
    reduce_models,
    reduce_server_info,
)
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_http import (
    Fetched,
    Reply,
    TransportError,
    UrllibTransport,
    classify,
    describe,
    fetch,
)
from ansible_collections.sglang.dsv4.plugins.module_utils.smg_live import (
    ROUTER_DEFAULTS,
    read_router,
    reduce_workers,
    router_effective,
)
from audit_helpers import SECRET, fixture_body
from loopback import Handler, closed_port, http_server, silent_port

NOT_FOUND = b'{"detail":"Not Found"}'  # FastAPI's 404 body, as SGLang's server answers an unknown path
UNAUTHORIZED = b'{"error":"Unauthorized"}'  # sglang/srt/utils/auth.py


def js(data: Any) -> bytes:
    return json.dumps(data).encode()


def engine_bodies() -> dict[str, tuple[int, bytes]]:
    """SGLang's own bodies (fixtures/) for the four engine endpoints."""
    return {
        "/server_info": (200, js(fixture_body("server_info_decode.json"))),
        "/v1/models": (200, js(fixture_body("models.json"))),
        "/v1/loads": (200, js(fixture_body("loads_decode.json"))),
        "/metrics": (200, fixture_body("metrics_decode.txt").encode()),
    }


def router_bodies() -> dict[str, tuple[int, bytes]]:
    """The synthetic smg bodies of fixtures/ (hand-written in smg 1.13.0's shape)."""
    return {
        "/readiness": (200, js(fixture_body("router_readiness.json"))),
        "/workers": (200, js(fixture_body("router_workers.json"))),
    }


def answering(routes: Mapping[str, tuple[int, bytes]], seen: list[tuple[str, str, dict[str, str]]]) -> Handler:
    """A loopback handler that records (method, path, headers) and answers from `routes` (404 otherwise)."""

    def handle(method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        seen.append((method, path, headers))
        return routes.get(path, (404, NOT_FOUND))

    return handle


class Recorder:
    """A transport that records each call's exact arguments and answers from a table (Reply or TransportError)."""

    def __init__(self, answers: Mapping[str, Reply | TransportError] | None = None) -> None:
        self.answers = answers or {}
        self.calls: list[tuple[str, dict[str, str], float]] = []
        self.lock = threading.Lock()

    def get(self, url: str, headers: Mapping[str, str], timeout: float) -> Reply:
        with self.lock:
            self.calls.append((url, dict(headers), timeout))
        answer = self.answers.get("/" + url.split("/", 3)[3], Reply(404, NOT_FOUND))
        if isinstance(answer, TransportError):
            raise answer
        return answer


# ---------------------------------------------------------------- the standard-library transport over loopback


def test_get_sends_a_get_with_the_given_headers_and_returns_status_and_body() -> None:
    seen: list[tuple[str, str, dict[str, str]]] = []
    with http_server(answering({"/v1/models": (200, b'{"data": []}')}, seen)) as url:
        reply = UrllibTransport().get(f"{url}/v1/models", {"Accept": "application/json", "X-Probe": "7"}, 5)
    assert reply == Reply(200, b'{"data": []}')
    [(method, path, headers)] = seen
    assert (method, path) == ("GET", "/v1/models")
    assert headers["Accept"] == "application/json"
    assert headers["X-Probe"] == "7"


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (401, UNAUTHORIZED),
        (403, b'{"error":"Forbidden"}'),  # synthetic
        (404, NOT_FOUND),
        (500, b"Internal Server Error"),  # synthetic
        (503, b'{"status":"not ready"}'),  # synthetic
        (503, b""),  # synthetic: an error status with an empty body
    ],
)
def test_an_error_status_is_a_reply_with_its_body(status: int, body: bytes) -> None:
    with http_server(answering({"/x": (status, body)}, [])) as url:
        assert UrllibTransport().get(f"{url}/x", {}, 5) == Reply(status, body)


def test_the_timeout_reaches_the_socket() -> None:
    with silent_port() as port, pytest.raises(TransportError) as caught:
        UrllibTransport().get(f"http://127.0.0.1:{port}/server_info", {}, 0.2)
    assert (caught.value.kind, caught.value.reason) == ("timeout", "timed out")


def test_a_refused_connection_raises_unreachable() -> None:
    with pytest.raises(TransportError) as caught:
        UrllibTransport().get(f"http://127.0.0.1:{closed_port()}/health", {}, 2)
    assert caught.value.kind == "unreachable"
    assert "Connection refused" in caught.value.reason


@contextlib.contextmanager
def raw_server(payload: bytes) -> Iterator[str]:
    """A loopback socket that answers every connection with `payload` (not necessarily HTTP), then closes it."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    def answer() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(payload)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        listener.close()
        thread.join(5)


def test_a_connection_closed_before_any_answer_is_unreachable() -> None:
    with raw_server(b"") as url:
        item = fetch(UrllibTransport(), url, "/server_info", api_key=None, timeout=5)
    assert (item.problem, item.detail) == ("unreachable", "Remote end closed connection without response")


@pytest.mark.parametrize(
    ("payload", "kind"),
    [
        (b"SSH-2.0-OpenSSH_9.6\r\n", "BadStatusLine"),  # something other than HTTP listens on the port
        (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{", "IncompleteRead"),  # cut off mid-body
    ],
    ids=["not-http", "truncated"],
)
def test_a_broken_answer_is_reported_not_raised(payload: bytes, kind: str) -> None:
    with raw_server(payload) as url:
        item = fetch(UrllibTransport(), url, "/server_info", api_key=None, timeout=5)
        result = read_engine(UrllibTransport(), url, "decode", timeout=5, host="h", metrics=False)
    assert (item.problem, item.detail) == ("malformed", f"not a whole HTTP answer ({kind})")
    assert result.status == "error"


@pytest.fixture(scope="module")
def tls_context(tmp_path_factory: pytest.TempPathFactory) -> ssl.SSLContext:
    """A server-side TLS context with a fresh self-signed certificate for 127.0.0.1 (made here, per run)."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .sign(key, hashes.SHA256())
    )
    folder: Path = tmp_path_factory.mktemp("tls")
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "cert.pem", folder / "key.pem")
    return context


def test_validate_certs_false_accepts_a_self_signed_server(tls_context: ssl.SSLContext) -> None:
    transport = UrllibTransport(validate_certs=False)
    with http_server(answering({"/health": (200, b"ok")}, []), tls=tls_context) as url:
        assert url.startswith("https://")
        assert transport.get(f"{url}/health", {}, 5) == Reply(200, b"ok")
        assert transport.get(f"{url}/health", {}, 5) == Reply(200, b"ok")  # the context is built once, reused


def test_certificates_are_verified_by_default(tls_context: ssl.SSLContext) -> None:
    with http_server(answering({"/health": (200, b"ok")}, []), tls=tls_context) as url:
        item = fetch(UrllibTransport(), url, "/health", api_key=None, timeout=5, as_text=True)
    assert item.problem == "tls"
    assert item.detail.startswith("TLS error: [SSL: CERTIFICATE_VERIFY_FAILED]"), item.detail


# ---------------------------------------------------------------- classification of transport failures


def test_transport_error_carries_kind_and_reason() -> None:
    error = TransportError("tls", "TLS error: handshake")
    assert (error.kind, error.reason, str(error)) == ("tls", "TLS error: handshake", "TLS error: handshake")


@pytest.mark.parametrize(
    ("exc", "kind", "reason"),
    [
        (TimeoutError(), "timeout", "timed out"),  # the type decides, whatever the text
        (urllib.error.URLError(TimeoutError()), "timeout", "timed out"),
        (OSError("connect: operation timed out"), "timeout", "timed out"),  # the text decides
        (ConnectionRefusedError(111, "Connection refused"), "unreachable", "[Errno 111] Connection refused"),
        (
            urllib.error.URLError(ConnectionRefusedError(111, "Connection refused")),
            "unreachable",
            "[Errno 111] Connection refused",
        ),
        (urllib.error.URLError("Name or service not known"), "unreachable", "Name or service not known"),
        (urllib.error.URLError(ConnectionResetError()), "unreachable", "ConnectionResetError"),
        (ssl.SSLError(1, "wrong version number"), "tls", f"TLS error: {ssl.SSLError(1, 'wrong version number')}"),
    ],
)
def test_classify(exc: BaseException, kind: str, reason: str) -> None:
    error = classify(exc)
    assert (error.kind, error.reason) == (kind, reason)


# ---------------------------------------------------------------- fetch: one endpoint, every outcome


@pytest.mark.parametrize(
    ("path", "status", "body", "problem", "detail", "data"),
    [
        ("/v1/models", 200, b'{"data": []}', None, "", {"data": []}),
        ("/v1/models", 401, UNAUTHORIZED, "unauthorized", "401 Unauthorized", None),
        ("/v1/models", 403, b"{}", "unauthorized", "403 Forbidden", None),
        ("/v1/models", 404, NOT_FOUND, "absent", "404 Not Found", None),
        ("/v1/models", 400, b"{}", "http", "400 error", None),
        ("/v1/models", 402, b"{}", "http", "402 error", None),
        ("/v1/models", 405, b"{}", "http", "405 error", None),
        ("/v1/models", 500, b"{}", "http", "500 error", None),
        ("/v1/models", 503, b"{}", "http", "503 Service Unavailable", None),
        # smg answers /readiness 503 with a JSON reason: a readable answer, not a failure (synthetic body).
        ("/readiness", 503, b'{"status":"not ready"}', None, "", {"status": "not ready"}),
        ("/readiness", 404, NOT_FOUND, "absent", "404 Not Found", None),
        ("/readiness", 401, UNAUTHORIZED, "unauthorized", "401 Unauthorized", None),
        ("/v1/models", 200, b"not json", "malformed", "the body is not JSON (JSONDecodeError at 0)", None),
        ("/v1/models", 200, b'{"data": [1,', "malformed", "the body is not JSON (JSONDecodeError at 12)", None),
        ("/v1/models", 200, b'{"id": "\xff"}', "malformed", "the body is not JSON (UnicodeDecodeError at ?)", None),
    ],
)
def test_fetch_classifies_each_http_outcome(
    path: str, status: int, body: bytes, problem: str | None, detail: str, data: Any
) -> None:
    with http_server(answering({path: (status, body)}, [])) as url:
        # The router adapter reads /readiness with error_body_ok (smg_live.read_router).
        item = fetch(UrllibTransport(), url, path, api_key=None, timeout=5, error_body_ok=path == "/readiness")
    assert (item.path, item.status, item.problem, item.detail, item.data) == (path, status, problem, detail, data)
    assert item.ok is (problem is None)


@pytest.mark.parametrize(
    ("as_text", "api_key", "headers"),
    [
        (False, None, {"Accept": "application/json"}),
        (True, None, {"Accept": "text/plain"}),
        (False, "", {"Accept": "application/json"}),
        (False, SECRET, {"Accept": "application/json", "Authorization": f"Bearer {SECRET}"}),
        (True, SECRET, {"Accept": "text/plain", "Authorization": f"Bearer {SECRET}"}),
    ],
)
def test_fetch_sends_accept_and_bearer_and_the_timeout(
    as_text: bool, api_key: str | None, headers: dict[str, str]
) -> None:
    transport = Recorder({"/metrics": Reply(200, b"{}")})
    fetch(transport, "http://h:1", "/metrics", api_key=api_key, timeout=0.75, as_text=as_text)
    assert transport.calls == [("http://h:1/metrics", headers, 0.75)]


def test_fetch_sends_the_headers_over_the_wire() -> None:
    seen: list[tuple[str, str, dict[str, str]]] = []
    with http_server(answering({"/metrics": (200, b"")}, seen)) as url:
        fetch(UrllibTransport(), url, "/metrics", api_key=SECRET, timeout=5, as_text=True)
    [(_, _, headers)] = seen
    assert (headers["Accept"], headers["Authorization"]) == ("text/plain", f"Bearer {SECRET}")


def test_fetch_joins_a_base_url_with_trailing_slashes() -> None:
    transport = Recorder({"/v1/models": Reply(200, b"{}")})
    item = fetch(transport, "http://GPU-X//", "/v1/models", api_key=None, timeout=1)
    assert transport.calls[0][0] == "http://GPU-X/v1/models"
    assert item.data == {}


def test_fetch_as_text_keeps_the_body_and_replaces_bad_bytes() -> None:
    transport = Recorder({"/metrics": Reply(200, b"sglang:num_running_reqs 1\n\xff")})
    item = fetch(transport, "http://h:1", "/metrics", api_key=None, timeout=1, as_text=True)
    assert (item.problem, item.data) == (None, "sglang:num_running_reqs 1\n\ufffd")


def test_fetch_json_by_default_and_a_parser_reduces_it() -> None:
    transport = Recorder({"/v1/models": Reply(200, js(fixture_body("models.json")))})
    raw = fetch(transport, "http://h:1", "/v1/models", api_key=None, timeout=1)
    reduced = fetch(transport, "http://h:1", "/v1/models", api_key=None, timeout=1, parse=reduce_models)
    assert raw.data == fixture_body("models.json")
    assert reduced.data == {"id": "deepseek-v4", "max_model_len": 131072}


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b"[]", "unexpected JSON shape (TypeError)"),  # synthetic: a list where an object belongs
        (b'{"object": "list"}', "unexpected JSON shape (KeyError)"),  # synthetic: no "data"
        (b'{"data": {"id": "m"}}', "unexpected JSON shape (TypeError)"),  # synthetic: data not a list
    ],
)
def test_fetch_reports_a_body_of_the_wrong_shape(body: bytes, detail: str) -> None:
    item = fetch(
        Recorder({"/v1/models": Reply(200, body)}),
        "http://h:1",
        "/v1/models",
        api_key=None,
        timeout=1,
        parse=reduce_models,
    )
    assert (item.status, item.problem, item.detail, item.data) == (200, "malformed", detail, None)


@pytest.mark.parametrize("kind", ["timeout", "unreachable", "tls"])
def test_fetch_passes_a_transport_failure_on(kind: str) -> None:
    transport = Recorder({"/server_info": TransportError(kind, f"why {kind}")})
    item = fetch(transport, "http://h:1", "/server_info", api_key=None, timeout=1)
    assert (item.path, item.status, item.problem, item.detail, item.data) == (
        "/server_info",
        None,
        kind,
        f"why {kind}",
        None,
    )


# ---------------------------------------------------------------- error lines


@pytest.mark.parametrize(
    ("problem", "detail", "line"),
    [
        (
            "unauthorized",
            "401 Unauthorized",
            "gpu7: GET http://10.0.0.7:30001/server_info: unauthorized (401 Unauthorized); "
            "the server requires an API key: pass api_key (the engine's --api-key)",
        ),
        (
            "timeout",
            "timed out",
            "gpu7: GET http://10.0.0.7:30001/server_info: timeout (timed out); "
            "no answer in time: raise timeout or check the server",
        ),
        (
            "unreachable",
            "[Errno 111] Connection refused",
            "gpu7: GET http://10.0.0.7:30001/server_info: unreachable ([Errno 111] Connection refused); "
            "nothing answers there: is the unit running?",
        ),
        ("tls", "TLS error: x", "gpu7: GET http://10.0.0.7:30001/server_info: tls (TLS error: x)"),
        (
            "http",
            "503 Service Unavailable",
            "gpu7: GET http://10.0.0.7:30001/server_info: http (503 Service Unavailable)",
        ),
        ("absent", "404 Not Found", "gpu7: GET http://10.0.0.7:30001/server_info: absent (404 Not Found)"),
    ],
)
def test_describe(problem: str, detail: str, line: str) -> None:
    assert describe("gpu7", "http://10.0.0.7:30001//", Fetched("/server_info", problem=problem, detail=detail)) == line


def test_describe_strips_only_slashes_from_the_base_url() -> None:
    item = Fetched("/v1/loads", problem="http", detail="500 error")
    assert describe("gpu7", "http://GPU-X/", item) == "gpu7: GET http://GPU-X/v1/loads: http (500 error)"


# ---------------------------------------------------------------- body reducers


# The keys of SGLang's decode /server_info that the reduction keeps: envelope keys (no secret) and scheduler info.
REDUCED_KEYS = {
    "attention_backend",
    "attn_dp_size",
    "base_gpu_id",
    "chunked_prefill_size",
    "context_length",
    "cuda_graph_bs_decode",
    "cuda_graph_bs_prefill",
    "cuda_graph_config",
    "cuda_graph_max_bs_decode",
    "cuda_graph_max_bs_prefill",
    "disable_radix_cache",
    "disaggregation_bootstrap_port",
    "disaggregation_ib_device",
    "disaggregation_mode",
    "disaggregation_transfer_backend",
    "dp_size",
    "enable_cache_report",
    "enable_deepseek_v4_fp4_indexer",
    "enable_metrics",
    "has_internal_states",
    "host",
    "kv_cache_dtype",
    "log_level",
    "max_prefill_tokens",
    "max_queued_requests",
    "max_req_input_len",
    "max_running_requests",
    "max_total_num_tokens",
    "max_total_tokens",
    "mem_fraction_static",
    "model_path",
    "page_size",
    "port",
    "rank0",
    "served_model_name",
    "status",
    "swa_full_tokens_ratio",
    "tp_size",
    "trust_remote_code",
    "version",
    "watchdog_timeout",
}


def test_reduce_server_info_keeps_exactly_the_envelope_and_scheduler_fields() -> None:
    body = fixture_body("server_info_decode.json")
    reduced = reduce_server_info(body)
    assert set(reduced) == REDUCED_KEYS
    assert {k: reduced[k] for k in REDUCED_KEYS - {"rank0", "has_internal_states"}} == {
        k: body[k] for k in REDUCED_KEYS - {"rank0", "has_internal_states"}
    }
    assert reduced["rank0"] == {
        "effective_max_running_requests_per_dp": 64,
        "memory_usage": body["internal_states"][0]["memory_usage"],
        "disaggregation_mode": "decode",
    }  # SGLang's rank state has no env_vars (not exposed) and no dsv4_index_k_dtype (the fork's field)
    assert reduced["has_internal_states"] is True


@pytest.mark.parametrize(
    ("states", "rank0"),
    [
        # synthetic: two ranks; only the first one's state is kept
        ([{"dsv4_index_k_dtype": "bf16", "x": 1}, {"dsv4_index_k_dtype": "fp8"}], {"dsv4_index_k_dtype": "bf16"}),
        ([], {}),
        (["not a rank"], {}),
        ({"0": {"dsv4_index_k_dtype": "bf16"}}, {}),
        (None, {}),
    ],
)
def test_reduce_server_info_keeps_rank_0_of_a_list(states: Any, rank0: dict[str, Any]) -> None:
    reduced = reduce_server_info({"version": "0.5.23", "internal_states": states})
    assert reduced == {"version": "0.5.23", "rank0": rank0, "has_internal_states": bool(rank0)}


def test_reduce_server_info_keeps_only_the_envelope_environment() -> None:
    body = {
        "internal_states": [{"env_vars": {"SGLANG_API_KEY": SECRET, "SGLANG_DSV4_BF16_INDEX_K": "1", "PATH": "/x"}}]
    }
    assert reduce_server_info(body)["rank0"] == {"env_vars": {"SGLANG_DSV4_BF16_INDEX_K": "1"}}


@pytest.mark.parametrize("body", [[], "server_info", None])
def test_reduce_server_info_refuses_a_non_object(body: Any) -> None:
    with pytest.raises(TypeError, match=r"^server_info is not an object$"):
        reduce_server_info(body)


@pytest.mark.parametrize(
    ("data", "reduced"),
    [
        ([{"id": "a", "max_model_len": 4096}, {"id": "b", "max_model_len": 8192}], {"id": "a", "max_model_len": 4096}),
        ([{"id": "a"}], {"id": "a", "max_model_len": None}),
        ([], {"id": None, "max_model_len": None}),
    ],
)
def test_reduce_models_reads_the_first_card(data: list[Any], reduced: dict[str, Any]) -> None:
    assert reduce_models({"object": "list", "data": data}) == reduced  # synthetic model lists


def test_reduce_models_refuses_data_that_is_not_a_list() -> None:
    with pytest.raises(TypeError, match=r"^data is not a list$"):
        reduce_models({"data": {"id": "a"}})


def test_reduce_loads_of_sglangs_single_rank_body() -> None:
    assert reduce_loads(fixture_body("loads_decode.json")) == {
        "version": "0.5.23",
        "running": 12,
        "queued": 3,
        "used_tokens": 245760,
        "token_usage": 0.022,
        "max_total_num_tokens": 11159040,
        "max_running_requests": 64,
        "ranks": 1,
    }


def test_reduce_loads_sums_counts_over_ranks_and_takes_the_worst_usage() -> None:
    """Synthetic three-rank body (SGLang's rank fields, hand-set values; some fields null or missing)."""
    body = {
        "version": "0.5.23",
        "loads": [
            {"num_running_reqs": 5, "num_waiting_reqs": 2, "num_used_tokens": 1000, "token_usage": 0.25,
             "max_total_num_tokens": None, "max_running_requests": None},
            {"num_running_reqs": None, "num_waiting_reqs": 4, "num_used_tokens": None, "token_usage": None,
             "max_total_num_tokens": 5000, "max_running_requests": 32},
            {"num_running_reqs": "7", "num_used_tokens": 24, "token_usage": 0.5, "max_total_num_tokens": 6000,
             "max_running_requests": "16"},
        ],
    }  # fmt: skip
    assert reduce_loads(body) == {
        "version": "0.5.23",
        "running": 12,
        "queued": 6,
        "used_tokens": 1024,
        "token_usage": 0.5,
        "max_total_num_tokens": 5000,
        "max_running_requests": 48,
        "ranks": 3,
    }


@pytest.mark.parametrize(
    ("loads", "usage"),
    [
        ([{"token_usage": 0.75}, {"token_usage": 0.125}], 0.75),
        ([{"token_usage": None}], 0.0),
    ],
)
def test_reduce_loads_token_usage_is_the_highest_rank(loads: list[dict[str, Any]], usage: float) -> None:
    assert reduce_loads({"loads": loads})["token_usage"] == usage  # synthetic ranks


def test_reduce_loads_of_no_ranks() -> None:
    assert reduce_loads({"loads": []}) == {
        "version": None,
        "running": 0,
        "queued": 0,
        "used_tokens": 0,
        "token_usage": 0.0,
        "max_total_num_tokens": None,
        "max_running_requests": None,
        "ranks": 0,
    }


def test_reduce_loads_refuses_loads_that_are_not_a_list() -> None:
    with pytest.raises(TypeError, match=r"^loads is not a list$"):
        reduce_loads({"loads": {"num_running_reqs": 1}})


def test_parse_metrics_of_sglangs_page() -> None:
    """The page's HELP/TYPE lines and its other gauges (page_size) are skipped."""
    assert parse_metrics(fixture_body("metrics_decode.txt")) == {
        "sglang:num_running_reqs": 12.0,
        "sglang:num_queue_reqs": 3.0,
        "sglang:token_usage": 0.022,
        "sglang:num_used_tokens": 245760.0,
        "sglang:max_total_num_tokens": 11159040.0,
        "sglang:context_len": 131072.0,
    }


# Synthetic: a page with two ranks, written in the fixture's line format, plus unlabelled and foreign lines.
TWO_RANK_PAGE = """\
# HELP sglang:num_running_reqs The number of running requests.
garbage line
sglang:num_running_reqs{tp_rank="0"} 3.0
sglang:num_running_reqs{tp_rank="1"} 4.0
sglang:num_queue_reqs{tp_rank="0"} 1.0
sglang:num_queue_reqs 2.0
sglang:num_used_tokens{tp_rank="0"} 100.0
sglang:num_used_tokens{tp_rank="1"} 28.0
sglang:token_usage{tp_rank="0"} 0.5
sglang:token_usage{tp_rank="1"} 0.25
sglang:max_total_num_tokens{tp_rank="0"} 1000.0
sglang:max_total_num_tokens{tp_rank="1"} 2000.0
sglang:context_len{tp_rank="1"} 4096.0
sglang:context_len{tp_rank="0"} 8192.0
sglang:page_size{tp_rank="0"} 256.0
"""


def test_parse_metrics_sums_counts_over_ranks_and_keeps_the_first_capacity() -> None:
    assert parse_metrics(TWO_RANK_PAGE) == {
        "sglang:num_running_reqs": 7.0,
        "sglang:num_queue_reqs": 3.0,
        "sglang:num_used_tokens": 128.0,
        "sglang:token_usage": 0.5,
        "sglang:max_total_num_tokens": 1000.0,
        "sglang:context_len": 4096.0,
    }


def test_parse_metrics_takes_the_highest_usage_in_any_order() -> None:
    page = 'sglang:token_usage{tp_rank="0"} 0.25\nsglang:token_usage{tp_rank="1"} 0.75\n'  # synthetic
    assert parse_metrics(page) == {"sglang:token_usage": 0.75}
    assert parse_metrics("# nothing\n") == {}


@pytest.mark.parametrize(
    ("name", "value", "typed"),
    [
        ("context_length", "131072", 131072),  # size
        ("max_running_requests", 64.0, 64),  # int
        ("port", "30001", 30001),
        ("context_length", "128k", "128k"),  # not a number: kept as given
        ("max_running_requests", None, None),
        ("mem_fraction_static", "0.83", 0.83),
        ("trust_remote_code", 1, True),
        ("trust_remote_code", 0, False),
        ("cuda_graph_bs_decode", ["1", 2, 4.0], [1, 2, 4]),
        ("cuda_graph_bs_decode", 8, 8),  # not a list: kept as given
        ("kv_cache_dtype", "fp8_e4m3", "fp8_e4m3"),
        ("log_level", 3, "3"),
    ],
)
def test_typed_coerces_by_the_keys_kind(name: str, value: Any, typed: Any) -> None:
    got = _typed(name, value)
    assert got == typed
    assert type(got) is type(typed)


# ---------------------------------------------------------------- normalize_engine: which source wins


def sglang_decode_live() -> dict[str, Any]:
    """normalize_engine over all four of SGLang's decode bodies (fixtures/), as read_engine reduces them."""
    live = normalize_engine(
        "decode",
        reduce_server_info(fixture_body("server_info_decode.json")),
        reduce_models(fixture_body("models.json")),
        reduce_loads(fixture_body("loads_decode.json")),
        parse_metrics(fixture_body("metrics_decode.txt")),
    )
    return dataclasses.asdict(live)


def test_normalize_engine_of_sglangs_decode_bodies() -> None:
    config = fixture_body("server_info_decode.json")["cuda_graph_config"]
    assert sglang_decode_live() == {
        "effective": {
            "model_path": "/models/DeepSeek-V4-Flash",
            "served_model_name": "deepseek-v4",
            "host": "127.0.0.1",
            "port": 30001,
            "context_length": 131072,
            "max_running_requests": 64,
            "max_queued_requests": IGNORED,
            "chunked_prefill_size": 8192,
            "max_prefill_tokens": 16384,
            "mem_fraction_static": 0.83,
            "page_size": 256,
            "kv_cache_dtype": "fp8_e4m3",
            "swa_full_tokens_ratio": 0.1,
            "tp_size": 4,
            "dp_size": 1,
            "base_gpu_id": 4,
            "cuda_graph_max_bs_decode": 64,  # echoed at the top level
            # SGLang echoes null for these at the top level: the captured sizes come from cuda_graph_config.
            "cuda_graph_max_bs_prefill": config["prefill"]["max_bs"],
            "cuda_graph_bs_decode": config["decode"]["bs"],
            "cuda_graph_bs_prefill": config["prefill"]["bs"],
            "disaggregation_mode": "decode",
            "disaggregation_transfer_backend": "mooncake",
            "disaggregation_ib_device": "mlx5_0",
            "disable_radix_cache": True,
            "attention_backend": "dsv4",
            "watchdog_timeout": 600.0,
            "enable_metrics": True,
            "enable_cache_report": True,
            "trust_remote_code": True,
            "log_level": "info",
            "enable_deepseek_v4_fp4_indexer": False,
            "max_total_tokens": 11159040,
        },
        "requested": {
            "context_length": 131072,
            "max_total_tokens": None,
            "max_running_requests": 64,
            "max_queued_requests": None,
        },
        "sources": {
            "context_length": "/v1/models max_model_len",
            "max_total_tokens": "/server_info max_total_num_tokens",
            "max_running_requests": "/server_info internal_states[0].effective_max_running_requests_per_dp",
            "max_queued_requests": "SGLang semantics",
        },
        "notes": {
            "max_queued_requests": "/server_info echoes None, but SGLang checks the queue limit only when "
            "disaggregation_mode is null (this engine: decode)",
            "bf16_index_k": "the engine does not report its index-key dtype",
        },
        "load": {"running": 12, "queued": 3, "used_tokens": 245760, "token_usage": 0.022, "source": "/v1/loads"},
        "facts": {
            "attn_dp_size": 1,
            "disaggregation_mode": "decode",
            "max_req_input_len": 131066,
            "token_capacity": 11159040,
            "token_capacity_swa": 1115904,
            "kvcache_gb": 81.072,
            "weight_gb": 35.128,
            "status": "ready",
        },
        "version": "0.5.23",
        "latency": {},  # read_engine parses it from /metrics' text (parse_latency)
    }


def test_normalize_engine_of_nothing() -> None:
    assert dataclasses.asdict(normalize_engine("prefill", None, None, None, None)) == {
        "effective": {},
        "requested": {
            "context_length": None,
            "max_total_tokens": None,
            "max_running_requests": None,
            "max_queued_requests": None,
        },
        "sources": {},
        "notes": {
            "context_length": "no source: /v1/models and /metrics gave no context length",
            "max_total_tokens": "no source reported the KV pool size",
            "bf16_index_k": "the engine does not report its index-key dtype",
        },
        "load": {},
        "facts": {
            "attn_dp_size": 1,
            "disaggregation_mode": "null",
            "max_req_input_len": None,
            "token_capacity": None,
            "token_capacity_swa": None,
            "kvcache_gb": None,
            "weight_gb": None,
            "status": None,
        },
        "version": None,
        "latency": {},
    }


def loads_of(**fields: Any) -> dict[str, Any]:
    """A reduced /v1/loads with no ranks, then `fields` (synthetic)."""
    return {**reduce_loads({"loads": []}), **fields}


def outcome(live: Any, key: str) -> tuple[Any, str | None, str | None]:
    """(effective value or 'absent', source, note) of one key."""
    return live.effective.get(key, "absent"), live.sources.get(key), live.notes.get(key)


ECHO_NULL = "/server_info echoes null (not passed): the model default applies"


@pytest.mark.parametrize(
    ("echoed", "models", "metrics", "expected"),
    [
        (131072, {"max_model_len": 65536}, {"sglang:context_len": 32768.0}, (65536, "/v1/models max_model_len", None)),
        (None, {"max_model_len": 65536}, {}, (65536, "/v1/models max_model_len", ECHO_NULL)),
        (
            131072,
            {"max_model_len": None},
            {"sglang:context_len": 32768.0},
            (32768, "/metrics sglang:context_len", None),
        ),
        (None, None, {"sglang:context_len": 32768.0}, (32768, "/metrics sglang:context_len", ECHO_NULL)),
        (131072, {}, {}, (131072, "/server_info context_length (echoed argument)", None)),
        ("131072", None, {}, (131072, "/server_info context_length (echoed argument)", None)),
        (None, None, {}, ("absent", None, "no source: /v1/models and /metrics gave no context length")),
    ],
)
def test_context_length_prefers_models_then_metrics_then_the_echo(
    echoed: Any, models: dict[str, Any] | None, metrics: dict[str, float], expected: tuple[Any, Any, Any]
) -> None:
    """Synthetic reduced bodies: only the fields the rule reads."""
    live = normalize_engine("decode", {"context_length": echoed}, models, None, metrics)
    assert outcome(live, "context_length") == expected
    assert live.requested["context_length"] == (None if echoed is None else 131072)


POOL_SOURCES = (
    "/server_info max_total_num_tokens",
    "/server_info internal_states[0].memory_usage.token_capacity",
    "/v1/loads max_total_num_tokens",
    "/metrics sglang:max_total_num_tokens",
)


@pytest.mark.parametrize("first", range(5))
def test_the_kv_pool_comes_from_the_first_source_that_reports_it(first: int) -> None:
    """Sources 0..3 each report a distinct size (synthetic); those before `first` report nothing."""
    values = [1000 + i if i >= first else None for i in range(4)]
    info = {
        "max_total_tokens": 999,
        "max_total_num_tokens": values[0],
        "rank0": {"memory_usage": {"token_capacity": values[1]}},
    }
    loads = loads_of(max_total_num_tokens=values[2])
    metrics = {} if values[3] is None else {"sglang:max_total_num_tokens": float(values[3])}
    live = normalize_engine("decode", info, None, loads, metrics)
    if first < 4:
        assert outcome(live, "max_total_tokens") == (1000 + first, POOL_SOURCES[first], None)
    else:  # the echoed --max-total-tokens is no measurement of the pool
        assert outcome(live, "max_total_tokens") == ("absent", None, "no source reported the KV pool size")
    assert live.requested["max_total_tokens"] == 999


PER_DP = "/server_info internal_states[0].effective_max_running_requests_per_dp"


@pytest.mark.parametrize(
    ("info", "loads", "expected"),
    [
        (
            {"attn_dp_size": 4, "max_running_requests": 64, "rank0": {"effective_max_running_requests_per_dp": 12}},
            {"max_running_requests": 40},
            (48, PER_DP, None),
        ),
        (
            {"max_running_requests": 64, "rank0": {"effective_max_running_requests_per_dp": 12}},
            None,
            (12, PER_DP, None),
        ),
        ({"max_running_requests": 64}, {"max_running_requests": 40}, (40, "/v1/loads max_running_requests", None)),
        (
            {"max_running_requests": 64},
            {"max_running_requests": None},
            (
                64,
                "/server_info max_running_requests (echoed argument)",
                "echoed argument only: the scheduler may apply less",
            ),
        ),
        ({"max_running_requests": None}, None, ("absent", None, None)),
    ],
)
def test_max_running_requests_prefers_the_scheduler_then_loads_then_the_echo(
    info: dict[str, Any], loads: dict[str, Any] | None, expected: tuple[Any, Any, Any]
) -> None:
    """Synthetic reduced bodies; the per-DP figure is multiplied by the attention DP size."""
    live = normalize_engine("decode", info, None, None if loads is None else loads_of(**loads), None)
    assert outcome(live, "max_running_requests") == expected
    assert live.facts["attn_dp_size"] == info.get("attn_dp_size", 1)


@pytest.mark.parametrize(
    ("info", "mode"),
    [
        ({"disaggregation_mode": "prefill", "rank0": {"disaggregation_mode": "decode"}}, "prefill"),
        ({"disaggregation_mode": None, "rank0": {"disaggregation_mode": "decode"}}, "decode"),
        ({"rank0": {"disaggregation_mode": None}}, "null"),
    ],
)
def test_the_disaggregation_mode_fact(info: dict[str, Any], mode: str) -> None:
    assert normalize_engine("decode", info, None, None, None).facts["disaggregation_mode"] == mode


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        (
            {"disaggregation_mode": "decode", "max_queued_requests": 10},
            (IGNORED, "SGLang semantics", "/server_info echoes 10, but SGLang checks the queue limit only when "
             "disaggregation_mode is null (this engine: decode)"),
        ),
        (
            {"rank0": {"disaggregation_mode": "prefill"}, "max_queued_requests": 10},
            (IGNORED, "SGLang semantics", "/server_info echoes 10, but SGLang checks the queue limit only when "
             "disaggregation_mode is null (this engine: prefill)"),
        ),
        ({"disaggregation_mode": "null", "max_queued_requests": 10}, (10, None, None)),
        ({"disaggregation_mode": "decode"}, ("absent", None, None)),
    ],
)  # fmt: skip
def test_the_queue_limit_is_ignored_in_pd_mode(info: dict[str, Any], expected: tuple[Any, Any, Any]) -> None:
    live = normalize_engine("decode", info, None, None, None)
    assert outcome(live, "max_queued_requests") == expected
    assert live.requested["max_queued_requests"] == info.get("max_queued_requests")


def test_requested_and_effective_hold_typed_echoes_and_never_a_secret() -> None:
    info = {
        "api_key": SECRET,
        "context_length": "4096",
        "max_running_requests": "8",
        "tp_size": "2",
        "log_level": "info",
    }
    live = normalize_engine("prefill", info, None, None, None)
    assert live.requested == {
        "context_length": 4096,
        "max_total_tokens": None,
        "max_running_requests": 8,
        "max_queued_requests": None,
    }
    assert live.effective == {"context_length": 4096, "max_running_requests": 8, "tp_size": 2, "log_level": "info"}
    assert SECRET not in json.dumps(dataclasses.asdict(live))


@pytest.mark.parametrize(
    ("info", "version"),
    [({"version": "0.5.23"}, "0.5.23"), ({"version": None}, "0.5.22"), ({}, "0.5.22")],
)
def test_version_falls_back_to_loads(info: dict[str, Any], version: str) -> None:
    assert normalize_engine("decode", info, None, loads_of(version="0.5.22"), None).version == version


def test_facts_come_from_rank_0_memory_usage() -> None:
    info = {
        "attn_dp_size": 2,
        "status": "ready",
        "max_req_input_len": 4090,
        "rank0": {"memory_usage": {"token_capacity": 7, "token_capacity_swa": 3, "kvcache": 1.5, "weight": 2.5}},
    }
    assert normalize_engine("decode", info, None, None, None).facts == {
        "attn_dp_size": 2,
        "disaggregation_mode": "null",
        "max_req_input_len": 4090,
        "token_capacity": 7,
        "token_capacity_swa": 3,
        "kvcache_gb": 1.5,
        "weight_gb": 2.5,
        "status": "ready",
    }
    info["rank0"] = {"memory_usage": "n/a"}  # not an object: no memory facts
    facts = normalize_engine("decode", info, None, None, None).facts
    assert (facts["token_capacity"], facts["kvcache_gb"]) == (None, None)


@pytest.mark.parametrize(
    ("top", "config", "expected"),
    [
        (
            {"cuda_graph_max_bs_decode": 32, "cuda_graph_bs_decode": [1, 2]},
            {"decode": {"max_bs": 64, "bs": [1, 2, 4]}},
            {"cuda_graph_max_bs_decode": 32, "cuda_graph_bs_decode": [1, 2]},
        ),
        (
            {"cuda_graph_max_bs_decode": None, "cuda_graph_bs_decode": None},
            {"decode": {"max_bs": "64", "bs": ["1", 2]}},
            {"cuda_graph_max_bs_decode": 64, "cuda_graph_bs_decode": [1, 2]},
        ),
        (
            {},
            {"decode": None, "prefill": {"max_bs": 16, "bs": [8, 16]}},
            {"cuda_graph_max_bs_prefill": 16, "cuda_graph_bs_prefill": [8, 16]},
        ),
        ({}, {"decode": {"max_bs": None, "bs": "1,2"}}, {}),
        ({}, [{"decode": {"max_bs": 8}}], {}),
    ],
)
def test_cuda_graph_sizes_fall_back_to_the_graph_config(
    top: dict[str, Any], config: Any, expected: dict[str, Any]
) -> None:
    """Synthetic: the echoed flags win unless null; cuda_graph_config fills them per phase."""
    live = normalize_engine("decode", {**top, "cuda_graph_config": config}, None, None, None)
    assert {k: v for k, v in live.effective.items() if k.startswith("cuda_graph")} == expected


@pytest.mark.parametrize(
    ("rank0", "expected"),
    [
        ({"dsv4_index_k_dtype": "bf16"}, (True, INDEX_K_DTYPE_SOURCE, "the engine stores bf16 index keys")),
        (
            {"dsv4_index_k_dtype": "fp8", "env_vars": {"SGLANG_DSV4_BF16_INDEX_K": "1"}},
            (False, INDEX_K_DTYPE_SOURCE, "the engine stores fp8 index keys"),
        ),
        ({"env_vars": {"SGLANG_DSV4_BF16_INDEX_K": "1"}}, (True, "/server_info internal_states[0].env_vars", None)),
        ({"env_vars": {"SGLANG_DSV4_BF16_INDEX_K": 1}}, (True, "/server_info internal_states[0].env_vars", None)),
        ({"env_vars": {"SGLANG_DSV4_BF16_INDEX_K": "0"}}, (False, "/server_info internal_states[0].env_vars", None)),
        ({"env_vars": {}}, ("absent", None, "the engine does not report its index-key dtype")),
        (
            {"env_vars": None, "dsv4_index_k_dtype": None},
            ("absent", None, "the engine does not report its index-key dtype"),
        ),
    ],
)
def test_index_key_dtype_prefers_the_engines_report_then_its_environment(
    rank0: dict[str, Any], expected: tuple[Any, Any, Any]
) -> None:
    live = normalize_engine("decode", {"rank0": rank0}, None, None, None)
    assert outcome(live, "bf16_index_k") == expected


@pytest.mark.parametrize(
    ("loads", "metrics", "load"),
    [
        (
            {"running": 1, "queued": 2, "used_tokens": 3, "token_usage": 0.5, "ranks": 1},
            {"sglang:num_running_reqs": 9.0},
            {"running": 1, "queued": 2, "used_tokens": 3, "token_usage": 0.5, "source": "/v1/loads"},
        ),
        (
            None,
            {"sglang:num_running_reqs": 4.0, "sglang:num_queue_reqs": 2.0, "sglang:num_used_tokens": 96.0,
             "sglang:token_usage": 0.25},
            {"running": 4, "queued": 2, "used_tokens": 96, "token_usage": 0.25, "source": "/metrics"},
        ),
        (
            None,
            {"sglang:num_running_reqs": 4.0},
            {"running": 4, "queued": 0, "used_tokens": 0, "token_usage": 0.0, "source": "/metrics"},
        ),
        (None, {"sglang:num_queue_reqs": 2.0}, {}),
        (None, None, {}),
    ],
)  # fmt: skip
def test_load_prefers_loads_then_metrics(
    loads: dict[str, Any] | None, metrics: dict[str, float] | None, load: dict[str, Any]
) -> None:
    assert normalize_engine("decode", {}, None, loads, metrics).load == load


# ---------------------------------------------------------------- read_engine


Seen = list[tuple[str, str, dict[str, str]]]
HINTS = {
    "timeout": "; no answer in time",
    "unreachable": "; nothing answers there",
    "tls": "",
}


def paths(seen: Seen) -> list[str]:
    return sorted(path for _, path, _ in seen)


def test_read_engine_reads_the_four_endpoints_with_the_key_over_http() -> None:
    seen: Seen = []
    with http_server(answering(engine_bodies(), seen)) as url:
        result = read_engine(UrllibTransport(), url, "decode", api_key=SECRET, timeout=5, host="h")
    assert (result.status, result.errors, result.warnings) == ("ok", [], [])
    assert result.engine is not None and dataclasses.asdict(result.engine) == sglang_decode_live()
    assert paths(seen) == ["/metrics", "/server_info", "/v1/loads", "/v1/models"]
    assert {h.get("Authorization") for _, _, h in seen} == {f"Bearer {SECRET}"}
    assert {p: h["Accept"] for _, p, h in seen} == {
        "/server_info": "application/json",
        "/v1/models": "application/json",
        "/v1/loads": "application/json",
        "/metrics": "text/plain",
    }


def test_read_engine_without_metrics_does_not_ask_for_them() -> None:
    routes = engine_bodies()
    del routes["/v1/loads"]
    seen: Seen = []
    with http_server(answering(routes, seen)) as url:
        result = read_engine(UrllibTransport(), url, "decode", timeout=5, host="h", metrics=False)
    assert paths(seen) == ["/server_info", "/v1/loads", "/v1/models"]
    assert result.warnings == [f"h: GET {url}/v1/loads: absent (404 Not Found)"]
    assert result.engine is not None and result.engine.load == {}  # /metrics would have given the load


def test_read_engine_uses_metrics_when_models_and_loads_are_missing() -> None:
    routes = engine_bodies()
    del routes["/v1/models"], routes["/v1/loads"]
    with http_server(answering(routes, [])) as url:
        result = read_engine(UrllibTransport(), url, "decode", timeout=5, host="h")
    assert result.engine is not None
    assert outcome(result.engine, "context_length") == (131072, "/metrics sglang:context_len", None)
    assert result.engine.load == {
        "running": 12,
        "queued": 3,
        "used_tokens": 245760,
        "token_usage": 0.022,
        "source": "/metrics",
    }


def test_read_engine_falls_back_to_the_legacy_server_info_path() -> None:
    routes = engine_bodies()
    routes["/get_server_info"] = routes.pop("/server_info")
    seen: Seen = []
    with http_server(answering(routes, seen)) as url:
        result = read_engine(UrllibTransport(), url, "decode", timeout=5, host="h")
    assert (result.status, result.errors, result.warnings) == ("ok", [], [])
    assert result.engine is not None and dataclasses.asdict(result.engine) == sglang_decode_live()
    assert paths(seen) == ["/get_server_info", "/metrics", "/server_info", "/v1/loads", "/v1/models"]


def test_read_engine_with_neither_server_info_path_is_an_error() -> None:
    routes = engine_bodies()
    del routes["/server_info"]
    with http_server(answering(routes, [])) as url:
        result = read_engine(UrllibTransport(), url, "decode", timeout=5, host="h")
    assert (result.status, result.engine, result.warnings) == ("error", None, [])
    assert result.errors == [f"h: GET {url}/get_server_info: absent (404 Not Found)"]


@pytest.mark.parametrize(
    ("models", "loads", "metrics", "warnings"),
    [
        (
            (404, NOT_FOUND),
            (503, b"{}"),
            (404, NOT_FOUND),
            [
                "h: GET {url}/v1/models: absent (404 Not Found)",
                "h: GET {url}/v1/loads: http (503 Service Unavailable)",
                "h: {url}/metrics is not mounted (no --enable-metrics)",
            ],
        ),
        ((500, b"{}"), (404, NOT_FOUND), (502, b""), [
            "h: GET {url}/v1/models: http (500 error)",
            "h: GET {url}/v1/loads: absent (404 Not Found)",
            "h: GET {url}/metrics: http (502 error)",
        ]),
    ],
)  # fmt: skip
def test_read_engine_warns_of_optional_endpoints_that_are_missing(
    models: tuple[int, bytes], loads: tuple[int, bytes], metrics: tuple[int, bytes], warnings: list[str]
) -> None:
    routes = {
        "/server_info": engine_bodies()["/server_info"],
        "/v1/models": models,
        "/v1/loads": loads,
        "/metrics": metrics,
    }
    with http_server(answering(routes, [])) as url:
        result = read_engine(UrllibTransport(), url + "/", "decode", timeout=5, host="h")
    assert (result.status, result.errors) == ("ok", [])
    assert result.warnings == [w.format(url=url) for w in warnings]
    assert result.engine is not None
    assert outcome(result.engine, "context_length") == (131072, "/server_info context_length (echoed argument)", None)
    assert result.engine.load == {}


def test_read_engine_reports_failures_of_optional_endpoints_as_errors() -> None:
    """A key refused, a garbled body or a transport failure on any endpoint is an error, not a warning."""
    transport = Recorder(
        {
            "/server_info": Reply(200, js(fixture_body("server_info_decode.json"))),
            "/v1/models": Reply(401, UNAUTHORIZED),
            "/v1/loads": Reply(200, b"<html>"),
            "/metrics": TransportError("timeout", "timed out"),
        }
    )
    result = read_engine(transport, "http://e:30001", "decode", host="h")
    assert result.status == "error"
    assert result.errors == [
        "h: GET http://e:30001/v1/models: unauthorized (401 Unauthorized); "
        "the server requires an API key: pass api_key (the engine's --api-key)",
        "h: GET http://e:30001/v1/loads: malformed (the body is not JSON (JSONDecodeError at 0))",
        "h: GET http://e:30001/metrics: timeout (timed out); no answer in time: raise timeout or check the server",
    ]
    assert result.warnings == []
    assert result.engine is not None and result.engine.effective["context_length"] == 131072


@pytest.mark.parametrize(
    "kinds",
    [("tls", "tls", "tls", "tls"), ("timeout", "unreachable", "tls", "timeout"), ("unreachable",) * 4],
)
def test_read_engine_is_unreachable_when_every_endpoint_fails_in_transport(kinds: tuple[str, ...]) -> None:
    names = ("/server_info", "/v1/models", "/v1/loads", "/metrics")
    transport = Recorder({p: TransportError(k, f"{k}!") for p, k in zip(names, kinds, strict=True)})
    result = read_engine(transport, "http://e:1", "decode", host="h")
    assert (result.status, result.engine, result.warnings) == ("unreachable", None, [])
    assert result.errors == [
        describe("h", "http://e:1", Fetched(p, problem=k, detail=f"{k}!")) for p, k in zip(names, kinds, strict=True)
    ]
    assert [e.split(": ")[2] for e in result.errors] == [f"{k} ({k}!)" + HINTS[k] for k in kinds]


@pytest.mark.parametrize(
    ("answers", "status"),
    [
        ({"/server_info": TransportError("timeout", "timed out")}, "error"),  # the rest answer 404
        (
            {
                "/server_info": TransportError("unreachable", "refused"),
                "/v1/models": Reply(200, b'{"data": []}'),
                "/v1/loads": TransportError("unreachable", "refused"),
                "/metrics": TransportError("unreachable", "refused"),
            },
            "error",
        ),
        ({"/server_info": Reply(200, b"[]")}, "error"),
    ],
)
def test_read_engine_is_an_error_when_server_info_fails_and_something_else_answers(
    answers: dict[str, Reply | TransportError], status: str
) -> None:
    transport = Recorder(answers)
    result = read_engine(transport, "http://e:1", "decode", host="h")
    assert (result.status, result.engine) == (status, None)
    assert result.errors[0].startswith("h: GET http://e:1/server_info: ")
    assert "/get_server_info" not in [url[len("http://e:1") :] for url, _, _ in transport.calls]


def test_read_engine_reports_a_server_info_of_the_wrong_shape() -> None:
    result = read_engine(Recorder({"/server_info": Reply(200, b"[]")}), "http://e:1", "decode", host="h")
    assert result.errors == ["h: GET http://e:1/server_info: malformed (unexpected JSON shape (TypeError))"]


def test_read_engine_defaults_host_timeout_and_metrics() -> None:
    transport = Recorder({"/server_info": Reply(200, js(fixture_body("server_info_decode.json")))})
    result = read_engine(transport, "http://e:1", "decode")
    assert sorted(url for url, _, _ in transport.calls) == [
        "http://e:1/metrics",
        "http://e:1/server_info",
        "http://e:1/v1/loads",
        "http://e:1/v1/models",
    ]
    assert {timeout for _, _, timeout in transport.calls} == {10.0}
    assert {"Authorization" in headers for _, headers, _ in transport.calls} == {False}
    assert result.warnings[0] == f"{socket.gethostname()}: GET http://e:1/v1/models: absent (404 Not Found)"


def test_read_engine_passes_timeout_and_key_to_every_request() -> None:
    transport = Recorder()
    read_engine(transport, "http://e:1", "prefill", api_key="k", timeout=2.5, host="h", metrics=False)
    assert sorted((url, h.get("Authorization"), t) for url, h, t in transport.calls) == [
        ("http://e:1/get_server_info", "Bearer k", 2.5),
        ("http://e:1/server_info", "Bearer k", 2.5),
        ("http://e:1/v1/loads", "Bearer k", 2.5),
        ("http://e:1/v1/models", "Bearer k", 2.5),
    ]


def test_read_engine_lines_strip_only_slashes_from_the_base_url() -> None:
    transport = Recorder({"/server_info": Reply(200, js(fixture_body("server_info_decode.json")))})
    result = read_engine(transport, "http://ENGINE-X/", "decode", host="h")
    assert result.warnings == [
        "h: GET http://ENGINE-X/v1/models: absent (404 Not Found)",
        "h: GET http://ENGINE-X/v1/loads: absent (404 Not Found)",
        "h: http://ENGINE-X/metrics is not mounted (no --enable-metrics)",
    ]


# ---------------------------------------------------------------- router


def test_reduce_workers_of_the_smg_fixture() -> None:
    assert reduce_workers(fixture_body("router_workers.json")) == [
        {"url": "http://127.0.0.1:30000", "type": "prefill", "healthy": True},
        {"url": "http://127.0.0.1:30001", "type": "decode", "healthy": True},
    ]


@pytest.mark.parametrize(
    ("worker", "reduced"),
    [
        ({"url": "http://a:1/", "worker_type": "Decode"}, {"url": "http://a:1", "type": "decode", "healthy": True}),
        (
            {"url": "http://a:1", "type": "PREFILL", "is_healthy": False},
            {"url": "http://a:1", "type": "prefill", "healthy": False},
        ),
        (
            {"url": "http://a:1", "worker_type": "decode", "type": "prefill"},
            {"url": "http://a:1", "type": "decode", "healthy": True},
        ),
        (
            {"url": "http://a:1", "worker_type": None, "is_healthy": 0},
            {"url": "http://a:1", "type": "regular", "healthy": False},
        ),
    ],
)
def test_reduce_workers_reads_type_url_and_health(worker: dict[str, Any], reduced: dict[str, Any]) -> None:
    """Synthetic worker entries: both a {"workers": [...]} object and a bare list are read."""
    assert reduce_workers({"workers": [worker]}) == [reduced]
    assert reduce_workers([worker]) == [reduced]


@pytest.mark.parametrize("body", [{"workers": {"url": "http://a:1"}}, {"total": 0}, "workers"])
def test_reduce_workers_refuses_a_body_without_a_list(body: Any) -> None:
    with pytest.raises(TypeError, match=r"^workers is not a list$"):
        reduce_workers(body)


@pytest.mark.parametrize(
    ("expected", "urls"),
    [
        ({}, []),
        (
            {
                "prefill": ["http://p:1/", {"url": "http://p:2"}],
                "decode": [{"url": "http://d:1//"}, "http://DECODE-X/"],
                "regular": ["http://r:1"],
            },
            ["decode http://DECODE-X", "decode http://d:1", "prefill http://p:1", "prefill http://p:2"],
        ),
        ({"prefill": None}, []),
    ],
)
def test_expected_worker_urls_are_normalized(expected: dict[str, Any], urls: list[str]) -> None:
    """The inventory's workers, dicts or plain URLs, without trailing slashes; only prefill and decode count."""
    missing = [d.explanation.split(" missing:")[0].replace(" worker ", " ") for d in worker_drift([], expected)]
    assert missing == urls


def test_read_router_ready_with_its_workers() -> None:
    seen: Seen = []
    with http_server(answering(router_bodies(), seen)) as url:
        result = read_router(UrllibTransport(), url, api_key=SECRET, timeout=5, host="h")
    assert (result.status, result.errors, result.warnings, result.engine) == ("ok", [], [], None)
    assert result.router == {
        "ready": True,
        "readiness": "ready",
        "healthy_workers": 2,
        "total_workers": 2,
        "workers": [
            {"url": "http://127.0.0.1:30000", "type": "prefill", "healthy": True},
            {"url": "http://127.0.0.1:30001", "type": "decode", "healthy": True},
        ],
        "unhealthy_workers": [],
    }
    assert paths(seen) == ["/readiness", "/workers"]
    assert {h.get("Authorization") for _, _, h in seen} == {f"Bearer {SECRET}"}


@pytest.mark.parametrize(
    ("readiness", "ready", "said"),
    [
        ((503, js(fixture_body("router_not_ready.json"))), False, "not ready"),
        ((503, b'{"reason": "starting"}'), False, "starting"),  # synthetic: a reason only
        ((503, b'{"status": "ready"}'), False, "ready"),  # synthetic: the status code decides
        ((200, b'{"status": "starting"}'), False, "starting"),  # synthetic
        ((200, b'"ready"'), False, None),  # synthetic: not an object
    ],
)
def test_read_router_not_ready_is_a_warning(readiness: tuple[int, bytes], ready: bool, said: str | None) -> None:
    routes = {**router_bodies(), "/readiness": readiness}
    with http_server(answering(routes, [])) as url:
        result = read_router(UrllibTransport(), url + "/", timeout=5, host="h")
    assert (result.status, result.errors) == ("ok", [])
    assert result.router is not None
    assert (result.router["ready"], result.router["readiness"]) == (ready, said)
    assert result.warnings == [f"h: {url}/readiness: not ready ({said})"]


def test_read_router_lists_the_workers_and_the_unhealthy_ones() -> None:
    workers = [  # synthetic, bare-list shape
        {"url": "http://p1/", "worker_type": "prefill"},
        {"url": "http://d1", "worker_type": "decode", "is_healthy": False},
        {"url": "http://r2", "type": "Regular", "is_healthy": False},
        {"url": "http://r1"},
    ]
    transport = Recorder(
        {"/readiness": Reply(200, js(fixture_body("router_readiness.json"))), "/workers": Reply(200, js(workers))}
    )
    expected = {"prefill": ["http://p1", "http://p2"], "decode": [{"url": "http://d1/"}, {"url": "http://d0"}]}
    result = read_router(transport, "http://r:1", host="h")
    assert result.router is not None
    drift = worker_drift(result.router["workers"], expected)
    assert [(d.declared, d.live) for d in drift] == [
        ("http://d0", None), ("http://p2", None), (None, "http://r1"), (None, "http://r2"),
    ]  # fmt: skip
    assert result.router["unhealthy_workers"] == ["decode http://d1", "regular http://r2"]
    assert (result.status, result.errors, result.warnings) == ("ok", [], [])


def test_read_router_without_a_worker_list() -> None:
    transport = Recorder({"/readiness": Reply(200, js(fixture_body("router_readiness.json")))})
    result = read_router(transport, "http://r:1", host="h")
    assert result.status == "error"
    assert result.errors == ["h: GET http://r:1/workers: absent (404 Not Found)"]
    assert result.router == {"ready": True, "readiness": "ready", "healthy_workers": 2, "total_workers": 2}


def test_read_router_that_refuses_connections_is_unreachable() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    result = read_router(UrllibTransport(), url, timeout=2, host="h")
    assert (result.status, result.router, result.warnings) == ("unreachable", None, [])
    assert [e.split(": unreachable (")[0] for e in result.errors] == [
        f"h: GET {url}/readiness",
        f"h: GET {url}/workers",
    ]
    assert all(e.endswith("); nothing answers there: is the unit running?") for e in result.errors), result.errors


@pytest.mark.parametrize("kind", ["tls", "timeout"])
def test_read_router_failing_in_transport_is_unreachable(kind: str) -> None:
    transport = Recorder({"/readiness": TransportError(kind, "x"), "/workers": TransportError(kind, "x")})
    result = read_router(transport, "http://r:1", host="h")
    assert (result.status, result.router) == ("unreachable", None)
    assert [e.split(": ")[2] for e in result.errors] == [f"{kind} (x){HINTS[kind]}"] * 2


def test_read_router_defaults_host_and_timeout() -> None:
    transport = Recorder()
    result = read_router(transport, "http://r:1")
    assert sorted((url, h, t) for url, h, t in transport.calls) == [
        ("http://r:1/readiness", {"Accept": "application/json"}, 10.0),
        ("http://r:1/workers", {"Accept": "application/json"}, 10.0),
    ]
    host = socket.gethostname()
    assert result.status == "error"
    assert result.warnings == [f"{host}: http://r:1/readiness: not ready (None)"]
    assert result.errors == [
        f"{host}: GET http://r:1/readiness: absent (404 Not Found)",
        f"{host}: GET http://r:1/workers: absent (404 Not Found)",
    ]


def test_read_router_sends_the_key_and_timeout() -> None:
    transport = Recorder()
    read_router(transport, "http://r:1", api_key="k", timeout=3.5, host="h")
    assert sorted((h.get("Authorization"), t) for _, h, t in transport.calls) == [("Bearer k", 3.5)] * 2


def test_read_router_lines_strip_only_slashes_from_the_base_url() -> None:
    transport = Recorder({"/workers": Reply(200, b"[]")})
    result = read_router(transport, "http://ROUTER-X/", host="h")
    assert result.errors == ["h: GET http://ROUTER-X/readiness: absent (404 Not Found)"]
    assert result.warnings == ["h: http://ROUTER-X/readiness: not ready (None)"]


def test_router_defaults_are_smgs() -> None:
    effective, notes = router_effective(None, cpu_count=2)
    assert effective == {**ROUTER_DEFAULTS, "max_concurrent_requests": 4096}
    assert notes == {
        **{name: f"smg default {value}" for name, value in ROUTER_DEFAULTS.items()},
        "max_concurrent_requests": "-1: smg derives 1024 per core (2), at least 4096",
    }


@pytest.mark.parametrize(
    ("mcr", "cores", "effective", "note"),
    [
        (-1, 8, 8192, "-1: smg derives 1024 per core (8), at least 4096"),
        (-1, 4, 4096, "-1: smg derives 1024 per core (4), at least 4096"),
        (-1, 5, 5120, "-1: smg derives 1024 per core (5), at least 4096"),
        (-7, 3, 4096, "-1: smg derives 1024 per core (3), at least 4096"),
        (0, 8, None, "0: no in-flight cap"),
        ("0", 8, None, "0: no in-flight cap"),
        (1, 8, 1, None),
        (512, 8, 512, None),
    ],
)
def test_max_concurrent_requests_minus_one_derives_and_zero_uncaps(
    mcr: Any, cores: int, effective: int | None, note: str | None
) -> None:
    got, notes = router_effective({"max_concurrent_requests": mcr}, cpu_count=cores)
    assert got["max_concurrent_requests"] == effective
    assert notes.get("max_concurrent_requests") == note


@pytest.mark.parametrize(("machine", "derived", "cores"), [(6, 6144, 6), (None, 4096, 1)])
def test_without_a_cpu_count_the_machines_is_used(
    monkeypatch: pytest.MonkeyPatch, machine: int | None, derived: int, cores: int
) -> None:
    monkeypatch.setattr(live_module.os, "cpu_count", lambda: machine)
    effective, notes = router_effective({})
    assert effective["max_concurrent_requests"] == derived
    assert notes["max_concurrent_requests"] == f"-1: smg derives 1024 per core ({cores}), at least 4096"
    assert router_effective({}, cpu_count=7)[0]["max_concurrent_requests"] == 7168  # a given count wins


def test_router_flags_that_are_set_win_over_the_defaults() -> None:
    running = {"queue_size": 256, "policy": "round_robin", "max_payload_size": None, "host": "0.0.0.0", "port": 30080}
    effective, notes = router_effective(running, cpu_count=1)
    assert effective == {
        **ROUTER_DEFAULTS,
        "max_concurrent_requests": 4096,
        "queue_size": 256,
        "policy": "round_robin",
        "host": "0.0.0.0",
        "port": 30080,
    }
    assert "queue_size" not in notes and "policy" not in notes
    assert notes["max_payload_size"] == "smg default 536870912"
    assert set(router_effective({"host": None}, cpu_count=1)[0]) == set(ROUTER_DEFAULTS)  # no host, no port
