#!/usr/bin/env python3
"""GPU check of the patch series: SGLang's JIT builds the patched index-key kernel on this GPU; store and score.

    <python with SGLang 0.5.23's CUDA dependencies> patches/gpu_check.py [--tree DIR]

e.g. on a host the build role has deployed (its release is already patched):
    /opt/sglang/current/venv/bin/python patches/gpu_check.py
or with the patched tree tests/component/fork builds ahead of an unpatched sglang install:
    python patches/gpu_check.py --tree .cache/sglang-patched/<series hash>

Checks, each printed PASS or FAIL; exit 0 only when all pass (2: no CUDA device or no torch):
1. jit: SGLang's load_jit compiles and loads FusedNormRopeKernel for the indexer (head_dim 128, rope 64,
   page 64) with the bf16 store (patch 0003) and with upstream's fp8 store.
2. store: the same random keys go through compress_norm_rope_store with one decode plan, once per store, into
   caches filled with a sentinel byte. bf16 writes exactly the out_loc rows (256 B each) and nothing else;
   its rows all have the same L2 norm (RMS norm with unit weight, then norm-preserving RoPE and Hadamard);
   and the fp8 rows (e4m3 times the fp32 scale) equal the bf16 rows within e4m3 rounding (the same transform,
   stored twice).
3. score: bf16_paged_mqa_logits and bf16_paged_mqa_logits_torch (patch 0004) on the GPU, against a float64
   reference from the stored bf16 keys and the fp8 query: max error under 0.5 % of the largest logit, masked
   tail zero, top-64 identical within one swap.
Takes about a minute or two, most of it the JIT compile. It has not yet run on a GPU.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HEAD_DIM, ROPE_DIM, PAGE, COMPRESS_RATIO, RING = 128, 64, 64, 4, 8
SENTINEL = 0xAB


def check(name: str, ok: bool, detail: str, results: list[bool]) -> None:
    results.append(bool(ok))
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)


def store(torch: Any, store_fn: Callable[..., None], plan: Any, inputs: dict[str, Any], bf16: bool, pages: int) -> Any:
    cache = torch.full((pages, PAGE * (256 if bf16 else 132)), SENTINEL, dtype=torch.uint8, device="cuda")
    store_fn(
        inputs["kv"].clone(),
        plan,
        norm_weight=inputs["weight"],
        norm_eps=1e-6,
        freq_cis=inputs["freqs"],
        out_loc=inputs["out_loc"],
        kvcache=cache,
        page_size=PAGE,
        bf16_store=bf16,
    )
    torch.cuda.synchronize()
    return cache


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, help="patched SGLang tree to import ahead of the installed one")
    parser.add_argument("--tokens", type=int, default=96, help="keys stored (one decode request each)")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("FAIL setup: torch is not installed in this Python (use the release venv)")
        return 2
    if not torch.cuda.is_available():
        print("FAIL setup: no CUDA device")
        return 2
    if args.tree is not None:
        sys.path.insert(0, str(args.tree.resolve()))
    started = time.monotonic()
    results: list[bool] = []
    from sglang.kernels.ops.attention.dsv4 import compress
    from sglang.srt.layers.attention.dsv4 import indexer

    print(f"sglang from {Path(compress.__file__).parents[4]} on {torch.cuda.get_device_name()}", flush=True)
    if not hasattr(indexer, "bf16_paged_mqa_logits"):
        print("FAIL setup: this sglang is not patched (no bf16_paged_mqa_logits); pass --tree")
        return 1

    # 1. JIT build of both stores.
    for bf16 in (True, False):
        t0 = time.monotonic()
        try:
            compress._jit_compress_norm_rope_module(
                torch.bfloat16, HEAD_DIM, ROPE_DIM, PAGE, bf16, compress.KVLayout.V4
            )
            check(f"jit {'bf16' if bf16 else 'fp8'} store", True, f"built in {time.monotonic() - t0:.0f} s", results)
        except Exception as exc:
            check(f"jit {'bf16' if bf16 else 'fp8'} store", False, repr(exc)[-2000:], results)
    if not all(results):
        return 1

    # 2. Store: one decode request per key (request ring, c4), all through one plan.
    gen = torch.Generator(device="cuda").manual_seed(0)
    n = args.tokens
    seq_lens = (torch.arange(n, device="cuda", dtype=torch.int64) % 7 + 1) * COMPRESS_RATIO * 8
    plan = compress.CompressorDecodePlan.generate(
        compress_ratio=COMPRESS_RATIO,
        req_pool_indices=torch.arange(n, device="cuda", dtype=torch.int64),
        req_to_token=torch.zeros((n, 1), device="cuda", dtype=torch.int32),
        full_to_state=torch.zeros(1, device="cuda", dtype=torch.int64),
        seq_lens=seq_lens,
        swa_page_size=PAGE,
        ring_size=RING,
        use_req_ring=True,
    )
    pages = (2 * n) // PAGE + 2
    slots = torch.randperm(pages * PAGE, generator=gen, device="cuda")[:n].to(torch.int64)
    angles = torch.outer(
        torch.arange(4096, device="cuda").float(),
        40000.0 ** (-torch.arange(0, ROPE_DIM, 2, device="cuda").float() / ROPE_DIM),
    )
    magnitude = torch.rand(n, 1, generator=gen, device="cuda") * 8 + 0.1  # rows of different sizes
    inputs = {
        "kv": (torch.randn(n, HEAD_DIM, generator=gen, device="cuda") * magnitude).to(torch.bfloat16),
        "weight": torch.ones(HEAD_DIM, dtype=torch.bfloat16, device="cuda"),
        "freqs": torch.polar(torch.ones_like(angles), angles),
        "out_loc": slots,
    }
    caches = {}
    for bf16 in (True, False):
        try:
            caches[bf16] = store(torch, compress.compress_norm_rope_store, plan, inputs, bf16, pages)
        except Exception as exc:
            check(f"store {'bf16' if bf16 else 'fp8'}", False, repr(exc)[-2000:], results)
            return 1
    rows = caches[True].view(pages * PAGE, 256)
    written = torch.zeros(pages * PAGE, dtype=torch.bool, device="cuda")
    written[slots] = True
    untouched = bool((rows[~written] == SENTINEL).all())
    k16 = rows[slots].contiguous().view(torch.bfloat16).float()  # [n, 128]
    norms = k16.norm(dim=1)
    spread = float((norms.max() - norms.min()) / norms.mean())
    check("store bf16 rows", untouched and bool(torch.isfinite(k16).all()), "only out_loc rows written", results)
    check(
        "store bf16 normalised", spread < 0.01, f"row L2 norms {float(norms.mean()):.3f} (spread {spread:.2e})", results
    )
    fp8_pages = caches[False].view(pages, PAGE * 132)
    page, offset = slots // PAGE, slots % PAGE
    values = fp8_pages[:, : PAGE * HEAD_DIM].reshape(pages, PAGE, HEAD_DIM)[page, offset]
    scales = fp8_pages[:, PAGE * HEAD_DIM :].contiguous().view(torch.float32).reshape(pages, PAGE)[page, offset]
    k8 = values.contiguous().view(torch.float8_e4m3fn).float() * scales[:, None]
    tolerance = 0.07 * k16.abs() + scales[:, None] / 256 + 1e-6
    worst = float(((k8 - k16).abs() / tolerance).max())
    check("store bf16 vs fp8", worst <= 1.0, f"worst error {worst:.2f} of the e4m3 rounding bound", results)

    # 3. Score the stored bf16 keys.
    batch, heads = 4, 64
    per_req = pages
    table = torch.stack([torch.randperm(pages, generator=gen, device="cuda") for _ in range(batch)]).int()
    lens = torch.tensor([1, PAGE * 2 + 5, PAGE * per_req // 2, PAGE * per_req], device="cuda", dtype=torch.int32)
    q = (torch.randn(batch, 1, heads, HEAD_DIM, generator=gen, device="cuda") * 4).to(torch.float8_e4m3fn)
    weight = torch.rand(batch, heads, generator=gen, device="cuda")
    kv = caches[True].view(pages, PAGE, 1, 256)
    max_len = PAGE * per_req + 64
    keys64 = caches[True].view(pages * PAGE, 256).view(torch.bfloat16).double().view(pages, PAGE, HEAD_DIM)
    ref = torch.zeros(batch, max_len, dtype=torch.float64, device="cuda")
    for b in range(batch):
        k = keys64[table[b].long()].reshape(-1, HEAD_DIM)[: int(lens[b])]
        ref[b, : k.shape[0]] = (torch.relu(k @ q[b, 0].double().T) * weight[b].double()).sum(dim=1)
    scale = float(ref.abs().max())
    for name in ("bf16_paged_mqa_logits", "bf16_paged_mqa_logits_torch"):
        fn = getattr(indexer, name)
        got = fn(q, kv, weight, lens, table, None, max_len, False).double()
        torch.cuda.synchronize()
        err = float((got - ref).abs().max()) / scale
        tail = all(bool((got[b, int(lens[b]) :] == 0).all()) for b in range(batch))
        overlap = min(
            len(set(got[b].topk(64).indices.tolist()) & set(ref[b].topk(64).indices.tolist())) for b in range(2, batch)
        )
        ok = err < 5e-3 and tail and overlap >= 63
        check(
            f"score {name}",
            ok,
            f"max error {err:.2e} of the largest logit, tail zero {tail}, top-64 {overlap}/64",
            results,
        )

    verdict = "PASS" if all(results) else "FAIL"
    print(f"{verdict}: {sum(results)}/{len(results)} checks in {time.monotonic() - started:.0f} s")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
