"""playbooks/render.yml renders, for every inventory, the files a deployment writes: serve scripts that exec
the engine with the declared flags and no secret, environment files, and units that systemd accepts.

The scripts are read the way a host reads them: bash runs each one with its `exec` target replaced by printf,
and the argv it prints goes through SGLang 0.5.23's own parser (in the parser venv) or smg 1.13.0's. Every
flag must be a full option string of that parser: argparse would also take an abbreviation such as --tp.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_flags import parse_env_file
from deploytools import REPO, VAULT_KEY, envelope, playbook
from smg.launch_router import RouterArgs, parse_router_args

LAB_KEY = yaml.safe_load((REPO / "inventories/lab/group_vars/all/lab.yml").read_text())["sglang_api_key"]
ENV = envelope()
HOSTS = {
    "lab": {"prefill": ["lab1"], "decode": ["lab1"], "router": ["lab1"]},
    "production": {"prefill": ["gpu-node-01"], "decode": ["gpu-node-01"], "router": ["gpu-node-01"]},
    "multinode": {
        "prefill": ["prefill-01", "prefill-02"],
        "decode": ["decode-01", "decode-02", "decode-03"],
        "router": ["router-01"],
    },
}
UNIT = {"prefill": "sglang-dsv4-prefill", "decode": "sglang-dsv4-decode", "router": "sglang-dsv4-router"}
PARSER_PYTHON = REPO / ".cache" / "sglang-parser-venv" / "bin" / "python"
SGLANG_PARSE = Path(__file__).resolve().parents[1] / "contract" / "sglang_parse.py"
KEY = "sk-render-test-key"  # what bash expands "${SGLANG_API_KEY}" to here
ABBREVIATED = ["--model-path", "/models/DeepSeek-V4-Flash", "--tp", "4"]  # SGLang's argparse takes --tp as --tp-size


def bash_argv(script: Path) -> list[str]:
    """The argv the script execs, as bash expands it (the exec target replaced by printf)."""
    text = script.read_text()
    assert text.count("\nexec ") == 1, f"{script}: one exec line expected"
    run = subprocess.run(
        ["bash", "-s"],
        input=text.replace("\nexec ", "\nexec printf '%s\\0' ", 1),
        env={"PATH": os.environ["PATH"], "SGLANG_API_KEY": KEY},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert run.returncode == 0, f"{script}: {run.stderr}"
    return run.stdout.split("\0")[:-1]


def _flags(argv: list[str]) -> list[str]:
    return argv[next(i for i, token in enumerate(argv) if token.startswith("--")) :]


def smg_options() -> set[str]:
    """Every option string of smg 1.13.0's `launch` parser (built as parse_router_args builds it)."""
    parser = argparse.ArgumentParser()
    RouterArgs.add_cli_args(parser, use_router_prefix=False)
    return {s for action in parser._actions for s in action.option_strings}


@pytest.fixture(scope="session")
def engines(rendered: tuple[str, Path]) -> dict[str, Any]:
    """{(role, host): (argv, SGLang's parse)} for every engine script, and SGLang's parse of ABBREVIATED."""
    if not PARSER_PYTHON.exists():
        pytest.fail(f"{PARSER_PYTHON} is missing; fix: run `make parser-venv` (make test does it)")
    name, root = rendered
    items = [(role, host) for role in ("prefill", "decode") for host in HOSTS[name][role]]
    argvs = [bash_argv(_files(root, host, role)[0]) for role, host in items]
    run = subprocess.run(
        [str(PARSER_PYTHON), str(SGLANG_PARSE)],
        input=json.dumps([_flags(a) for a in argvs] + [ABBREVIATED]),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads(run.stdout)
    scripts = dict(zip(items, zip(argvs, results[:-1], strict=True), strict=True))
    return {"scripts": scripts, "abbreviated": results[-1]}


def _files(root: Path, host: str, role: str) -> tuple[Path, Path, Path]:
    base = root / host
    return (
        base / f"opt/sglang/bin/serve_dsv4_{role}.sh",
        base / f"etc/sglang/dsv4-{role}.env",
        base / f"etc/systemd/system/{UNIT[role]}.service",
    )


def _unit(path: Path) -> dict[str, list[str]]:
    directives: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            name, _, value = line.partition("=")
            directives.setdefault(name, []).append(value)
    return directives


# The monitoring files (roles/sglang_monitoring): the drift exporter's units on each engine host; Prometheus's and
# Alertmanager's files on the monitoring host (the first router host of these inventories).
DRIFT_UNITS = ("etc/systemd/system/sglang-drift-export.service", "etc/systemd/system/sglang-drift-export.timer")
SERVER_FILES = (
    "etc/prometheus/sglang_rules.yml",
    "etc/prometheus/sglang_dashboard.json",
    "etc/prometheus/prometheus.yml",
    "etc/prometheus/alertmanager.yml",
    "etc/default/prometheus",
    "etc/default/prometheus-alertmanager",
)


def test_every_host_gets_its_files_and_no_other(rendered: tuple[str, Path]) -> None:
    name, root = rendered
    hosts = HOSTS[name]
    engine_hosts = set(hosts["prefill"] + hosts["decode"])
    expected = {
        path.relative_to(root)
        for role, role_hosts in hosts.items()
        for host in role_hosts
        for path in _files(root, host, role)
    }
    expected |= {Path(host, unit) for host in engine_hosts for unit in DRIFT_UNITS}
    expected |= {Path(hosts["router"][0], path) for path in SERVER_FILES}
    # Beside each host's files, the command that checks each (the render play's last step runs them).
    expected |= {Path(host, ".sglang-checks.json") for host in engine_hosts | set(hosts["router"])}
    assert {p.relative_to(root) for p in root.rglob("*") if p.is_file()} == expected


@pytest.mark.parametrize("rendered", ["lab"], indirect=True)
def test_a_rerun_writes_only_what_differs(rendered: tuple[str, Path], tmp_path: Path) -> None:
    """sglang_render_files leaves a file whose content and mode match alone, and puts back one that differs."""
    _, root = rendered
    out = tmp_path / "render"
    shutil.copytree(root, out)
    env = out / "lab1/etc/sglang/dsv4-decode.env"
    script = out / "lab1/opt/sglang/bin/serve_dsv4_router.sh"
    declared_env = env.read_text()
    env.write_text(declared_env + "SGLANG_EDITED_BY_HAND=1\n")
    script.chmod(0o700)
    untouched = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and p not in (env, script)}
    run = playbook(
        "-i", "inventories/lab", "playbooks/render.yml", "-e", f"sglang_render_dir={out}",
        "-e", "sglang_validate_deep_check=false",
    ).check()  # fmt: skip
    assert env.read_text() == declared_env
    assert script.stat().st_mode & 0o7777 == 0o755
    assert {p: p.stat().st_mtime_ns for p in untouched} == untouched
    assert run.recap()["lab1"]["changed"] == 2, run.output[-3000:]  # the decode and router render tasks


def test_engine_scripts_exec_the_declared_envelope(rendered: tuple[str, Path], engines: dict[str, Any]) -> None:
    name, root = rendered
    for (role, host), (argv, parsed) in engines["scripts"].items():
        declared = {**ENV["sglang_engine_common"], **ENV[f"sglang_{role}"]}
        script, env_file, _ = _files(root, host, role)
        text = script.read_text()
        assert text.startswith("#!/usr/bin/env bash\n")
        assert "\nset -euo pipefail\n" in text
        engine = {"lab": ["/opt/sglang/current/venv/bin/python", "-m", "sglang_sim"]}.get(
            name, ["/opt/sglang/current/venv/bin/sglang", "serve"]
        )
        assert argv[: len(engine)] == engine, argv[:4]
        assert parsed["ok"], f"{script}: SGLang refused it: {parsed['error']}"
        flags = parsed["args"]  # as SGLang 0.5.23's parser read them
        for key in ("context_length", "chunked_prefill_size", "mem_fraction_static", "tp_size", "page_size",
                    "kv_cache_dtype", "port"):  # fmt: skip
            assert flags[key] == declared[key], f"{script}: {key}: SGLang read {flags[key]!r}"
        assert flags["base_gpu_id"] == min(declared["gpu_ids"])
        assert flags["disaggregation_mode"] == role
        assert flags["model_path"] == ENV["sglang_model"]["path"]
        assert flags["host"] == ("127.0.0.1" if name == "lab" else "0.0.0.0")
        assert flags["api_key"] == KEY  # every inventory has its key: the lab's, or its vault file's
        if role == "prefill":
            assert flags["disaggregation_bootstrap_port"] == declared["disaggregation_bootstrap_port"]
        else:
            assert flags["cuda_graph_bs_decode"] == declared["cuda_graph_bs_decode"]
            assert "--disaggregation-bootstrap-port" not in argv
        environ = parse_env_file(env_file.read_text())
        assert environ["SGLANG_DSV4_BF16_INDEX_K"] == "1"


def test_engine_flags_are_full_sglang_option_strings(engines: dict[str, Any]) -> None:
    for (role, host), (argv, parsed) in engines["scripts"].items():
        assert parsed["not_options"] == [], f"{host} {role}: not options of SGLang's parser: {parsed['not_options']}"
        assert len([t for t in argv if t.startswith("--")]) > 10, argv


def test_the_option_check_catches_an_abbreviation_sglang_accepts(engines: dict[str, Any]) -> None:
    """Why the check above exists: SGLang's parser reads --tp 4 as --tp-size 4, a rename would go unseen."""
    abbreviated = engines["abbreviated"]
    assert abbreviated["ok"] and abbreviated["args"]["tp_size"] == 4
    assert abbreviated["not_options"] == ["--tp"]


def test_router_script_lists_every_worker_and_the_limits(rendered: tuple[str, Path]) -> None:
    name, root = rendered
    router = ENV["sglang_router"] if name != "multinode" else None
    options = smg_options()
    for host in HOSTS[name]["router"]:
        script, _, unit = _files(root, host, "router")
        text = script.read_text()
        assert "\nset -euo pipefail\n" in text
        argv = bash_argv(script)
        assert argv[:2] == ["/opt/smg/current/venv/bin/smg", "launch"]
        flags = [t for t in argv[2:] if t.startswith("--")]
        assert [f for f in flags if f not in options] == [], "not full option strings of smg's parser"
        args = parse_router_args(argv[2:])  # smg 1.13.0's own parser
        assert args.pd_disaggregation and args.disable_tokenizer_autoload
        address = {"lab": "127.0.0.1", "production": "127.0.0.1"}
        assert [list(p) for p in args.prefill_urls] == [
            [f"http://{address.get(name, h)}:{ENV['sglang_prefill']['port']}", 8998] for h in HOSTS[name]["prefill"]
        ]
        assert args.decode_urls == [
            f"http://{address.get(name, h)}:{ENV['sglang_decode']['port']}" for h in HOSTS[name]["decode"]
        ]
        if router is not None:
            for key in ("max_concurrent_requests", "queue_size", "queue_timeout_secs", "request_timeout_secs",
                        "max_payload_size", "port", "prometheus_port"):  # fmt: skip
                assert getattr(args, key) == router[key], key
        else:
            assert args.max_concurrent_requests == 192  # 3 decode engines x 64
        assert args.api_key == KEY
        assert _unit(unit)["ExecStart"] == ["/opt/sglang/bin/serve_dsv4_router.sh"]


def test_the_router_option_check_catches_an_abbreviation_smg_accepts() -> None:
    args = parse_router_args(["--pd-disaggregation", "--decode", "http://127.0.0.1:1", "--queue-timeout", "7"])
    assert args.queue_timeout_secs == 7
    assert "--queue-timeout" not in smg_options() and "--queue-timeout-secs" in smg_options()


def test_the_api_key_is_only_a_reference(rendered: tuple[str, Path]) -> None:
    _name, root = rendered
    for path in root.rglob("*"):
        if path.is_file():
            assert LAB_KEY not in path.read_text() and VAULT_KEY not in path.read_text(), path
    for script in root.rglob("serve_dsv4_*.sh"):
        assert '--api-key "${SGLANG_API_KEY}"' in script.read_text(), script
    for env_file in root.rglob("dsv4-*.env"):
        assert parse_env_file(env_file.read_text()).get("SGLANG_API_KEY") == "<redacted>", env_file


def test_units_come_from_one_data_structure(rendered: tuple[str, Path]) -> None:
    name, root = rendered
    for role, hosts in HOSTS[name].items():
        for host in hosts:
            script, env_file, unit = _files(root, host, role)
            d = _unit(unit)
            assert d["User"] == ["sglang"] and d["Group"] == ["sglang"]
            assert d["Restart"] == ["on-failure"]
            assert d["ExecStart"] == [f"/{script.relative_to(root / host)}"]
            assert d["EnvironmentFile"] == [f"/{env_file.relative_to(root / host)}"]
            assert d["NoNewPrivileges"] == ["yes"] and d["ProtectSystem"] == ["full"]
            assert d["ProtectHome"] == ["yes"] and d["PrivateTmp"] == ["yes"]
            assert d["LimitNOFILE"] == (["16384"] if name == "lab" else ["1048576"])
            assert d["LimitMEMLOCK"] == (["8M"] if name == "lab" else ["infinity"])
            if role == "router":
                assert d["PrivateDevices"] == ["yes"] and "DeviceAllow" not in d
                continue
            assert d["TimeoutStartSec"] == ["1800"]
            assert d["PrivateDevices"] == ["no"]
            if name == "lab":
                assert "DeviceAllow" not in d
            else:
                assert "char-nvidia-frontend rw" in d["DeviceAllow"] and "char-nvidia-uvm rw" in d["DeviceAllow"]


def test_scripts_pass_shellcheck(rendered: tuple[str, Path]) -> None:
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (Debian package shellcheck)")
    scripts = sorted(str(p) for p in rendered[1].rglob("serve_dsv4_*.sh"))
    run = subprocess.run([shellcheck, "--severity=style", *scripts], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout + run.stderr


def test_units_pass_systemd_analyze_verify(rendered: tuple[str, Path], tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    system_units = Path("/usr/lib/systemd/system")
    if analyze is None or not (system_units / "sysinit.target").exists():
        pytest.skip("systemd-analyze and the systemd unit tree are missing (Debian package systemd)")
    name, root = rendered
    for host_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        # A scratch root with the rendered files (so ExecStart= resolves to an executable script) and the
        # system's own units (so the dependencies of every unit exist).
        scratch = tmp_path / host_dir.name
        shutil.copytree(host_dir, scratch)
        shutil.copytree(system_units, scratch / "usr/lib/systemd/system", symlinks=True)
        # the host's own interpreter (Debian's python3), which the drift exporter's unit runs
        interpreter = scratch / "usr/bin/python3"
        interpreter.parent.mkdir(parents=True, exist_ok=True)
        interpreter.write_text("#!/bin/sh\n")
        interpreter.chmod(0o755)
        units = sorted(p.name for p in (scratch / "etc/systemd/system").glob("*.service"))
        run = subprocess.run(
            [analyze, "verify", f"--root={scratch}", *units], capture_output=True, text=True, check=False
        )
        output = run.stdout + run.stderr
        assert run.returncode == 0, f"{name}/{host_dir.name}: {output}"
        problems = [line for line in output.splitlines() if "sglang" in line]
        assert not problems, f"{name}/{host_dir.name}: {problems}"


def test_verify_catches_a_broken_unit(tmp_path: Path) -> None:
    """The check above can fail: a unit whose ExecStart is not executable is rejected."""
    analyze = shutil.which("systemd-analyze")
    system_units = Path("/usr/lib/systemd/system")
    if analyze is None or not (system_units / "sysinit.target").exists():
        pytest.skip("systemd-analyze and the systemd unit tree are missing (Debian package systemd)")
    shutil.copytree(system_units, tmp_path / "usr/lib/systemd/system", symlinks=True)
    unit_dir = tmp_path / "etc/systemd/system"
    unit_dir.mkdir(parents=True)
    (unit_dir / "broken.service").write_text("[Service]\nExecStart=/opt/missing.sh\n")
    run = subprocess.run(
        [analyze, "verify", f"--root={tmp_path}", "broken.service"], capture_output=True, text=True, check=False
    )
    assert run.returncode != 0, run.stdout + run.stderr
