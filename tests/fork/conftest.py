"""Fixtures of the patch-series checks: the pinned wheel and the patched tree (both cached under .cache/)."""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from pathlib import Path

import pytest
from sglang_patched_tree import (
    CACHE,
    PARSER_PYTHON,
    REPO,
    SERIES,
    WHEEL_SHA256,
    pip_download,
    sglang_wheel_patch,
)
from sglang_patched_tree import patched_tree as build_patched_tree
from sglang_patched_tree import pinned_wheel as cached_wheel

TVM_FFI = "apache-tvm-ffi==0.1.11"
__all__ = ["REPO", "SERIES", "WHEEL_SHA256", "run_probe", "sglang_wheel_patch"]


@pytest.fixture(scope="session")
def pinned_wheel() -> Path:
    return cached_wheel()


@pytest.fixture(scope="session")
def patched_tree(pinned_wheel: Path) -> Path:
    """The series applied to the pinned wheel (.cache/sglang-patched/<series hash>, shared with the bench)."""
    return build_patched_tree()


@pytest.fixture(scope="session")
def tvm_ffi_include() -> Path:
    root = CACHE / "tvm-ffi"
    include = root / "x/tvm_ffi/include"
    if not (include / "tvm/ffi/container/tensor.h").is_file():
        wheels = sorted(root.glob("apache_tvm_ffi-*.whl"))
        if not wheels:
            pip_download(TVM_FFI, root)
            wheels = sorted(root.glob("apache_tvm_ffi-*.whl"))
        with zipfile.ZipFile(wheels[0]) as archive:
            archive.extractall(root / "x", [n for n in archive.namelist() if n.startswith("tvm_ffi/include/")])
    return include


def run_probe(tree: Path, what: str, **env: str) -> dict[str, object]:
    if not PARSER_PYTHON.is_file():
        pytest.fail(f"{PARSER_PYTHON} is missing; fix: run `make parser-venv` (make test does it)")
    environ = {k: v for k, v in os.environ.items() if k != "SGLANG_DSV4_BF16_INDEX_K"} | env
    cmd = [str(PARSER_PYTHON), str(Path(__file__).with_name("sglang_patched_probe.py")), str(tree), what]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=environ, timeout=300, cwd="/")
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)
