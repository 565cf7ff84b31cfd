"""plugins/module_utils/sglang_server_read.py read directly: the role and health a file read reports, and the exact
requests a live read sends (URL, headers, timeout) with the options' defaults (10 s, metrics on)."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_server_read as server_read
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_http import Reply, TransportError
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_layers import HostFiles
from audit_helpers import load_cases
from loopback import http_server
from test_sglang_layers import CASES, TICKS, build_host, layout_args

ENDPOINT = "http://10.9.0.4:30001/"
KEY = "sk-read-unit"


class Refusing:
    """A transport where every GET is refused; records (url, headers, timeout) of each."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, str], Any]] = []
        self.lock = threading.Lock()

    def get(self, url: str, headers: Mapping[str, str], timeout: float) -> Reply:
        with self.lock:
            self.seen.append((url, dict(headers), timeout))
        raise TransportError("unreachable", "connection refused")

    def sorted_seen(self) -> list[tuple[str, dict[str, str], Any]]:
        return sorted(self.seen, key=lambda s: s[0])


@pytest.fixture
def decode_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> HostFiles:
    monkeypatch.setattr(os, "sysconf", lambda name: TICKS if name == "SC_CLK_TCK" else os.sysconf(name))
    case = next(p.values[0] for p in load_cases(CASES) if p.id == "decode_files_and_process_agree")
    return build_host(tmp_path, case)


def files_options(**extra: Any) -> dict[str, Any]:
    return {"role": "decode", **layout_args("decode"), "unit_dir": "/etc/systemd/system", "keep_releases": 3, **extra}


def test_a_file_read_names_its_role_and_probes_the_health_url(decode_host: HostFiles) -> None:
    def handle(method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        return (200, b'{"status": "ok"}') if (method, path) == ("GET", "/health") else (404, b"{}")

    with http_server(handle) as url:
        got = server_read.read_files(files_options(health_url=url + "/health"), decode_host, "lab1")
    assert (got["changed"], got["role"], got["problems"]) == (False, "decode", [])
    assert got["unit"]["name"] == "sglang-dsv4-decode"
    assert got["health"] == {"url": url + "/health", "status": 200, "json": {"status": "ok"}}


@pytest.mark.parametrize("health_url", [None, ""], ids=["absent", "empty"])
def test_a_file_read_without_a_health_url_probes_nothing(decode_host: HostFiles, health_url: str | None) -> None:
    options = files_options() if health_url is None else files_options(health_url=health_url)
    got = server_read.read_files(options, decode_host, "lab1")
    assert (got["role"], got["health"]) == ("decode", None)


def test_a_live_engine_read_asks_every_endpoint_with_the_key_and_10_s() -> None:
    transport = Refusing()
    got = server_read.read_live(transport, {"endpoint": ENDPOINT, "role": "decode"}, KEY, "lab1")
    assert (got["changed"], got["endpoint"], got["role"], got["name"]) == (False, ENDPOINT, "decode", "lab1")
    auth = {"Authorization": f"Bearer {KEY}"}
    assert transport.sorted_seen() == [
        ("http://10.9.0.4:30001/metrics", {"Accept": "text/plain", **auth}, 10),
        ("http://10.9.0.4:30001/server_info", {"Accept": "application/json", **auth}, 10),
        ("http://10.9.0.4:30001/v1/loads", {"Accept": "application/json", **auth}, 10),
        ("http://10.9.0.4:30001/v1/models", {"Accept": "application/json", **auth}, 10),
    ]


def test_a_live_engine_read_passes_its_timeout_and_can_leave_out_the_metrics() -> None:
    transport = Refusing()
    options = {"endpoint": ENDPOINT, "role": "prefill", "timeout": 2.5, "metrics": False}
    got = server_read.read_live(transport, options, None, "lab2")
    assert (got["endpoint"], got["role"], got["name"]) == (ENDPOINT, "prefill", "lab2")
    assert transport.sorted_seen() == [
        ("http://10.9.0.4:30001/server_info", {"Accept": "application/json"}, 2.5),
        ("http://10.9.0.4:30001/v1/loads", {"Accept": "application/json"}, 2.5),
        ("http://10.9.0.4:30001/v1/models", {"Accept": "application/json"}, 2.5),
    ]


def test_a_live_router_read_asks_with_the_key_and_10_s() -> None:
    transport = Refusing()
    got = server_read.read_live(transport, {"endpoint": ENDPOINT, "role": "router"}, KEY, "lab1")
    assert (got["changed"], got["endpoint"], got["role"], got["name"]) == (False, ENDPOINT, "router", "lab1")
    auth = {"Authorization": f"Bearer {KEY}"}
    assert transport.sorted_seen() == [
        ("http://10.9.0.4:30001/readiness", {"Accept": "application/json", **auth}, 10),
        ("http://10.9.0.4:30001/workers", {"Accept": "application/json", **auth}, 10),
    ]


def test_a_live_router_read_passes_its_timeout() -> None:
    transport = Refusing()
    server_read.read_live(transport, {"endpoint": ENDPOINT, "role": "router", "timeout": 0.75}, "", "lab1")
    assert [(s[0], s[1], s[2]) for s in transport.sorted_seen()] == [
        ("http://10.9.0.4:30001/readiness", {"Accept": "application/json"}, 0.75),
        ("http://10.9.0.4:30001/workers", {"Accept": "application/json"}, 0.75),
    ]
