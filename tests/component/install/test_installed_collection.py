"""The collection installed as an operator installs it: `ansible-galaxy collection build`, then `install` into an
empty directory outside the checkout, and a project directory holding only what an operator writes (an ansible.cfg
naming that directory, the production inventory, the models' config.json, the playbooks). The render playbook runs
there with the deep check (SGLang's own startup checks, in the parser venv given as a setting); the command line,
`pip install`ed from a copy of the tracked files into a fresh venv, answers there with time figures from
AIConfigurator's venv given as a setting; ansible-doc documents every filter of the installed collection."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from ansible_collections.sglang.dsv4.plugins.filter.sglang import FilterModule
from deploytools import tracked_copy

REPO = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
SOURCE = REPO / "collections" / "ansible_collections" / "sglang" / "dsv4"
PARSER_PYTHON = REPO / ".cache" / "sglang-parser-venv" / "bin" / "python"
PERF_VENV = REPO / ".cache" / "aiconfigurator-venv"
GALAXY = SOURCE / "galaxy.yml"


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{cmd}: {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """(project directory, environment): the collection built and installed outside the checkout."""
    root = tmp_path_factory.mktemp("operator")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "SGLANG_DSV4_"))}
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    built = root / "built"
    run([str(BIN / "ansible-galaxy"), "collection", "build", str(SOURCE), "--output-path", str(built)], root, env)
    (tarball,) = built.glob("sglang-dsv4-*.tar.gz")
    installed = root / "collections"
    run([str(BIN / "ansible-galaxy"), "collection", "install", str(tarball), "-p", str(installed)], root, env)
    assert (installed / "ansible_collections" / "sglang" / "dsv4" / "MANIFEST.json").is_file()
    proj = root / "project"
    proj.mkdir()
    for part in ("inventories/production", "models", "playbooks", "group_vars"):
        if (REPO / part).exists():
            shutil.copytree(REPO / part, proj / part, ignore=shutil.ignore_patterns("vault.yml"))
    # The key in the inventory's vault file, as the README's quick start writes it (validation refuses production
    # without one: access.key_beyond_loopback).
    (proj / "inventories/production/group_vars/all/vault.yml").write_text(f"sglang_api_key: {secrets.token_hex(24)}\n")
    (proj / "ansible.cfg").write_text(
        f"[defaults]\ncollections_path = {installed}\ninventory = inventories/production\n"
        "interpreter_python = auto_silent\ninject_facts_as_vars = False\n"
    )
    env["ANSIBLE_CONFIG"] = str(proj / "ansible.cfg")
    yield proj, env


def test_the_installed_collection_is_used_not_the_checkout(project: tuple[Path, dict[str, str]]) -> None:
    proj, env = project
    listed = run([str(BIN / "ansible-galaxy"), "collection", "list", "sglang.dsv4"], proj, env).stdout
    assert str(proj.parent / "collections") in listed and str(REPO) not in listed


def test_ansible_doc_documents_every_filter(project: tuple[Path, dict[str, str]]) -> None:
    proj, env = project
    listing = run([str(BIN / "ansible-doc"), "-t", "filter", "-l", "sglang.dsv4", "--json"], proj, env).stdout
    docs = json.loads(listing)
    assert sorted(docs) == sorted(f"sglang.dsv4.{name}" for name in FilterModule().filters())  # each, and no other
    assert [name for name, text in docs.items() if not text or text == "UNDOCUMENTED"] == []


def test_render_with_the_deep_check_in_the_installed_collection(project: tuple[Path, dict[str, str]]) -> None:
    proj, env = project
    assert PARSER_PYTHON.exists(), "no parser venv: make parser-venv (make test builds it)"
    out = proj / "rendered"
    cmd = [str(BIN / "ansible-playbook"), "-i", "inventories/production", "playbooks/render.yml",
           "-e", f"sglang_render_dir={out}", "-e", f"sglang_validate_parser_python={PARSER_PYTHON}",
           "-e", "sglang_validate_deep_check=true"]  # fmt: skip
    done = run(cmd, proj, env, timeout=900)  # deep check `true`: a skipped deep check would fail the play
    assert "failed=0" in done.stdout and "is skipped" not in done.stdout
    rendered = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert any(p.startswith("gpu-node-01/") and p.endswith(".service") for p in rendered), rendered


@pytest.fixture(scope="module")
def cli_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv of the system's Python holding the command line as pip installs it: its distribution
    (pyproject.toml) built from a copy of the tracked files, not the checkout's editable install."""
    root = tmp_path_factory.mktemp("cli")
    tracked_copy(root / "source")
    venv = root / "venv"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    run(["python3", "-m", "venv", str(venv)], root, env)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile"]  # as make venv installs
    run([*pip, "-c", str(REPO / "requirements" / "constraints.txt"), str(root / "source")], root, env, timeout=900)
    return venv


def test_the_cli_is_the_pip_installed_one(cli_venv: Path) -> None:
    where = run([str(cli_venv / "bin" / "python"), "-c", "import sglang_envelope_cli, "
                 "ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_paths as p; "
                 "print(sglang_envelope_cli.__file__); print(p.__file__)"], cli_venv, {}).stdout  # fmt: skip
    for line in where.splitlines():
        assert Path(line).is_relative_to(cli_venv / "lib"), where
    version = run([str(cli_venv / "bin" / "sglang-envelope"), "--version"], cli_venv, {}).stdout
    assert yaml.safe_load(GALAXY.read_text())["version"] in version


def test_the_cli_answers_with_time_from_settings(project: tuple[Path, dict[str, str]], cli_venv: Path) -> None:
    """The pip-installed CLI, run in the operator's project with SGLANG_DSV4_HOME and the estimator's venv as
    settings."""
    proj, env = project
    assert (PERF_VENV / ".installed").exists(), "no estimator venv: make perf-venv (make test builds it)"
    env = {**env, "SGLANG_DSV4_HOME": str(proj), "SGLANG_DSV4_PERF_VENV": str(PERF_VENV),
           "SGLANG_DSV4_PERF_CACHE": str(REPO / ".cache" / "perf")}  # fmt: skip
    env["PATH"] = f"{cli_venv / 'bin'}:/usr/local/bin:/usr/bin:/bin"
    cli = str(cli_venv / "bin" / "sglang-envelope")
    plan = run([cli, "plan", "-i", "inventories/production", "--want", "10x4k", "--json"], proj, env)
    doc = json.loads(plan.stdout)
    assert doc["time_from"].startswith("AIConfigurator ")
    assert doc["plans"][0]["today_times"], doc["plans"][0]
    capacity = run([cli, "capacity", "-i", "inventories/production", "--no-time"], proj, env).stdout
    assert "total context (KV pool): 11159040 tokens" in capacity
    assert (proj / "reports" / "capacity-production" / "capacity.md").is_file()
