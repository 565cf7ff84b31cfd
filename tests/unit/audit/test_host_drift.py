"""The audit beyond the envelope keys: owner, group and mode of the files, leftover backups, interrupted deploys
(plugins/modules/sglang_layers_info.py reading, plugins/module_utils/sglang_drift.py judging: host_drift, as judge calls
it)."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_drift import (
    compare,
    host_drift,
    interrupted_deploy,
)
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_hostfs import files_to_write
from audit_helpers import load_cases, load_library, run_module
from test_sglang_layers import CASES, TICKS, build_host

layers = load_library("sglang_layers_info")
SCRIPT, ENV, UNIT = (
    "/opt/sglang/bin/serve_dsv4_decode.sh",
    "/etc/sglang/dsv4-decode.env",
    "/etc/systemd/system/sglang-dsv4-decode.service",
)
FACTS = "/etc/ansible/facts.d/sglang.fact"
ROOT_META = {"owner": "root", "group": "root"}
DECLARED = {
    "script": {**ROOT_META, "mode": "0755"},
    "env_file": {**ROOT_META, "mode": "0640"},
    "unit": {**ROOT_META, "mode": "0644"},
}


def _case() -> dict[str, Any]:
    return next(p.values[0] for p in load_cases(CASES) if p.id == "decode_files_and_process_agree")


def _host(tmp_path: Path, facts: dict[str, Any] | None = None) -> Any:
    host = build_host(tmp_path, _case())
    for path, mode in ((SCRIPT, 0o755), (ENV, 0o640), (UNIT, 0o644)):
        os.chmod(tmp_path / path.lstrip("/"), mode)
    if facts is not None:
        target = tmp_path / FACTS.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(facts))
    return host


def _run(tmp_path: Path, host: Any, declared_files: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """The module's result, with the drift the judge finds on the host side (`drift`)."""
    args = {"role": "decode", "name": "lab1", "facts_file": FACTS, "script": SCRIPT, "env_file": ENV, **extra}
    result = run_module(layers, args, host=host)
    assert not result.get("failed"), result.get("msg")
    drift = host_drift(
        result["files"], DECLARED if declared_files is None else declared_files, result["backups"], result["deployed"],
        result["in_progress"], result["releases"], result["release_switch"],
    )  # fmt: skip
    return {**result, "drift": [asdict(d) for d in drift]}


@pytest.fixture(autouse=True)
def _ticks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sysconf", lambda name: TICKS if name == "SC_CLK_TCK" else os.sysconf(name))


@pytest.mark.skipif(os.geteuid() != 0, reason="the files must be root:root (run as root)")
def test_declared_metadata_is_clean(tmp_path: Path) -> None:
    result = _run(tmp_path, _host(tmp_path))
    assert result["drift"] == [], result["drift"]
    assert result["files"]["env_file"]["mode"] == "0640"
    assert result["files"]["env_file"]["group"] == "root"


def test_wrong_group_and_mode_are_drift_with_origin(tmp_path: Path) -> None:
    host = _host(tmp_path)
    os.chmod(tmp_path / ENV.lstrip("/"), 0o644)
    declared = {**DECLARED, "env_file": {"owner": "root", "group": "sglang-nonexistent", "mode": "0640"}}
    result = _run(tmp_path, host, declared_files=declared)
    items = {d["key"]: d for d in result["drift"]}
    assert set(items) >= {"file:env_file"}, result["drift"]
    env = items["file:env_file"]
    assert env["layer"] == "on_disk" and env["severity"] == "drift"
    assert env["declared"] == "root:sglang-nonexistent 0640"
    assert env["live"].endswith(" 0644")
    assert "group, mode differ" in env["explanation"] and "rerun site.yml" in env["explanation"]


def test_leftover_backups_are_reported(tmp_path: Path) -> None:
    host = _host(tmp_path)
    backup = f"{SCRIPT}.1234.2026-11-30@12:00:00~"
    (tmp_path / backup.lstrip("/")).write_text("old\n")
    result = _run(tmp_path, host, declared_files={})
    assert result["backups"] == [backup]
    items = {d["key"]: d for d in result["drift"]}
    assert items["backups"]["live"] == [backup]


def test_interrupted_deploy_is_reported_as_one_not_as_a_hand_edit(tmp_path: Path) -> None:
    deployed = dict(_case()["output"]["on_disk"], max_running_requests=32)
    marker = {"since": "2026-11-30T12:00:00Z", "envelope": _case()["output"]["on_disk"], "files": ["script"]}
    facts = {"decode": {"unit": "sglang-dsv4-decode", "envelope": deployed, "in_progress": marker}}
    result = _run(tmp_path, _host(tmp_path, facts), declared_files={})
    assert result["in_progress"]["since"] == "2026-11-30T12:00:00Z"
    deploy = next(d for d in result["drift"] if d["key"] == "deploy")
    assert deploy["explanation"].startswith("interrupted deploy of max_running_requests 32 -> 64")
    assert deploy["explanation"].endswith("at 2026-11-30T12:00:00Z: rerun site.yml")
    # The deploy was run with a declaration (extra vars) the inventory does not hold: declared and recorded agree,
    # files and process run the new value. That is the interrupted deploy, not a hand edit.
    declared = deployed
    audit = compare("decode", declared, result["on_disk"], result["running"], deployed=result["deployed"],
                    in_progress=result["in_progress"])  # fmt: skip
    item = next(d for d in audit.drift if d.key == "max_running_requests")
    assert "edited on the host" not in item.explanation
    assert item.explanation == interrupted_deploy(marker, deployed)
    # Without the marker, the same state reads as a declaration that changed without a deploy.
    plain = compare("decode", declared, result["on_disk"], result["running"], deployed=result["deployed"])
    assert "interrupted" not in next(d for d in plain.drift if d.key == "max_running_requests").explanation


def test_host_drift_ignores_missing_files() -> None:
    files = {"script": {"path": SCRIPT, "exists": False}}
    assert host_drift(files, DECLARED, [], None) == []


def test_releases_not_current_previous_or_kept_are_shown(tmp_path: Path) -> None:
    host = _host(tmp_path)
    releases = tmp_path / "opt/sglang/releases"
    for age, name in enumerate(["r-new", "r-cur", "r-prev", "r-3", "r-old", "r-partial"]):
        (releases / name).mkdir(parents=True)
        if name != "r-partial":
            (releases / name / "manifest.json").write_text("{}")
        os.utime(releases / name, (2_000_000_000 - age * 10, 2_000_000_000 - age * 10))
    os.utime(releases / "r-partial", (2_000_000_100, 2_000_000_100))  # the newest, but never completed
    (tmp_path / "opt/sglang/current").symlink_to("/opt/sglang/releases/r-cur")
    (tmp_path / "opt/sglang/previous").symlink_to("/opt/sglang/releases/r-prev")
    result = _run(tmp_path, host, declared_files={}, releases_dir="/opt/sglang/releases", keep_releases=2)
    assert result["releases"] == ["/opt/sglang/releases/r-3", "/opt/sglang/releases/r-old",
                                  "/opt/sglang/releases/r-partial"]  # fmt: skip
    item = next(d for d in result["drift"] if d["key"] == "releases")
    assert item["severity"] == "info" and item["live"] == result["releases"]


def test_interrupted_release_switch_is_reported_from_its_record(tmp_path: Path) -> None:
    """The record the engine roles write before a new release is unpacked (roles/sglang_common/tasks/release_switch.yml)
    makes the audit report an interrupted switch; without it, an unlinked new release is only information."""
    host = _host(tmp_path)
    (tmp_path / "opt/sglang/releases/wh-new").mkdir(parents=True)
    (tmp_path / "opt/sglang/releases/wh-old").mkdir(parents=True)
    (tmp_path / "opt/sglang/current").symlink_to("/opt/sglang/releases/wh-old")
    args = {"declared_files": {}, "releases_dir": "/opt/sglang/releases", "keep_releases": 2,
            "release_fact_file": "/etc/ansible/facts.d/sglang_release.fact"}  # fmt: skip
    assert not any(d["key"] == "release" for d in _run(tmp_path, host, **args)["drift"])
    record = {"in_progress": {"to": "wh-new", "from": "wh-old", "since": "2026-11-30T16:00:00Z"}}
    (tmp_path / "etc/ansible/facts.d").mkdir(parents=True, exist_ok=True)
    (tmp_path / "etc/ansible/facts.d/sglang_release.fact").write_text(json.dumps(record))
    result = _run(tmp_path, host, **args)
    assert result["release_switch"] == record["in_progress"]
    item = next(d for d in result["drift"] if d["key"] == "release")
    assert item["severity"] == "drift" and item["live"] == "wh-new"
    assert item["explanation"] == (
        "interrupted switch to release wh-new (from wh-old) at 2026-11-30T16:00:00Z: not every engine of the host runs "
        "the current release; rerun site.yml"
    )
    # The router has no releases: the record is not its business.
    assert (
        _run(tmp_path, host, declared_files={}, release_fact_file=args["release_fact_file"])["release_switch"] is None
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="the files must be root:root (run as root)")
def test_files_to_write_are_those_whose_content_or_metadata_differ(tmp_path: Path) -> None:
    """What the deploy compares before writing (roles/sglang_common/tasks/server.yml): the module's checksums of the
    host's files against the rendered ones: same content and metadata writes nothing; each difference writes that
    file only; a file at another path or absent is written."""
    host = _host(tmp_path)
    files = _run(tmp_path, host, checksums=True)["files"]
    texts = {name: (tmp_path / info["path"].lstrip("/")).read_bytes() for name, info in files.items()}
    wanted = {
        name: {"path": files[name]["path"], "sha1": hashlib.sha1(texts[name]).hexdigest(), **DECLARED[name]}
        for name in DECLARED
    }
    assert all(files[name]["sha1"] == wanted[name]["sha1"] for name in DECLARED), files
    assert files_to_write(files, wanted) == []
    edited = {**wanted, "script": {**wanted["script"], "sha1": hashlib.sha1(texts["script"] + b"#").hexdigest()}}
    assert files_to_write(files, edited) == ["script"]
    assert files_to_write(files, {**wanted, "env_file": {**wanted["env_file"], "mode": "0600"}}) == ["env_file"]
    assert files_to_write(files, {**wanted, "unit": {**wanted["unit"], "path": "/etc/systemd/system/x.service"}}) == [
        "unit"
    ]
    os.remove(tmp_path / SCRIPT.lstrip("/"))
    assert files_to_write(_run(tmp_path, host, checksums=True)["files"], wanted) == ["script"]
    assert "sha1" not in _run(tmp_path, host)["files"]["env_file"]
