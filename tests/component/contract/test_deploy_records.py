"""sglang_deploy_records, the one writer of the deploy's records, run by Ansible itself on this machine; what it writes
is read back by the readers the deploy and the audit use (sglang_host_info, sglang_layers)."""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import subprocess
import sys
from pathlib import Path
from typing import Any

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_layers import HostFiles, read_layers
from deploytools import REPO

ME = {"owner": pwd.getpwuid(os.getuid()).pw_name, "group": grp.getgrgid(os.getgid()).gr_name}


def records_module(*flags: str, **args: Any) -> dict[str, Any]:
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("ansible")), "localhost", "-c", "local", *flags,
         "-m", "sglang.dsv4.sglang_deploy_records", "-a", json.dumps(args), "-o"],
        capture_output=True, text=True, check=False, cwd=REPO,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return dict(json.loads(proc.stdout.split("=>", 1)[1]))


def spec(tmp_path: Path) -> dict[str, Any]:
    facts = tmp_path / "facts.d"
    return {
        "facts_file": str(facts / "sglang.fact"), "release_fact_file": str(facts / "sglang_release.fact"),
        **ME, "mode": "0640", "dir": {"path": str(facts), **ME, "mode": "0755"},
    }  # fmt: skip


def mode(path: Path) -> str:
    return f"{path.stat().st_mode & 0o7777:04o}"


def test_marker_then_record_then_a_rerun_that_writes_nothing(tmp_path: Path) -> None:
    records = spec(tmp_path)
    deployed = {"decode": {"unit": "sglang-dsv4-decode", "release": "r1", "envelope": {"mem_fraction_static": 0.83}}}
    marker = {"server": "decode", "envelope": {"mem_fraction_static": 0.82}, "release": "r1", "files": ["script"]}
    got = records_module(records=records, deployed=deployed, in_progress=marker)
    facts = Path(records["facts_file"])
    assert got["changed"] and got["written"] == [str(facts)]
    assert mode(facts) == "0640" and mode(facts.parent) == "0755"  # the folder was missing: created
    written = json.loads(facts.read_text())
    since = written["decode"]["in_progress"].pop("since")
    assert len(since) == 20 and since.endswith("Z")
    assert written["decode"]["in_progress"] == {"envelope": {"mem_fraction_static": 0.82}, "release": "r1",
                                                "files": ["script"]}  # fmt: skip
    # The audit's reader sees the marker, and the last passed envelope beside it.
    layers = read_layers("decode", "sglang-dsv4-decode", "/nowhere.sh", "/nowhere.env", records["facts_file"],
                         HostFiles(), ticks=100)  # fmt: skip
    assert layers.deployed == {"mem_fraction_static": 0.83}
    assert layers.in_progress is not None and layers.in_progress["envelope"] == {"mem_fraction_static": 0.82}

    got = records_module(records=records, deployed=deployed)
    assert got["changed"]
    assert facts.read_text() == (
        '{\n  "decode": {\n    "envelope": {\n      "mem_fraction_static": 0.83\n    },\n'
        '    "release": "r1",\n    "unit": "sglang-dsv4-decode"\n  }\n}\n'
    )
    assert got["facts_sha1"] == hashlib.sha1(facts.read_bytes()).hexdigest()
    again = records_module(records=records, deployed=deployed)
    assert not again["changed"] and again["written"] == [] and again["facts_sha1"] == got["facts_sha1"]

    facts.chmod(0o644)  # metadata alone differs: written again
    assert records_module(records=records, deployed=deployed)["written"] == [str(facts)]
    assert mode(facts) == "0640"


def test_release_switch_recorded_then_ended(tmp_path: Path) -> None:
    records = spec(tmp_path)
    switch = Path(records["release_fact_file"])
    records_module(records=records, release_switch={"to": "wh-b", "from": "wh-a"})
    record = json.loads(switch.read_text())["in_progress"]
    assert record["to"] == "wh-b" and record["from"] == "wh-a" and record["since"].endswith("Z")
    layers = read_layers("decode", "sglang-dsv4-decode", "/nowhere.sh", "/nowhere.env", None, HostFiles(), ticks=100,
                         releases_dir=str(tmp_path / "releases"), release_fact_file=str(switch))  # fmt: skip
    assert layers.release_switch == record

    got = records_module(records=records, release_switch_done=True)
    assert got["removed"] == [str(switch)] and not switch.exists()
    assert records_module(records=records, release_switch_done=True)["changed"] is False


def test_backups_cleared_and_nothing_else(tmp_path: Path) -> None:
    script = tmp_path / "serve_dsv4_decode.sh"
    script.write_text("#!/bin/bash\n")
    backup = tmp_path / "serve_dsv4_decode.sh.4242.2026-12-04@10:00:00~"
    backup.write_text("old\n")
    kept = [tmp_path / "serve_dsv4_decode.sh.bak", tmp_path / "serve_dsv4_prefill.sh.17.2026-12-04@10:00:00~"]
    for path in kept:
        path.write_text("other\n")
    assert HostFiles().backups(str(script)) == [str(backup)]

    dry = records_module("--check", records=spec(tmp_path), clear_backups=[str(script)])
    assert dry["changed"] and dry["removed"] == [str(backup)] and backup.exists()
    got = records_module(records=spec(tmp_path), clear_backups=[str(script)])
    assert got["removed"] == [str(backup)] and not backup.exists()
    assert script.exists() and all(path.exists() for path in kept)


def test_check_mode_writes_nothing(tmp_path: Path) -> None:
    records = spec(tmp_path)
    got = records_module("--check", records=records, deployed={"router": {"unit": "sglang-dsv4-router"}},
                         release_switch={"to": "wh-b", "from": None})  # fmt: skip
    assert got["changed"] and sorted(got["written"]) == sorted([records["facts_file"], records["release_fact_file"]])
    assert not Path(records["dir"]["path"]).exists()


def test_diff_shows_each_record_before_and_after(tmp_path: Path) -> None:
    """--diff shows a record's text before and after, as the copy module would; a backup removed is not shown."""
    records = spec(tmp_path)
    records_module(records=records, deployed={"router": {"release": "a"}})
    backup = tmp_path / "unit.service.1.2026-12-04@10:00:00~"
    backup.write_text("old\n")
    args = {"records": records, "deployed": {"router": {"release": "b"}}, "release_switch_done": True,
            "clear_backups": [str(tmp_path / "unit.service")]}  # fmt: skip
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("ansible")), "localhost", "-c", "local", "--check", "--diff",
         "-m", "sglang.dsv4.sglang_deploy_records", "-a", json.dumps(args)],
        capture_output=True, text=True, check=False, cwd=REPO,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    facts = records["facts_file"]
    assert f"--- before: {facts}\n+++ after: {facts}\n" in proc.stdout, proc.stdout
    assert '-    "release": "a"\n+    "release": "b"\n' in proc.stdout, proc.stdout
    assert str(backup) not in proc.stdout.split("+++ after:", 1)[1].split("=>", 1)[0]
    assert backup.exists()
