"""Rules of the host-side layer reader: parsers, /proc decoding, file metadata, releases and read_layers results."""

from __future__ import annotations

import grp
import os
import pwd
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_layers import (
    HostFiles,
    Layers,
    boot_time,
    parse_systemctl_show,
    parse_unit,
    proc_start_epoch,
    read_layers,
    release_leftovers,
    split_nul,
)
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_records import (
    deploy_marker,
    deployed_record,
    parse_switch,
)

BOOT, TICKS, PID = 1_700_000_000, 100, 4242
STARTED = float(BOOT + 1_000)  # starttime 100000 ticks at 100 ticks/s
BEFORE, AFTER = BOOT + 500, BOOT + 2_000
UNIT = "sglang-dsv4-router"
SCRIPT = "/opt/sglang/bin/serve_dsv4_router.sh"
ENV_FILE = "/etc/sglang/dsv4-router.env"
UNIT_PATH = f"/etc/systemd/system/{UNIT}.service"
SCRIPT_TEXT = "#!/bin/bash\nexec /opt/smg/bin/smg launch \\\n  --port 8000\n"
UNIT_TEXT = f"[Service]\nEnvironmentFile=-{ENV_FILE}\nExecStart={SCRIPT}\n"
SHOW_CALL = ["systemctl", "show", "-p", "MainPID", "-p", "ActiveState", "-p", "UnitFileState", UNIT]
TITLE_NOTE = f"the process title is rewritten (no argv in /proc/{PID}/cmdline)"
FILES_NOTE = f"{TITLE_NOTE}: running values are the files' values, which did not change after the process started"


def _write(root: Path, path: str, data: str | bytes, mtime: float = BEFORE, mode: int = 0o644) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        target.write_bytes(data)
    else:
        target.write_text(data)
    target.chmod(mode)
    os.utime(target, (mtime, mtime))


def _stat_line(pid: int, comm: str = "python3") -> str:
    return f"{pid} ({comm}) S " + "0 " * 18 + "100000 0 0\n"


def _host(
    root: Path, show: str | None, calls: list[list[str]] | None = None, files: dict[str, Any] | None = None
) -> HostFiles:
    """A router host: script, env file and unit (mtimes before the start unless `files` overrides), /proc/stat."""
    layout: dict[str, Any] = {SCRIPT: SCRIPT_TEXT, ENV_FILE: "# no variables\n", UNIT_PATH: UNIT_TEXT}
    layout.update(files or {})
    for path, spec in layout.items():
        if spec is None:
            continue
        data, mtime = spec if isinstance(spec, tuple) else (spec, BEFORE)
        _write(root, path, data, mtime)
    _write(root, "/proc/stat", f"cpu  1 2 3 4\nbtime {BOOT}\n")
    if show is None:
        return HostFiles(root=str(root))

    def systemctl(argv: list[str]) -> str:
        if calls is not None:
            calls.append(list(argv))
        return show

    return HostFiles(root=str(root), run=systemctl)


def _read(host: HostFiles, **kwargs: Any) -> Layers:
    return read_layers("router", UNIT, SCRIPT, ENV_FILE, None, host, ticks=TICKS, **kwargs)


def _process(root: Path, pid: int, argv: bytes, environ: bytes | None = None, stat: bool = True) -> None:
    _write(root, f"/proc/{pid}/cmdline", argv)
    if environ is not None:
        _write(root, f"/proc/{pid}/environ", environ)
    if stat:
        _write(root, f"/proc/{pid}/stat", _stat_line(pid))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("MainPID=12\nActiveState=active\n", {"MainPID": "12", "ActiveState": "active"}),
        ("Environment=A=1 B=2\n", {"Environment": "A=1 B=2"}),
        ("ExecStart={ path=/x ; argv[]=/x --a=b }\n", {"ExecStart": "{ path=/x ; argv[]=/x --a=b }"}),
        ("no separator\n", {}),
    ],
)
def test_systemctl_show_splits_at_the_first_equals(text: str, expected: dict[str, str]) -> None:
    """A property value may hold `=`; only the first one separates the name."""
    assert parse_systemctl_show(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ExecStart=/opt/x.sh --opt=1\n", {"ExecStart": ["/opt/x.sh --opt=1"], "EnvironmentFile": []}),
        ("EnvironmentFile=-/etc/a=b.env\n", {"ExecStart": [], "EnvironmentFile": ["/etc/a=b.env"]}),
        ("ExecStart=Xvfb :99\n", {"ExecStart": ["Xvfb :99"], "EnvironmentFile": []}),
        ("ExecStart=-@+!:/usr/bin/x  y\n", {"ExecStart": ["/usr/bin/x y"], "EnvironmentFile": []}),
        ("ExecStart=\nExecStart=/a\nExecStart=/b\n", {"ExecStart": ["/a", "/b"], "EnvironmentFile": []}),
    ],
)
def test_unit_lines_split_at_the_first_equals_and_drop_only_prefix_characters(
    text: str, expected: dict[str, list[str]]
) -> None:
    """`=` inside a unit value stays in the value; only the systemd prefixes -@+!: are stripped."""
    assert parse_unit(text) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"a\0b\0\0", ["a", "b"]),
        (b"--port\x008000\xff\0", ["--port", "8000\ufffd"]),
        (b"\xc3\x28\0ok\0", ["\ufffd(", "ok"]),
        (b"", []),
    ],
)
def test_nul_split_replaces_invalid_utf8(raw: bytes, expected: list[str]) -> None:
    """Invalid UTF-8 in /proc blocks becomes U+FFFD instead of failing; empty parts are dropped."""
    assert split_nul(raw) == expected


@pytest.mark.parametrize(
    ("comm", "expected"),
    [("python3", STARTED), ("a) b", STARTED), ("x) (y)", STARTED)],
)
def test_start_time_reads_after_the_last_parenthesis(comm: str, expected: float) -> None:
    """A process name holding `)` does not shift the stat fields."""
    assert proc_start_epoch(_stat_line(PID, comm), float(BOOT), TICKS) == expected


def test_boot_time_reads_btime_and_names_its_absence() -> None:
    """btime is read from /proc/stat; without it the error says what is missing."""
    assert boot_time(f"cpu 1 2\nbtime {BOOT}\n") == float(BOOT)
    with pytest.raises(ValueError) as info:
        boot_time("cpu 1 2\n")
    assert str(info.value) == "no btime line in /proc/stat"


@pytest.mark.parametrize("facts", [[], None, "decode", 3, ["decode"]])
def test_facts_that_are_not_a_mapping_hold_no_record(facts: Any) -> None:
    """A facts file that is not a JSON object yields no deployed record and no deploy marker."""
    assert deployed_record(facts, "decode") == (None, {})
    assert deploy_marker(facts, "decode") is None


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"script": {"path": "/s"}, "unit": {"sha1": "ab12"}}, {"unit": "ab12"}),
        ({"script": "ab12", "env_file": {"sha1": ""}, "unit": {"sha1": 7}}, {"unit": "7"}),
        ("not a mapping", {}),
    ],
)
def test_deployed_checksums_need_a_mapping_with_a_sha1(files: Any, expected: dict[str, str]) -> None:
    """Only file entries that are mappings with a non-empty sha1 give a checksum."""
    facts = {"decode": {"envelope": {"port": 1}, "files": files}}
    assert deployed_record(facts, "decode") == ({"port": 1}, expected)


@pytest.mark.parametrize(
    ("path", "relative"),
    [("/Xorg/xorg.conf", "Xorg/xorg.conf"), ("//etc/x", "etc/x"), ("opt/y", "opt/y")],
)
def test_host_paths_lie_under_the_root(path: str, relative: str) -> None:
    """Only leading slashes are removed when a host path is placed under the root."""
    assert HostFiles(root="/r").path(path) == Path("/r") / relative


def test_backups_need_the_name_prefix_and_the_tilde(tmp_path: Path) -> None:
    """Backups are `<name>.<...>~` beside the file; other names ending in ~ or starting with the name are not."""
    names = ["serve.sh", "serve.sh.123.2024-01-02@03:04:05~", "serve.sh.1.x~", "serve.sh.orig", "serve.sh~", "o~"]
    for name in names:
        _write(tmp_path, f"/opt/bin/{name}", "x")
    assert HostFiles(root=str(tmp_path)).backups("/opt/bin/serve.sh") == [
        "/opt/bin/serve.sh.1.x~",
        "/opt/bin/serve.sh.123.2024-01-02@03:04:05~",
    ]


def test_owner_falls_back_to_numeric_ids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A uid or gid the host has no name for is shown as its number."""
    _write(tmp_path, "/etc/a.env", "A=1\n", mode=0o640)

    def unknown(_id: int) -> Any:
        raise KeyError(_id)

    monkeypatch.setattr(pwd, "getpwuid", unknown)
    monkeypatch.setattr(grp, "getgrgid", unknown)
    st = (tmp_path / "etc/a.env").stat()
    owner = HostFiles(root=str(tmp_path)).owner("/etc/a.env")
    assert owner == {"owner": str(st.st_uid), "group": str(st.st_gid), "mode": "0640"}


SWITCH_UNREADABLE = {"to": None, "from": None, "since": None, "unreadable": True}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, None),
        ("", None),
        ("{not json", SWITCH_UNREADABLE),
        ("[1, 2]", SWITCH_UNREADABLE),
        ("{}", None),
        ('{"in_progress": "yes"}', None),
        ('{"in_progress": {"to": "r2", "from": "r1", "since": 5}}', {"to": "r2", "from": "r1", "since": 5}),
    ],
)
def test_release_switch_record(tmp_path: Path, raw: str | None, expected: dict[str, Any] | None) -> None:
    """An unfinished release switch is returned as written; an unreadable record is flagged, not hidden."""
    if raw is not None:
        _write(tmp_path, "/etc/ansible/facts.d/sglang_release.fact", raw)
    host = HostFiles(root=str(tmp_path))
    assert parse_switch(host.read_text("/etc/ansible/facts.d/sglang_release.fact")) == expected


@pytest.mark.parametrize(
    ("releases", "links", "keep", "expected"),
    [
        ({"r1": True, "r2": True, "r3": True}, {}, 1, ["r1", "r2"]),
        ({"r1": True, "r2": True, "r3": True}, {}, 2, ["r1"]),
        ({"r1": True, "r2": True, "r3": True}, {}, 3, []),
        ({"r1": True, "r2": True, "r3": True}, {"current": "r1"}, 0, ["r2", "r3"]),
        ({"r1": True, "r2": True, "r3": True}, {"previous": "r1"}, 1, ["r2"]),
        ({"r1": True, "r2": True}, {"current": "r2", "previous": "r1"}, 0, []),
        ({"r1": True, "r2": False}, {}, 1, ["r2"]),
        ({"r1": True, "r2": False, "r3": True}, {}, 2, ["r2"]),
    ],
)
def test_release_leftovers(
    tmp_path: Path, releases: dict[str, bool], links: dict[str, str], keep: int, expected: list[str]
) -> None:
    """Leftovers: unlinked releases beyond the newest `keep` complete ones, incomplete ones too; plain files are not
    releases."""
    base = tmp_path / "opt/sglang/releases"
    for age, (name, complete) in enumerate(releases.items()):
        (base / name).mkdir(parents=True)
        if complete:
            (base / name / "manifest.json").write_text("{}")
        os.utime(base / name, (BOOT + age, BOOT + age))
    _write(tmp_path, "/opt/sglang/releases/notes.txt", "a plain file", mtime=BOOT - 10)
    for link, target in links.items():
        (tmp_path / "opt/sglang" / link).symlink_to(base / target)
    leftovers = release_leftovers(HostFiles(root=str(tmp_path)), "/opt/sglang/releases", keep)
    assert leftovers == [f"/opt/sglang/releases/{name}" for name in expected]


def test_files_and_unit_of_a_host_without_systemctl(tmp_path: Path) -> None:
    """Each file reports path, existence, mtime and metadata; the unit reports what it runs and reads."""
    layers = _read(_host(tmp_path, None))
    meta = {"owner": pwd.getpwuid(os.getuid()).pw_name, "group": grp.getgrgid(os.getgid()).gr_name, "mode": "0644"}
    assert layers.files == {
        "script": {"path": SCRIPT, "exists": True, "mtime": BEFORE, **meta},
        "env_file": {"path": ENV_FILE, "exists": True, "mtime": BEFORE, **meta},
        "unit": {"path": UNIT_PATH, "exists": True, "mtime": BEFORE, **meta},
    }
    assert layers.unit == {
        "exec_start": SCRIPT,
        "environment_files": [ENV_FILE],
        "runs_script": True,
        "reads_env_file": True,
    }
    assert layers.on_disk == {"port": 8000}
    assert (layers.problems, layers.notes) == ([], ["no systemctl access: running layer unknown"])


@pytest.mark.parametrize(
    ("unit_dir", "unit_path"),
    [
        ("/etc/systemd/system/", UNIT_PATH),
        ("/etc/systemd/system", UNIT_PATH),
        ("/srv/unitsX/", f"/srv/unitsX/{UNIT}.service"),
    ],
)
def test_unit_path_joins_the_unit_dir_without_trailing_slashes(tmp_path: Path, unit_dir: str, unit_path: str) -> None:
    """The unit file path is <unit_dir without trailing slashes>/<unit>.service."""
    layers = _read(_host(tmp_path, None, files={unit_path: UNIT_TEXT}), unit_dir=unit_dir)
    assert (layers.files["unit"]["path"], layers.files["unit"]["exists"]) == (unit_path, True)


@pytest.mark.parametrize(
    ("env_text", "unit_text", "unit", "problems"),
    [
        (
            "A=1\n",
            f"ExecStart=/usr/bin/env\nExecStart={SCRIPT} --x\n",
            {"exec_start": f"/usr/bin/env {SCRIPT} --x", "environment_files": [], "reads_env_file": False},
            [f"{UNIT_PATH}: no EnvironmentFile={ENV_FILE}"],
        ),
        (
            None,
            f"ExecStart={SCRIPT}\n",
            {"exec_start": SCRIPT, "environment_files": [], "reads_env_file": False},
            [],
        ),
        (
            None,
            f"EnvironmentFile={ENV_FILE}\nExecStart=/opt/other.sh\n",
            {"exec_start": "/opt/other.sh", "environment_files": [ENV_FILE], "reads_env_file": True},
            [f"{UNIT_PATH}: ExecStart does not run {SCRIPT}"],
        ),
    ],
)
def test_unit_problems(
    tmp_path: Path, env_text: str | None, unit_text: str, unit: dict[str, Any], problems: list[str]
) -> None:
    """The unit must run the script, and read the environment file when that file exists."""
    layers = _read(_host(tmp_path, None, files={ENV_FILE: env_text, UNIT_PATH: unit_text}))
    assert {k: layers.unit[k] for k in unit} == unit
    assert layers.problems == problems


def test_systemctl_is_asked_for_main_pid_and_active_state(tmp_path: Path) -> None:
    """The running layer starts from `systemctl show -p MainPID -p ActiveState -p UnitFileState <unit>`."""
    calls: list[list[str]] = []
    _read(_host(tmp_path, "MainPID=0\nActiveState=inactive\n", calls))
    assert calls == [SHOW_CALL]


@pytest.mark.parametrize(
    ("show", "main_pid", "problem"),
    [
        ("ActiveState=inactive\n", 0, f"{UNIT} has no main process (ActiveState=inactive)"),
        ("MainPID=\nActiveState=failed\n", 0, f"{UNIT} has no main process (ActiveState=failed)"),
        ("MainPID=0\n", 0, f"{UNIT} has no main process (ActiveState=None)"),
    ],
)
def test_no_main_process(tmp_path: Path, show: str, main_pid: int, problem: str) -> None:
    """A missing or zero MainPID is a problem and no /proc entry is read (not even PID 1's)."""
    _process(tmp_path, 1, b"/sbin/init\0--port\x009\0", b"")
    layers = _read(_host(tmp_path, show))
    assert layers.unit["main_pid"] == main_pid
    assert layers.problems == [problem]
    assert (layers.running, layers.running_source, layers.notes) == (None, "unknown", [])
    assert "started" not in layers.unit


def test_main_pid_one_is_a_process(tmp_path: Path) -> None:
    """MainPID=1 (a server running as a container's init) is read like any other process."""
    _process(tmp_path, 1, b"/opt/smg/bin/smg\0launch\0--port\x008001\0", b"")
    layers = _read(_host(tmp_path, "MainPID=1\nActiveState=active\n"))
    assert (layers.unit["main_pid"], layers.unit["active_state"], layers.unit["started"]) == (1, "active", STARTED)
    assert (layers.running, layers.running_source, layers.problems) == ({"port": 8001}, "proc", [])


@pytest.mark.parametrize(
    ("environ", "running"),
    [
        (None, {"port": 30001}),
        (b"", {"port": 30001}),
        (b"HOME=/root\0", {"port": 30001, "bf16_index_k": False}),
        (b"SGLANG_DSV4_BF16_INDEX_K=1\0OPTS=a=b\0", {"port": 30001, "bf16_index_k": True}),
        (b"SGLANG_DSV4_BF16_INDEX_K=1\0SGLANG_DSV4_BF16_INDEX_K=0=x\0", {"port": 30001, "bf16_index_k": True}),
    ],
)
def test_running_environment_only_from_a_readable_environ(
    tmp_path: Path, environ: bytes | None, running: dict[str, Any]
) -> None:
    """Environment-carried keys are reported only when the process environment could be read."""
    _process(tmp_path, PID, b"python3\0--port\x0030001\0", environ)
    host = _host(tmp_path, f"MainPID={PID}\nActiveState=active\n")
    layers = read_layers("decode", "sglang-dsv4-decode", SCRIPT, ENV_FILE, None, host, ticks=TICKS)
    assert (layers.running, layers.running_source) == (running, "proc")


@pytest.mark.parametrize(
    ("mtimes", "stat", "changed", "source", "notes"),
    [
        ({}, True, [], "files", [FILES_NOTE]),
        ({SCRIPT: STARTED, ENV_FILE: STARTED, UNIT_PATH: STARTED}, True, [], "files", [FILES_NOTE]),
        ({SCRIPT: AFTER}, True, ["script"], "unknown", [f"{TITLE_NOTE} and script changed after the process started"]),
        (
            {SCRIPT: STARTED + 0.5, UNIT_PATH: AFTER},
            True,
            ["script", "unit"],
            "unknown",
            [f"{TITLE_NOTE} and script, unit changed after the process started"],
        ),
        ({SCRIPT: AFTER}, False, [], "unknown", [f"{TITLE_NOTE} and start time unknown"]),
    ],
)
def test_rewritten_title_uses_files_only_when_unchanged_since_start(
    tmp_path: Path, mtimes: dict[str, float], stat: bool, changed: list[str], source: str, notes: list[str]
) -> None:
    """A file changed after the start (strictly later mtime) or an unknown start leaves the running layer unknown."""
    _process(tmp_path, PID, b"smg::router\0\0\0", b"", stat=stat)
    layout = {SCRIPT: SCRIPT_TEXT, ENV_FILE: "# no variables\n", UNIT_PATH: UNIT_TEXT}
    files = {path: (text, mtimes.get(path, BEFORE)) for path, text in layout.items()}
    layers = _read(_host(tmp_path, f"MainPID={PID}\nActiveState=active\n", files=files))
    assert layers.unit["started"] == (STARTED if stat else None)
    assert layers.unit["changed_since_start"] == changed
    assert (layers.running_source, layers.notes) == (source, notes)
    assert layers.running == ({"port": 8000} if source == "files" else None)


def test_rewritten_title_without_files_says_so(tmp_path: Path) -> None:
    """A known start time but no script to read leaves the running layer unknown, for that reason."""
    _process(tmp_path, PID, b"smg::router\0\0\0", b"")
    layers = _read(_host(tmp_path, f"MainPID={PID}\nActiveState=active\n", files={SCRIPT: None}))
    assert layers.unit["started"] == STARTED
    assert (layers.running_source, layers.notes) == ("unknown", [f"{TITLE_NOTE} and no files to read the values from"])
