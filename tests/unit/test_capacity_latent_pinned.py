"""Capacity-model details pinned by hand (module_utils/sglang_capacity.py): the fp8 MLA latent of a rank that is not
a multiple of 128 (one fp32 scale per whole 128 dims), and EngineLimits as a plain dict."""

from __future__ import annotations

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_capacity import EngineLimits, mla_latent_bytes


def test_the_fp8_latent_counts_a_scale_per_whole_128_dims() -> None:
    """500 fp8 nope bytes + 3 scales of 4 bytes (500 // 128 = 3) + 64 bf16 rope dims of 2 bytes = 640."""
    size = mla_latent_bytes({"kv_lora_rank": 500, "qk_rope_head_dim": 64}, "fp8_e4m3", True)
    assert (size, type(size)) == (640, int)


def test_engine_limits_as_a_dict() -> None:
    limits = EngineLimits(
        resolved={"page_size": 64},
        context_len=8192,
        max_total_num_tokens=100000,
        token_capacity_swa=None,
        max_running_requests=32,
        max_req_len=8191,
        max_req_input_len=8186,
        page_size=64,
        bytes_per_token=1024.5,
        fixed_bytes=10,
        weights_bytes=20,
        kv_budget_bytes=30,
        memory_usage={"kv": 1.0},
    )
    assert limits.as_dict() == {
        "resolved": {"page_size": 64},
        "context_len": 8192,
        "max_total_num_tokens": 100000,
        "token_capacity_swa": None,
        "max_running_requests": 32,
        "max_req_len": 8191,
        "max_req_input_len": 8186,
        "page_size": 64,
        "bytes_per_token": 1024.5,
        "fixed_bytes": 10,
        "weights_bytes": 20,
        "kv_budget_bytes": 30,
        "memory_usage": {"kv": 1.0},
        "admission_reserve": 0,
    }
