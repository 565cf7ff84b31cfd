"""The URL of a server that declares no port (module_utils/sglang_layout.py: server_layout): its parser's default
port, 30000 for SGLang's engines and for smg."""

from __future__ import annotations

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_layout import server_layout

MODE = {"owner": "root", "group": "root", "mode": "0644"}
PLACES = {
    "bin_dir": "/opt/sglang/bin",
    "env_dir": "/etc/sglang",
    "unit_dir": "/etc/systemd/system",
    "facts_file": "/etc/ansible/facts.d/sglang.fact",
    "release_fact_file": "/etc/ansible/facts.d/sglang_release.fact",
    "file_modes": {"script": MODE, "env_file": MODE, "unit": MODE},
}


@pytest.mark.parametrize(("role", "health"), [("prefill", "/health"), ("decode", "/health"), ("router", "/readiness")])
def test_a_server_without_a_port_answers_on_its_parsers_default(role: str, health: str) -> None:
    out = server_layout(role, {"host": "10.0.0.5"}, PLACES)
    assert (out["url"], out["health_url"]) == ("http://10.0.0.5:30000", f"http://10.0.0.5:30000{health}")


def test_a_server_with_a_null_port_answers_on_the_default() -> None:
    out = server_layout("decode", {"port": None}, PLACES)
    assert (out["url"], out["health_url"]) == ("http://127.0.0.1:30000", "http://127.0.0.1:30000/health")
