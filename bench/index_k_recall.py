#!/usr/bin/env python3
"""Top-512 selection of SGLang's own indexer scoring, fp8 vs bf16 index keys, across context lengths and depths.

    .cache/sglang-parser-venv/bin/python bench/index_k_recall.py [--trials 8] [--lengths ...] [--depths ...]

Runs in the parser venv (make parser-venv) with SGLang's code on CPU: roles/sglang_validate/files/sglang_cpu.py's
bootstrap, then the pinned 0.5.23 wheel with patches/sglang-0.5.23 applied (tests/component/fork/sglang_patched_tree.py,
cached under .cache/sglang-patched/, the tree tests/component/fork checks). The logits come from SGLang's functions:
upstream ``fp8_paged_mqa_logits_torch`` on the fp8 cache (e4m3 values, then one fp32 scale per key, per page)
and the series' ``bf16_paged_mqa_logits`` (the serving path) on the bf16 cache; "exact" is a float64 NumPy
score of the unrounded keys. Nothing here scores keys by itself.

Synthetic model (NumPy, kernels/index_k_ref.py does the key path exactly as the kernel and lays the pages out
as SGLang's indexer pool does):

* Every key is `mu + g` before normalisation: a shared component `mu` (per-dim size
  --common relative to the token-specific noise `g`, like the common direction real
  attention keys share) plus N(0, 1) noise. Keys are rounded to bf16, RMS-normalised,
  rotated (last 64 dims, position = token index) and stored as the cache stores them:
  fp8 e4m3 with one fp32 scale per 128 values, or bf16.
* One key, at depth d of the context (0 = the first token, 1 = the last), is relevant:
  its noise along a hidden unit direction `v` is replaced by --needle (in units of the noise).
* The query has --heads heads, each `v` plus noise, rotated at position = context
  length, in fp8 (as upstream quantizes it); the score of a token is
  sum_h w_h * relu(q_h . k), w_h > 0, as in the DeepSeek indexer.

Printed per (length, depth): how often the relevant key is in the top-512 ("needle"), and how much of the
exact top-512 each format selects ("overlap"). Storage rounding adds noise proportional to the whole key,
dominated by the shared component, while the gap between the relevant key and the 512th best distractor
shrinks as the context grows. The numbers illustrate that mechanism under these assumptions; they are not a
measurement of the production model.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from types import ModuleType

import numpy as np
import numpy.typing as npt

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [
    str(REPO / "collections/ansible_collections/sglang/dsv4/roles/sglang_validate/files"),
    str(REPO / "tests/component/fork"),
    str(REPO / "kernels"),
]

import index_k_ref as ref  # noqa: E402
import sglang_cpu  # noqa: E402
import sglang_patched_tree  # noqa: E402

Floats = npt.NDArray[np.float32]
FORMATS = ("exact", "bf16", "fp8")
BLOCK = 64  # SGLang's indexer page (block) size


def load_indexer() -> ModuleType:
    """SGLang's patched indexer module, imported from the patched tree on CPU."""
    sglang_cpu.install()
    tree = sglang_patched_tree.patched_tree()
    sys.path.insert(0, str(tree))
    from sglang.srt.layers.attention.dsv4 import indexer

    if not str(indexer.__file__).startswith(str(tree)):
        raise RuntimeError(f"imported {indexer.__file__}, not the patched tree {tree}")
    return indexer


def pre_norm_keys(common: Floats, noise: Floats) -> Floats:
    return (common + noise).astype(np.float32)


def normed(pre_norm: Floats, positions: npt.NDArray[np.int64], cos_sin: Floats) -> Floats:
    """Keys [n, 1, 128] after bf16 rounding of the input, RMS norm and RoPE, in fp32 (before storage)."""
    k_bits = ref.float_to_bf16_bits(pre_norm)[:, None, :]
    weight = ref.float_to_bf16_bits(np.ones(ref.HEAD_DIM, np.float32))
    return ref.norm_rope(k_bits, weight, cos_sin, positions)


class Caches:
    """The index-K pages of one context, fp8 and bf16, laid out as SGLang's indexer pool stores them."""

    def __init__(self, keys: Floats) -> None:
        pages = -(-len(keys) // BLOCK)
        slots = np.arange(len(keys), dtype=np.int64)
        self.keys = keys
        self.cache = {fmt: ref.new_cache(pages, BLOCK, 1, fmt == "bf16") for fmt in ("bf16", "fp8")}
        for fmt, cache in self.cache.items():
            ref.store(cache, keys, slots, BLOCK, fmt == "bf16")

    def with_key(self, slot: int, key: Floats) -> dict[str, npt.NDArray[np.uint8]]:
        """Copies of the caches with one slot rewritten (the planted key), as the kernel would store it."""
        out = {}
        for fmt, cache in self.cache.items():
            copy = cache.copy()
            ref.store(copy, key[None], np.array([slot]), BLOCK, fmt == "bf16")
            out[fmt] = copy
        return out


def sglang_logits(
    indexer: ModuleType, fmt: str, cache: npt.NDArray[np.uint8], q: Floats, weights: Floats, length: int
) -> npt.NDArray[np.float64]:
    """Logits [length] from SGLang's scoring function for the cache's format."""
    import torch

    pages = -(-length // BLOCK)
    q_fp8 = torch.from_numpy(q).to(torch.float8_e4m3fn).view(1, 1, *q.shape)
    weight = torch.from_numpy(weights).view(1, -1)
    table = torch.arange(pages, dtype=torch.int32).view(1, pages)
    per_token = 256 if fmt == "bf16" else 132
    kv = torch.from_numpy(cache).view(-1, BLOCK, 1, per_token)
    seq_lens = torch.tensor([length], dtype=torch.int32)
    fn = indexer.bf16_paged_mqa_logits if fmt == "bf16" else indexer.fp8_paged_mqa_logits_torch
    logits = fn(q_fp8, kv, weight, seq_lens, table, None, length, False)
    return logits[0, :length].double().numpy()


def top(values: npt.NDArray[np.float64], k: int) -> npt.NDArray[np.int64]:
    k = min(k, len(values))
    return np.argpartition(-values, k - 1)[:k]


def run_trial(
    indexer: ModuleType,
    rng: np.random.Generator,
    lengths: list[int],
    depths: list[float],
    args: argparse.Namespace,
    cos_sin: Floats,
) -> dict[tuple[int, float], dict[str, tuple[bool, float]]]:
    """(length, depth) -> format -> (relevant key in the top-k, share of the exact top-k selected)."""
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
    caches = Caches(normed(pre_norm_keys(common, noise), np.arange(longest), cos_sin))

    heads = direction + args.query_noise * rng.standard_normal((args.heads, dim)).astype(np.float32)
    heads = heads / np.linalg.norm(heads, axis=1, keepdims=True)
    weights = rng.uniform(0.5, 1.5, args.heads).astype(np.float32)

    out: dict[tuple[int, float], dict[str, tuple[bool, float]]] = {}
    for length in lengths:
        # fp8 queries as upstream feeds them; a common scale keeps them in e4m3's normal range.
        q = ref.rotate(heads, cos_sin[length][None, :], interleaved=False)
        q = (q * (224.0 / np.abs(q).max())).astype(np.float32)
        q_used = ref.e4m3_bits_to_float(ref.float_to_e4m3_bits(q)).astype(np.float64)
        for depth in depths:
            slot = min(length - 1, int(depth * length))
            needle = rng.standard_normal(dim).astype(np.float32)
            needle += (args.needle - needle @ direction) * direction
            key = normed(pre_norm_keys(common, needle[None]), np.array([slot]), cos_sin)
            pages = caches.with_key(slot, key)
            exact_keys = caches.keys[:length, 0].astype(np.float64).copy()
            exact_keys[slot] = key[0, 0]
            exact = np.maximum(exact_keys @ q_used.T, 0.0) @ weights.astype(np.float64)
            chosen = set(top(exact, args.topk).tolist())
            row = {"exact": (slot in chosen, 1.0)}
            for fmt in ("bf16", "fp8"):
                picked = set(top(sglang_logits(indexer, fmt, pages[fmt], q, weights, length), args.topk).tolist())
                row[fmt] = (slot in picked, len(picked & chosen) / len(chosen))
            out[(length, depth)] = row
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048, 4500, 8000, 12000, 22600, 65536])
    parser.add_argument("--depths", type=float, nargs="+", default=[0.1, 0.5, 0.9])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--topk", type=int, default=512, help="DeepSeek-V4 index_topk")
    parser.add_argument("--heads", type=int, default=16, help="query heads of the indexer")
    parser.add_argument("--common", type=float, default=32.0, help="shared key component / token noise")
    parser.add_argument("--needle", type=float, default=3.0, help="relevant key's lead along v, in noise units")
    parser.add_argument("--query-noise", type=float, default=0.05, help="per-head deviation of the query")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    lengths, depths = sorted(args.lengths), sorted(args.depths)
    indexer = load_indexer()
    cos_sin = ref.rope_cos_sin(max(lengths) + 1)
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    hits = {(n, d): {fmt: 0.0 for fmt in FORMATS} for n in lengths for d in depths}
    overlap = {(n, d): {fmt: 0.0 for fmt in FORMATS} for n in lengths for d in depths}
    for _ in range(args.trials):
        for case, row in run_trial(indexer, rng, lengths, depths, args, cos_sin).items():
            for fmt, (hit, share) in row.items():
                hits[case][fmt] += hit / args.trials
                overlap[case][fmt] += share / args.trials
    print(
        f"top-{args.topk} selection by SGLang's scoring ({indexer.__name__}: fp8_paged_mqa_logits_torch, "
        f"bf16_paged_mqa_logits), {args.trials} trials per case; "
        f"common={args.common} needle={args.needle} heads={args.heads} seed={args.seed}"
    )
    print(f"{'':>15} | {'needle in top-k':^22} | {'exact top-k selected':^15}")
    print(f"{'context':>7} {'depth':>7} | {'exact':>6} {'bf16':>6} {'fp8':>6} | {'bf16':>7} {'fp8':>7}")
    print("-" * 58)
    for (length, depth), row in hits.items():
        shares = overlap[(length, depth)]
        print(
            f"{length:>7} {depth:>7.2f} | {row['exact']:6.3f} {row['bf16']:6.3f} {row['fp8']:6.3f} | "
            f"{shares['bf16']:7.3f} {shares['fp8']:7.3f}"
        )
    print(f"({time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
