"""The layer reader (sglang_layers.read_layers, what the sglang_layers_info module returns) never hands back the API
key it finds in the local facts: not from the last deploy's record, and not from the record of a deploy in progress,
at any depth."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_flags import api_key_file
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_layers import HostFiles, read_layers
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_records import deployed_record
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_sidedoors import _redacted

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


def test_the_key_of_an_environment_file(tmp_path: Path) -> None:
    """What the verify probes send as the key: SGLANG_API_KEY of the server's environment file, else nothing."""
    env = tmp_path / "dsv4-decode.env"
    env.write_text("SGLANG_DSV4_BF16_INDEX_K=1\nSGLANG_API_KEY=s3cret\n", encoding="utf-8")
    assert api_key_file(str(env)) == "s3cret"
    (tmp_path / "nokey.env").write_text("SGLANG_DSV4_BF16_INDEX_K=1\n", encoding="utf-8")
    assert api_key_file(str(tmp_path / "nokey.env")) is None
    assert api_key_file(str(tmp_path / "absent.env")) is None
    assert api_key_file("") is None and api_key_file(None) is None


@pytest.mark.parametrize(
    ("extra", "shown"),
    [
        (["--api-key", "s3cret", "--port", "8000"], ["--api-key", "<redacted>", "--port", "8000"]),
        (["--api-key=s3cret"], ["--api-key=<redacted>"]),
        (["--api-k", "s3cret"], ["--api-k", "<redacted>"]),  # argparse takes an unambiguous abbreviation
        (["--api=s3cret", "--ap", "x"], ["--api=<redacted>", "--ap", "<redacted>"]),
        (["--a", "x", "--api-keys", "y"], ["--a", "x", "--api-keys", "y"]),  # too short, or another option
        (["--port", "--api-key"], ["--port", "--api-key"]),  # nothing after it to hide
        ([8000, "--api-key", 123], ["8000", "--api-key", "<redacted>"]),
    ],
    ids=["separate", "inline", "abbreviated", "shortest-abbreviations", "not-the-key", "key-last", "non-strings"],
)
def test_router_extra_args_are_shown_without_the_key(extra: list[Any], shown: list[str]) -> None:
    assert _redacted(extra) == shown
