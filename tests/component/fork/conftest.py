"""Fixtures of the patch-series checks: the pinned wheel and the patched tree (both cached under .cache/)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from sglang_patched_tree import (
    CACHE,
    pip_download,
)
from sglang_patched_tree import patched_tree as build_patched_tree
from sglang_patched_tree import pinned_wheel as cached_wheel

TVM_FFI = "apache-tvm-ffi==0.1.11"


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
