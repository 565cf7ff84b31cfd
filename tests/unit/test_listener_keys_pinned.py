"""The sockets a server listens on and the declared keys the preflight names for them (a router in smg's mesh has a
third listener, its mesh port), the backends a release must carry, and how the hosts' files are read: the
server file checksums in bounded 1 MiB blocks, the environment file as UTF-8 whatever the host's locale."""

from __future__ import annotations

import builtins
import hashlib
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_flags, sglang_hostfs
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_flags import api_key_file, from_argv
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_hostfs import sha1
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_layout import listeners
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_preflight import server_problems, transfer_needs
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_schema import EnvelopeError

ROUTER = {"role": "router", "unit": "sglang-dsv4-router", "user": "sglang"}


def test_a_router_without_the_mesh_listens_on_its_port_and_its_metrics_port() -> None:
    assert listeners("router", {}) == [("*", 30000), ("*", 29000)]
    assert listeners("router", {"enable_mesh": False, "mesh_port": 40000}) == [("*", 30000), ("*", 29000)]


def test_a_router_in_the_mesh_listens_on_its_mesh_port_too() -> None:
    assert listeners("router", {"enable_mesh": True}) == [("*", 30000), ("*", 29000), ("*", 39527)]
    envelope = {"enable_mesh": True, "host": "10.0.0.5", "port": 8000, "mesh_host": "10.0.0.6", "mesh_port": 40000}
    assert listeners("router", envelope) == [("10.0.0.5", 8000), ("*", 29000), ("10.0.0.6", 40000)]


def test_an_engine_has_no_mesh_listener_even_with_enable_mesh_declared() -> None:
    assert listeners("prefill", {"enable_mesh": True}) == [("127.0.0.1", 30000), ("127.0.0.1", 8998)]
    assert listeners("decode", {"enable_mesh": True, "port": 30001}) == [("127.0.0.1", 30001)]


def _answer(*rows: dict[str, Any]) -> dict[str, Any]:
    return {"listeners": list(rows), "paths": [], "imports": {}, "gpus": None}


def test_a_router_mesh_port_in_use_is_named_by_its_mesh_key() -> None:
    answer = _answer(
        {"host": "*", "port": 30000, "result": "bound"},
        {"host": "*", "port": 29000, "result": "bound"},
        {"host": "*", "port": 39527, "result": "EADDRINUSE"},
    )
    assert server_problems(ROUTER, answer, lambda port: []) == [
        "sglang-dsv4-router: port 39527 (sglang_router.mesh_port = 39527) is already in use on this host by another "
        "process; sglang-dsv4-router could not bind it. Declare a free port in sglang_router.mesh_port or stop what "
        "holds it."
    ]


def test_a_router_mesh_address_not_on_the_host_is_named_by_its_mesh_host_key() -> None:
    answer = _answer(
        {"host": "*", "port": 30000, "result": "bound"},
        {"host": "*", "port": 29000, "result": "bound"},
        {"host": "10.9.9.9", "port": 39527, "result": "EADDRNOTAVAIL", "error": "EADDRNOTAVAIL: Cannot assign"},
    )
    assert server_problems(ROUTER, answer, lambda port: []) == [
        "sglang-dsv4-router: the listen address 10.9.9.9 (sglang_router.mesh_host) is not an address of this host "
        "(EADDRNOTAVAIL: Cannot assign). Declare an address the host has, or 0.0.0.0 / ::."
    ]


def test_an_unknown_backend_is_skipped_and_the_next_one_still_counts() -> None:
    assert transfer_needs([None, "nixl"]) == {
        "requirements": ["nixl==1.5.2"],
        "imports": {"nixl._api": "disaggregation_transfer_backend nixl imports it (package nixl==1.5.2)"},
    }
    assert transfer_needs(["fake", "mooncake"]) == {
        "requirements": ["mooncake-transfer-engine==0.3.11.post1"],
        "imports": {
            "mooncake.engine": "disaggregation_transfer_backend mooncake imports it "
            "(package mooncake-transfer-engine==0.3.11.post1)"
        },
    }


def test_the_checksum_is_read_in_1_mib_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sizes: list[Any] = []

    class Recording:
        def __init__(self, path: Any, mode: str) -> None:
            self.handle = builtins.open(path, mode)

        def __enter__(self) -> Recording:
            return self

        def __exit__(self, *exc: object) -> None:
            self.handle.close()

        def read(self, size: Any = -1) -> bytes:
            sizes.append(size)
            return self.handle.read(size)

    path = tmp_path / "serve.sh"
    path.write_bytes(b"x" * ((1 << 20) + 5))
    monkeypatch.setattr(sglang_hostfs, "open", Recording, raising=False)
    assert sha1(str(path)) == hashlib.sha1(b"x" * ((1 << 20) + 5)).hexdigest()
    assert sizes == [1048576, 1048576, 1048576]


def test_the_checksum_of_known_content_and_of_a_missing_file(tmp_path: Path) -> None:
    (tmp_path / "abc").write_bytes(b"abc")
    (tmp_path / "empty").write_bytes(b"")
    assert sha1(str(tmp_path / "abc")) == "a9993e364706816aba3e25717850c26c9cd0d89d"
    assert sha1(str(tmp_path / "empty")) == "da39a3ee5e6b4b0d3255bfef95601890afd80709"
    assert sha1(str(tmp_path / "absent")) is None


def test_the_api_key_is_read_as_utf_8_on_a_host_whose_locale_is_latin_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def latin1_host_open(file: Any, mode: str = "r", buffering: int = -1, encoding: str | None = None) -> Any:
        return builtins.open(file, mode, buffering, encoding or "latin-1")

    env = tmp_path / "dsv4-decode.env"
    env.write_bytes("SGLANG_API_KEY=clé-ü\n".encode())
    monkeypatch.setattr(sglang_flags, "open", latin1_host_open, raising=False)
    assert api_key_file(str(env)) == "clé-ü"


def test_a_list_flag_with_a_bad_value_names_every_token_it_was_given() -> None:
    with pytest.raises(EnvelopeError) as caught:
        from_argv("decode", ["--cuda-graph-bs-decode", "1", "x", "--port", "30001"])
    assert str(caught.value) == (
        "flag --cuda-graph-bs-decode has the value '1 x', not a valid intlist: the server refuses it at start; "
        "site.yml writes the declared value back"
    )
