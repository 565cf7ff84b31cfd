"""Capacity model: what an engine envelope costs in KV memory and which limits it yields (SGLang 0.5.23).

Pure Python, no third-party imports: Ansible modules, filter plugins, the simulator and the tests share it.
Formulas follow SGLang 0.5.23's KV cache configurator and pool configurators:

- per-token KV bytes per GPU (MHA/GQA, MLA, DeepSeek-V3.2 DSA, DeepSeek-V4 compressed attention);
- the pool: ``rest = pre_load_free * mem_fraction_static - weights``; ``tokens = (rest - fixed) // per_token``,
  page aligned, capped by ``--max-total-tokens``;
- derived limits: ``max_running_requests`` (DeepSeek-V4 hook default 256, else the clamp estimate, always
  capped at ``token_capacity // 2``), ``max_req_input_len = min(context_len - 1, tokens - 1) - 5``.

Assumptions (documented because the live engine is the truth):
- Weights per GPU = parameters x bytes per parameter of the declared quantization / tp_size: SGLang places
  MoE experts over the TP ranks (EP = TP by default) and the replicated attention share is small.
- The CUDA context and allocator take ``cuda_context_gib`` (default 1 GiB) before the model loads.
- DeepSeek-V4 page padding of the FlashMLA layout is not modelled (it is under 1 % of a page).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

GIB = 1 << 30

# Bytes per parameter of the declared weight quantization (block scales included).
QUANT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0 + 4 / (128 * 128), "mxfp4": 0.5 + 1 / 32, "nvfp4": 0.5 + 1 / 16}
KV_DTYPES = {"fp8_e4m3": 1, "fp8_e5m2": 1, "bf16": 2, "bfloat16": 2, "auto": 2}

DSV4_ARCH = "DeepseekV4ForCausalLM"
DSA_ARCHS = ("DeepseekV32ForCausalLM",)
MLA_ARCHS = ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "KimiK2ForCausalLM")

DSV4_DEFAULT_MAX_RUNNING = 256
DSV4_PAGE_SIZE = 256
DSV4_DEFAULT_SWA_RATIO = 0.1
DSV4_C4_RING, DSV4_C128_RING = 8, 128  # compress-state ring rows per request, no speculative decoding
DSV4_PAGE_ALIGN = 576  # FlashMLA pads each paged latent page to a multiple of 576 bytes
DSV4_QUANT_TILE = 64  # nope dims per fp8 scale byte in the V4 latent layout
DSV4_STATE_BYTES = 4  # compress state is fp32 (SGLANG_DSV4_COMPRESS_STATE_DTYPE default)
DSV4_SMALL_BATCH = 32  # PD decode reserves 2x extra request slots at or below this per-rank batch
RESERVED_DECODE_TOKENS = 5  # max_req_input_len = max_req_len - 5
# PD decode admission keeps this many free tokens per active request (--num-reserved-decode-tokens default,
# arg_groups/fields/disagg.py; disaggregation/decode.py _allocatable_token_budgets, _required_admission_tokens).
PD_DECODE_ADMISSION_RESERVE = 512
# chunked_prefill_size when unset, by GPU memory (memory_hook.handle_gpu_memory_settings): (below MiB, tokens).
CHUNK_BY_GPU_MIB = ((20 * 1024, 2048), (60 * 1024, 4096), (160 * 1024, 8192))
CHUNK_LARGE_GPU = 16384


def request_lengths(context_len: int, tokens: int) -> tuple[int, int]:
    """SGLang's (max_req_len, max_req_input_len) for a context length and a KV pool of `tokens`."""
    max_req_len = min(context_len - 1, tokens - 1)
    return max_req_len, max_req_len - RESERVED_DECODE_TOKENS


def served_tokens(max_req_len: int) -> int:
    """The most tokens (prompt + output) one call is served: the scheduler caps max_new_tokens at
    max_req_len - input - 1, so a context_length of X serves X - 2."""
    return max_req_len - 1


def admission_reserve(resolved: Mapping[str, Any]) -> int:
    """Tokens a PD decode engine keeps free per active request before it admits one more; 0 elsewhere."""
    if resolved.get("disaggregation_mode") != "decode":
        return 0
    declared = resolved.get("num_reserved_decode_tokens")
    return PD_DECODE_ADMISSION_RESERVE if declared is None else int(declared)


def default_chunked_prefill_size(gpu_memory_gib: float) -> int:
    """SGLang's chunked_prefill_size when unset, from the GPU's memory."""
    mib = gpu_memory_gib * 1024
    return next((chunk for below, chunk in CHUNK_BY_GPU_MIB if mib < below), CHUNK_LARGE_GPU)


class CapacityError(ValueError):
    """Bad capacity input; the message names the field, the value and what to change."""


def _arch(config: Mapping[str, Any]) -> str:
    archs = config.get("architectures") or []
    if not archs:
        raise CapacityError("model config field architectures is missing or empty; fix: use the model's config.json")
    return str(archs[0])


def _req(config: Mapping[str, Any], name: str) -> Any:
    if config.get(name) is None:
        raise CapacityError(f"model config field {name} is missing (architecture {config.get('architectures')})")
    return config[name]


def is_dsv4(config: Mapping[str, Any]) -> bool:
    return _arch(config) == DSV4_ARCH


def kv_dtype_bytes(kv_cache_dtype: str) -> int:
    if kv_cache_dtype not in KV_DTYPES:
        raise CapacityError(f"kv_cache_dtype={kv_cache_dtype!r} is unknown; fix: one of {', '.join(KV_DTYPES)}")
    return KV_DTYPES[kv_cache_dtype]


# ---------------------------------------------------------------- per-token KV bytes


def mla_latent_bytes(config: Mapping[str, Any], kv_cache_dtype: str, scaled_fp8: bool) -> int:
    """Bytes of one MLA latent per token per layer. fp8 FlashMLA layout: nope fp8 + scales + rope bf16."""
    rank, rope = int(_req(config, "kv_lora_rank")), int(_req(config, "qk_rope_head_dim"))
    if kv_dtype_bytes(kv_cache_dtype) == 1:
        return rank + rank // 128 * 4 + rope * 2 if scaled_fp8 else rank + rope
    return (rank + rope) * 2


def index_k_bytes(config: Mapping[str, Any], bf16_index_k: bool) -> int:
    """Bytes of one indexer key: fp8 with an fp32 scale per 128 dims, or bf16.

    --enable-deepseek-v4-fp4-indexer does not change this on NVIDIA GPUs: SGLang budgets fp8-sized keys there
    (68-byte fp4 keys only on HIP), and refuses the flag on H200 (validation does too).
    """
    dim = int(config.get("index_head_dim", 128))
    return dim * 2 if bf16_index_k else dim + dim // 128 * 4


@dataclass(frozen=True)
class KVCost:
    """What one token costs per GPU: `per_token` scales with the pool, `per_layer` is informative."""

    per_token: float
    per_layer: float
    layers: int
    detail: dict[str, float] = field(default_factory=dict)


def kv_cost(
    config: Mapping[str, Any], kv_cache_dtype: str, bf16_index_k: bool, tp_size: int = 1, page_size: int = 256
) -> KVCost:
    """Per-token KV bytes per GPU for the model family of `config`.

    bf16 index keys apply to DeepSeek-V4 only (the fork's switch); DeepSeek-V3.2 always sizes fp8 keys on GPU.
    """
    arch = _arch(config)
    layers = int(_req(config, "num_hidden_layers"))
    if arch == DSV4_ARCH:
        return _dsv4_cost(config, kv_cache_dtype, bf16_index_k, page_size)
    if arch in DSA_ARCHS:
        latent = mla_latent_bytes(config, kv_cache_dtype, scaled_fp8=True)
        index = index_k_bytes(config, False)
        per_layer = latent + index
        return KVCost(per_layer * layers, per_layer, layers, {"latent": latent, "index_k": index})
    if arch in MLA_ARCHS or config.get("kv_lora_rank"):
        latent = mla_latent_bytes(config, kv_cache_dtype, scaled_fp8=False)
        return KVCost(latent * layers, latent, layers, {"latent": latent})
    heads = int(config.get("num_key_value_heads") or _req(config, "num_attention_heads"))
    head_dim = int(
        config.get("head_dim") or int(_req(config, "hidden_size")) // int(_req(config, "num_attention_heads"))
    )
    per_gpu_heads = max(1, heads // max(1, tp_size))
    per_layer = per_gpu_heads * head_dim * 2 * kv_dtype_bytes(kv_cache_dtype)
    return KVCost(per_layer * layers, per_layer, layers, {"kv_heads_per_gpu": per_gpu_heads})


def _dsv4_ratios(config: Mapping[str, Any]) -> list[int]:
    layers = int(_req(config, "num_hidden_layers"))
    ratios = [int(r) for r in _req(config, "compress_ratios")]
    if len(ratios) != layers:
        raise CapacityError(
            f"model config field compress_ratios has {len(ratios)} entries, num_hidden_layers={layers}; "
            "fix: one ratio (0, 4 or 128) per layer"
        )
    bad = sorted({r for r in ratios if r not in (0, 4, 128)})
    if bad:
        raise CapacityError(f"model config field compress_ratios has unsupported ratios {bad}; fix: use 0, 4 or 128")
    return ratios


def _dsv4_check_kv_dtype(kv_cache_dtype: str) -> None:
    if kv_cache_dtype not in ("fp8_e4m3", "bfloat16", "bf16"):
        raise CapacityError(
            f"kv_cache_dtype={kv_cache_dtype!r} is not allowed for DeepSeek-V4; fix: fp8_e4m3 or bfloat16"
        )


def _dsv4_head_dim(config: Mapping[str, Any]) -> int:
    return int(_req(config, "qk_nope_head_dim")) + int(_req(config, "qk_rope_head_dim"))


def _dsv4_slot_bytes(config: Mapping[str, Any]) -> int:
    """One FlashMLA V4-layout latent slot: nope fp8 + rope bf16 + nope scales + pad (584 B), any KV dtype."""
    nope, rope = int(_req(config, "qk_nope_head_dim")), int(_req(config, "qk_rope_head_dim"))
    return nope + rope * 2 + nope // DSV4_QUANT_TILE + 1


def _dsv4_paged_bytes(config: Mapping[str, Any], page_size: int, ratio: int = 0) -> float:
    """Bytes per token of a paged latent cache: a page of page_size/ratio slots is padded to 576 B."""
    slots = page_size // ratio if ratio else page_size
    return _ceil_to(slots * _dsv4_slot_bytes(config), DSV4_PAGE_ALIGN) / slots


def _dsv4_swa_token_bytes(config: Mapping[str, Any], page_size: int) -> float:
    """One SWA slot over all layers, plus the c4 compress state the SWA pages carry (fp32 rings)."""
    ratios = _dsv4_ratios(config)
    index_dim = int(config.get("index_head_dim", 128))
    state = 2 * 2 * (_dsv4_head_dim(config) + index_dim) * DSV4_STATE_BYTES
    return _dsv4_paged_bytes(config, page_size) * len(ratios) + DSV4_C4_RING / page_size * state * ratios.count(4)


def _dsv4_cost(config: Mapping[str, Any], kv_cache_dtype: str, bf16_index_k: bool, page_size: int) -> KVCost:
    """Compressed bytes one full token adds: c4 layers a quarter slot and a quarter index key, c128 layers
    1/128 of a slot. The SWA share is priced apart (it scales with swa_full_tokens_ratio)."""
    _dsv4_check_kv_dtype(kv_cache_dtype)
    ratios = _dsv4_ratios(config)
    index = index_k_bytes(config, bf16_index_k)
    c4, c128 = ratios.count(4), ratios.count(128)
    c4_bytes = c4 * (_dsv4_paged_bytes(config, page_size, 4) + index) / 4
    c128_bytes = c128 * _dsv4_paged_bytes(config, page_size, 128) / 128
    per_token = c4_bytes + c128_bytes
    detail = {
        "slot": _dsv4_slot_bytes(config),
        "index_k": index,
        "c4_layers": c4,
        "c128_layers": c128,
        "c4": c4_bytes,
        "c128": c128_bytes,
    }
    return KVCost(per_token, per_token / len(ratios), len(ratios), detail)


def dsv4_request_slots(resolved: Mapping[str, Any]) -> int:
    """Request slots the pools are sized for: running requests per DP rank + 1, plus PD decode's extra slots
    (twice the per-rank batch when that is 32 or less, unless declared)."""
    per_rank = max(1, int(resolved["max_running_requests"]) // max(1, int(resolved.get("attn_dp_size") or 1)))
    if resolved.get("disaggregation_mode") != "decode":
        return per_rank + 1
    extra = resolved.get("disaggregation_decode_extra_slots")
    if extra is None:
        per_replica = max(1, int(resolved["max_running_requests"]) // max(1, int(resolved.get("dp_size") or 1)))
        extra = 2 * per_replica if per_replica <= DSV4_SMALL_BATCH else 0
    return per_rank + int(extra) + 1


def _dsv4_fixed_bytes(config: Mapping[str, Any], resolved: Mapping[str, Any]) -> int:
    """Request-scoped bytes taken before the token pool: the c128 compress-state rings (fp32)."""
    rows = _ceil_to(dsv4_request_slots(resolved) * DSV4_C128_RING + DSV4_C128_RING + 1, 128)
    return rows * 2 * _dsv4_head_dim(config) * DSV4_STATE_BYTES * _dsv4_ratios(config).count(128)


def _ceil_to(value: int, step: int) -> int:
    return -(-value // step) * step


# ---------------------------------------------------------------- resolution of defaults


def model_context_len(config: Mapping[str, Any]) -> int:
    return int(_req(config, "max_position_embeddings"))


def activation_tokens(mode: str, max_running_requests: Any, chunked_prefill_size: Any) -> int:
    """Tokens SGLang reserves activation memory for when it picks --mem-fraction-static (memory_hook): the running
    batch on a decode engine, the prefill chunk elsewhere, at least 2048."""
    size = max_running_requests if mode == "decode" else chunked_prefill_size
    return max(int(size or 0), 2048)


def default_mem_fraction(gpu_memory_gib: float, tp_size: int, activation_tokens: int) -> float:
    """SGLang's estimate when --mem-fraction-static is unset (memory_hook.handle_gpu_memory_settings)."""
    gpu_mb = gpu_memory_gib * 1024
    reserved = 512 + 1.5 * activation_tokens + tp_size / 8 * 1024
    if gpu_memory_gib > 60:
        reserved = max(reserved, 10 * 1024)
    return round((gpu_mb - reserved) / gpu_mb, 3)


def resolve_args(config: Mapping[str, Any], envelope: Mapping[str, Any], gpu_memory_gib: float) -> dict[str, Any]:
    """The envelope after SGLang's model overrides and memory defaults (what /server_info echoes)."""
    out = dict(envelope)
    tp = int(out.get("tp_size") or 1)
    out["tp_size"] = tp
    out.setdefault("disaggregation_mode", "null")
    out["disaggregation_mode"] = out["disaggregation_mode"] or "null"
    if out.get("chunked_prefill_size") is None:
        out["chunked_prefill_size"] = default_chunked_prefill_size(gpu_memory_gib)
    if out.get("max_prefill_tokens") is None:
        out["max_prefill_tokens"] = 16384
    kv = out.get("kv_cache_dtype") or "auto"
    if is_dsv4(config):
        out["page_size"] = DSV4_PAGE_SIZE
        out["kv_cache_dtype"] = "fp8_e4m3" if kv == "auto" else kv
        if out.get("max_running_requests") is None:
            out["max_running_requests"] = DSV4_DEFAULT_MAX_RUNNING
        if out.get("swa_full_tokens_ratio") is None:
            out["swa_full_tokens_ratio"] = DSV4_DEFAULT_SWA_RATIO
        if out["disaggregation_mode"] == "decode":
            out["disable_radix_cache"] = True
    else:
        out["kv_cache_dtype"] = kv
        if out.get("page_size") is None:
            out["page_size"] = 64 if _arch(config) in DSA_ARCHS else 1
    if out.get("mem_fraction_static") is None:
        mode = out["disaggregation_mode"]
        activation = activation_tokens(mode, out.get("max_running_requests"), out["chunked_prefill_size"])
        out["mem_fraction_static"] = default_mem_fraction(gpu_memory_gib, tp, activation)
    return out


# ---------------------------------------------------------------- the engine's limits


@dataclass(frozen=True)
class EngineLimits:
    """The limits one engine runs with, as SGLang 0.5.23 resolves them."""

    resolved: dict[str, Any]
    context_len: int
    max_total_num_tokens: int
    token_capacity_swa: int | None
    max_running_requests: int
    max_req_len: int
    max_req_input_len: int
    page_size: int
    bytes_per_token: float
    fixed_bytes: int
    weights_bytes: int
    kv_budget_bytes: int
    memory_usage: dict[str, Any]
    admission_reserve: int = 0  # tokens kept free per active request (PD decode)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def weights_bytes_per_gpu(params_b: float, quantization: str, tp_size: int) -> int:
    """Weights per GPU: parameters x bytes per parameter / tp_size (experts spread over TP ranks)."""
    if quantization not in QUANT_BYTES:
        raise CapacityError(f"quantization={quantization!r} is unknown; fix: one of {', '.join(QUANT_BYTES)}")
    if params_b <= 0:
        raise CapacityError(f"params_b={params_b!r} must be > 0 (billions of parameters)")
    return int(params_b * 1e9 * QUANT_BYTES[quantization] / tp_size)


def _check_inputs(envelope: Mapping[str, Any], gpu_memory_gib: float) -> None:
    if not isinstance(gpu_memory_gib, (int, float)) or gpu_memory_gib <= 0:
        raise CapacityError(f"gpu_memory_gib={gpu_memory_gib!r} must be > 0 (GiB per GPU)")
    mfs = envelope.get("mem_fraction_static")
    if mfs is not None and not 0 < float(mfs) < 1:
        raise CapacityError(f"mem_fraction_static={mfs!r} must be in (0, 1)")
    for name in ("context_length", "max_total_tokens", "max_running_requests", "tp_size", "page_size"):
        value = envelope.get(name)
        if value is not None and int(value) <= 0:
            raise CapacityError(f"{name}={value!r} must be > 0")


@dataclass(frozen=True)
class PoolSize:
    """What SGLang's pool configurator derives from a KV byte budget (per GPU)."""

    max_total_num_tokens: int
    swa_tokens: int
    bytes_per_token: float  # per full token, the SWA share included
    fixed_bytes: int  # request-scoped, taken before the token pool
    max_running_requests: int  # per DP rank
    context_len: int


def size_pool(model_config: Mapping[str, Any], args: Mapping[str, Any], budget_bytes: int) -> PoolSize:
    """Size the KV pool from `budget_bytes` available after the weights, as SGLang 0.5.23 does.

    `args` are resolved server args (resolve_args). DeepSeek-V4 (DSV4PoolConfigurator): the model override sets
    swa_full_tokens_ratio (0.1) before the cache hook looks, so the SWA pool is always a share of the full pool and
    is priced per full token; the c128 compress-state rings are request-scoped. Other models
    (DefaultPoolConfigurator): the per-token cell only. Then --max-total-tokens caps the pool, page aligned, and
    the running requests follow from the final capacity (resolve_max_num_reqs).
    """
    page = int(args["page_size"])
    context_len = model_context_len(model_config)
    if args.get("context_length") is not None:
        context_len = int(args["context_length"])
    cost = kv_cost(
        model_config, str(args["kv_cache_dtype"]), bool(args.get("bf16_index_k")), int(args["tp_size"]), page
    )
    per_token, fixed, ratio = cost.per_token, 0, 0.0
    if is_dsv4(model_config):
        ratio = float(args["swa_full_tokens_ratio"])
        per_token += ratio * _dsv4_swa_token_bytes(model_config, page)
        fixed = _dsv4_fixed_bytes(model_config, args)
    tokens = int(max(budget_bytes - fixed, 0) / per_token) // page * page
    if tokens <= 0:
        raise CapacityError(
            f"Not enough memory. Please try to increase --mem-fraction-static "
            f"(mem_fraction_static={args['mem_fraction_static']}, KV budget {(budget_bytes - fixed) / GIB:.2f} GiB); "
            "fix: raise mem_fraction_static or lower max_running_requests"
        )
    if args.get("max_total_tokens") is not None:
        tokens = min(tokens, int(args["max_total_tokens"])) // page * page
    swa_tokens = int(tokens * ratio) // page * page
    running = resolve_max_running_requests(
        args.get("max_running_requests"), tokens, context_len, args.get("attn_dp_size")
    )
    return PoolSize(tokens, swa_tokens, per_token, fixed, running, context_len)


def resolve_engine(
    model_config: Mapping[str, Any],
    envelope: Mapping[str, Any],
    gpu_memory_gib: float,
    weights_gib_per_gpu: float | None = None,
    *,
    params_b: float | None = None,
    quantization: str | None = None,
    cuda_context_gib: float = 1.0,
) -> EngineLimits:
    """Resolve one engine's envelope into the limits the engine applies.

    Weights come from `weights_gib_per_gpu`, else from `params_b` x `quantization`, else from the config's
    `num_parameters_b` / `quantization` fields.
    """
    _check_inputs(envelope, gpu_memory_gib)
    args = resolve_args(model_config, envelope, gpu_memory_gib)
    tp, page = int(args["tp_size"]), int(args["page_size"])
    if weights_gib_per_gpu is not None:
        weights = int(weights_gib_per_gpu * GIB)
    else:
        pb = params_b if params_b is not None else model_config.get("num_parameters_b")
        quant = quantization or model_config.get("quantization") or "bf16"
        if pb is None:
            raise CapacityError("params_b is unknown: declare the model's parameter count (billions) or weights_gib")
        weights = weights_bytes_per_gpu(float(pb), str(quant), tp)

    pre_load_free = (gpu_memory_gib - cuda_context_gib) * GIB
    rest = pre_load_free * float(args["mem_fraction_static"]) - weights
    if rest <= 0:
        raise CapacityError(
            f"weights ({weights / GIB:.1f} GiB per GPU) leave no GPU memory at mem_fraction_static="
            f"{args['mem_fraction_static']} on {gpu_memory_gib} GiB GPUs; fix: raise mem_fraction_static or tp_size"
        )
    pool = size_pool(model_config, args, int(rest))
    context_len, tokens, swa_tokens = pool.context_len, pool.max_total_num_tokens, pool.swa_tokens
    per_token, fixed, running = pool.bytes_per_token, pool.fixed_bytes, pool.max_running_requests
    max_req_len, max_req_input_len = request_lengths(context_len, tokens)
    kv_bytes = int(tokens * per_token + fixed)
    memory = {
        "weight": round(weights / GIB, 2),
        "kvcache": round(kv_bytes / GIB, 2),
        "startup_available": round(pre_load_free / GIB, 2),
        "token_capacity": tokens,
        "token_capacity_swa": swa_tokens or None,
        "graph": {
            "prefill": 0.0,
            "decode": 0.0,
            "target_verify": 0.0,
            "draft_prefill": 0.0,
            "draft_decode": 0.0,
            "draft_extend": 0.0,
        },
    }
    return EngineLimits(
        resolved=args,
        context_len=context_len,
        max_total_num_tokens=tokens,
        token_capacity_swa=swa_tokens or None,
        max_running_requests=running,
        max_req_len=max_req_len,
        max_req_input_len=max_req_input_len,
        page_size=page,
        bytes_per_token=per_token,
        fixed_bytes=fixed,
        weights_bytes=weights,
        kv_budget_bytes=int(rest),
        memory_usage=memory,
        admission_reserve=admission_reserve(args),
    )


def resolve_max_running_requests(
    requested: int | None, token_capacity: int, context_len: int, attn_dp_size: int | None = None
) -> int:
    """Effective running requests per DP worker (kv_cache_configurator.resolve_max_num_reqs)."""
    if requested is not None:
        return clamp_running_requests(requested, token_capacity, attn_dp_size)
    estimated = min(max(int(token_capacity / context_len * 512), 2048), 4096)
    return min(estimated, token_capacity // 2)


def clamp_running_requests(requested: int, token_capacity: int, attn_dp_size: int | None = None) -> int:
    """A requested max_running_requests as SGLang applies it per DP worker: min(requested // dp, capacity // 2)."""
    dp = max(1, int(attn_dp_size or 1))
    return min(max(1, int(requested) // dp), token_capacity // 2)


# ---------------------------------------------------------------- concurrency table


@dataclass(frozen=True)
class ConcurrencyRow:
    context_len: int
    fit_in_pool: int
    concurrent: int
    binding: str  # kv_pool | max_running_requests | router
    fit_fp8_index: int | None
    lost_to_bf16_index: int | None


def requests_that_fit(pool_tokens: int, request_tokens: int, page_size: int, reserve: int = 0) -> int:
    """Requests of `request_tokens` each that the pool holds at once: each rounds up to whole pages, plus the
    admission `reserve` a PD decode engine keeps free per active request (the k-th is admitted while
    pool - (k - 1) x (pages + reserve) >= pages + reserve)."""
    return pool_tokens // (_ceil_to(max(1, request_tokens), page_size) + max(0, reserve))


def concurrency_table(
    limits: EngineLimits,
    context_lens: Sequence[int],
    router_concurrency: int | None = None,
    fp8_limits: EngineLimits | None = None,
    ranks: int = 1,
) -> list[ConcurrencyRow]:
    """For each per-call context length: requests the whole engine fits at once and which limit binds first.
    `limits` are one rank's (its KV pool and running slots, as SGLang resolves them per attention-DP rank); the
    engine has `ranks` of them, so its pools and slots count `ranks` times before the router's admission."""
    rows = []
    for length in sorted({int(c) for c in context_lens}):
        fit = ranks * requests_that_fit(limits.max_total_num_tokens, length, limits.page_size, limits.admission_reserve)
        bounds = {"kv_pool": fit, "max_running_requests": ranks * limits.max_running_requests}
        if router_concurrency is not None and router_concurrency > 0:
            bounds["router"] = router_concurrency
        binding = min(bounds, key=lambda k: (bounds[k], list(bounds).index(k)))
        fp8_fit = None
        if fp8_limits is not None:
            fp8_fit = ranks * requests_that_fit(
                fp8_limits.max_total_num_tokens, length, fp8_limits.page_size, fp8_limits.admission_reserve
            )
        rows.append(
            ConcurrencyRow(length, fit, bounds[binding], binding, fp8_fit, None if fp8_fit is None else fp8_fit - fit)
        )
    return rows


def default_context_lens(declared: int) -> list[int]:
    """A ladder of per-call context lengths up to and including the declared one."""
    ladder = [4096, 8192, 32768, 65536, 131072, 262144, 524288, 1048576]
    return sorted({c for c in ladder if c <= declared} | {declared})


def bf16_index_loss(
    model_config: Mapping[str, Any], envelope: Mapping[str, Any], gpu_memory_gib: float, **kwargs: Any
) -> tuple[EngineLimits, EngineLimits, float]:
    """(limits with bf16 index keys, limits with fp8 index keys, share of KV tokens the bf16 keys cost)."""
    bf16 = resolve_engine(model_config, {**envelope, "bf16_index_k": True}, gpu_memory_gib, **kwargs)
    fp8 = resolve_engine(model_config, {**envelope, "bf16_index_k": False}, gpu_memory_gib, **kwargs)
    loss = 1 - bf16.max_total_num_tokens / fp8.max_total_num_tokens if fp8.max_total_num_tokens else math.nan
    return bf16, fp8, loss
