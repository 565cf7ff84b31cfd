"""The GPU comparison: runs on a GPU host, and its comparers must catch differences."""

from __future__ import annotations

from pathlib import Path

import gpu_check
import numpy as np
import pytest


@pytest.mark.skipif(not Path("/dev/nvidia0").exists(), reason="no NVIDIA GPU here (/dev/nvidia0 is absent)")
def test_kernel_matches_reference_on_gpu(nvcc: str, tmp_path: Path) -> None:
    assert gpu_check.main(["--workdir", str(tmp_path)]) == 0


@pytest.fixture(scope="module")
def reference_caches(tmp_path_factory: pytest.TempPathFactory) -> tuple[gpu_check.Case, np.ndarray, np.ndarray]:
    case = gpu_check.CASES[1]
    inputs = gpu_check.write_inputs(case, tmp_path_factory.mktemp("inputs"), seed=1)
    return case, gpu_check.reference_cache(case, inputs, True), gpu_check.reference_cache(case, inputs, False)


def test_identical_caches_pass(reference_caches: tuple[gpu_check.Case, np.ndarray, np.ndarray]) -> None:
    case, bf16, fp8 = reference_caches
    assert gpu_check.compare_bf16(bf16.copy(), bf16) == []
    assert gpu_check.compare_fp8(case, fp8.copy(), fp8) == []


def test_one_bf16_byte_fails(reference_caches: tuple[gpu_check.Case, np.ndarray, np.ndarray]) -> None:
    _, bf16, _ = reference_caches
    got = bf16.copy()
    got.reshape(-1)[1000] ^= 1
    assert gpu_check.compare_bf16(got, bf16) == ["bf16: 1 bytes differ from the reference"]


def test_fp8_allows_one_step_but_not_two(reference_caches: tuple[gpu_check.Case, np.ndarray, np.ndarray]) -> None:
    case, _, fp8 = reference_caches
    split = case.page_size * case.num_heads * 128
    rows, cols = np.nonzero((fp8[:, :split] & 0x7F) == 0x30)  # a mid-range code, either sign
    one_step, two_steps = fp8.copy(), fp8.copy()
    one_step[rows[0], cols[0]] += 1
    two_steps[rows[0], cols[0]] += 2
    assert gpu_check.compare_fp8(case, one_step, fp8) == []
    assert gpu_check.compare_fp8(case, two_steps, fp8) == ["1 e4m3 codes more than one step away"]


def test_fp8_scale_change_fails(reference_caches: tuple[gpu_check.Case, np.ndarray, np.ndarray]) -> None:
    case, _, fp8 = reference_caches
    split = case.page_size * case.num_heads * 128
    got = fp8.copy()
    got[0, split] ^= 1
    assert gpu_check.compare_fp8(case, got, fp8) == ["1 scales differ"]
