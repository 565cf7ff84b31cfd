#!/usr/bin/env python3
"""How often a planted relevant key stays in the indexer's top-k, fp8 vs bf16 index keys.

    .venv/bin/python bench/index_k_recall.py [--trials 32] [--lengths 1024 2048 ...]

Synthetic model (NumPy, kernels/index_k_ref.py does the key path exactly as the kernel):

* Every key is `mu + g` before normalisation: a shared component `mu` (per-dim size
  --common relative to the token-specific noise `g`, like the common direction real
  attention keys share) plus N(0, 1) noise. Keys are rounded to bf16, RMS-normalised,
  rotated (last 64 dims, position = token index) and stored as the cache stores them:
  fp8 e4m3 with one fp32 scale per 128 values, or bf16. "exact" keeps fp32.
* One key, at a uniformly random depth, is relevant: its noise along a hidden unit
  direction `v` is replaced by --needle (in units of the noise).
* The query has --heads heads, each `v` plus noise, rotated at position = context
  length; the score of a token is sum_h w_h * relu(q_h . k), w_h > 0, as in the
  DeepSeek indexer. The relevant key counts as recalled when it is in the top-k.

Storage rounding adds noise proportional to the whole key, dominated by the shared
component, while the gap between the relevant key and the k-th best distractor
shrinks as the context grows. The numbers illustrate that mechanism under these
assumptions; they are not a measurement of the production model.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels"))

import index_k_ref as ref

Floats = npt.NDArray[np.float32]
FORMATS = ("exact", "bf16", "fp8")


def stored_keys(pre_norm: Floats, positions: npt.NDArray[np.int64], cos_sin: Floats) -> dict[str, Floats]:
    """Keys [n, 128] as the attention side reads them back, per storage format."""
    k_bits = ref.float_to_bf16_bits(pre_norm)[:, None, :]
    weight = ref.float_to_bf16_bits(np.ones(ref.HEAD_DIM, np.float32))
    y = ref.norm_rope(k_bits, weight, cos_sin, positions)[:, 0, :]
    values, scales = ref.quantize_fp8(y)
    return {
        "exact": y,
        "bf16": ref.round_to_bf16(y),
        "fp8": ref.e4m3_bits_to_float(values) * scales[..., None],
    }


def scores(keys: Floats, queries: Floats, weights: Floats) -> Floats:
    return np.maximum(keys @ queries.T, 0.0) @ weights


def rotated_queries(base: Floats, position: int, cos_sin: Floats) -> Floats:
    return ref.rotate(base, cos_sin[position][None, :], interleaved=False)


def run_trial(
    rng: np.random.Generator, lengths: list[int], args: argparse.Namespace, cos_sin: Floats
) -> dict[str, list[bool]]:
    dim, longest = ref.HEAD_DIM, max(lengths)
    # The shared component and the relevance direction live in the non-rotary dims,
    # so the ranking does not depend on the depth through RoPE.
    common = np.zeros(dim, np.float32)
    common[: ref.ROPE_OFFSET] = rng.standard_normal(ref.ROPE_OFFSET)
    common *= args.common * np.sqrt(dim) / np.linalg.norm(common)
    direction = np.zeros(dim)
    direction[: ref.ROPE_OFFSET] = rng.standard_normal(ref.ROPE_OFFSET)
    direction -= direction @ common / (common @ common) * common
    direction = (direction / np.linalg.norm(direction)).astype(np.float32)
    noise = rng.standard_normal((longest, dim)).astype(np.float32)
    distractors = stored_keys(common + noise, np.arange(longest), cos_sin)

    heads = direction + args.query_noise * rng.standard_normal((args.heads, dim)).astype(np.float32)
    heads = ref.round_to_bf16(heads / np.linalg.norm(heads, axis=1, keepdims=True))
    weights = rng.uniform(0.5, 1.5, args.heads).astype(np.float32)

    recalled: dict[str, list[bool]] = {fmt: [] for fmt in FORMATS}
    for length in lengths:
        depth = int(rng.integers(0, length))
        needle = rng.standard_normal(dim).astype(np.float32)
        needle += (args.needle - needle @ direction) * direction
        planted = stored_keys((common + needle)[None, :], np.array([depth]), cos_sin)
        queries = rotated_queries(heads, length, cos_sin)
        for fmt in FORMATS:
            context = scores(distractors[fmt][:length], queries, weights)
            context[depth] = -np.inf  # the relevant key replaces this token
            target = scores(planted[fmt], queries, weights)[0]
            recalled[fmt].append(int(np.count_nonzero(context > target)) < args.topk)
    return recalled


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384, 32768, 65536])
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--topk", type=int, default=512, help="DeepSeek-V4 index_topk")
    parser.add_argument("--heads", type=int, default=16, help="query heads of the indexer")
    parser.add_argument("--common", type=float, default=32.0, help="shared key component / token noise")
    parser.add_argument("--needle", type=float, default=3.0, help="relevant key's lead along v, in noise units")
    parser.add_argument("--query-noise", type=float, default=0.05, help="per-head deviation of the query")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    lengths = sorted(args.lengths)
    cos_sin = ref.rope_cos_sin(max(lengths) + 1)
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    totals = {fmt: np.zeros(len(lengths)) for fmt in FORMATS}
    for _ in range(args.trials):
        for fmt, hits in run_trial(rng, lengths, args, cos_sin).items():
            totals[fmt] += hits
    print(
        f"relevant key in top-{args.topk}, {args.trials} trials per length, random depth; "
        f"common={args.common} needle={args.needle} heads={args.heads} seed={args.seed}"
    )
    print(f"{'context':>8} | {'exact':>6} | {'bf16':>6} | {'fp8':>6}")
    print(f"{'-' * 8}-+-{'-' * 6}-+-{'-' * 6}-+-{'-' * 6}")
    for i, length in enumerate(lengths):
        row = " | ".join(f"{totals[fmt][i] / args.trials:6.3f}" for fmt in FORMATS)
        print(f"{length:>8} | {row}")
    print(f"({time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
