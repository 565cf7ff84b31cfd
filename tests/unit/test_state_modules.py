"""The modules that change a host, run in this process on this machine: sglang_deploy_records (the deploy's
records) and the action sglang_render_files (the rendered server files). For each: check mode changes nothing; a
second call in the middle state behaves; owners and modes other than the defaults are the ones written; the
temporary file of an atomic write is made beside its target (one file system, so the rename is atomic) and does not
outlive a failed write. (The HAProxy front's drain and ready: test_front_module.py; the preflight:
test_preflight_module.py; the router's workers: tests/component/sim/test_rollout.py.)"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from audit.audit_helpers import load_library, run_module
from unituser import UnitUser, unit_user

RECORDS = load_library("sglang_deploy_records")
RENDER = load_library("sglang_render_files", "action")


@pytest.fixture
def user() -> Iterator[UnitUser]:
    with unit_user() as made:
        yield made


@pytest.fixture
def umask_022() -> Iterator[None]:
    before = os.umask(0o022)
    yield
    os.umask(before)


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o7777


def tree(root: Path) -> dict[str, tuple[bytes, int, int, int, int]]:
    """Every file and folder under `root`: content, mode, owner, group and mtime (what a change would touch)."""
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else b"", mode(p), p.stat().st_uid,
                                   p.stat().st_gid, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
    }  # fmt: skip


@pytest.fixture
def temporaries(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Each temporary file the modules make: its folder and that folder's device (its name in `names`)."""
    made: list[tuple[str, int]] = []
    real = tempfile.mkstemp

    def mkstemp(*args: Any, **kwargs: Any) -> tuple[int, str]:
        handle, path = real(*args, **kwargs)
        made.append((os.path.dirname(path), os.stat(os.path.dirname(path)).st_dev))
        NAMES.append(os.path.basename(path))
        return handle, path

    NAMES.clear()
    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    return made


NAMES: list[str] = []  # the temporary files' names, of the test that uses `temporaries`


# ---------------------------------------------------------------- sglang_deploy_records


def records_spec(root: Path, owner: str = "root", group: str = "root", file_mode: str = "0640",
                 dir_mode: str = "0755") -> dict[str, Any]:  # fmt: skip
    facts = root / "facts.d"
    return {"facts_file": str(facts / "sglang.fact"), "release_fact_file": str(facts / "sglang_release.fact"),
            "owner": owner, "group": group, "mode": file_mode,
            "dir": {"path": str(facts), "owner": owner, "group": group, "mode": dir_mode}}  # fmt: skip


DEPLOYED = {"decode": {"unit": "sglang-dsv4-decode", "release": "r1", "envelope": {"mem_fraction_static": 0.83}}}
MARKER = {"server": "decode", "envelope": {"mem_fraction_static": 0.82}, "release": "r1", "files": ["script"]}


def test_records_check_mode_changes_nothing_on_the_host(tmp_path: Path) -> None:
    """Records already written, then every kind of change asked in check mode: each is reported, none is made."""
    spec = records_spec(tmp_path)
    run_module(RECORDS, {"records": spec, "deployed": DEPLOYED, "release_switch": {"to": "wh-b", "from": "wh-a"}})
    backup = tmp_path / "serve.sh.17.2026-12-04@10:00:00~"
    backup.write_text("old\n")
    before = tree(tmp_path)
    got = run_module(RECORDS, {"records": spec, "deployed": DEPLOYED, "in_progress": MARKER,
                               "release_switch_done": True, "clear_backups": [str(tmp_path / "serve.sh")],
                               "_ansible_check_mode": True})  # fmt: skip
    assert got["changed"] and got["written"] == [spec["facts_file"]]
    assert got["removed"] == [spec["release_fact_file"], str(backup)]
    assert tree(tmp_path) == before


def test_records_written_with_an_owner_and_modes_other_than_the_defaults(
    tmp_path: Path, user: UnitUser, umask_022: None
) -> None:
    """The unit's user and group, a file mode of 0600 and a folder mode of 0750, under a umask of 022 (which would
    give 0644 and 0755): the folder is made and each record written with exactly those."""
    spec = records_spec(tmp_path, user.name, user.group, "0600", "0750")
    got = run_module(RECORDS, {"records": spec, "deployed": DEPLOYED, "release_switch": {"to": "wh-b", "from": None}})
    assert got["changed"] and not got.get("failed"), got
    facts, switch, folder = Path(spec["facts_file"]), Path(spec["release_fact_file"]), Path(spec["dir"]["path"])
    for path, want in ((facts, 0o600), (switch, 0o600), (folder, 0o750)):
        assert (mode(path), path.stat().st_uid, path.stat().st_gid) == (want, user.uid, user.gid), path
    # Already written: nothing to do. The owner alone differs (root chowned it back): written again.
    assert run_module(RECORDS, {"records": spec, "deployed": DEPLOYED})["changed"] is False
    os.chown(facts, 0, 0)
    again = run_module(RECORDS, {"records": spec, "deployed": DEPLOYED})
    assert again["written"] == [str(facts)] and facts.stat().st_uid == user.uid


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_records_folders_made_above_the_records_folder_are_0755_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    """/etc/ansible/facts.d on a host without /etc/ansible: the folder above is made 0755 (under umask 0,
    os.makedirs alone left it 0777, anyone's to replace facts.d in), the records' folder its declared 0750."""
    spec = records_spec(tmp_path / "etc/ansible", dir_mode="0750")
    before = os.umask(umask)
    try:
        got = run_module(RECORDS, {"records": spec, "deployed": DEPLOYED})
    finally:
        os.umask(before)
    assert got["changed"] and not got.get("failed"), got
    made = [tmp_path / "etc", tmp_path / "etc/ansible", tmp_path / "etc/ansible/facts.d"]
    assert [mode(f) for f in made] == [0o755, 0o755, 0o750]


def test_records_an_unknown_owner_is_named_before_anything_is_written(tmp_path: Path) -> None:
    spec = records_spec(tmp_path, owner="no-such-user-here")
    got = run_module(RECORDS, {"records": spec, "deployed": DEPLOYED})
    assert got["failed"] and "no-such-user-here" in got["msg"] and "not usable on this host" in got["msg"]
    assert not Path(spec["dir"]["path"]).exists()


def test_records_temporary_files_are_made_beside_the_record(tmp_path: Path, temporaries: list[tuple[str, int]]) -> None:
    spec = records_spec(tmp_path)
    run_module(RECORDS, {"records": spec, "deployed": DEPLOYED, "release_switch": {"to": "wh-b", "from": None}})
    folder = spec["dir"]["path"]
    assert temporaries == [(folder, os.stat(folder).st_dev)] * 2
    # hidden, and named after their record
    assert NAMES[0].startswith(".sglang_release.fact.") and NAMES[1].startswith(".sglang.fact."), NAMES
    assert sorted(os.listdir(folder)) == ["sglang.fact", "sglang_release.fact"]  # no temporary file left


def test_records_a_failed_write_leaves_the_record_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rename fails (a full disk, a read-only remount): the record keeps its old text, the temporary file is
    removed, and the failure names the record."""
    spec = records_spec(tmp_path)
    run_module(RECORDS, {"records": spec, "deployed": DEPLOYED})
    facts = Path(spec["facts_file"])
    old = facts.read_text()

    def refuse(_src: str, _dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    got = run_module(RECORDS, {"records": spec, "deployed": DEPLOYED, "in_progress": MARKER})
    assert got["failed"] and got["msg"].startswith(f"could not write {facts}: ") and "No space left" in got["msg"]
    assert facts.read_text() == old and os.listdir(facts.parent) == ["sglang.fact"]


def test_records_a_second_marker_call_after_a_stop_keeps_one_marker(tmp_path: Path) -> None:
    """A deploy stopped after its marker was written (the middle state), then run again: the record still holds the
    last passed envelope and one marker, of the new attempt; the record after the gate clears it."""
    spec = records_spec(tmp_path)
    facts = Path(spec["facts_file"])
    run_module(RECORDS, {"records": spec, "deployed": DEPLOYED, "in_progress": MARKER})
    rerun = {**MARKER, "envelope": {"mem_fraction_static": 0.81}}
    run_module(RECORDS, {"records": spec, "deployed": DEPLOYED, "in_progress": rerun})
    record = json.loads(facts.read_text())["decode"]
    assert record["envelope"] == {"mem_fraction_static": 0.83}
    assert record["in_progress"]["envelope"] == {"mem_fraction_static": 0.81}
    run_module(RECORDS, {"records": spec, "deployed": DEPLOYED})
    assert "in_progress" not in json.loads(facts.read_text())["decode"]


def test_records_a_switch_ended_twice_removes_once(tmp_path: Path) -> None:
    """The release switch ended, and the end asked again (a rerun after the record was removed): nothing to do."""
    spec = records_spec(tmp_path)
    run_module(RECORDS, {"records": spec, "release_switch": {"to": "wh-b", "from": "wh-a"}})
    first = run_module(RECORDS, {"records": spec, "release_switch_done": True})
    second = run_module(RECORDS, {"records": spec, "release_switch_done": True})
    assert (first["removed"], second["removed"], second["changed"]) == ([spec["release_fact_file"]], [], False)


# ---------------------------------------------------------------- sglang_render_files (an action)


def render(dest: Path, files: list[dict[str, Any]], check: bool = False) -> dict[str, Any]:
    task = SimpleNamespace(args={"dest_dir": str(dest), "files": files}, check_mode=check, async_val=0,
                           action="sglang.dsv4.sglang_render_files")  # fmt: skip
    connection = SimpleNamespace(_shell=SimpleNamespace(tmpdir="/nowhere"))
    action = RENDER.ActionModule(task, connection, None, None, None)
    return dict(action.run(task_vars={}))


FILES = [
    {"path": "/etc/sglang/dsv4-decode.env", "content": "A=1\n", "mode": "0600"},
    {"path": "/opt/sglang/bin/serve.sh", "content": "#!/bin/sh\n", "mode": 0o750},
]


def test_render_check_mode_writes_nothing(tmp_path: Path) -> None:
    got = render(tmp_path, FILES, check=True)
    assert got["changed"] and got["written"] == [str(tmp_path / "etc/sglang/dsv4-decode.env"),
                                                 str(tmp_path / "opt/sglang/bin/serve.sh")]  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_render_modes_other_than_the_umasks_then_a_rerun_in_the_middle_state(tmp_path: Path, umask_022: None) -> None:
    """0600 and 0750 under a umask of 022 are written as declared. Half the files written before a stop (the env file
    written, the script not): the rerun writes only the script; a mode alone that differs is written again."""
    env, script = tmp_path / "etc/sglang/dsv4-decode.env", tmp_path / "opt/sglang/bin/serve.sh"
    assert render(tmp_path, FILES[:1])["written"] == [str(env)]
    assert render(tmp_path, FILES)["written"] == [str(script)]
    assert (mode(env), mode(script), env.read_text(), script.read_text()) == (0o600, 0o750, "A=1\n", "#!/bin/sh\n")
    assert render(tmp_path, FILES) == {"changed": False, "written": []}
    env.chmod(0o644)
    assert render(tmp_path, FILES)["written"] == [str(env)] and mode(env) == 0o600


def test_render_temporary_files_are_made_beside_their_targets(
    tmp_path: Path, temporaries: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    render(tmp_path, FILES)
    folders = [str(tmp_path / "etc/sglang"), str(tmp_path / "opt/sglang/bin")]
    assert temporaries == [(f, os.stat(f).st_dev) for f in folders]
    assert all(name.startswith(".sglang-render-") for name in NAMES), NAMES

    def refuse(_src: str, _dst: str) -> None:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="Read-only"):
        render(tmp_path, [{**FILES[0], "content": "A=2\n"}])
    assert os.listdir(folders[0]) == ["dsv4-decode.env"]


def test_records_diff_shows_each_record_before_and_after_and_no_backup(tmp_path: Path) -> None:
    """--diff: a record written for the first time has an empty before; a record removed an empty after; a template
    backup removed is not shown (it is a copy of a server file)."""
    spec = records_spec(tmp_path)
    facts, switch = spec["facts_file"], spec["release_fact_file"]
    first = run_module(RECORDS, {"records": spec, "deployed": DEPLOYED, "_ansible_diff": True})
    text = Path(facts).read_text()
    assert first["diff"] == [{"before_header": facts, "after_header": facts, "before": "", "after": text}]
    run_module(RECORDS, {"records": spec, "release_switch": {"to": "wh-b", "from": "wh-a"}})
    switched = Path(switch).read_text()
    (tmp_path / "serve.sh.1.2026-12-04@10:00:00~").write_text("old\n")
    later = {"decode": {**DEPLOYED["decode"], "release": "r2"}}
    got = run_module(RECORDS, {"records": spec, "deployed": later, "release_switch_done": True, "_ansible_diff": True,
                               "clear_backups": [str(tmp_path / "serve.sh")]})  # fmt: skip
    assert got["diff"] == [
        {"before_header": facts, "after_header": facts, "before": text, "after": Path(facts).read_text()},
        {"before_header": switch, "after_header": switch, "before": switched, "after": ""},
    ]
    assert got["removed"] == [switch, str(tmp_path / "serve.sh.1.2026-12-04@10:00:00~")]
    without = run_module(RECORDS, {"records": spec, "deployed": DEPLOYED})  # a change, --diff not asked
    assert without["changed"] and without["diff"] == []


def test_records_one_call_writes_the_switch_and_the_marker_with_one_time(tmp_path: Path) -> None:
    """The switch record {to, from, since} and the marker share the call's time; facts_sha1 is the SHA-1 of the facts
    record as written, null without one."""
    import hashlib

    spec = records_spec(tmp_path)
    got = run_module(RECORDS, {"records": spec, "deployed": DEPLOYED, "in_progress": MARKER,
                               "release_switch": {"to": "wh-b", "from": "wh-a"}})  # fmt: skip
    switch = json.loads(Path(spec["release_fact_file"]).read_text())["in_progress"]
    marker = json.loads(Path(spec["facts_file"]).read_text())["decode"]["in_progress"]
    assert (switch["to"], switch["from"], switch["since"]) == ("wh-b", "wh-a", marker["since"])
    assert marker["since"].endswith("Z") and marker["release"] == "r1" and marker["files"] == ["script"]
    assert got["facts_sha1"] == hashlib.sha1(Path(spec["facts_file"]).read_bytes()).hexdigest()
    alone = run_module(RECORDS, {"records": spec, "release_switch": {"to": "wh-c", "from": None}})
    assert alone["facts_sha1"] is None
    assert json.loads(Path(spec["release_fact_file"]).read_text())["in_progress"]["from"] is None


def test_records_a_marker_without_the_record_is_refused(tmp_path: Path) -> None:
    got = run_module(RECORDS, {"records": records_spec(tmp_path), "in_progress": MARKER})
    assert got["failed"] and "in_progress" in got["msg"] and "deployed" in got["msg"]
    assert not (tmp_path / "facts.d").exists()


def test_records_a_failed_write_lists_what_was_written_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The switch record written, then the facts record's rename fails: the failure lists the switch record as
    written, the facts record not, nothing removed."""
    spec = records_spec(tmp_path)
    real = os.replace

    def refuse_facts(src: str, dst: str) -> None:
        if dst == spec["facts_file"]:
            raise OSError(28, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(os, "replace", refuse_facts)
    got = run_module(RECORDS, {"records": spec, "deployed": DEPLOYED, "release_switch": {"to": "wh-b", "from": None},
                               "release_switch_done": False})  # fmt: skip
    assert (got["failed"], got["written"], got["removed"]) == (True, [spec["release_fact_file"]], [])


def test_records_a_failed_removal_names_the_file_and_what_was_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = records_spec(tmp_path)
    run_module(RECORDS, {"records": spec, "release_switch": {"to": "wh-b", "from": None}})

    def refuse(path: str) -> None:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(os, "unlink", refuse)
    got = run_module(RECORDS, {"records": spec, "deployed": DEPLOYED, "release_switch_done": True})
    switch = spec["release_fact_file"]
    assert got["failed"] and got["msg"] == f"could not remove {switch}: [Errno 30] Read-only file system"
    assert (got["written"], got["removed"]) == ([spec["facts_file"]], [switch])


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_render_missing_folders_are_made_0755_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    """Every folder made on the way, not only the last: under umask 0 os.makedirs alone leaves the upper ones 0777."""
    before = os.umask(umask)
    try:
        render(tmp_path, FILES)
    finally:
        os.umask(before)
    made = ("etc", "etc/sglang", "opt", "opt/sglang", "opt/sglang/bin")
    assert [mode(tmp_path / f) for f in made] == [0o755] * 5


def test_render_each_path_lands_under_the_folder_as_its_host_path(tmp_path: Path) -> None:
    """The host path loses only its leading slash: /X11/xorg.conf lands at <dest>/X11/xorg.conf."""
    got = render(tmp_path, [{"path": "/X11/xorg.conf", "content": "x\n", "mode": "0644"}])
    assert got["written"] == [str(tmp_path / "X11/xorg.conf")] and (tmp_path / "X11/xorg.conf").read_text() == "x\n"


def test_render_bad_arguments_are_refused_naming_each(tmp_path: Path) -> None:
    from ansible.errors import AnsibleActionFail

    task = SimpleNamespace(args={"files": [{"path": "/a"}]}, check_mode=False, async_val=0, action="render")
    action = RENDER.ActionModule(task, SimpleNamespace(_shell=SimpleNamespace(tmpdir="/nowhere")), None, None, None)
    with pytest.raises(AnsibleActionFail) as failed:
        action.run(task_vars={})
    text = str(failed.value)
    assert "dest_dir" in text and "content" in text and "; " in text, text


def test_render_a_folder_another_fork_made_meanwhile_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The renders of two hosts run in two forks on one folder: the other one makes etc/ between this one's look and
    its mkdir. This one goes on with etc/sglang and writes its file."""
    real = os.mkdir

    def raced(path: Any, *args: Any, **kwargs: Any) -> None:
        if str(path) == str(tmp_path / "etc"):
            real(path)
            raise FileExistsError(17, "File exists", str(path))
        real(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", raced)
    assert render(tmp_path, FILES[:1])["written"] == [str(tmp_path / "etc/sglang/dsv4-decode.env")]
    assert (tmp_path / "etc/sglang/dsv4-decode.env").read_text() == "A=1\n"


def test_render_check_mode_in_the_middle_state_writes_neither_a_file_nor_the_checks(tmp_path: Path) -> None:
    """A render stopped half way (the env file written with another mode, the script not), previewed: both are
    reported, nothing is written, the checks' manifest neither. The render then writes both and the manifest."""
    checked = [{**f, "check": "shell", "declared": {"sglang_decode.port": 30001}} for f in FILES]
    env = tmp_path / "etc/sglang/dsv4-decode.env"
    render(tmp_path, FILES[:1])
    env.chmod(0o644)
    before = tree(tmp_path)
    got = render(tmp_path, checked, check=True)
    assert got["written"] == [str(env), str(tmp_path / "opt/sglang/bin/serve.sh")]
    assert tree(tmp_path) == before
    assert render(tmp_path, checked)["written"] == got["written"] and mode(env) == 0o600
    manifest = json.loads((tmp_path / RENDER.CHECKS_FILE).read_text())
    assert manifest == {f["path"]: {"check": "shell", "declared": {"sglang_decode.port": 30001}} for f in FILES}
