"""The host-side preflight (module_utils/sglang_preflight.py): its probe run for real by this Python on loopback,
the systemd-run command line it builds from a rendered unit, and the problems it names from the probe's answer."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_preflight import (
    engine_imports,
    passed_before,
    release_check_argv,
    release_problems,
    remember_pass,
    server_problems,
    systemd_run_argv,
    transfer_needs,
)
from audit.audit_helpers import load_library
from probetools import fake_systemd_run, probe_server, run_probe


@pytest.fixture
def held_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        yield int(s.getsockname()[1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def probe(**spec: Any) -> dict[str, Any]:
    return run_probe(sys.executable, spec)


def test_probe_binds_a_free_port_and_finds_a_taken_one(held_port: int) -> None:
    free = free_port()
    answer = probe(listeners=[["127.0.0.1", free], ["127.0.0.1", held_port], ["*", held_port]])
    assert [row["result"] for row in answer["listeners"]] == ["bound", "EADDRINUSE", "EADDRINUSE"]


def test_probe_ignores_a_pythonpath_from_the_unit_environment(tmp_path: Path) -> None:
    """The unit's environment file may set PYTHONPATH for the server: the probe runs isolated from it (a module of
    that path named like one the probe imports would otherwise replace it)."""
    (tmp_path / "json.py").write_text("raise SystemExit('the environment path was imported')\n")
    assert run_probe(sys.executable, {}, env={"PYTHONPATH": str(tmp_path)})["listeners"] == []


def test_probe_refuses_an_address_the_host_lacks() -> None:
    answer = probe(listeners=[["192.0.2.1", free_port()], ["no-such-host.invalid", free_port()]])
    assert [row["result"] for row in answer["listeners"]] == ["EADDRNOTAVAIL", "unresolved"]


def test_probe_reads_paths_and_finds_modules(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    answer = probe(
        paths=[str(tmp_path), str(tmp_path / "config.json"), str(tmp_path / "missing.json")],
        python=sys.executable,
        imports=["json", "no_such_module_of_the_preflight"],
    )
    assert [row["result"] for row in answer["paths"]] == ["read", "read", "ENOENT"]
    assert answer["imports"] == {"json": "found", "no_such_module_of_the_preflight": "not found"}


def test_systemd_run_keeps_what_bounds_the_process_and_drops_how_it_is_run() -> None:
    service = {
        "Type": "simple",
        "User": "sglang",
        "Group": "sglang",
        "ExecStart": "/opt/sglang/bin/serve_dsv4_decode.sh",
        "EnvironmentFile": "/etc/sglang/dsv4-decode.env",
        "Restart": "on-failure",
        "ProtectHome": True,
        "NoNewPrivileges": False,
        "DeviceAllow": ["char-nvidia-frontend rw", "char-nvidia-uvm rw"],
        "LimitNOFILE": 16384,
        "TimeoutStartSec": 1800,
        "SyslogIdentifier": None,
    }
    argv = systemd_run_argv("sglang-preflight-decode-1", service, "/run/x.env", ["/usr/bin/python3", "-c", "pass"])
    assert argv[: argv.index("--")] == [
        "systemd-run",
        "--quiet",
        "--wait",
        "--pipe",
        "--collect",
        "--service-type=exec",
        "--unit=sglang-preflight-decode-1",
        "--property=User=sglang",
        "--property=Group=sglang",
        "--property=ProtectHome=yes",
        "--property=NoNewPrivileges=no",
        "--property=DeviceAllow=char-nvidia-frontend rw",
        "--property=DeviceAllow=char-nvidia-uvm rw",
        "--property=LimitNOFILE=16384",
        "--property=EnvironmentFile=/run/x.env",
    ]
    assert argv[argv.index("--") + 1 :] == ["/usr/bin/python3", "-c", "pass"]


PREFILL = {"role": "prefill", "unit": "sglang-dsv4-prefill", "user": "sglang", "path_vars": [], "gpu_ids": []}


def rows(*results: tuple[str, int, str]) -> dict[str, Any]:
    return {"listeners": [{"host": h, "port": p, "result": r, "error": r} for h, p, r in results], "paths": []}


def test_a_port_held_by_the_same_unit_is_fine_and_by_another_is_refused_naming_its_variable() -> None:
    answer = rows(("127.0.0.1", 30000, "EADDRINUSE"), ("127.0.0.1", 8998, "EADDRINUSE"))
    held = {
        30000: [{"pid": 11, "comm": "python", "unit": "sglang-dsv4-prefill"}],
        8998: [{"pid": 12, "comm": "socat", "unit": "other"}],
    }
    problems = server_problems(PREFILL, answer, lambda port: held[port])
    assert answer["listeners"][0]["held_by"] == "sglang-dsv4-prefill (pid 11)"
    assert problems == [
        "sglang-dsv4-prefill: port 8998 (sglang_prefill.disaggregation_bootstrap_port = 8998) is already in use on "
        "this host by pid 12 (socat, unit other); sglang-dsv4-prefill could not bind it. Declare a free port in "
        "sglang_prefill.disaggregation_bootstrap_port or stop what holds it."
    ]


ROUTER = {"role": "router", "unit": "sglang-dsv4-router", "user": "sglang", "path_vars": [], "gpu_ids": []}
R = "sglang-dsv4-router"

# (the router's second listener, its metrics port 29000, as the probe found it; holders of that port; the one
# problem, written out by hand). The first listener (port 8000) is bound, so every row also shows that a bound
# listener is passed over and the next one still judged.
LISTENER_ROWS = [
    ({"result": "bound"}, [], None),
    ({"result": "EADDRINUSE", "error": "EADDRINUSE: Address already in use"},
     [{"pid": 7, "comm": "node", "unit": ""}, {"pid": 8, "comm": "nc", "unit": "x"}],
     f"{R}: port 29000 (sglang_router.prometheus_port = 29000) is already in use on this host by pid 7 (node, unit "
     f"none), pid 8 (nc, unit x); {R} could not bind it. Declare a free port in sglang_router.prometheus_port or "
     "stop what holds it."),
    ({"result": "EADDRINUSE"}, [],
     f"{R}: port 29000 (sglang_router.prometheus_port = 29000) is already in use on this host by another process; "
     f"{R} could not bind it. Declare a free port in sglang_router.prometheus_port or stop what holds it."),
    ({"result": "EADDRNOTAVAIL", "error": "EADDRNOTAVAIL: Cannot assign requested address"}, [],
     f"{R}: the listen address 10.1.2.3 (sglang_router.prometheus_host) is not an address of this host "
     "(EADDRNOTAVAIL: Cannot assign requested address). Declare an address the host has, or 0.0.0.0 / ::."),
    ({"result": "unresolved"}, [],
     f"{R}: the listen address 10.1.2.3 (sglang_router.prometheus_host) is not an address of this host "
     "(unresolved). Declare an address the host has, or 0.0.0.0 / ::."),
    ({"result": "EPERM", "error": "EPERM: Operation not permitted"}, [],
     f"{R}: binding 10.1.2.3:29000 (sglang_router.prometheus_port) failed: EPERM: Operation not permitted"),
    ({"result": "EMFILE"}, [], f"{R}: binding 10.1.2.3:29000 (sglang_router.prometheus_port) failed: EMFILE"),
]  # fmt: skip


@pytest.mark.parametrize(("row", "held", "problem"), LISTENER_ROWS, ids=[r[0]["result"] + str(i) for i, r in
                                                                          enumerate(LISTENER_ROWS)])  # fmt: skip
def test_each_listener_result_is_named_with_its_variable(
    row: dict[str, Any], held: list[dict[str, Any]], problem: str | None
) -> None:
    answer = {"listeners": [{"host": "0.0.0.0", "port": 8000, "result": "bound"},
                            {"host": "10.1.2.3", "port": 29000, **row}], "paths": []}  # fmt: skip
    assert server_problems(ROUTER, answer, lambda port: held if port == 29000 else []) == ([problem] if problem else [])


def test_a_low_port_a_foreign_address_a_hidden_path_a_missing_module_and_missing_gpus() -> None:
    answer = {
        **rows(("0.0.0.0", 80, "EACCES"), ("10.9.9.9", 8998, "EADDRNOTAVAIL")),
        "paths": [{"path": "/root/models/X", "result": "ENOENT"}],
        "imports": {"mooncake": "not found"},
        "gpus": 2,
    }
    server = {**PREFILL, "path_vars": ["sglang_model.path"], "python": "/opt/sglang/current/venv/bin/python",
              "import_reasons": {"mooncake": "disaggregation_transfer_backend mooncake imports it"},
              "gpu_ids": [0, 1, 2, 3]}  # fmt: skip
    problems = server_problems(server, answer, lambda port: [])
    assert [p.split(": ", 1)[1].split(" (")[0] for p in problems] == [
        "the unit's user sglang may not bind 0.0.0.0:80",
        "the listen address 10.9.9.9",
        "/root/models/X",
        "module mooncake is not found in the release's Python /opt/sglang/current/venv/bin/python, and "
        "disaggregation_transfer_backend mooncake imports it. Install it into the release",
        "the unit can open 2 of the 4 GPU(s) in sglang_prefill.gpu_ids [0, 1, 2, 3]",
    ]
    assert "sglang_prefill.port" in problems[0] and "sglang_prefill.host" in problems[1]
    assert "sglang_model.path" in problems[2] and "ProtectHome" in problems[2]
    assert "sglang_prefill.gpu_ids [0, 1, 2, 3]" in problems[4]


def test_engine_imports_follow_the_command_and_the_backend() -> None:
    serve = ["/opt/sglang/current/venv/bin/sglang", "serve"]
    assert list(engine_imports(serve, "mooncake")) == ["sglang", "mooncake.engine"]
    assert list(engine_imports(serve, "mooncake_tcp")) == ["sglang", "mooncake.engine"]
    assert list(engine_imports(["/v/bin/python", "-m", "sglang_sim"], "nixl")) == ["sglang_sim", "nixl._api"]
    assert list(engine_imports(["/v/bin/python", "-m", "sglang.launch_server"], None)) == ["sglang"]
    assert list(engine_imports(serve, "fake")) == ["sglang"]


# (backends the host's engines declare, pip requirements of the release, modules its check imports); by hand.
NEEDS = [
    (["mooncake"], ["mooncake-transfer-engine==0.3.11.post1"], ["mooncake.engine"]),
    (["mooncake", "mooncake_tcp"], ["mooncake-transfer-engine==0.3.11.post1"], ["mooncake.engine"]),
    (["nixl", "mooncake"], ["nixl==1.5.2", "mooncake-transfer-engine==0.3.11.post1"], ["nixl._api", "mooncake.engine"]),
    (["fake", "ascend"], [], []),
    ([], [], []),
]


@pytest.mark.parametrize(("backends", "requirements", "modules"), NEEDS, ids=[" ".join(n[0]) or "-" for n in NEEDS])
def test_a_release_gets_the_package_of_each_declared_backend(
    backends: list[str], requirements: list[str], modules: list[str]
) -> None:
    needs = transfer_needs(list(backends))
    assert needs["requirements"] == requirements
    assert list(needs["imports"]) == modules
    assert all("disaggregation_transfer_backend" in why for why in needs["imports"].values())


def test_the_release_check_imports_for_real_and_names_what_fails(tmp_path: Path) -> None:
    """In a fresh venv: a module that is there, one that is not, and one whose import raises as mooncake's engine
    does without libibverbs; a preload the release lacks is skipped. Each failure is named with why the engine needs
    the module and, for a system library, where the host gets it."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    python = str(tmp_path / "venv/bin/python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    (Path(site) / "linked.py").write_text(
        "raise ImportError('libibverbs.so.1: cannot open shared object file: No such file or directory')\n"
    )
    imports = {"json": "the engine's command runs json", "absent_backend.engine": "the backend imports it",
               "linked": "disaggregation_transfer_backend mooncake imports it"}  # fmt: skip
    run = subprocess.run(release_check_argv(python, imports, ["no_such_preload", "csv"]),
                         capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    answer = json.loads(run.stdout)
    assert answer == {
        "csv": "ok",
        "json": "ok",
        "absent_backend.engine": "ModuleNotFoundError: No module named 'absent_backend'",
        "linked": "ImportError: libibverbs.so.1: cannot open shared object file: No such file or directory",
    }
    assert release_problems(python, answer, imports, "Fix: rerun.") == [
        f"module absent_backend.engine does not import in the new release's Python {python} "
        "(ModuleNotFoundError: No module named 'absent_backend'); the backend imports it. Fix: rerun.",
        f"module linked does not import in the new release's Python {python} (ImportError: libibverbs.so.1: "
        "cannot open shared object file: No such file or directory); disaggregation_transfer_backend mooncake imports "
        "it. libibverbs.so.1 is the RDMA verbs library (Debian and Ubuntu: apt install libibverbs1, from rdma-core). "
        "Fix: rerun.",
    ]


def test_a_transient_unit_systemd_could_not_set_up_once_is_tried_once_more(monkeypatch: pytest.MonkeyPatch) -> None:
    """219/CGROUP once (seen on a loaded lab host): a second transient unit of another name runs the probe."""
    preflight = load_library("sglang_preflight")
    names: list[str] = []
    monkeypatch.setattr(preflight.subprocess, "run", fake_systemd_run([219, 0], names))
    problems, notes, result = preflight.check(probe_server(), 60, None)
    assert problems == [] and result["listeners"] == []
    assert notes == ["sglang-dsv4-decode: systemd could not set up the transient unit's control group (exit 219); "
                     "tried once more"]  # fmt: skip
    assert len(set(names)) == 2


@pytest.mark.parametrize("statuses", [[219, 219], [217]], ids=["cgroup-twice", "user-once"])
def test_a_unit_systemd_cannot_set_up_is_a_problem(monkeypatch: pytest.MonkeyPatch, statuses: list[int]) -> None:
    """219 twice, or any other status of a process systemd could not set up once: the server's own unit would fail the
    same way."""
    preflight = load_library("sglang_preflight")
    names: list[str] = []
    monkeypatch.setattr(preflight.subprocess, "run", fake_systemd_run(list(statuses), names))
    problems, _notes, _result = preflight.check(probe_server(), 60, None)
    status = statuses[-1]
    assert problems == [
        f"sglang-dsv4-decode: a transient unit with its User=root, sandbox and environment did not run (systemd-run "
        f"exit {status} {preflight.EXEC_STATUS[status]}: ); the server's own unit would fail to start the same way. "
        "Check the account, WorkingDirectory and the unit overrides declared for it."
    ]
    assert len(names) == len(statuses)


# ---------------------------------------------------------------- a verdict not asked again


def _passing_server(tmp_path: Path, **changes: Any) -> dict[str, Any]:
    env_file = tmp_path / "dsv4-decode.env"
    server = {"role": "decode", "unit": "sglang-dsv4-decode", "service": {"User": "sglang"},
              "environment": "SGLANG_API_KEY=k\n", "env_file": str(env_file), "listeners": [["127.0.0.1", 30001]],
              "paths": [], "path_vars": [], "python": "/opt/sglang/current/bin/python", "imports": {},
              "gpu_ids": [4, 5, 6, 7], "sglang_argv": ["--port", "30001"]}  # fmt: skip
    return {**server, **changes}


@pytest.fixture
def passed(tmp_path: Path) -> tuple[dict[str, Any], str]:
    """A server whose environment file is written and whose inputs passed, and the directory of the passes."""
    server = _passing_server(tmp_path)
    Path(server["env_file"]).write_text(server["environment"])
    passed_dir = str(tmp_path / "passed")
    remember_pass(server, passed_dir)
    return server, passed_dir


def test_the_same_inputs_on_a_running_unit_are_not_checked_again(passed: tuple[dict[str, Any], str]) -> None:
    server, passed_dir = passed
    assert passed_before(server, lambda unit: unit == "sglang-dsv4-decode", passed_dir)
    stamp = Path(passed_dir) / "sglang-dsv4-decode.sha256"
    assert stamp.stat().st_mode & 0o777 == 0o600 and Path(passed_dir).stat().st_mode & 0o777 == 0o700
    assert "SGLANG_API_KEY" not in stamp.read_text()


@pytest.mark.parametrize(
    "change",
    [{"listeners": [["127.0.0.1", 30002]]}, {"python": "/opt/sglang/releases/new/bin/python"},
     {"environment": "SGLANG_API_KEY=other\n"}, {"gpu_ids": [0, 1, 2, 3]}, {"service": {"User": "root"}}],
    ids=["listener", "release", "environment", "gpus", "sandbox"],
)  # fmt: skip
def test_changed_inputs_are_checked_again(passed: tuple[dict[str, Any], str], change: dict[str, Any]) -> None:
    server, passed_dir = passed
    assert not passed_before({**server, **change}, lambda _unit: True, passed_dir)


def test_a_stopped_unit_or_an_environment_not_yet_written_is_checked_again(
    passed: tuple[dict[str, Any], str],
) -> None:
    server, passed_dir = passed
    assert not passed_before(server, lambda _unit: False, passed_dir)
    Path(server["env_file"]).write_text("SGLANG_API_KEY=old\n")  # the deploy has not written it yet
    assert not passed_before(server, lambda _unit: True, passed_dir)
    Path(server["env_file"]).unlink()
    assert not passed_before(server, lambda _unit: True, passed_dir)


def test_nothing_passed_since_the_boot_is_checked(tmp_path: Path) -> None:
    server = _passing_server(tmp_path)
    Path(server["env_file"]).write_text(server["environment"])
    assert not passed_before(server, lambda _unit: True, str(tmp_path / "empty"))
