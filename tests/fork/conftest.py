"""Fixtures of the patch-series checks: the pinned wheel (cached under .cache/), the patched tree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache"
SERIES = REPO / "patches/sglang-0.5.23"
PARSER_PYTHON = CACHE / "sglang-parser-venv/bin/python"
WHEEL_NAME = "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl"
WHEEL_SHA256 = "00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937"
TVM_FFI = "apache-tvm-ffi==0.1.11"

sys.path.insert(0, str(REPO / "roles/sglang_build/files"))
import sglang_wheel_patch  # noqa: E402


def pip_download(spec: str, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", spec, "-d", str(dest)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"pip download {spec} failed: {proc.stderr[-2000:]}")


@pytest.fixture(scope="session")
def pinned_wheel() -> Path:
    wheel = CACHE / "wheels" / WHEEL_NAME
    if not wheel.is_file():
        pip_download("sglang==0.5.23", wheel.parent)
    assert sglang_wheel_patch.sha256_file(wheel) == WHEEL_SHA256
    return wheel


@pytest.fixture(scope="session")
def patched_tree(pinned_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = tmp_path_factory.mktemp("patched") / "tree"
    tree.mkdir()
    with zipfile.ZipFile(pinned_wheel) as archive:
        archive.extractall(tree)
    sglang_wheel_patch.apply_series(tree, sglang_wheel_patch.read_series(SERIES))
    return tree


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
