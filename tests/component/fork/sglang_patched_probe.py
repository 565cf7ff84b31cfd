"""Run SGLang's patched modules on CPU; run inside the parser venv with the patched tree first on sys.path.

    python sglang_patched_probe.py TREE {budget|score}

Prints one JSON object. The CUDA-only imports are stubbed by the bootstrap the conformance tests use
(roles/sglang_validate/files/sglang_cpu.py); nothing that is measured runs through a stub.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(
    0,
    str(
        Path(__file__).resolve().parents[3]
        / "collections/ansible_collections/sglang/dsv4/roles/sglang_validate"
        / "files"
    ),
)
import sglang_cpu


def load_patched(tree: str) -> None:
    """Bootstrap SGLang on CPU with the patched tree ahead of the venv's own sglang."""
    sglang_cpu.install()
    sys.path.insert(0, tree)


def budget() -> dict[str, Any]:
    from sglang.srt.layers.attention.dsv4 import index_k_dtype
    from sglang.srt.mem_cache import deepseek_v4_memory_pool as pool
    from sglang.srt.model_executor import pool_configurator

    assert pool.__file__.startswith(sys.path[0]), pool.__file__
    configurator = pool_configurator.DSV4PoolConfigurator.__new__(pool_configurator.DSV4PoolConfigurator)
    configurator.c4_shrink_factor = 1
    configurator.indexer_bytes_per_token = pool.get_dsv4_indexer_bytes_per_token(128, False)
    configurator._get_paged_kv_bytes_per_token = lambda ratio=None: 0  # isolate the indexer term
    return {
        "bytes_per_token": pool.get_dsv4_indexer_bytes_per_token(128, False),
        "fp4_bytes_per_token": pool.get_dsv4_indexer_bytes_per_token(128, True),
        "configurator_c4_index_bytes": configurator._compressed_bytes_per_full_token(4),
        "dtype": index_k_dtype.index_k_dtype_name(),
        "module": pool.__file__,
    }


def score() -> dict[str, Any]:
    import numpy as np
    import torch
    from sglang.srt.layers.attention.dsv4 import indexer

    gen = torch.Generator().manual_seed(0)
    batch, heads, block, pages_per_req, num_pages = 3, 16, 64, 5, 16
    seq_lens = torch.tensor([1, 200, 320], dtype=torch.int32)
    keys = torch.randn(num_pages, block, 128, generator=gen).to(torch.bfloat16)
    cache = keys.view(torch.uint8).view(num_pages, block, 1, 256)
    page_table = torch.randperm(num_pages, generator=gen)[: batch * pages_per_req].view(batch, pages_per_req).int()
    page_table[0, 1:] = -1  # a short request's unused pages
    q = torch.randn(batch, 1, heads, 128, generator=gen).to(torch.float8_e4m3fn)
    weight = torch.rand(batch, heads, generator=gen)
    max_seq_len = 384
    args = (q, cache, weight, seq_lens.unsqueeze(-1), page_table, None, max_seq_len, False)
    slow = indexer.bf16_paged_mqa_logits_torch(*args).float().numpy()
    indexer.BF16_LOGITS_PAGES_PER_STEP = 2  # several steps on this small table
    fast = indexer.bf16_paged_mqa_logits(*args).float().numpy()

    # Reference in float64 from the same stored bf16 keys and fp8 queries.
    k64 = keys.double().numpy()
    q64 = q[:, 0].double().numpy()
    w64 = weight.double().numpy()
    ref = np.zeros((batch, max_seq_len))
    for b in range(batch):
        rows = [k64[p] for p in page_table[b].tolist() if p >= 0]
        k = np.concatenate(rows)[: int(seq_lens[b])]
        ref[b, : len(k)] = (np.maximum(k @ q64[b].T, 0.0) * w64[b]).sum(axis=1)
    scale = float(np.abs(ref).max())
    top = [
        len(set(np.argsort(-ref[b])[:64].tolist()) & set(np.argsort(-fast[b])[:64].tolist())) / 64
        for b in range(1, batch)
    ]
    return {
        "shape": list(fast.shape),
        "max_err_torch": float(np.abs(slow - ref).max()) / scale,
        "max_err_fast": float(np.abs(fast - ref).max()) / scale,
        "masked_zero": bool((fast[0, 1:] == 0).all() and (fast[1, 200:] == 0).all()),
        "top64_overlap": min(top),
    }


def main() -> None:
    tree, what = sys.argv[1:3]
    load_patched(tree)
    result = {"budget": budget, "score": score}[what]()
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
