"""The host-side layer reader (module_utils/sglang_layers.py: read_layers) written out whole for one router host: the
unit as systemd shows it, the host's cores, the releases kept by default, the notes on the local facts and a script
the codec refuses."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_layers
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_layers import HostFiles, Layers, read_layers

BOOT, TICKS, PID = 1_700_000_000, 100, 4242
UNIT = "sglang-dsv4-router"
SCRIPT = "/opt/sglang/bin/serve_dsv4_router.sh"
ENV_FILE = "/etc/sglang/dsv4-router.env"
UNIT_PATH = f"/etc/systemd/system/{UNIT}.service"
FACTS = "/etc/ansible/facts.d/sglang.fact"


def write(root: Path, path: str, data: str | bytes, mtime: float = BOOT + 500) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        target.write_bytes(data)
    else:
        target.write_text(data)
    os.utime(target, (mtime, mtime))


def router_host(
    root: Path, script: str = "#!/bin/bash\nexec smg launch --port 8000\n", show: str | None = None
) -> HostFiles:
    write(root, SCRIPT, script)
    write(root, ENV_FILE, "# no variables\n")
    write(root, UNIT_PATH, f"[Service]\nEnvironmentFile=-{ENV_FILE}\nExecStart={SCRIPT}\n")
    write(root, "/proc/stat", f"cpu  1 2 3 4\nbtime {BOOT}\n")
    if show is None:
        return HostFiles(root=str(root))
    return HostFiles(root=str(root), run=lambda argv: show)


def read(host: HostFiles, facts: str | None = None, **more: Any) -> Layers:
    return read_layers("router", UNIT, SCRIPT, ENV_FILE, facts, host, ticks=TICKS, **more)


def test_the_unit_as_systemd_shows_it_with_its_enabled_state(tmp_path: Path) -> None:
    write(tmp_path, f"/proc/{PID}/cmdline", b"/opt/smg/bin/smg\0launch\0--port\x008001\0")
    write(tmp_path, f"/proc/{PID}/stat", f"{PID} (smg) S " + "0 " * 18 + "100000 0 0\n")
    show = f"MainPID={PID}\nActiveState=active\nUnitFileState=enabled\n"
    layers = read(router_host(tmp_path, show=show))
    assert layers.unit == {
        "exec_start": SCRIPT,
        "environment_files": [ENV_FILE],
        "runs_script": True,
        "reads_env_file": True,
        "active_state": "active",
        "enabled": "enabled",
        "main_pid": PID,
        "started": float(BOOT + 1_000),
        "changed_since_start": [],
    }
    assert (layers.running, layers.running_source, layers.problems, layers.notes) == ({"port": 8001}, "proc", [], [])


def test_a_unit_without_a_main_process_still_shows_whether_it_is_enabled(tmp_path: Path) -> None:
    layers = read(router_host(tmp_path, show="MainPID=0\nActiveState=inactive\nUnitFileState=disabled\n"))
    assert (layers.unit["active_state"], layers.unit["enabled"], layers.unit["main_pid"]) == ("inactive", "disabled", 0)


def test_the_host_cores_are_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sglang_layers.os, "cpu_count", lambda: 7)
    assert read(router_host(tmp_path)).cpus == 7


def test_the_three_newest_complete_releases_are_kept_by_default(tmp_path: Path) -> None:
    base = tmp_path / "opt/sglang/releases"
    for age, name in enumerate(["r1", "r2", "r3", "r4", "r5"]):
        (base / name).mkdir(parents=True)
        (base / name / "manifest.json").write_text("{}")
        os.utime(base / name, (BOOT + age, BOOT + age))
    layers = read(router_host(tmp_path), releases_dir="/opt/sglang/releases")
    assert layers.releases == ["/opt/sglang/releases/r1", "/opt/sglang/releases/r2"]
    assert layers.release_switch is None


def test_a_missing_facts_file_leaves_the_deployed_envelope_unknown(tmp_path: Path) -> None:
    layers = read(router_host(tmp_path), FACTS)
    assert layers.notes == [
        f"{FACTS} does not exist: deployed envelope unknown",
        "no systemctl access: running layer unknown",
    ]
    assert layers.deployed is None


@pytest.mark.parametrize("raw", ["not json", "[1, 2]"], ids=["text", "list"])
def test_facts_that_are_not_a_json_object_leave_the_deployed_envelope_unknown(tmp_path: Path, raw: str) -> None:
    host = router_host(tmp_path)
    write(tmp_path, FACTS, raw)
    layers = read(host, FACTS)
    assert layers.notes == [
        f"{FACTS} is not a JSON object: deployed envelope unknown",
        "no systemctl access: running layer unknown",
    ]
    assert layers.deployed is None


def test_a_script_the_codec_refuses_is_a_problem_naming_the_script(tmp_path: Path) -> None:
    layers = read(router_host(tmp_path, script="#!/bin/bash\nexec smg launch --port\n"))
    assert layers.problems == [f"{SCRIPT}: flag --port has no value in the command line"]
    assert layers.on_disk is None


@pytest.mark.parametrize(
    ("flag", "kind"),
    [("--port abc", "int"), ("--port=abc", "int"), ("--max-concurrent-requests 1.5", "int")],
)
def test_a_script_with_a_value_of_the_wrong_kind_is_a_problem_not_a_crash(tmp_path: Path, flag: str, kind: str) -> None:
    layers = read(router_host(tmp_path, script=f"#!/bin/bash\nexec smg launch {flag}\n"))
    name, value = flag.replace("=", " ").split(" ")
    assert layers.problems == [
        f"{SCRIPT}: flag {name} has the value {value!r}, not a valid {kind}: the server refuses it at start; "
        "site.yml writes the declared value back"
    ]
    assert layers.on_disk is None
