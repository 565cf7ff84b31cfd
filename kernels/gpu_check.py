#!/usr/bin/env python3
"""Runs the fused index-key kernel on a GPU and compares it with index_k_ref.

    python3 kernels/gpu_check.py [--arch native] [--workdir DIR]

Builds harness/index_k_harness.cu with nvcc, writes inputs as raw files, runs
the harness (explicit fp8, explicit bf16, and the SGLANG_DSV4_BF16_INDEX_K
switch both ways) and checks: bf16 caches byte-identical to the reference;
fp8 scales identical and every e4m3 code within one step of the reference.
Exit status 0 when every check passes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

KERNELS = Path(__file__).resolve().parent
sys.path.insert(0, str(KERNELS))

import index_k_ref as ref  # noqa: E402  (needs the path above)

Bytes = npt.NDArray[np.uint8]


@dataclass(frozen=True)
class Case:
    name: str
    num_tokens: int
    num_heads: int
    page_size: int
    num_pages: int
    interleaved: bool
    stride_pad: int  # extra elements between tokens of k
    max_position: int = 4096
    eps: float = 1e-6


CASES = (
    Case("one head, rotate halves", 300, 1, 64, 6, False, 0),
    Case("two heads, adjacent pairs, padded rows", 77, 2, 16, 8, True, 64),
)


def find_nvcc() -> str:
    for candidate in (
        os.environ.get("CUDACXX"),
        os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin/nvcc"),
    ):
        if candidate and Path(candidate).is_file():
            return candidate
    found = shutil.which("nvcc")
    if found is None:
        raise SystemExit("nvcc not found: set CUDACXX or CUDA_HOME")
    return found


def build_harness(out_dir: Path, arch: str) -> Path:
    binary = out_dir / "index_k_harness"
    sources = [KERNELS / "harness/index_k_harness.cu", KERNELS / "csrc/fused_index_k.cu"]
    cmd = [find_nvcc(), "-std=c++17", "-O3", f"-arch={arch}", f"-I{KERNELS / 'csrc'}"]
    subprocess.run([*cmd, *map(str, sources), "-o", str(binary), "-lcudart"], check=True)
    return binary


def write_inputs(case: Case, work: Path, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    stride = case.num_heads * ref.HEAD_DIM + case.stride_pad
    raw = rng.standard_normal((case.num_tokens, stride)).astype(np.float32) * 2.0
    raw[0] = 0.0  # all-zero row: exercises the amax floor
    raw[1] *= 1000.0  # large row: normalisation must still hold
    k_bits = ref.float_to_bf16_bits(raw)
    weight_bits = ref.float_to_bf16_bits(1.0 + 0.25 * rng.standard_normal(ref.HEAD_DIM))
    cos_sin = ref.rope_cos_sin(case.max_position)
    positions = rng.integers(0, case.max_position, case.num_tokens).astype(np.int64)
    slots = rng.permutation(case.num_pages * case.page_size)[: case.num_tokens].astype(np.int64)
    slots[rng.random(case.num_tokens) < 0.1] = -1
    arrays: dict[str, np.ndarray] = {
        "k": k_bits,
        "weight": weight_bits,
        "cos_sin": cos_sin,
        "positions": positions,
        "out_loc": slots,
    }
    for name, array in arrays.items():
        array.tofile(work / f"{name}.bin")
    fields = (case.num_tokens, case.num_heads, case.page_size, case.num_pages, int(case.interleaved), stride)
    (work / "params.txt").write_text(" ".join(map(str, (*fields, case.max_position, case.eps))) + "\n")
    heads = k_bits[:, : case.num_heads * ref.HEAD_DIM].reshape(case.num_tokens, case.num_heads, ref.HEAD_DIM)
    return {"k": heads, "weight": weight_bits, "cos_sin": cos_sin, "positions": positions, "out_loc": slots}


def reference_cache(case: Case, inputs: dict[str, np.ndarray], use_bf16: bool) -> Bytes:
    cache = ref.new_cache(case.num_pages, case.page_size, case.num_heads, use_bf16)
    ref.fused_index_k(
        cache,
        inputs["k"],
        inputs["weight"],
        inputs["cos_sin"],
        inputs["positions"],
        inputs["out_loc"],
        case.page_size,
        use_bf16,
        case.eps,
        case.interleaved,
    )
    return cache


def signed_ordinal(codes: Bytes) -> npt.NDArray[np.int64]:
    magnitude = (codes & 0x7F).astype(np.int64)
    return np.where(codes & 0x80, -magnitude, magnitude)


def compare_bf16(got: Bytes, want: Bytes) -> list[str]:
    """bf16 keys must be byte-identical (untouched slots included)."""
    got, want = got.reshape(-1), want.reshape(-1)
    if got.size != want.size:
        return [f"bf16: cache has {got.size} bytes, expected {want.size}"]
    differing = int((got != want).sum())
    print(f"    bf16: {'identical' if differing == 0 else f'{differing} bytes differ'}")
    return [f"bf16: {differing} bytes differ from the reference"] if differing else []


def compare_fp8(case: Case, got: Bytes, want: Bytes) -> list[str]:
    """Scales identical; each e4m3 code at most one step from the reference."""
    if got.size != want.size:
        return [f"fp8: cache has {got.size} bytes, expected {want.size}"]
    split = case.page_size * case.num_heads * ref.HEAD_DIM
    got = got.reshape(want.shape)
    scales_got, scales_want = got[:, split:].view(np.float32), want[:, split:].view(np.float32)
    steps = np.abs(signed_ordinal(got[:, :split]) - signed_ordinal(want[:, :split]))
    problems = []
    if not np.array_equal(scales_got.view(np.uint32), scales_want.view(np.uint32)):
        problems.append(f"{int((scales_got != scales_want).sum())} scales differ")
    if steps.max() > 1:
        problems.append(f"{int((steps > 1).sum())} e4m3 codes more than one step away")
    exact = float((steps == 0).mean())
    print(f"    fp8: {exact:.6f} of value bytes exact, max {int(steps.max())} step(s) apart")
    return problems


def run_case(binary: Path, case: Case, work: Path, seed: int) -> list[str]:
    work.mkdir(parents=True, exist_ok=True)
    inputs = write_inputs(case, work, seed)
    problems: list[str] = []
    for switch, expected in ((None, "fp8"), ("1", "bf16")):
        env = {k: v for k, v in os.environ.items() if k != ref.ENV_SWITCH}
        if switch is not None:
            env[ref.ENV_SWITCH] = switch
        subprocess.run([str(binary), str(work)], check=True, env=env)
        chosen = (work / "auto_format.txt").read_text().strip()
        if chosen != expected:
            problems.append(f"{ref.ENV_SWITCH}={switch}: kernel chose {chosen}, engine expects {expected}")
        explicit = (work / f"cache_{expected}.bin").read_bytes()
        if (work / "cache_auto.bin").read_bytes() != explicit:
            problems.append(f"switch {switch}: cache differs from the explicit {expected} launch")
    bf16_want = reference_cache(case, inputs, use_bf16=True)
    problems += compare_bf16(np.fromfile(work / "cache_bf16.bin", np.uint8), bf16_want)
    fp8_want = reference_cache(case, inputs, use_bf16=False)
    problems += compare_fp8(case, np.fromfile(work / "cache_fp8.bin", np.uint8), fp8_want)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="native", help="nvcc -arch value, e.g. sm_90a (default: native)")
    parser.add_argument("--workdir", type=Path, help="keep inputs and outputs here (default: a temp dir)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        binary = build_harness(work, args.arch)
        failures = 0
        for seed, case in enumerate(CASES):
            print(f"case: {case.name}")
            problems = run_case(binary, case, work / f"case{seed}", seed)
            for problem in problems:
                print(f"    FAIL {problem}")
            failures += len(problems)
    print("all checks passed" if failures == 0 else f"{failures} check(s) failed")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
