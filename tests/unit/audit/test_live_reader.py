"""The live reader over real HTTP: the API key never leaves it, and the transport classifies real failures.

The bodies are SGLang's own (fixtures/, made by SGLang 0.5.23's code); the servers are on loopback. The
snapshot that the verify suite runs on a host (verify/hostside/snapshot.py) reads servers outside
Ansible, where no no_log masks anything: it runs here as the script it is.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import ssl
import subprocess
import sys
import time
import urllib.error
from pathlib import Path

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_engine_live import read_engine, reduce_server_info
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_http import (
    Fetched,
    UrllibTransport,
    classify,
    describe,
    fetch,
)
from audit_helpers import REPO, SECRET, fixture_body
from loopback import closed_port, http_server, silent_port

SNAPSHOT = REPO / "verify" / "hostside" / "snapshot.py"
ADMIN_SECRET = "sk-admin-secret-456"
BODIES = {
    "/server_info": "server_info_decode.json",
    "/v1/models": "models.json",
    "/v1/loads": "loads_decode.json",
    "/metrics": "metrics_decode.txt",
}


def key_bearing_server_info() -> dict:
    """SGLang's /server_info with both keys set and the engine's own environment exposed
    (SGLANG_EXPOSE_OWN_ENV_VARS), which would include SGLANG_API_KEY."""
    body = copy.deepcopy(fixture_body("server_info_decode.json"))
    body["admin_api_key"] = ADMIN_SECRET
    body["internal_states"][0]["admin_api_key"] = ADMIN_SECRET
    body["internal_states"][0]["env_vars"] = {"SGLANG_API_KEY": SECRET, "SGLANG_DSV4_BF16_INDEX_K": "1"}
    return body


def sglang_engine(seen: list[str]) -> object:
    """Answers as SGLang 0.5.23 does: /health and /metrics open, the rest behind the bearer key (401 body
    from sglang/srt/utils/auth.py)."""

    def handle(method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        seen.append(headers.get("Authorization", ""))
        if path == "/health":
            return 200, b""
        if path not in ("/metrics",) and headers.get("Authorization") != f"Bearer {SECRET}":
            return 401, b'{"error":"Unauthorized"}'
        if path == "/server_info":
            return 200, json.dumps(key_bearing_server_info()).encode()
        if path in BODIES:
            data = fixture_body(BODIES[path])
            return 200, (data if isinstance(data, str) else json.dumps(data)).encode()
        return 404, b'{"detail":"Not Found"}'

    return handle


def test_the_fixture_carries_the_keys_in_plain_text() -> None:
    body = json.dumps(key_bearing_server_info())
    assert body.count(SECRET) >= 3 and ADMIN_SECRET in body  # api_key, launch_command, internal_states, env_vars


def test_reduce_server_info_keeps_no_key() -> None:
    reduced = reduce_server_info(key_bearing_server_info())
    for name in ("api_key", "admin_api_key", "launch_command"):
        assert name not in reduced
    assert reduced["rank0"]["env_vars"] == {"SGLANG_DSV4_BF16_INDEX_K": "1"}
    text = json.dumps(reduced)
    assert SECRET not in text and ADMIN_SECRET not in text
    assert reduced["max_total_num_tokens"] == 11_159_040  # the reduction kept what the audit needs


def test_read_engine_over_http_keeps_no_key() -> None:
    seen: list[str] = []
    with http_server(sglang_engine(seen)) as url:
        result = read_engine(UrllibTransport(), url, "decode", api_key=SECRET, timeout=5, host="t")
    assert result.status == "ok", result.errors
    assert result.engine is not None and result.engine.effective["context_length"] == 131072
    assert result.engine.effective["bf16_index_k"] is True  # from the filtered env_vars
    text = json.dumps(dataclasses.asdict(result), default=str)
    assert SECRET not in text and ADMIN_SECRET not in text
    assert f"Bearer {SECRET}" in seen  # the key was sent, and still not kept


def test_snapshot_script_prints_no_key(tmp_path: Path) -> None:
    """The verify snapshot as a host runs it: reads the key from the env file, queries the engine, prints JSON."""
    if REPO.name == "mutants":
        pytest.skip("the script imports the installed package, not mutmut's mutated copy")
    env_file = tmp_path / "dsv4-decode.env"
    env_file.write_text(f'SGLANG_DSV4_BF16_INDEX_K=1\nSGLANG_API_KEY="{SECRET}"\n')
    script = tmp_path / "serve_dsv4_decode.sh"
    script.write_text(f"#!/bin/bash\nexec sglang serve --api-key {SECRET}\n")
    seen: list[str] = []
    with http_server(sglang_engine(seen)) as url:
        spec = {
            "timeout": 5,
            "paths": [],
            "servers": [
                {
                    "role": "decode",
                    "unit": "sglang-snapshot-test-absent",
                    "script": str(script),
                    "env_file": str(env_file),
                    "unit_file": str(tmp_path / "sglang-snapshot-test-absent.service"),
                    "base_url": url,
                    "health_url": url + "/health",
                }
            ],
        }
        run = subprocess.run(
            [sys.executable, str(SNAPSHOT), json.dumps(spec)], capture_output=True, text=True, timeout=120, check=False
        )
    assert run.returncode == 0, run.stderr[-2000:]
    assert SECRET not in run.stdout and ADMIN_SECRET not in run.stdout
    live = json.loads(run.stdout)["servers"]["decode"]["live"]
    assert live["status"] == "ok", live["errors"]
    assert live["live"]["max_total_tokens"] == 11_159_040
    assert f"Bearer {SECRET}" in seen


def test_a_real_timeout_is_classified_as_timeout() -> None:
    with silent_port() as port:
        started = time.monotonic()
        item = fetch(UrllibTransport(), f"http://127.0.0.1:{port}", "/server_info", api_key=None, timeout=0.5)
        elapsed = time.monotonic() - started
    assert (item.problem, item.detail) == ("timeout", "timed out")
    assert 0.4 < elapsed < 5


def test_a_refused_connection_is_classified_as_unreachable() -> None:
    item = fetch(UrllibTransport(), f"http://127.0.0.1:{closed_port()}", "/server_info", api_key=None, timeout=2)
    assert item.problem == "unreachable"
    assert "refused" in item.detail.lower()


def test_read_engine_reports_each_kind_of_failure() -> None:
    with silent_port() as port:
        silent = read_engine(UrllibTransport(), f"http://127.0.0.1:{port}", "decode", timeout=0.5, host="h")
    refused = read_engine(UrllibTransport(), f"http://127.0.0.1:{closed_port()}", "decode", timeout=2, host="h")
    assert silent.status == refused.status == "unreachable"
    assert any("/server_info: timeout (timed out)" in e for e in silent.errors), silent.errors
    assert any("/server_info: unreachable (" in e and "refused" in e.lower() for e in refused.errors), refused.errors


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (TimeoutError("timed out"), "timeout"),
        (ConnectionRefusedError(111, "Connection refused"), "unreachable"),
    ],
)
def test_classify_by_exception_type(exc: BaseException, kind: str) -> None:
    assert classify(exc).kind == kind
    assert classify(urllib.error.URLError(exc)).kind == kind  # urlopen wraps connection errors


def test_tls_to_a_plain_http_server_is_classified_as_tls() -> None:
    """https:// to a server that speaks plain HTTP: the handshake fails, and the transport says TLS."""
    with http_server(lambda *_: (200, b"{}")) as url:
        item = fetch(UrllibTransport(), url.replace("http:", "https:"), "/server_info", api_key=None, timeout=5)
    assert item.problem == "tls"
    assert item.detail.startswith("TLS error: ")


def test_classify_reads_the_text_when_the_type_says_nothing() -> None:
    assert classify(OSError("timed out")).kind == "timeout"  # a plain OSError whose text says it timed out
    assert classify(urllib.error.URLError("timed out")).kind == "timeout"
    refused = classify(ConnectionResetError())  # no text: the error's type names it
    assert (refused.kind, refused.reason) == ("unreachable", "ConnectionResetError")
    tls = classify(urllib.error.URLError(ssl.SSLError(1, "certificate verify failed")))
    assert tls.kind == "tls" and tls.reason == f"TLS error: {ssl.SSLError(1, 'certificate verify failed')}"


@pytest.mark.parametrize(
    ("problem", "hint"),
    [
        ("unauthorized", "the server requires an API key: pass api_key (the engine's --api-key)"),
        ("timeout", "no answer in time: raise timeout or check the server"),
        ("unreachable", "nothing answers there: is the unit running?"),
        ("malformed", None),
    ],
)
def test_an_error_line_names_host_endpoint_problem_and_hint(problem: str, hint: str | None) -> None:
    item = Fetched("/v1/models", problem=problem, detail="why")
    line = describe("gpu7", "http://10.0.0.7:30001/", item)
    assert line == f"gpu7: GET http://10.0.0.7:30001/v1/models: {problem} (why)" + (f"; {hint}" if hint else "")
