"""Every audit fixture says how it was made; none passes off a hand-written body as SGLang's."""

from __future__ import annotations

import json

import pytest
from audit_helpers import FIXTURES, fixture_body

FILES = sorted(p.name for p in FIXTURES.iterdir() if p.suffix in (".json", ".txt"))
SGLANG_MADE = "SGLang 0.5.23's own code on CPU: tests/unit/audit/fixtures/make_fixtures.py"
SYNTHETIC = "SYNTHETIC: written by tests/unit/audit/fixtures/make_fixtures.py"
CAPTURED = "captured by tests/unit/audit/fixtures/capture_latency.py from running software: "


def test_there_are_fixtures() -> None:
    assert {"server_info_decode.json", "models.json", "router_workers.json", "metrics_decode.txt"} <= set(FILES)


@pytest.mark.parametrize("name", FILES)
def test_fixture_states_its_provenance(name: str) -> None:
    text = (FIXTURES / name).read_text()
    assert name in (FIXTURES / "README.md").read_text()
    if name.endswith(".txt"):
        assert text.startswith((f"# {SYNTHETIC}", f"# {CAPTURED}")), name
        return
    made_by = json.loads(text)["_provenance"]["made_by"]
    assert made_by == SGLANG_MADE or made_by.startswith(("synthetic: ", CAPTURED)), (name, made_by)


@pytest.mark.parametrize("name", [n for n in FILES if n.endswith(".json")])
def test_served_body_has_no_provenance_key(name: str) -> None:
    assert "_provenance" not in fixture_body(name)


def test_sglang_bodies_list_their_stand_in_fields() -> None:
    """The fields SGLang's code did not compute for this file are named; the pool's source is among them."""
    body = json.loads((FIXTURES / "server_info_decode.json").read_text())
    fields = body["_provenance"]["stand_in_fields"]
    assert "KVCacheConfigurator" in fields["max_total_num_tokens"]
    assert fields["internal_states.0.memory_usage.token_capacity"] == fields["max_total_num_tokens"]
    assert body["max_total_num_tokens"] == body["internal_states"][0]["memory_usage"]["token_capacity"]
