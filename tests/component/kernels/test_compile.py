"""nvcc builds of kernels/ (compile only: there is no GPU or libcuda here)."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import wheel_backend

KERNELS = Path(wheel_backend.__file__).resolve().parent
CUDA_HOME = Path("/usr/local/cuda")

ARCHS = ["sm_90a", "sm_100a", "sm_120a"]
STRICT = ["-std=c++17", "-O3", "-Werror", "all-warnings", "-Xcompiler", "-Wall,-Wextra"]


def sections(path: Path) -> str:
    return subprocess.run(["readelf", "-S", str(path)], check=True, capture_output=True, text=True).stdout


@pytest.mark.parametrize("arch", ARCHS)
def test_kernel_compiles(nvcc: str, arch: str, tmp_path: Path) -> None:
    obj = tmp_path / f"fused_index_k_{arch}.o"
    source = KERNELS / "csrc/fused_index_k.cu"
    subprocess.run([nvcc, *STRICT, f"-arch={arch}", "-c", str(source), "-o", str(obj)], check=True)
    assert ".nv_fatbin" in sections(obj)


def test_wheel_backend_builds_library_with_switch(nvcc: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CMAKE_CUDA_ARCHITECTURES", "90a")
    monkeypatch.setenv("CUDACXX", nvcc)
    name = wheel_backend.build_wheel(str(tmp_path))
    with zipfile.ZipFile(tmp_path / name) as wheel:
        members = set(wheel.namelist())
        info = json.loads(wheel.read("dsv4_index_k/build_info.json"))
        wheel.extractall(tmp_path / "site")
    assert {"dsv4_index_k/libdsv4_index_k.so", "dsv4_index_k/include/fused_index_k.cuh"} <= members
    assert info["cuda_archs"] == ["90a"] and info["nvcc_version"].startswith("V")
    library = tmp_path / "site/dsv4_index_k/libdsv4_index_k.so"
    assert ".nv_fatbin" in sections(library)
    lib = ctypes.CDLL(str(library))
    assert [lib.dsv4_index_k_bytes_per_token_head(b) for b in (0, 1)] == [132, 256]
    # The switch is read once per process, so each setting gets its own process.
    probe = "import ctypes, sys; print(ctypes.CDLL(sys.argv[1]).dsv4_index_k_bf16_enabled())"
    for value, want in (("1", "1"), ("TRUE", "1"), ("0", "0"), (" 1", "0"), (None, "0")):
        env = {k: v for k, v in os.environ.items() if k != "SGLANG_DSV4_BF16_INDEX_K"}
        if value is not None:
            env["SGLANG_DSV4_BF16_INDEX_K"] = value
        out = subprocess.run([sys.executable, "-c", probe, str(library)], env=env, capture_output=True, text=True)
        assert out.stdout.strip() == want, (value, out.stderr)


@pytest.mark.parametrize(
    ("env", "archs"),
    [
        ({"CMAKE_CUDA_ARCHITECTURES": "90a;100a"}, ["90a", "100a"]),
        ({"TORCH_CUDA_ARCH_LIST": "9.0a 10.0a;12.0a+PTX"}, ["90a", "100a", "120a"]),
        ({}, ["90a", "100a", "120a"]),
    ],
)
def test_arch_list_parsing(env: dict[str, str], archs: list[str]) -> None:
    assert wheel_backend.cuda_archs(env) == archs


def test_arch_list_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="sm_90"):
        wheel_backend.cuda_archs({"CMAKE_CUDA_ARCHITECTURES": "sm_90"})


def test_host_conversions_match_cuda_headers(tmp_path: Path) -> None:
    """The reference's bf16/e4m3 rounding against cuda_bf16.h / cuda_fp8.h host code."""
    import index_k_ref as ref

    gxx = shutil.which("g++")
    if gxx is None or not (CUDA_HOME / "include/cuda_fp8.h").is_file():
        pytest.skip("needs g++ and the CUDA headers in /usr/local/cuda/include")
    binary = tmp_path / "host_convert"
    source = Path(__file__).with_name("host_convert.cpp")
    subprocess.run([gxx, "-std=c++17", "-O1", f"-I{CUDA_HOME / 'include'}", str(source), "-o", str(binary)], check=True)
    rng = np.random.default_rng(3)
    every_bf16 = (np.arange(2**16, dtype=np.uint32) << 16).view(np.float32)
    ties = ((np.arange(2**16, dtype=np.uint32) << 16) | 0x8000).view(np.float32)
    scaled = (rng.standard_normal(200_000) * np.exp2(rng.uniform(-14, 10, 200_000))).astype(np.float32)
    grid = np.unique(ref.e4m3_bits_to_float(np.arange(256, dtype=np.uint8)))
    grid = grid[np.isfinite(grid)].astype(np.float64)
    midpoints = ((grid[1:] + grid[:-1]) / 2).astype(np.float32)
    raw_bits = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    values = np.concatenate([every_bf16, ties, scaled, midpoints, raw_bits])
    assert values.dtype == np.float32
    values.tofile(tmp_path / "in.f32")
    subprocess.run([str(binary), *(str(tmp_path / n) for n in ("in.f32", "out.bf16", "out.e4m3"))], check=True)
    bf16 = np.fromfile(tmp_path / "out.bf16", np.uint16)
    e4m3 = np.fromfile(tmp_path / "out.e4m3", np.uint8)
    assert np.array_equal(ref.float_to_bf16_bits(values), bf16)
    assert np.array_equal(ref.float_to_e4m3_bits(values), e4m3)


def test_gpu_harness_links(nvcc: str, tmp_path: Path) -> None:
    """The harness of the GPU check builds here; without a GPU it says so and exits 4."""
    import gpu_check

    binary = gpu_check.build_harness(tmp_path, "sm_90a")
    case = gpu_check.CASES[0]
    gpu_check.write_inputs(case, tmp_path, seed=0)
    run = subprocess.run([str(binary), str(tmp_path)], capture_output=True, text=True)
    if Path("/dev/nvidia0").exists():
        assert run.returncode == 0, run.stderr
    else:
        assert run.returncode == 4
        assert "no CUDA device" in run.stderr
