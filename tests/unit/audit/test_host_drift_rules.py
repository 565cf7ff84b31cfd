"""The host findings beyond the envelope keys, each as the audit reports it: interrupted release switch and
deploy, file metadata, leftover backups and releases (synthetic layer readings, typed for each rule)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_drift import (
    LiveContext,
    change_summary,
    expected_running,
    host_drift,
    interrupted_deploy,
)

ROOT = {"owner": "root", "group": "root"}
DECLARED = {"script": {**ROOT, "mode": "0755"}, "env_file": {**ROOT, "mode": "0640"}}


def _file(path: str, **meta: Any) -> dict[str, Any]:
    return {"path": path, "exists": True, **ROOT, "mode": "0755", **meta}


def test_every_finding_of_one_host_in_order() -> None:
    files = {
        "script": _file("/opt/sglang/bin/serve_dsv4_decode.sh", group="sglang", mode="0775"),
        "env_file": _file("/etc/sglang/dsv4-decode.env", mode="0640"),
    }
    found = host_drift(
        files,
        DECLARED,
        ["/etc/sglang/dsv4-decode.env.1234.2026-11-30@10:00:00~"],
        {"context_length": 262144},
        in_progress={"since": "2026-11-30T10:00:00Z", "files": ["script"], "envelope": {"context_length": 524288}},
        releases=["r0"],
        release_switch={"to": "r2", "from": "r1", "since": "2026-11-30T09:59:00Z"},
    )
    assert [asdict(d) for d in found] == [
        {
            "key": "release",
            "layer": "on_disk",
            "layers": ["on_disk"],
            "declared": None,
            "live": "r2",
            "severity": "drift",
            "explanation": "interrupted switch to release r2 (from r1) at 2026-11-30T09:59:00Z: not every engine of "
            "the host runs the current release; rerun site.yml",
        },
        {
            "key": "deploy",
            "layer": "on_disk",
            "layers": ["on_disk"],
            "declared": None,
            "live": "2026-11-30T10:00:00Z",
            "severity": "drift",
            "explanation": "interrupted deploy of context_length 262144 -> 524288, files script at "
            "2026-11-30T10:00:00Z: rerun site.yml",
        },
        {
            "key": "file:script",
            "layer": "on_disk",
            "layers": ["on_disk"],
            "declared": "root:root 0755",
            "live": "root:sglang 0775",
            "severity": "drift",
            "explanation": "/opt/sglang/bin/serve_dsv4_decode.sh is root:sglang 0775, the roles declare root:root "
            "0755 (group, mode differ): changed on the host or left by an interrupted rollback; rerun site.yml",
        },
        {
            "key": "backups",
            "layer": "on_disk",
            "layers": ["on_disk"],
            "declared": [],
            "live": ["/etc/sglang/dsv4-decode.env.1234.2026-11-30@10:00:00~"],
            "severity": "drift",
            "explanation": "backup copies left by a deploy that did not finish (a finished deploy removes them once "
            "the server passed its gate): rerun site.yml",
        },
        {
            "key": "releases",
            "layer": "on_disk",
            "layers": ["on_disk"],
            "declared": [],
            "live": ["r0"],
            "severity": "info",
            "explanation": "releases that are neither current, previous nor among the newest kept (one without "
            "manifest.json is an install or switch that did not finish); the next release install prunes them, or "
            "remove them by hand",
        },
    ]


def test_a_clean_host_has_no_finding() -> None:
    files = {"script": _file("/s"), "env_file": _file("/e", mode="0640")}
    assert host_drift(files, DECLARED, [], {"port": 1}, releases=[]) == []


@pytest.mark.parametrize(
    "have",
    [{"exists": False, **ROOT, "mode": "0600"}, {"exists": True, **ROOT}, {}],
    ids=["absent-file", "no-metadata-read", "not-read"],
)
def test_a_file_not_read_is_not_judged(have: dict[str, Any]) -> None:
    assert host_drift({"script": have}, {"script": DECLARED["script"]}, [], None) == []


def test_owner_alone_differs() -> None:
    (found,) = host_drift({"script": _file("/s", owner="sglang")}, {"script": DECLARED["script"]}, [], None)
    assert found.explanation.startswith("/s is sglang:root 0755, the roles declare root:root 0755 (owner differ)")


def test_an_unknown_switch_time_is_said() -> None:
    (found,) = host_drift({}, None, [], None, release_switch={"to": "r2", "from": None})
    assert found.explanation.startswith("interrupted switch to release r2 (from None) at an unknown time: ")


@pytest.mark.parametrize(
    ("before", "after", "extra", "summary"),
    [
        ({}, {}, {}, "the same envelope"),
        ({"a": 1}, {"a": 1}, {"release": None, "files": ""}, "the same envelope"),
        ({"a": 1}, {}, {}, "a 1 -> None"),
        ({}, {"b": 2}, {}, "b None -> 2"),
        (
            {"a": 1, "b": 1, "c": 1, "d": 1},
            {"a": 2, "b": 2, "c": 2, "d": 2},
            {},
            "a 1 -> 2, b 1 -> 2, c 1 -> 2, d 1 -> 2",
        ),
        (
            {"a": 1, "b": 1, "c": 1, "d": 1, "e": 1},
            {"a": 2, "b": 2, "c": 2, "d": 2, "e": 2},
            {},
            "a 1 -> 2, b 1 -> 2, c 1 -> 2, d 1 -> 2, 1 more keys",
        ),
        ({"a": 1}, {"a": 2}, {"release": "r2", "files": "script, unit"}, "a 1 -> 2, release r2, files script, unit"),
    ],
    ids=["empty", "unchanged", "removed", "added", "four", "five", "extras"],
)
def test_the_change_summary(before: dict[str, Any], after: dict[str, Any], extra: dict[str, Any], summary: str) -> None:
    assert change_summary(before, after, **extra) == summary


def test_an_interrupted_deploy_without_time_or_files() -> None:
    text = interrupted_deploy({"release": "r3"}, None)
    assert text == "interrupted deploy of release r3 at an unknown time: rerun site.yml"


@pytest.mark.parametrize(
    ("requested", "capacity", "dp", "expected"),
    [
        (None, 100_000, 1, None),
        (64, None, 1, None),
        (64, 100_000, 1, 64),
        (64, 100, 1, 50),
        (64, 100_000, 4, 64),
        (6, 100_000, 4, 4),
        (2, 100_000, 4, 4),
    ],
)
def test_running_requests_sglang_applies(
    requested: int | None, capacity: int | None, dp: int, expected: int | None
) -> None:
    """SGLang splits the limit over the attention-DP ranks (at least one each) and caps it at half the pool."""
    ctx = LiveContext(token_capacity=capacity, attn_dp_size=dp)
    assert expected_running(requested, ctx) == expected
