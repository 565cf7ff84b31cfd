"""The pinned SGLang 0.5.23 wheel with the patch series applied, unpacked under .cache/ (standard library only).

Built once per (wheel, series) at .cache/sglang-patched/<series hash 12>/ and reused by tests/component/fork and
bench/index_k_recall.py, which put it first on sys.path after roles/sglang_validate/files/sglang_cpu.py's bootstrap.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
CACHE = REPO / ".cache"
SERIES = REPO / "patches/sglang-0.5.23"
PARSER_PYTHON = CACHE / "sglang-parser-venv/bin/python"
WHEEL_NAME = "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl"
WHEEL_SHA256 = "00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937"

sys.path.insert(0, str(REPO / "collections/ansible_collections/sglang/dsv4/roles/sglang_build/files"))
import sglang_wheel_patch  # noqa: E402


def pip_download(spec: str, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", spec, "-d", str(dest)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"pip download {spec} failed: {proc.stderr[-2000:]}")


def pinned_wheel() -> Path:
    """The pinned wheel from .cache/wheels, downloaded when absent; its sha256 is checked."""
    wheel = CACHE / "wheels" / WHEEL_NAME
    if not wheel.is_file():
        pip_download("sglang==0.5.23", wheel.parent)
    digest = sglang_wheel_patch.sha256_file(wheel)
    if digest != WHEEL_SHA256:
        raise RuntimeError(f"{wheel} has sha256 {digest}, expected {WHEEL_SHA256}")
    return wheel


def patched_tree() -> Path:
    """The unpacked wheel with the series applied; built into a scratch directory and renamed into place."""
    digest = sglang_wheel_patch.series_hash(sglang_wheel_patch.read_series(SERIES))
    tree = CACHE / "sglang-patched" / digest[:12]
    if (tree / "sglang/srt/layers/attention/dsv4/index_k_dtype.py").is_file():
        return tree
    wheel = pinned_wheel()
    tree.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".build-", dir=tree.parent))
    try:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(scratch)
        sglang_wheel_patch.apply_series(scratch, sglang_wheel_patch.read_series(SERIES))
        try:
            os.rename(scratch, tree)
        except OSError:  # built meanwhile by another process
            if not tree.is_dir():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return tree
