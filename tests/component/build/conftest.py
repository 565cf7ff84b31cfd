"""Fixture of the sglang_build role tests: a fork repository and a runner against localhost."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from sglang_build_lab import FIXTURE, PLAYBOOK, BuildLab, ansible_playbook, make_fork, pinned_wheel


def require_tools() -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    if not Path(ansible_playbook()).is_file():
        pytest.skip("ansible-playbook is not installed")
    if not Path("/usr/local/cuda/bin/nvcc").is_file():
        pytest.skip("nvcc is not installed at /usr/local/cuda/bin/nvcc")


@pytest.fixture(scope="module")
def wheel_lab(tmp_path_factory: pytest.TempPathFactory) -> BuildLab:
    """The role with its defaults (the pinned upstream wheel and the series), the wheel copied from the controller."""
    require_tools()
    wheel = pinned_wheel()
    root = tmp_path_factory.mktemp("sglang_build_wheel")
    inventory = root / "hosts.ini"
    inventory.write_text(f"engine ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    playbook = root / "play.yml"
    playbook.write_text(PLAYBOOK)
    lab = BuildLab(root, root, [], root / "switches.log", playbook, inventory)
    lab.base_vars = {
        "marker": str(lab.marker),
        "sglang_defaults_root": str(root / "opt"),
        "sglang_defaults_facts_dir": str(root / "facts.d"),
        "sglang_build_wheel_src": str(wheel),
        "sglang_build_cuda_archs": ["90a"],
        "sglang_build_cuda_home": "/usr/local/cuda",
        "sglang_build_python": sys.executable,
        "sglang_build_env": {"PIP_NO_INDEX": "1"},
        # SGLang's own dependencies (torch, ...) are not what this test installs: `import sglang` would need them,
        # so the release check imports the kernel only.
        "sglang_build_pip_install_args": ["--no-index", "--no-deps"],
        "sglang_build_release_imports": {"dsv4_index_k": "the index-key kernel"},
        "sglang_defaults_keep_releases": 1,
    }
    return lab


@pytest.fixture(scope="module")
def build_lab(tmp_path_factory: pytest.TempPathFactory) -> BuildLab:
    require_tools()
    root = tmp_path_factory.mktemp("sglang_build")
    fork = root / "fork"
    fork.mkdir()
    shas = make_fork(fork)
    inventory = root / "hosts.ini"
    inventory.write_text(f"engine ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    playbook = root / "play.yml"
    playbook.write_text(PLAYBOOK)
    lab = BuildLab(root, fork, shas, root / "switches.log", playbook, inventory)
    lab.base_vars = {
        "marker": str(lab.marker),
        "sglang_defaults_root": str(root / "opt"),
        "sglang_defaults_facts_dir": str(root / "facts.d"),
        "sglang_build_source": "git",
        "sglang_build_source_url": str(fork),
        "sglang_build_source_sha": shas[0],
        "sglang_build_patches": [str(FIXTURE / "ok.patch")],
        "sglang_build_patch_dir": "",
        "sglang_build_cuda_archs": ["90a"],
        "sglang_build_cuda_home": "/usr/local/cuda",
        "sglang_build_python": sys.executable,
        "sglang_build_env": {"PIP_NO_INDEX": "1"},
        "sglang_build_pip_install_args": ["--no-index"],
        "sglang_defaults_keep_releases": 1,
    }
    return lab
