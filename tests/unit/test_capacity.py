"""The capacity model's own behaviour. Its agreement with SGLang 0.5.23 is proven by executing SGLang's pool
configurators over a grid (tests/component/conformance); the figures pinned here were produced that way, as each
test says."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_capacity import (
    CapacityError,
    bf16_index_loss,
    concurrency_table,
    default_mem_fraction,
    dsv4_request_slots,
    kv_cost,
    requests_that_fit,
    resolve_args,
    resolve_engine,
    resolve_max_running_requests,
    size_pool,
)

DECODE = {
    "tp_size": 4,
    "mem_fraction_static": 0.83,
    "context_length": 524288,
    "chunked_prefill_size": 8192,
    "disaggregation_mode": "decode",
}


def test_v32_fp8_latent_and_fp8_index_is_788_bytes_per_layer(v32: dict[str, Any]) -> None:
    cost = kv_cost(v32, "fp8_e4m3", bf16_index_k=False)
    assert cost.detail == {"latent": 656, "index_k": 132}
    assert cost.per_layer == 788
    assert cost.per_token == 48_068


def test_bf16_index_keys_apply_to_deepseek_v4_only(v32: dict[str, Any], dsv4: dict[str, Any]) -> None:
    """The fork's switch changes DeepSeek-V4's indexer pool; DeepSeek-V3.2 keeps fp8 keys on GPU."""
    assert kv_cost(v32, "fp8_e4m3", bf16_index_k=True) == kv_cost(v32, "fp8_e4m3", bf16_index_k=False)
    assert kv_cost(dsv4, "fp8_e4m3", True).detail["index_k"] == 256
    assert kv_cost(dsv4, "fp8_e4m3", False).detail["index_k"] == 132


def test_v32_bf16_latent_is_1152_bytes(v32: dict[str, Any]) -> None:
    cost = kv_cost(v32, "bf16", bf16_index_k=False)
    assert cost.detail["latent"] == 1152
    assert cost.per_layer == 1284


def test_v32_40_gib_budget_holds_893504_tokens(v32: dict[str, Any]) -> None:
    """893,504 tokens at 40 GiB, fp8 latent and keys: the count SGLang's DefaultPoolConfigurator gives."""
    args = resolve_args(v32, {"tp_size": 8, "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.8}, 141)
    assert size_pool(v32, args, 40 * 2**30).max_total_num_tokens == 893_504


def test_gqa_heads_are_sharded_over_tp() -> None:
    llama = {
        "architectures": ["LlamaForCausalLM"],
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "hidden_size": 4096,
        "max_position_embeddings": 8192,
    }
    assert kv_cost(llama, "bf16", False, tp_size=1).per_token == 8 * 128 * 2 * 32 * 2
    assert kv_cost(llama, "bf16", False, tp_size=4).per_token == 2 * 128 * 2 * 32 * 2
    assert kv_cost(llama, "bf16", False, tp_size=16).per_token == 1 * 128 * 2 * 32 * 2


def test_max_running_requests_clamp_formula() -> None:
    # estimated = clamp(int(capacity / context_len * 512), 2048, 4096), capped at capacity // 2
    assert resolve_max_running_requests(None, 1_000_000, 131072) == 3906
    assert resolve_max_running_requests(None, 100_000, 131072) == 2048
    assert resolve_max_running_requests(None, 10_000_000, 8192) == 4096
    assert resolve_max_running_requests(None, 3000, 131072) == 1500
    assert resolve_max_running_requests(32, 18, 131072) == 9  # requested 32, token_capacity // 2 applies
    assert resolve_max_running_requests(64, 1_000_000, 131072, attn_dp_size=4) == 16


def test_dsv4_defaults_running_requests_to_256_and_page_to_256(dsv4: dict[str, Any]) -> None:
    limits = resolve_engine(dsv4, {**DECODE, "page_size": 64, "kv_cache_dtype": "auto"}, 141)
    assert limits.resolved["max_running_requests"] == 256
    assert limits.max_running_requests == 256
    assert limits.page_size == 256
    assert limits.resolved["kv_cache_dtype"] == "fp8_e4m3"


def test_pool_is_page_aligned_and_capped_by_max_total_tokens(dsv4: dict[str, Any]) -> None:
    limits = resolve_engine(dsv4, DECODE, 141)
    assert limits.max_total_num_tokens % 256 == 0
    capped = resolve_engine(dsv4, {**DECODE, "max_total_tokens": 1_000_000}, 141)
    assert capped.max_total_num_tokens == 1_000_000 // 256 * 256  # the cap is page aligned too
    larger = resolve_engine(dsv4, {**DECODE, "max_total_tokens": 10**12}, 141)
    assert larger.max_total_num_tokens == limits.max_total_num_tokens


def test_max_req_input_len_is_context_minus_six(dsv4: dict[str, Any]) -> None:
    limits = resolve_engine(dsv4, DECODE, 141)
    assert limits.max_req_len == 524287
    assert limits.max_req_input_len == 524282
    small = resolve_engine(dsv4, {**DECODE, "max_total_tokens": 4096}, 141)
    assert small.max_req_input_len == 4095 - 5


def test_more_memory_fraction_gives_a_larger_pool(dsv4: dict[str, Any]) -> None:
    low = resolve_engine(dsv4, {**DECODE, "mem_fraction_static": 0.78}, 141)
    high = resolve_engine(dsv4, {**DECODE, "mem_fraction_static": 0.83}, 141)
    assert high.max_total_num_tokens > low.max_total_num_tokens


# Production envelope (inventories/production), 141 GiB H200, 284 B mxfp4 weights over tp 4. SGLang 0.5.23's
# DSV4PoolConfigurator, run on CPU with the same available bytes (tests/component/conformance/sglang_pool.py), sized:
SGLANG_PRODUCTION_POOLS = {
    ("decode", True): 11_159_040,
    ("decode", False): 12_184_320,
    ("prefill", True): 9_927_680,
    ("prefill", False): 10_839_552,
}
PREFILL = {**DECODE, "disaggregation_mode": "prefill", "mem_fraction_static": 0.78}
PRODUCTION = {"decode": {**DECODE, "max_running_requests": 64}, "prefill": PREFILL}


@pytest.mark.parametrize(("role", "bf16"), list(SGLANG_PRODUCTION_POOLS))
def test_production_pools_match_what_sglang_sized(dsv4: dict[str, Any], role: str, bf16: bool) -> None:
    limits = resolve_engine(dsv4, {**PRODUCTION[role], "bf16_index_k": bf16}, 141, params_b=284, quantization="mxfp4")
    assert limits.max_total_num_tokens == SGLANG_PRODUCTION_POOLS[(role, bf16)]


def test_dsv4_bytes_per_token_carry_page_padding_and_the_swa_share(dsv4: dict[str, Any]) -> None:
    """SGLang's figures for this config: a V4 slot is 584 B, padded to 585 B in 256-slot pages, 864 B in the
    2-slot c128 pages; SWA costs 31,875 B a slot and 10 % of it rides on every full token."""
    args = resolve_args(dsv4, {**DECODE, "max_running_requests": 64}, 141)
    fp8 = size_pool(dsv4, {**args, "bf16_index_k": False}, 100 * 2**30)
    bf16 = size_pool(dsv4, {**args, "bf16_index_k": True}, 100 * 2**30)
    assert (fp8.bytes_per_token, bf16.bytes_per_token) == (7086.75, 7737.75)
    assert fp8.fixed_bytes == bf16.fixed_bytes == 702_545_920  # c128 rings for 65 request slots
    assert fp8.swa_tokens == fp8.max_total_num_tokens // 10 // 256 * 256


def test_dsv4_bf16_index_keys_cost_about_8_percent_of_kv_tokens(dsv4: dict[str, Any]) -> None:
    bf16, fp8, loss = bf16_index_loss(dsv4, PRODUCTION["decode"], 141)
    assert bf16.max_total_num_tokens < fp8.max_total_num_tokens
    assert 0.08 <= loss <= 0.09


def test_small_pd_decode_batches_reserve_extra_request_slots(dsv4: dict[str, Any]) -> None:
    """PD decode adds 2 x the per-rank batch as slots when it is 32 or less: the c128 rings grow with them."""
    small = size_pool(dsv4, resolve_args(dsv4, {**DECODE, "max_running_requests": 32}, 141), 100 * 2**30)
    large = size_pool(dsv4, resolve_args(dsv4, {**DECODE, "max_running_requests": 33}, 141), 100 * 2**30)
    assert dsv4_request_slots({"max_running_requests": 32, "disaggregation_mode": "decode"}) == 32 + 64 + 1
    assert dsv4_request_slots({"max_running_requests": 33, "disaggregation_mode": "decode"}) == 34
    assert small.fixed_bytes > large.fixed_bytes


def test_concurrency_table_names_the_binding_limit(dsv4: dict[str, Any]) -> None:
    bf16, fp8, _ = bf16_index_loss(dsv4, DECODE, 141)
    rows = {r.context_len: r for r in concurrency_table(bf16, [4096, 524288], router_concurrency=100, fp8_limits=fp8)}
    assert rows[4096].binding == "router"
    assert rows[4096].concurrent == 100
    full = rows[524288]
    assert full.binding == "kv_pool"
    assert full.fit_in_pool == bf16.max_total_num_tokens // 524288
    assert full.lost_to_bf16_index == full.fit_fp8_index - full.fit_in_pool > 0


def test_default_mem_fraction_estimate_reserves_10_gib_on_large_gpus() -> None:
    assert default_mem_fraction(141, 4, 2048) == round((141 * 1024 - 10240) / (141 * 1024), 3)
    assert default_mem_fraction(141, 4, 8192) == round((141 * 1024 - (512 + 1.5 * 8192 + 512)) / (141 * 1024), 3)
    assert default_mem_fraction(40, 1, 2048) == round((40 * 1024 - (512 + 3072 + 128)) / (40 * 1024), 3)


@pytest.mark.parametrize(
    ("envelope", "gpu", "field"),
    [
        ({}, 0, "gpu_memory_gib=0"),
        ({}, -8, "gpu_memory_gib=-8"),
        ({"mem_fraction_static": 1.2}, 141, "mem_fraction_static=1.2"),
        ({"mem_fraction_static": 0}, 141, "mem_fraction_static=0"),
        ({"kv_cache_dtype": "int3"}, 141, "kv_cache_dtype='int3'"),
        ({"context_length": -1}, 141, "context_length=-1"),
        ({"mem_fraction_static": 0.2}, 141, "mem_fraction_static=0.2"),
    ],
)
def test_invalid_inputs_name_the_field_and_value(
    dsv4: dict[str, Any], envelope: dict[str, Any], gpu: float, field: str
) -> None:
    with pytest.raises(CapacityError, match=field.replace("(", r"\(")):
        resolve_engine(dsv4, {**DECODE, **envelope}, gpu)


def test_config_missing_a_required_field_is_named(dsv4: dict[str, Any]) -> None:
    broken = {k: v for k, v in dsv4.items() if k != "compress_ratios"}
    with pytest.raises(CapacityError, match="compress_ratios"):
        resolve_engine(broken, DECODE, 141)
    with pytest.raises(CapacityError, match="architectures"):
        resolve_engine({}, DECODE, 141)


def test_dsv4_swa_pool_is_a_share_of_the_full_pool(dsv4: dict[str, Any]) -> None:
    """The V4 override sets swa_full_tokens_ratio=0.1 before the cache hook looks: always ratio mode."""
    default = resolve_engine(dsv4, DECODE, 141)
    assert default.resolved["swa_full_tokens_ratio"] == 0.1
    assert default.token_capacity_swa == default.max_total_num_tokens // 10 // 256 * 256
    larger = resolve_engine(dsv4, {**DECODE, "swa_full_tokens_ratio": 0.2}, 141)
    assert larger.token_capacity_swa == larger.max_total_num_tokens // 5 // 256 * 256
    assert larger.max_total_num_tokens < default.max_total_num_tokens


def test_requests_that_fit_count_whole_pages() -> None:
    """SGLang allocates KV in whole pages: a request of 131,073 tokens at page 256 holds 513 pages. A pool of
    1,537 pages (393,472 tokens) holds 2 such requests (3 x 513 = 1,539 pages > 1,537), although 3 x 131,073 =
    393,219 tokens would be fewer than the pool's."""
    assert requests_that_fit(1537 * 256, 131_073, 256) == 2
    assert requests_that_fit(1539 * 256, 131_073, 256) == 3  # three whole 513-page requests
    assert requests_that_fit(1537 * 256, 131_072, 256) == 3  # 512 pages each: 1,536 of the 1,537
    assert requests_that_fit(1537 * 256, 131_073, 1) == 3  # page 1: no rounding
    assert requests_that_fit(100, 0, 64) == 1  # an empty request still takes a page


def test_ties_name_the_pool_then_the_engine_slots_then_the_router(dsv4: dict[str, Any]) -> None:
    """When limits are equal, the table names the one nearest the GPU: the KV pool (memory), then the engine's
    max_running_requests, then the router's cap (set to protect the engines below it). A PD decode engine keeps
    512 tokens free per call: a call of 8,192 tokens takes 8,704."""
    base = resolve_engine(dsv4, DECODE, 141)
    limits = dataclasses.replace(base, max_total_num_tokens=64 * 8704, max_running_requests=64, page_size=256)
    (row,) = concurrency_table(limits, [8192], router_concurrency=64)
    assert (row.fit_in_pool, row.concurrent, row.binding) == (64, 64, "kv_pool")
    (row,) = concurrency_table(dataclasses.replace(limits, max_total_num_tokens=65 * 8704), [8192], 64)
    assert (row.fit_in_pool, row.concurrent, row.binding) == (65, 64, "max_running_requests")
    (row,) = concurrency_table(dataclasses.replace(limits, max_running_requests=65), [8192], 63)
    assert (row.concurrent, row.binding) == (63, "router")
    (row,) = concurrency_table(limits, [8192], router_concurrency=0)  # 0: the router has no cap
    assert (row.concurrent, row.binding) == (64, "kv_pool")


def test_an_engine_of_attention_dp_ranks_counts_each_rank_s_pool_and_slots(dsv4: dict[str, Any]) -> None:
    """SGLang gives each attention-DP rank its own KV pool and requested // attn_dp_size running slots (limits are one
    rank's); the table states the whole engine: two ranks of 64 x 8,704 tokens and 32 slots fit 128 calls of 8,192
    tokens and run 64, below a router of 100; their fp8 pools of 70 x 8,704 would fit 140."""
    base = resolve_engine(dsv4, DECODE, 141)
    rank = dataclasses.replace(base, max_total_num_tokens=64 * 8704, max_running_requests=32, page_size=256)
    fp8 = dataclasses.replace(rank, max_total_num_tokens=70 * 8704)
    (row,) = concurrency_table(rank, [8192], 100, fp8, ranks=2)
    assert (row.fit_in_pool, row.concurrent, row.binding) == (128, 64, "max_running_requests")
    assert (row.fit_fp8_index, row.lost_to_bf16_index) == (140, 12)
    (row,) = concurrency_table(rank, [8192], 50, fp8, ranks=2)
    assert (row.concurrent, row.binding) == (50, "router")
