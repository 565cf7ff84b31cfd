"""Size KV pools with SGLang 0.5.23's own code on CPU; run inside the parser venv.

stdin: {"cases": [{"argv": [...], "budgets": [bytes, ...], "bf16_index_k": bool}, ...]}
stdout: one result list per case, one dict per budget: the pool SGLang's configurator derives from that many
available bytes (what ``KVCacheConfigurator._profile_available_bytes`` would measure on a GPU), or the error
it raises.

Each case is resolved by SGLang's own pipeline (``prepare_server_args`` + ``publish``: model overrides, the
DeepSeek-V4 hook, PD defaults), then sized by ``KVCacheConfigurator._resolve_memory_pool_config`` with the
memory probe replaced by the given budget. bf16 index keys: an unpatched SGLang knows only fp8 keys, so its
DeepSeek-V4 indexer-bytes function is wrapped to return 2 bytes per dimension, as the fork's series does;
where the patched tree is first on sys.path and SGLANG_DSV4_BF16_INDEX_K is honoured, set "patched": true.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

# The CPU bootstrap belongs to the validation role (its deep check runs SGLang the same way).
sys.path.insert(
    0,
    str(
        Path(__file__).resolve().parents[3]
        / "collections/ansible_collections/sglang/dsv4/roles/sglang_validate"
        / "files"
    ),
)
import sglang_cpu

sglang_cpu.install()
logging.disable(logging.WARNING)

import torch  # noqa: E402
from sglang.srt import runtime_context  # noqa: E402
from sglang.srt.arg_groups.model_override_base import model_config_of  # noqa: E402
from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator  # noqa: E402
from sglang.srt.model_executor import model_runner, pool_configurator  # noqa: E402
from sglang.srt.model_executor.model_runner_components.layer_setup import ModelLayerInfo  # noqa: E402
from sglang.srt.model_executor.model_runner_components.load_model_utils import (  # noqa: E402
    resolve_sliding_window_size,
)
from sglang.srt.server_args import prepare_server_args  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

UPSTREAM_INDEXER_BYTES = pool_configurator.get_dsv4_indexer_bytes_per_token
KV_DTYPES = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


def _bf16_indexer_bytes(index_head_dim: int, use_fp4_indexer: bool) -> int:
    return UPSTREAM_INDEXER_BYTES(index_head_dim, use_fp4_indexer) if use_fp4_indexer else index_head_dim * 2


def _configurator(server_args: Any, budget: list[int]) -> KVCacheConfigurator:
    """A KVCacheConfigurator built as ModelRunner.init_kv_cache_configurator builds it, minus the model."""

    class Budgeted(KVCacheConfigurator):
        def _profile_available_bytes(self, pre_model_load_memory: int) -> int:
            return budget[0]

    config = model_config_of(server_args)
    model = runtime_context.get_model()
    spec = SpeculativeAlgorithm.from_string(runtime_context.get_spec().speculative_algorithm)
    layers = config.num_hidden_layers
    return Budgeted(
        device="cuda",
        gpu_id=0,
        attn_dp_size=runtime_context.get_parallel().attn_dp_size,
        pp_size=1,
        pp_group=None,
        model=None,
        model_config=config,
        server_args=server_args,
        kv_cache_dtype=KV_DTYPES.get(model.kv_cache_dtype, torch.bfloat16),
        kv_cache_dtype_str=model.kv_cache_dtype,
        model_dtype=torch.bfloat16,
        page_size=runtime_context.get_schedule().page_size,
        sliding_window_size=resolve_sliding_window_size(None, config),
        spec_algorithm=spec,
        is_draft_worker=False,
        post_capture_kv_active=False,
        spec_aux_config=model_runner.resolve_spec_aux_hidden_state_config(
            server_args=server_args, model_config=config, spec_algorithm=spec, is_draft_worker=False
        ),
        is_hybrid_swa=config.is_hybrid_swa,
        is_hybrid_swa_compress=config.is_hybrid_swa_compress,
        use_mla_backend=config.attention_arch == model_runner.AttentionArch.MLA,
        layer_info=ModelLayerInfo(start_layer=0, end_layer=layers, num_effective_layers=layers),
        forward_stream=None,
        req_to_token_pool=None,
        token_to_kv_pool_allocator=None,
        memory_pool_config=None,
    )


def _terms(kvc: KVCacheConfigurator, max_running_requests: int) -> dict[str, Any]:
    """The sizing terms of the configurator SGLang picks: per-token and request-scoped bytes."""
    sizer = pool_configurator.create_memory_pool_configurator(kvc)
    if isinstance(sizer, pool_configurator.DSV4PoolConfigurator):
        fixed = (
            sizer._get_c128_state_fixed_bytes(max_running_requests)
            + sizer._get_c2_state_fixed_bytes(max_running_requests)
            + sizer._get_swa_fixed_bytes()
            + sizer._fixed_swa_bytes(max_running_requests)
            + sizer._fixed_c4_state_bytes(max_running_requests)
        )
        return {
            "configurator": type(sizer).__name__,
            "bytes_per_full_token": sizer.bytes_per_full_token,
            "bytes_per_swa_token": sizer.bytes_per_swa_token,
            "indexer_bytes_per_token": sizer.indexer_bytes_per_token,
            "swa_ratio": sizer.swa_ratio,
            "swa_cap_tokens": sizer.swa_cap_tokens,
            "fixed_bytes": int(fixed),
        }
    return {
        "configurator": type(sizer).__name__,
        "bytes_per_full_token": getattr(sizer, "_cell_size", None),
        "fixed_bytes": int(getattr(sizer, "_fixed_overhead_bytes", 0)),
    }


def size_case(case: dict[str, Any]) -> list[dict[str, Any]]:
    pool_configurator.get_dsv4_indexer_bytes_per_token = (
        _bf16_indexer_bytes if case.get("bf16_index_k") and not case.get("patched") else UPSTREAM_INDEXER_BYTES
    )
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            server_args = prepare_server_args(list(case["argv"]))
            runtime_context.publish(server_args, role="test")
    except (SystemExit, Exception) as exc:
        text = stderr.getvalue().strip().splitlines()[-1:] or [str(exc)]
        return [{"error": f"{type(exc).__name__}: {text[0]}"} for _ in case["budgets"]]
    resolved = server_args.resolved_dict()
    context_len = model_config_of(server_args).context_len
    budget = [0]
    kvc = _configurator(server_args, budget)
    results = []
    for available in case["budgets"]:
        budget[0] = int(available)
        try:
            config = kvc._resolve_memory_pool_config(0)
        except Exception as exc:
            results.append({"error": f"{type(exc).__name__}: {exc}"})
            continue
        results.append(
            {
                "max_total_num_tokens": config.max_total_num_tokens,
                "swa_max_total_num_tokens": config.swa_max_total_num_tokens,
                "max_running_requests": config.max_running_requests,
                "context_len": context_len,
                "page_size": resolved["page_size"],
                "resolved_max_running_requests": resolved["max_running_requests"],
                "swa_full_tokens_ratio": resolved["swa_full_tokens_ratio"],
                "kv_cache_dtype": resolved["kv_cache_dtype"],
                "decode_extra_slots": resolved.get("disaggregation_decode_extra_slots"),
                **_terms(kvc, config.max_running_requests),
            }
        )
    return results


def main() -> None:
    request = json.load(sys.stdin)
    os.environ.setdefault("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "0")
    json.dump([size_case(case) for case in request["cases"]], sys.stdout)


if __name__ == "__main__":
    main()
