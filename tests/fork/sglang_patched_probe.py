"""Run SGLang's patched modules on CPU; run inside the parser venv with the patched tree first on sys.path.

    python sglang_patched_probe.py TREE DEPS {budget|score}

Prints one JSON object. CUDA-only or absent packages (triton, tvm_ffi, ...) are
stubbed just enough for the modules to import; nothing that is measured runs
through a stub.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
import tempfile
import types
from typing import Any

# Packages the patched modules import but never call on this path.
STUBBED = ("triton", "tvm_ffi", "torchvision", "sentencepiece", "compressed_tensors", "gguf", "partial_json_parser")


class _AnyMeta(type):
    def __new__(mcls, name: str, bases: tuple[type, ...], ns: dict[str, Any], **_: Any) -> _AnyMeta:
        return super().__new__(mcls, name, bases, ns)

    def __init__(cls, name: str, bases: tuple[type, ...], ns: dict[str, Any], **_: Any) -> None:
        super().__init__(name, bases, ns)

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        sub = _AnyMeta(name, (_Any,), {})
        setattr(cls, name, sub)
        return sub

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return cls

    def __getitem__(cls, item: Any) -> Any:
        return cls


class _Any(metaclass=_AnyMeta):
    def __init_subclass__(cls, **_: Any) -> None:
        pass


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        sub = _AnyMeta(name, (_Any,), {})
        setattr(self, name, sub)
        return sub


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0"
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def install_stubs(tree: str, deps: str) -> None:
    # torch decides once whether triton exists: let it see none before the stub goes in.
    import torch._inductor.runtime.hints
    import torch._inductor.runtime.triton_compat  # noqa: F401
    import torch.utils._triton as torch_triton

    torch_triton.has_triton_package()
    torch_triton.has_triton()
    meta = tempfile.mkdtemp(prefix="stub-dist-")
    for name in STUBBED:
        info = os.path.join(meta, f"{name}-0.0.0.dist-info")
        os.makedirs(info)
        with open(os.path.join(info, "METADATA"), "w") as handle:
            handle.write(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.0.0\n")
    sys.path[:0] = [tree]
    sys.path += [deps, meta]
    sys.meta_path.insert(0, _Finder())


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
    tree, deps, what = sys.argv[1:4]
    install_stubs(tree, deps)
    result = {"budget": budget, "score": score}[what]()
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
