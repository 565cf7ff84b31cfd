"""The deploy's records in the local facts (module_utils/sglang_records.py): the exact JSON text written, the keys of
the in-progress markers, the timestamp format under a fixed clock, and how a record is read back from the host."""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_records
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_records import (
    backups_beside,
    marked,
    now,
    parse_facts,
    read_facts,
    read_text,
    record_text,
    server_record,
    switch_record,
)

SINCE = "2026-11-30T12:00:00Z"


def test_a_record_is_written_as_indented_json_with_sorted_keys_and_a_final_newline() -> None:
    record = {"b": 1, "a": {"d": [1, 2], "c": None}}
    assert record_text(record) == (
        '{\n  "a": {\n    "c": null,\n    "d": [\n      1,\n      2\n    ]\n  },\n  "b": 1\n}\n'
    )


def test_the_switch_record_text_is_the_same_bytes_whatever_the_key_order() -> None:
    text = '{\n  "in_progress": {\n    "from": "r1",\n    "since": "2026-11-30T12:00:00Z",\n    "to": "r2"\n  }\n}\n'
    assert record_text(switch_record("r2", "r1", SINCE)) == text
    assert record_text({"in_progress": {"to": "r2", "since": SINCE, "from": "r1"}}) == text


def test_the_switch_record_names_the_release_switched_to_the_previous_one_and_since_when() -> None:
    assert switch_record("r2", "r1", SINCE) == {"in_progress": {"to": "r2", "from": "r1", "since": SINCE}}
    assert switch_record("r1", None, SINCE) == {"in_progress": {"to": "r1", "from": None, "since": SINCE}}


def test_now_is_the_utc_time_in_iso_8601_with_a_z(monkeypatch: pytest.MonkeyPatch) -> None:
    real_gmtime = time.gmtime
    monkeypatch.setattr(sglang_records.time, "gmtime", lambda secs=None: real_gmtime(1_000_000_000))
    assert now() == "2001-09-09T01:46:40Z"


def test_now_pads_each_field_to_its_width(monkeypatch: pytest.MonkeyPatch) -> None:
    real_gmtime = time.gmtime
    monkeypatch.setattr(sglang_records.time, "gmtime", lambda secs=None: real_gmtime(31_539_661))  # 1971-01-01T01:01:01
    assert now() == "1971-01-01T01:01:01Z"


def test_marking_a_deployed_server_keeps_its_record_and_adds_the_marker() -> None:
    deployed: dict[str, Any] = {
        "decode": {"unit": "sglang-dsv4-decode", "release": "r1", "files": {"env_file": {"sha1": "ab"}}},
        "prefill": {"unit": "sglang-dsv4-prefill", "release": "r1"},
    }
    marker = {"envelope": {"port": 30001}, "release": "r2", "files": ["env_file"]}
    assert marked(deployed, "decode", marker, SINCE) == {
        "decode": {
            "unit": "sglang-dsv4-decode",
            "release": "r1",
            "files": {"env_file": {"sha1": "ab"}},
            "in_progress": {"envelope": {"port": 30001}, "release": "r2", "files": ["env_file"], "since": SINCE},
        },
        "prefill": {"unit": "sglang-dsv4-prefill", "release": "r1"},
    }
    assert deployed["decode"] == {"unit": "sglang-dsv4-decode", "release": "r1", "files": {"env_file": {"sha1": "ab"}}}
    assert marker == {"envelope": {"port": 30001}, "release": "r2", "files": ["env_file"]}


def test_marking_a_server_never_deployed_gives_it_a_record_of_the_marker_alone() -> None:
    marker = {"envelope": {}, "release": "r1", "files": []}
    expected = {"in_progress": {"envelope": {}, "release": "r1", "files": [], "since": SINCE}}
    assert marked({}, "decode", marker, SINCE) == {"decode": expected}
    assert marked({"decode": None}, "decode", marker, SINCE) == {"decode": expected}


def test_the_marker_since_is_the_one_given_even_over_a_since_in_the_marker() -> None:
    got = marked({}, "router", {"since": "old", "release": "r3"}, SINCE)
    assert got == {"router": {"in_progress": {"since": SINCE, "release": "r3"}}}


@pytest.mark.parametrize("raw", [None, "", "not json", "[1, 2]", '"text"', "3"])
def test_facts_text_that_is_missing_not_json_or_not_a_mapping_reads_as_none(raw: str | None) -> None:
    assert parse_facts(raw) is None


def test_facts_text_of_a_mapping_reads_as_that_mapping() -> None:
    assert parse_facts('{"decode": {"release": "r1"}}') == {"decode": {"release": "r1"}}


@pytest.mark.parametrize("facts", [{"decode": "r1"}, {"decode": ["r1"]}, {"decode": None}, {}, ["decode"], None])
def test_a_server_record_that_is_not_a_mapping_is_none(facts: Any) -> None:
    assert server_record(facts, "decode") is None


def test_a_server_record_that_is_a_mapping_is_returned() -> None:
    assert server_record({"decode": {"release": "r1"}}, "decode") == {"release": "r1"}


def test_read_text_is_none_for_a_missing_file_or_one_under_a_file(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("x", encoding="utf-8")
    assert read_text(str(tmp_path / "absent.fact")) is None
    assert read_text(str(tmp_path / "plain" / "sglang.fact")) is None


def test_read_text_reads_utf_8_whatever_the_host_locale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "sglang.fact"
    path.write_bytes('{"decode": {"note": "café ü"}}\n'.encode())
    real = io.text_encoding
    monkeypatch.setattr(io, "text_encoding", lambda encoding, stacklevel=2: real(encoding or "latin-1"))
    assert read_text(str(path)) == '{"decode": {"note": "café ü"}}\n'
    assert read_facts(str(path)) == {"decode": {"note": "café ü"}}


def test_read_facts_reads_the_record_and_is_none_without_one(tmp_path: Path) -> None:
    path = tmp_path / "sglang.fact"
    path.write_text(record_text({"decode": {"release": "r1", "unit": "sglang-dsv4-decode"}}), encoding="utf-8")
    assert read_facts(str(path)) == {"decode": {"release": "r1", "unit": "sglang-dsv4-decode"}}
    assert read_facts(str(tmp_path / "absent.fact")) is None
    (tmp_path / "list.fact").write_text("[]", encoding="utf-8")
    assert read_facts(str(tmp_path / "list.fact")) is None


def test_backups_beside_a_file_on_the_local_root_by_default(tmp_path: Path) -> None:
    for name in ("dsv4-decode.env", "dsv4-decode.env.4242.2026-11-30@12:00:00~", "dsv4-prefill.env.1.2026~"):
        (tmp_path / name).write_text("", encoding="utf-8")
    path = str(tmp_path / "dsv4-decode.env")
    assert backups_beside(path) == [f"{tmp_path}/dsv4-decode.env.4242.2026-11-30@12:00:00~"]


def test_backups_beside_a_host_path_under_a_mounted_root_keep_the_host_path(tmp_path: Path) -> None:
    folder = tmp_path / "Xsglang"
    folder.mkdir()
    for name in ("dsv4.env", "dsv4.env.9.2026-11-30@12:00:01~", "dsv4.env.8.2026-11-30@12:00:00~"):
        (folder / name).write_text("", encoding="utf-8")
    assert backups_beside("/Xsglang/dsv4.env", root=str(tmp_path)) == [
        "/Xsglang/dsv4.env.8.2026-11-30@12:00:00~",
        "/Xsglang/dsv4.env.9.2026-11-30@12:00:01~",
    ]
    assert backups_beside("/absent/dsv4.env", root=str(tmp_path)) == []
