"""Two routers form smg's mesh when it is asked for (`sglang_router_mesh: true`; off by default):
playbooks/render.yml on the multi-host lab inventory writes, in each router's serve script, the mesh flags
(sglang_declared.router_mesh), and smg 1.13.0's own parser and startup checks accept the line as rendered (the deep
check's smg_startup_check.py, which starts smg on loopback stand-ins of its listeners and peers). The peers listed are
the other routers' advertised addresses at smg's default mesh port."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_deep import FILES_DIR, SMG_CHECKER
from deploytools import REPO, playbook
from smg.launch_router import parse_router_args
from test_render import bash_argv

INVENTORY = REPO / "inventories" / "multinode-lab" / "hosts.yml"
SCRIPT = Path("opt/sglang/bin/serve_dsv4_router.sh")


def _advertised() -> dict[str, str]:
    hosts = yaml.safe_load(INVENTORY.read_text())["all"]["children"]["sglang_lab_hosts"]["hosts"]
    return {name: str(host["sglang_advertise_host"]) for name, host in hosts.items()}


@pytest.fixture(scope="module")
def mesh_render(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, list[str]], str]:
    """The flags after `smg launch` of each router's rendered script, and the run's output."""
    out = tmp_path_factory.mktemp("render-multinode-lab")
    run = playbook("-i", str(INVENTORY), "playbooks/render.yml", "-e", f"sglang_render_dir={out}", "-e",
                   "sglang_router_mesh=true")  # fmt: skip
    run.check()
    return {host: bash_argv(out / host / SCRIPT)[2:] for host in ("mlab-r1", "mlab-r2")}, run.output


@pytest.fixture(scope="module")
def mesh_lines(mesh_render: tuple[dict[str, list[str]], str]) -> dict[str, list[str]]:
    return mesh_render[0]


def test_validation_warns_what_the_mesh_costs_under_round_robin(mesh_render: tuple[dict[str, list[str]], str]) -> None:
    """The lab's routers run round_robin: the mesh shares nothing they use, and the validation says so as a risk."""
    output = " ".join(mesh_render[1].split()).replace("''", "'")  # folded over lines, quoted as YAML
    assert "warn: router_mesh_busy_at_rest: smg's mesh joins the routers mlab-r1, mlab-r2" in output
    assert "under policy round_robin it shares nothing the routers use: set sglang_router_mesh: false" in output


def test_each_router_script_carries_the_mesh_flags(mesh_lines: dict[str, list[str]]) -> None:
    address = _advertised()
    for host, other in (("mlab-r1", "mlab-r2"), ("mlab-r2", "mlab-r1")):
        args = parse_router_args(mesh_lines[host])  # smg 1.13.0's own parser
        assert args.enable_mesh, host
        assert args.mesh_server_name == host
        assert args.mesh_advertise_host == address[host]
        assert args.mesh_port == 39527
        assert args.mesh_peer_urls == [f"{address[other]}:39527"]


def test_smg_starts_with_the_rendered_mesh_line(mesh_lines: dict[str, list[str]]) -> None:
    cases = [{"id": host, "argv": argv, "ablate": False} for host, argv in mesh_lines.items()]
    run = subprocess.run(
        [sys.executable, str(FILES_DIR / SMG_CHECKER)],
        input=json.dumps({"cases": cases}),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert [(r["id"], r["ok"], r["error"]) for r in json.loads(run.stdout)] == [
        ("mlab-r1", True, ""),
        ("mlab-r2", True, ""),
    ]


def test_smg_refuses_a_mesh_port_equal_to_the_router_port(mesh_lines: dict[str, list[str]]) -> None:
    """Why the line must reach smg whole: its startup check refuses a mesh listener on the router's own port."""
    argv = list(mesh_lines["mlab-r1"])
    argv[argv.index("--mesh-port") + 1] = argv[argv.index("--port") + 1]
    run = subprocess.run(
        [sys.executable, str(FILES_DIR / SMG_CHECKER)],
        input=json.dumps({"cases": [{"id": "clash", "argv": argv, "ablate": False}]}),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    (result,) = json.loads(run.stdout)
    assert not result["ok"] and "--mesh-port and --port are both 8000" in result["error"], result
    assert result["culprits"] == ["--port", "--mesh-port"]
