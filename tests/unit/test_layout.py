"""The server layout (plugins/module_utils/sglang_layout.py): every path, owner, mode, listener and URL of one server,
pinned for the production places (the sglang_defaults role's defaults) and for declared addresses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_layout import listeners, server_layout

DEFAULTS = (
    Path(__file__).resolve().parents[2]
    / "collections/ansible_collections/sglang/dsv4/roles/sglang_defaults"
    / "defaults"
    / "main.yml"
)
MODES = {
    "script": {"owner": "root", "group": "root", "mode": "0755"},
    "env_file": {"owner": "root", "group": "sglang", "mode": "0640"},
    "unit": {"owner": "root", "group": "root", "mode": "0644"},
}
PLACES = {
    "bin_dir": "/opt/sglang/bin",
    "env_dir": "/etc/sglang",
    "unit_dir": "/etc/systemd/system",
    "facts_file": "/etc/ansible/facts.d/sglang.fact",
    "release_fact_file": "/etc/ansible/facts.d/sglang_release.fact",
    "file_modes": MODES,
}


def test_the_defaults_role_declares_these_places() -> None:
    """PLACES above is what sglang_defaults_layout renders to with the role's defaults."""
    raw = yaml.safe_load(DEFAULTS.read_text())
    facts_dir = raw["sglang_defaults_facts_dir"]
    assert (raw["sglang_defaults_bin_dir"], raw["sglang_defaults_env_dir"], raw["sglang_defaults_unit_dir"]) == (
        PLACES["bin_dir"], PLACES["env_dir"], PLACES["unit_dir"],
    )  # fmt: skip
    assert (
        raw["sglang_defaults_facts_file"].replace("{{ sglang_defaults_facts_dir }}", facts_dir) == PLACES["facts_file"]
    )
    modes = {k: v for k, v in raw["sglang_defaults_file_modes"].items() if k in MODES}
    modes["env_file"] = {**modes["env_file"], "group": raw["sglang_defaults_group"]}
    assert modes == MODES
    assert set(raw["sglang_defaults_layout"]) == set(PLACES)


def test_decode_layout() -> None:
    assert server_layout("decode", {"port": 30001}, PLACES) == {
        "role": "decode",
        "unit": "sglang-dsv4-decode",
        "script": "/opt/sglang/bin/serve_dsv4_decode.sh",
        "env_file": "/etc/sglang/dsv4-decode.env",
        "unit_file": "/etc/systemd/system/sglang-dsv4-decode.service",
        "facts_file": "/etc/ansible/facts.d/sglang.fact",
        "release_fact_file": "/etc/ansible/facts.d/sglang_release.fact",
        "files": {
            "script": {"path": "/opt/sglang/bin/serve_dsv4_decode.sh", **MODES["script"]},
            "env_file": {"path": "/etc/sglang/dsv4-decode.env", **MODES["env_file"]},
            "unit": {"path": "/etc/systemd/system/sglang-dsv4-decode.service", **MODES["unit"]},
        },
        "listeners": [["127.0.0.1", 30001]],
        "url": "http://127.0.0.1:30001",
        "health_url": "http://127.0.0.1:30001/health",
    }


def test_router_layout_on_a_wildcard() -> None:
    out = server_layout("router", {"host": "0.0.0.0", "port": 8000}, PLACES)
    assert (out["unit"], out["script"], out["env_file"]) == (
        "sglang-dsv4-router", "/opt/sglang/bin/serve_dsv4_router.sh", "/etc/sglang/dsv4-router.env",
    )  # fmt: skip
    assert (out["url"], out["health_url"]) == ("http://127.0.0.1:8000", "http://127.0.0.1:8000/readiness")
    assert out["listeners"] == [["*", 8000], ["*", 29000]]


@pytest.mark.parametrize(
    ("role", "envelope", "expected"),
    [
        # SGLang binds 127.0.0.1:30000 unless told; the prefill bootstrap server shares the engine's address.
        ("prefill", {}, [("127.0.0.1", 30000), ("127.0.0.1", 8998)]),
        ("prefill", {"host": "10.0.0.5", "disaggregation_bootstrap_port": 9000},
         [("10.0.0.5", 30000), ("10.0.0.5", 9000)]),
        ("decode", {"host": "::", "port": 31001}, [("*", 31001)]),
        # smg binds 0.0.0.0:30000 and its metrics on 29000 unless told.
        ("router", {}, [("*", 30000), ("*", 29000)]),
        ("router", {"host": "10.0.0.9", "prometheus_host": "127.0.0.1", "prometheus_port": 29001},
         [("10.0.0.9", 30000), ("127.0.0.1", 29001)]),
    ],
)  # fmt: skip
def test_listeners_take_the_parsers_defaults(role: str, envelope: dict[str, Any], expected: list[Any]) -> None:
    assert listeners(role, envelope) == expected


@pytest.mark.parametrize(
    ("host", "url"),
    [(None, "http://127.0.0.1:30001"), ("0.0.0.0", "http://127.0.0.1:30001"), ("10.1.2.3", "http://10.1.2.3:30001"),
     ("fd00::7", "http://[fd00::7]:30001")],
)  # fmt: skip
def test_the_connect_url_is_loopback_for_a_wildcard(host: str | None, url: str) -> None:
    out = server_layout("decode", {"host": host, "port": 30001}, PLACES)
    assert (out["url"], out["health_url"]) == (url, url + "/health")
