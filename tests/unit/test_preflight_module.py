"""sglang_preflight run in this process, its transient units answered by the probe called here (probetools): what it
leaves on the host. Check mode remembers no pass; a pass remembered is not checked again (the middle state of a
rerun); the environment file it hands to systemd-run holds the API key, is root's alone and does not outlive the
call, whether the unit ran, failed or never answered."""

from __future__ import annotations

import functools
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_preflight import passed_before, remember_pass
from audit.audit_helpers import load_library, run_module
from probetools import fake_systemd_run, probe_server

ENVIRONMENT = "SGLANG_API_KEY=sk-lab-secret-123\n"


@pytest.fixture
def preflight(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The module, its passes remembered under tmp_path/passed and every unit active."""
    if os.geteuid() != 0:
        pytest.skip("the module writes its environment file under /run (root)")
    module = load_library("sglang_preflight")
    passed_dir = str(tmp_path / "passed")
    monkeypatch.setattr(module, "remember_pass", functools.partial(remember_pass, passed_dir=passed_dir))
    monkeypatch.setattr(module, "passed_before", functools.partial(passed_before, passed_dir=passed_dir))
    monkeypatch.setattr(module, "unit_active", lambda _unit: True)
    return module


def server(tmp_path: Path) -> dict[str, Any]:
    """A decode engine whose environment file is written already, as a rerun finds it."""
    env_file = tmp_path / "dsv4-decode.env"
    env_file.write_text(ENVIRONMENT)
    return probe_server(environment=ENVIRONMENT, env_file=str(env_file), paths=[str(env_file)],
                        path_vars=["sglang_decode.env_file"])  # fmt: skip


def run(module: Any, servers: list[dict[str, Any]], statuses: list[int | BaseException], **more: Any) -> Any:
    """(result, the commands run, the environment files they were given) of one call of the module."""
    names: list[str] = []
    env_files: list[tuple[str, int, str]] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module.subprocess, "run", fake_systemd_run(statuses, names, env_files))
        return run_module(module, {"servers": servers, **more}), names, env_files


def test_check_mode_remembers_no_pass_then_a_pass_is_not_checked_again(preflight: Any, tmp_path: Path) -> None:
    one = server(tmp_path)
    checked, names, _ = run(preflight, [one], [0], _ansible_check_mode=True)
    assert not checked.get("failed") and checked["changed"] is False and len(names) == 1, checked
    assert not (tmp_path / "passed").exists()
    passed, names, _ = run(preflight, [one], [0])
    assert not passed.get("failed") and passed["servers"][0]["listeners"] == [] and len(names) == 1, passed
    stamp = tmp_path / "passed/sglang-dsv4-decode.sha256"
    assert stamp.stat().st_mode & 0o777 == 0o600 and (tmp_path / "passed").stat().st_mode & 0o777 == 0o700
    assert os.listdir(tmp_path / "passed") == ["sglang-dsv4-decode.sha256"]  # no temporary file left beside it
    again, names, _ = run(preflight, [one], [])
    assert again["servers"] == [{"unit": "sglang-dsv4-decode", "passed_before": True, "seconds": 0.0}] and not names
    assert again["notes"] == ["sglang-dsv4-decode: runs with these very inputs, which passed its preflight: not "
                              "checked again"]  # fmt: skip


def test_a_failed_check_remembers_no_pass(preflight: Any, tmp_path: Path) -> None:
    """A path the probe cannot read: the module fails naming it, and the rerun checks again."""
    missing = server(tmp_path) | {"paths": [str(tmp_path / "no-model")], "path_vars": ["sglang_model.path"]}
    failed, _, _ = run(preflight, [missing], [0])
    assert failed["failed"] and f"{tmp_path / 'no-model'} (sglang_model.path) does not exist" in failed["msg"]
    assert not (tmp_path / "passed").exists()


@pytest.mark.parametrize("umask", [0o000, 0o022])
@pytest.mark.parametrize(
    "statuses",
    [[0], [217], [219, 219], [subprocess.TimeoutExpired("systemd-run", 70)]],
    ids=["ran", "failed", "failed-twice", "never-answered"],
)
def test_the_environment_file_is_root_s_alone_and_removed_after_the_call(
    preflight: Any, tmp_path: Path, statuses: list[int | BaseException], umask: int
) -> None:
    before = os.umask(umask)
    try:
        got, names, env_files = run(preflight, [server(tmp_path)], list(statuses))
    finally:
        os.umask(before)
    assert len(env_files) == len(statuses) == len({n for n in names if n.startswith("--unit=")})
    for path, mode, text in env_files:
        assert (os.path.dirname(path), mode, text) == ("/run", 0o600, ENVIRONMENT)
        assert not os.path.exists(path)
    if statuses != [0]:
        assert got["failed"] and got["msg"].startswith("sglang-dsv4-decode: "), got
        assert ENVIRONMENT.strip() not in got["msg"]


def test_a_unit_that_never_answers_is_stopped_and_named(preflight: Any, tmp_path: Path) -> None:
    got, names, _ = run(preflight, [server(tmp_path)], [subprocess.TimeoutExpired("systemd-run", 70)], timeout=60)
    unit = f"sglang-preflight-decode-{os.getpid()}-1"
    assert names == [f"--unit={unit}", f"systemctl stop --no-block {unit}.service"]
    assert got["problems"] == [
        "sglang-dsv4-decode: a transient unit with its User=root, sandbox and environment did not answer in 70 s "
        "(stopped); the probe hangs where the server would start: reading a declared path (a network file system "
        "that does not answer), opening a GPU, or SGLang's startup checks. Check the paths and GPUs declared for it."
    ]
    assert not (tmp_path / "passed").exists()


def test_the_host_read_finds_the_pass_the_module_remembered(preflight: Any, tmp_path: Path) -> None:
    """sglang_host_info (option preflight_stamps, as the filter sglang_preflight_stamps builds them on the controller
    from the servers as the deploy declares them) names a server whose check would repeat a verdict, exactly as the
    module judges it after its own normalization of the options: the deploy then makes no call to the module."""
    host_info = load_library("sglang_host_info")
    stamps = load_library("sglang", "filter").preflight_stamps
    passed_dir = str(tmp_path / "passed")
    one = server(tmp_path)
    # As the deploy declares it: the options left to their defaults, which the module fills in before its digest.
    declared = {key: value for key, value in one.items() if key not in ("python", "imports", "gpu_ids", "sglang_argv")}

    def passed(servers: list[dict[str, Any]], active: bool = True) -> list[str]:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(host_info, "stamp_repeats", functools.partial(
                host_info.stamp_repeats, passed_dir=passed_dir))  # fmt: skip
            patch.setattr(host_info, "unit_active", lambda _unit: active)
            result = run_module(host_info, {"preflight_stamps": stamps(servers)})
        assert not result.get("failed"), result
        assert ENVIRONMENT not in json.dumps(result)  # the environment (the API key) is never echoed
        return list(result["preflight_passed"])

    assert passed([declared]) == []  # nothing passed yet
    checked, _, _ = run(preflight, [declared], [0])
    assert not checked.get("failed"), checked
    assert passed([declared]) == ["sglang-dsv4-decode"]
    assert passed([declared], active=False) == []  # a unit that does not run starts with what the check never saw
    assert passed([declared | {"sglang_argv": ["--port", "30001"]}]) == []  # other inputs than those that passed
    assert passed([declared | {"environment": ENVIRONMENT + "X=1\n"}]) == []  # another environment file
    Path(str(one["env_file"])).write_text("SGLANG_API_KEY=other\n")
    assert passed([declared]) == []  # the file on disk is not the one about to be written
