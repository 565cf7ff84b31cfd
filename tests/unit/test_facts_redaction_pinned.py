"""The layer reader (sglang_layers.read_layers, what the sglang_layers_info module returns) never hands back the API
key it finds in the local facts: not from the last deploy's record, and not from the record of a deploy in progress,
at any depth."""

from __future__ import annotations

import json
from pathlib import Path

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_layers import HostFiles, deployed_record, read_layers

SECRET = "sk-facts-secret-456"
SCRIPT, ENV = "/opt/sglang/bin/serve_dsv4_decode.sh", "/etc/sglang/dsv4-decode.env"
FACTS = "/etc/ansible/facts.d/sglang.fact"
SINCE = "2026-11-30T12:00:00Z"


def _host(root: Path, facts: dict[str, object]) -> HostFiles:
    for path, text in ((SCRIPT, "#!/bin/sh\nexec python3 -m sglang.launch_server --port 30001\n"),
                       (ENV, ""), (FACTS, json.dumps(facts))):  # fmt: skip
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return HostFiles(root=str(root))


def test_the_key_is_redacted_in_the_deployed_record_and_in_a_deploy_in_progress(tmp_path: Path) -> None:
    marker = {
        "since": SINCE,
        "envelope": {"port": 30001, "api_key": SECRET},
        "release": "r2",
        "files": ["env_file"],
        "previous": [{"envelope": {"api_key": SECRET}}],  # a nested copy (a list of records) is redacted too
    }
    facts = {"decode": {"unit": "sglang-dsv4-decode", "envelope": {"port": 30001, "api_key": SECRET},
                        "in_progress": marker}}  # fmt: skip
    layers = read_layers("decode", "sglang-dsv4-decode", SCRIPT, ENV, FACTS, _host(tmp_path, facts))
    assert layers.deployed == {"port": 30001, "api_key": "<redacted>"}
    assert layers.in_progress == {
        "since": SINCE,
        "envelope": {"port": 30001, "api_key": "<redacted>"},
        "release": "r2",
        "files": ["env_file"],
        "previous": [{"envelope": {"api_key": "<redacted>"}}],
    }
    assert SECRET not in json.dumps(layers.snapshot())


def test_an_unset_key_stays_unset(tmp_path: Path) -> None:
    """No key recorded (null): nothing to hide, and the judge must still see that none is set."""
    marker = {"since": SINCE, "envelope": {"port": 30001, "api_key": None}, "files": []}
    facts = {"decode": {"envelope": {"port": 30001, "api_key": None}, "in_progress": marker}}
    layers = read_layers("decode", "sglang-dsv4-decode", SCRIPT, ENV, FACTS, _host(tmp_path, facts))
    assert layers.deployed == {"port": 30001, "api_key": None}
    assert layers.in_progress == marker


def test_a_record_without_an_envelope_gives_none() -> None:
    """A record the first deploy is still writing (its marker only) has no envelope yet: None, never a guess."""
    facts = {"decode": {"in_progress": {"since": "2026-11-30T12:00:00Z"}, "files": {"script": {"sha1": "ab12"}}}}
    assert deployed_record(facts, "decode") == (None, {"script": "ab12"})
    assert deployed_record({"decode": {"envelope": "broken"}}, "decode") == (None, {})
    assert deployed_record({"decode": {"envelope": {"api_key": None}}}, "decode") == ({"api_key": None}, {})
