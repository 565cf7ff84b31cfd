"""Puts kernels/ on the import path and finds the CUDA toolchain for the kernel tests."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

KERNELS = Path(__file__).resolve().parents[3] / "kernels"
if str(KERNELS) not in sys.path:
    sys.path.insert(0, str(KERNELS))

CUDA_HOME = Path("/usr/local/cuda")


@pytest.fixture(scope="session")
def nvcc() -> str:
    for candidate in (CUDA_HOME / "bin/nvcc", shutil.which("nvcc")):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    pytest.skip("nvcc is not installed (looked in /usr/local/cuda/bin and PATH)")
