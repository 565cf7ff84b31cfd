"""The patch series against the pinned SGLang 0.5.23 wheel, on CPU."""

from __future__ import annotations

import base64
import compileall
import csv
import hashlib
import io
import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from sglang_patched_tree import PARSER_PYTHON, REPO, SERIES, WHEEL_SHA256, sglang_wheel_patch

JIT = "sglang/kernels/jit"
ARCHS = {"sm_90a": "900", "sm_100a": "1000"}


def run_probe(tree: Path, what: str, **env: str) -> dict[str, object]:
    if not PARSER_PYTHON.is_file():
        pytest.fail(f"{PARSER_PYTHON} is missing; fix: run `make parser-venv` (make test does it)")
    environ = {k: v for k, v in os.environ.items() if k != "SGLANG_DSV4_BF16_INDEX_K"} | env
    cmd = [str(PARSER_PYTHON), str(Path(__file__).with_name("sglang_patched_probe.py")), str(tree), what]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=environ, timeout=300, cwd="/")
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)


def patched_files() -> list[str]:
    names: list[str] = []
    for patch in sglang_wheel_patch.read_series(SERIES):
        names += [line[6:] for line in patch.read_text().splitlines() if line.startswith("+++ b/")]
    return sorted(set(names))


def test_series_applies_and_repacks(pinned_wheel: Path, tmp_path: Path) -> None:
    result = sglang_wheel_patch.patch_wheel(pinned_wheel, WHEEL_SHA256, SERIES, tmp_path)
    digest = sglang_wheel_patch.series_hash(sglang_wheel_patch.read_series(SERIES))
    assert result["version"] == f"0.5.23+dsv4bf16.{digest[:12]}"
    wheel = Path(result["wheel"])
    assert wheel.name == f"sglang-0.5.23+dsv4bf16.{digest[:12]}-cp311-cp311-manylinux_2_34_x86_64.whl"
    info = f"sglang-{result['version']}.dist-info"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert f"{info}/METADATA" in names and not any(n.startswith("sglang-0.5.23.dist-info/") for n in names)
        assert f"Version: {result['version']}\n" in archive.read(f"{info}/METADATA").decode()
        rows = list(csv.reader(io.StringIO(archive.read(f"{info}/RECORD").decode())))
        assert {row[0] for row in rows} == names
        for path, digest_field, size in rows:
            if path.endswith("/RECORD"):
                continue
            data = archive.read(path)
            want = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert (digest_field, int(size)) == (want, len(data)), path
        assert b"bf16_index_k_enabled" in archive.read("sglang/srt/mem_cache/deepseek_v4_memory_pool.py")


def test_wrong_sha256_is_refused(pinned_wheel: Path, tmp_path: Path) -> None:
    with pytest.raises(sglang_wheel_patch.PatchError, match="expected 0000"):
        sglang_wheel_patch.patch_wheel(pinned_wheel, "0" * 64, SERIES, tmp_path)


def test_patch_that_does_not_apply_names_itself(pinned_wheel: Path, tmp_path: Path) -> None:
    series = tmp_path / "series-dir"
    shutil.copytree(SERIES, series)
    stale = series / "0002-dsv4-index-k-budget-and-pool.patch"
    stale.write_text(
        stale.read_text().replace("    return index_head_dim + index_head_dim // 128 * 4", "    return 132")
    )
    with pytest.raises(
        sglang_wheel_patch.PatchError,
        match=r"Patch 0002-dsv4-index-k-budget-and-pool.patch does not apply after 1 earlier",
    ) as err:
        sglang_wheel_patch.patch_wheel(pinned_wheel, WHEEL_SHA256, series, tmp_path / "out")
    assert err.value.exit_code == 3
    assert not list((tmp_path / "out").glob("*.whl"))


def test_patched_tree_byte_compiles(patched_tree: Path) -> None:
    for name in patched_files():
        if name.endswith(".py"):
            assert compileall.compile_file(str(patched_tree / name), quiet=1, force=True), name


def test_store_header_is_the_kernels_copy(patched_tree: Path) -> None:
    ours = (REPO / "kernels/csrc/index_k_store.cuh").read_bytes()
    assert (patched_tree / JIT / "include/sgl_kernel/deepseek_v4/index_k_store.cuh").read_bytes() == ours


@pytest.mark.parametrize(
    ("switch", "dtype", "index_bytes"),
    [(None, "fp8", 132), ("1", "bf16", 256), ("TRUE", "bf16", 256), ("0", "fp8", 132)],
)
def test_patched_budget_follows_the_switch(
    patched_tree: Path, switch: str | None, dtype: str, index_bytes: int
) -> None:
    env = {} if switch is None else {"SGLANG_DSV4_BF16_INDEX_K": switch}
    got = run_probe(patched_tree, "budget", **env)
    assert str(got["module"]).startswith(str(patched_tree))
    assert got["dtype"] == dtype
    assert got["bytes_per_token"] == index_bytes
    # DSV4PoolConfigurator's per-full-token indexer term of a c4 layer: a quarter of a key.
    assert got["configurator_c4_index_bytes"] == index_bytes / 4
    assert got["fp4_bytes_per_token"] == 68  # the fp4 indexer is untouched


def test_bf16_scoring_matches_reference(patched_tree: Path) -> None:
    got = run_probe(patched_tree, "score")
    assert got["shape"] == [3, 384]
    assert got["masked_zero"] is True
    # bf16 q.k products round once (bf16 bmm output): well under 1 % of the largest logit.
    assert got["max_err_torch"] < 5e-3, got
    assert got["max_err_fast"] < 5e-3, got
    assert got["top64_overlap"] >= 0.95, got


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_patched_cuh_compiles(patched_tree: Path, tvm_ffi_include: Path, tmp_path: Path, arch: str) -> None:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not os.access(nvcc, os.X_OK):
        pytest.skip("nvcc is not installed")
    jit = patched_tree / JIT
    kernel = "FusedNormRopeKernel<bf16_t, 128, 64, 64, 0, {bf16}, V4, true>"
    unit = tmp_path / "unit.cu"
    unit.write_text(
        "#include <tvm/ffi/container/tensor.h>\n#include <tvm/ffi/function.h>\n"
        '#include "deepseek_v4/fused_norm_rope_v2.cuh"\nnamespace sglang {\n'
        f"TVM_FFI_DLL_EXPORT_TYPED_FUNC(forward_bf16, ({kernel.format(bf16='true')}::forward));\n"
        f"TVM_FFI_DLL_EXPORT_TYPED_FUNC(forward_fp8, ({kernel.format(bf16='false')}::forward));\n"
        f"TVM_FFI_DLL_EXPORT_TYPED_FUNC(forward_fp4, ({kernel.format(bf16='false')}::forward_fp4));\n"
        "}\n"
    )
    target = arch[3:]
    # SGLang's JIT flags (kernels/jit/utils: arch.py, compile/toolchain.py) and include paths.
    cmd = [
        nvcc, "-std=c++20", "-O3", "--expt-relaxed-constexpr", f"-gencode=arch=compute_{target},code={arch}",
        f"-DSGL_CUDA_ARCH={ARCHS[arch]}", "-isystem", str(jit / "include"), "-isystem", str(tvm_ffi_include),
        "-I", str(jit / "csrc"), "-c", str(unit), "-o", str(tmp_path / "unit.o"),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    symbols = subprocess.run(["nm", "-C", str(tmp_path / "unit.o")], capture_output=True, text=True).stdout
    assert "fused_norm_rope_indexer<__nv_bfloat16, (sglang::ForwardMode)0, 6, true, 0, true>" in symbols


def test_gpu_check_reports_a_missing_device() -> None:
    """patches/gpu_check.py (the H200 check) refuses to pass without a CUDA device: exit 2, saying why."""
    proc = subprocess.run(
        [str(PARSER_PYTHON), str(REPO / "patches/gpu_check.py")], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "FAIL setup: no CUDA device" in proc.stdout
