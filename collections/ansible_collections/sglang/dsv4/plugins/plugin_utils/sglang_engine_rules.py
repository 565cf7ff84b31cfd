"""The rules of one engine envelope (scope `engine`), in four stages: the declared values one by one, the GPU layout
and the values against each other, the weights against the GPU memory, then the capacity model's KV pool."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_argspec import SGLANG
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_capacity import (
    CapacityError,
    is_dsv4,
    model_context_len,
    resolve_engine,
    weights_bytes_per_gpu,
)
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_declared import declared_var

from .sglang_host_rules import FACTS
from .sglang_rules import (
    NO_VALUE,
    Finding,
    Rule,
    choice_findings,
    in_range,
    overridden_findings,
    port_findings,
    split_fix,
)

# arg_groups/serving_hook.py: the fp4 indexer needs an SM100, SM120 or gfx95 GPU.
FP4_INDEXER_REFUSAL = "--enable-deepseek-v4-fp4-indexer requires SM100, SM120, or gfx95 GPUs with FP4 indexer support."
POSITIVE = (
    "tp_size",
    "dp_size",
    "context_length",
    "max_total_tokens",
    "max_running_requests",
    "max_prefill_tokens",
    "page_size",
    "cuda_graph_max_bs_decode",
    "cuda_graph_max_bs_prefill",
)
DECLARED, LAYOUT, WEIGHTS, CAPACITY = 1, 2, 3, 4  # the stages


def model_facts(hostvars: Mapping[str, Any], model_config: Mapping[str, Any]) -> tuple[Any, Any]:
    """(params_b, quantization): as declared in sglang_model, else as models/<name>/config.json states them
    (num_parameters_b, quantization)."""
    model = hostvars.get("sglang_model") or {}
    params_b, quantization = (model[k] if model.get(k) is not None else model_config.get(f) for k, f in FACTS)
    return params_b, quantization


def engine_limits(model_config: Mapping[str, Any], env: Mapping[str, Any], hostvars: Mapping[str, Any]) -> Any:
    """Capacity-model limits for a declared engine envelope on its host."""
    params_b, quantization = model_facts(hostvars, model_config)
    return resolve_engine(
        model_config,
        env,
        float(hostvars.get("sglang_gpu_memory_gib", 0)),
        params_b=params_b,
        quantization=quantization,
    )


def divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, max(1, limit) + 1) if n % d == 0]


@dataclass(frozen=True)
class EngineContext:
    """One engine envelope on its host, with the figures its rules share."""

    host: str
    role: str
    env: Mapping[str, Any]
    hostvars: Mapping[str, Any]
    model_config: Mapping[str, Any]

    def var(self, key: str) -> str:
        return f"{self.host}: {declared_var(self.role, self.hostvars, key)}"

    def get(self, key: str) -> Any:
        return self.env.get(key)

    @cached_property
    def base_gpu_id(self) -> Any:
        """base_gpu_id as declared; otherwise the envelope derives it from gpu_ids, whose own rules name them."""
        own, common = self.hostvars.get(f"sglang_{self.role}") or {}, self.hostvars.get("sglang_engine_common") or {}
        return next((d[k] for d in (own, common) for k in d if k == "base_gpu_id"), None)

    @cached_property
    def gpu_ids(self) -> list[Any]:
        return list(self.env.get("gpu_ids") or [])

    @cached_property
    def tp(self) -> int:
        return int(self.env.get("tp_size") or 1)

    @cached_property
    def dp(self) -> int:
        return int(self.env.get("dp_size") or 1)

    @cached_property
    def heads(self) -> int:
        return int(self.model_config.get("num_attention_heads") or 0)

    @cached_property
    def experts(self) -> int:
        return int(self.model_config.get("n_routed_experts") or 0)

    @cached_property
    def per_host(self) -> Any:
        return self.hostvars.get("sglang_gpus_per_host")

    @cached_property
    def page(self) -> int:
        return int(self.env.get("page_size") or (256 if is_dsv4(self.model_config) else 1))

    @cached_property
    def gib(self) -> float:
        return float(self.hostvars.get("sglang_gpu_memory_gib") or 0)

    @cached_property
    def facts(self) -> tuple[Any, Any]:
        return model_facts(self.hostvars, self.model_config)

    @cached_property
    def weights(self) -> float | None:
        """Weight bytes per GPU (0 when the capacity model cannot tell), or None when a model fact or the GPU memory
        is missing (host_problems names those)."""
        params_b, quantization = self.facts
        if not (params_b and quantization and self.gib > 0):
            return None
        try:
            return float(weights_bytes_per_gpu(float(params_b), str(quantization), self.tp))
        except CapacityError:
            return 0

    @cached_property
    def limits(self) -> tuple[Any, str | None]:
        """(the capacity-model limits, None) or (None, the capacity model's refusal)."""
        try:
            return engine_limits(self.model_config, self.env, self.hostvars), None
        except CapacityError as exc:
            return None, str(exc)


def _choice(c: EngineContext) -> Iterator[Finding]:
    yield from choice_findings(c.role, c.env, c.var)


def _port(c: EngineContext) -> Iterator[Finding]:
    yield from port_findings(c.var("port"), c.get("port"), True, f"the {c.role} engine")
    yield from port_findings(c.var("disaggregation_bootstrap_port"), c.get("disaggregation_bootstrap_port"), False, "")


def _positive(c: EngineContext) -> Iterator[Finding]:
    for name in POSITIVE:
        yield from in_range(
            c.var(name), c.get(name), 1, None, "must be >= 1", f"declare a positive {name} or remove it"
        )


def _base_gpu_id_non_negative(c: EngineContext) -> Iterator[Finding]:
    yield from in_range(
        c.var("base_gpu_id"), c.base_gpu_id, 0, None, "base_gpu_id must be non-negative (SGLang)", "remove it"
    )


def _chunked_prefill_size_valid(c: EngineContext) -> Iterator[Finding]:
    chunk = c.get("chunked_prefill_size")
    if chunk == 0 or (chunk or 0) < -1:
        yield Finding(
            c.var("chunked_prefill_size"),
            chunk,
            "must be a positive chunk size, or -1 to disable chunked prefill",
            "declare e.g. 8192",
        )


def _not_overridden(c: EngineContext) -> Iterator[Finding]:
    yield from overridden_findings(c.host, c.role, c.hostvars)


def _watchdog_timeout_positive(c: EngineContext) -> Iterator[Finding]:
    yield from in_range(
        c.var("watchdog_timeout"), c.get("watchdog_timeout"), 1e-9, None, "must be > 0 seconds", "declare e.g. 600"
    )


def _served_model_name_no_colon(c: EngineContext) -> Iterator[Finding]:
    served = c.get("served_model_name")
    if served and ":" in str(served):
        yield Finding(
            f"{c.host}: {declared_var(c.role, c.hostvars, 'served_model_name')}",
            served,
            "served_model_name cannot contain a colon (':') character; SGLang reserves it for 'model:adapter'",
            f"declare {str(served).replace(':', '-')!r}",
        )


def _swa_full_tokens_ratio_range(c: EngineContext) -> Iterator[Finding]:
    ratio = c.get("swa_full_tokens_ratio")
    if ratio is not None and not 0 < float(ratio) <= 1:
        yield Finding(
            c.var("swa_full_tokens_ratio"),
            ratio,
            "--swa-full-tokens-ratio should be in range (0, 1.0] (SGLang)",
            "remove it (DeepSeek-V4 defaults to 0.1) or declare a ratio in (0, 1]",
        )


def _tp_divides(count: int, what: str, c: EngineContext) -> Iterator[Finding]:
    if count and count % c.tp:
        fits = [d for d in divisors(count, int(c.per_host or 8)) if not c.experts or c.experts % d == 0]
        yield Finding(
            c.var("tp_size"),
            c.tp,
            f"must divide the model's {count} {what} (models/.../config.json)",
            f"use a tp_size of {', '.join(map(str, fits))}",
        )


def _tp_divides_heads(c: EngineContext) -> Iterator[Finding]:
    yield from _tp_divides(c.heads, "attention heads", c)


def _tp_divides_experts(c: EngineContext) -> Iterator[Finding]:
    yield from _tp_divides(c.experts, "routed experts", c)


def _gpu_count_matches(c: EngineContext) -> Iterator[Finding]:
    tp, dp, gpu_ids = c.tp, c.dp, c.gpu_ids
    need = tp * dp
    if len(gpu_ids) != need:
        rule = f"tp_size={tp} needs exactly {tp} GPUs" if dp == 1 else f"tp_size={tp} x dp_size={dp} needs {need} GPUs"
        fix = f"list {need} GPU ids"
        if gpu_ids and len(gpu_ids) % dp == 0 and (not c.heads or c.heads % (len(gpu_ids) // dp) == 0):
            fix += f" or set tp_size to {len(gpu_ids) // dp}"
        yield Finding(c.var("gpu_ids"), gpu_ids, rule, fix)


def _gpu_ids_contiguous(c: EngineContext) -> Iterator[Finding]:
    gpu_ids = c.gpu_ids
    if gpu_ids and sorted(gpu_ids) != list(range(min(gpu_ids), min(gpu_ids) + len(gpu_ids))):
        yield Finding(
            c.var("gpu_ids"), gpu_ids, "SGLang uses base_gpu_id..base_gpu_id+tp_size-1", "declare contiguous GPU ids"
        )


def _base_gpu_id_matches(c: EngineContext) -> Iterator[Finding]:
    base, gpu_ids = c.base_gpu_id, c.gpu_ids
    if base is not None and gpu_ids and int(base) != min(gpu_ids):
        yield Finding(
            c.var("base_gpu_id"),
            base,
            f"SGLang starts at base_gpu_id, but gpu_ids={gpu_ids} start at {min(gpu_ids)}",
            "remove base_gpu_id (it is derived from gpu_ids) or make them agree",
        )


def _gpu_ids_exist(c: EngineContext) -> Iterator[Finding]:
    per_host, gpu_ids = c.per_host, c.gpu_ids
    if per_host is not None and int(per_host) >= 1 and any(g < 0 or g >= int(per_host) for g in gpu_ids):
        yield Finding(
            c.var("gpu_ids"), gpu_ids, f"the host has GPUs 0..{int(per_host) - 1}", "use GPU ids that exist on the host"
        )
    elif per_host is None and any(g < 0 for g in gpu_ids):
        yield Finding(c.var("gpu_ids"), gpu_ids, "GPU ids are >= 0", "use GPU ids that exist on the host")


def _mem_fraction_static_range(c: EngineContext) -> Iterator[Finding]:
    mfs = c.get("mem_fraction_static")
    if mfs is not None and not 0 < float(mfs) < 1:
        yield Finding(c.var("mem_fraction_static"), mfs, "must be in (0, 1)", "use e.g. 0.83")


def _max_queued_requests_unset(c: EngineContext) -> Iterator[Finding]:
    if c.get("max_queued_requests") is not None:
        yield Finding(
            c.var("max_queued_requests"),
            c.get("max_queued_requests"),
            "SGLang ignores --max-queued-requests in PD mode",
            "remove it and bound the queue with sglang_router.queue_size",
        )


def _chunk_within_max_prefill(c: EngineContext) -> Iterator[Finding]:
    chunk, max_prefill = c.get("chunked_prefill_size"), c.get("max_prefill_tokens")
    if chunk is not None and max_prefill is not None and int(chunk) > 0 and int(chunk) > int(max_prefill):
        yield Finding(
            c.var("chunked_prefill_size"),
            chunk,
            f"larger than max_prefill_tokens={max_prefill}, which caps every prefill batch",
            f"lower it to <= {max_prefill} or raise max_prefill_tokens",
        )


def _chunk_page_multiple(c: EngineContext) -> Iterator[Finding]:
    chunk, page = c.get("chunked_prefill_size"), c.page
    if chunk is not None and int(chunk) > 0 and c.role != "decode" and int(chunk) % page:
        yield Finding(
            c.var("chunked_prefill_size"),
            chunk,
            f"chunked_prefill_size must be divisible by page_size ({page}) (SGLang)",
            f"use a multiple of {page}, e.g. {max(page, int(chunk) // page * page)}",
        )


def _cuda_graph_max_bs_within_running(c: EngineContext) -> Iterator[Finding]:
    running, max_bs = c.get("max_running_requests"), c.get("cuda_graph_max_bs_decode")
    if max_bs is not None and running is not None and int(max_bs) > int(running):
        yield Finding(
            c.var("cuda_graph_max_bs_decode"),
            max_bs,
            f"above max_running_requests={running}: no decode batch is ever that large",
            f"lower it to <= {running}",
        )


def _cuda_graph_bs(phase: str, c: EngineContext) -> Iterator[Finding]:
    """One phase's capture sizes: listed, positive, captured, and (decode) within max_running_requests."""
    name = f"cuda_graph_bs_{phase}"
    sizes, max_bs, running = c.get(name), c.get(f"cuda_graph_max_bs_{phase}"), c.get("max_running_requests")
    if sizes is None:
        return
    if not sizes:
        yield Finding(
            c.var(name),
            sizes,
            f"renders a bare --cuda-graph-bs-{phase}, which SGLang's parser refuses (nargs {SGLANG[name].nargs!r})",
            "list at least one batch size or remove the key",
        )
    elif min(sizes) < 1:
        yield Finding(c.var(name), sizes, "batch sizes must be >= 1", "list positive batch sizes")
    elif max_bs is not None and max(sizes) > int(max_bs):
        yield Finding(
            c.var(name),
            sizes,
            f"sizes above cuda_graph_max_bs_{phase}={max_bs} are never captured",
            f"keep sizes <= {max_bs} or raise cuda_graph_max_bs_{phase}",
        )
    elif phase == "decode" and running is not None and max(sizes) > int(running):
        yield Finding(
            c.var(name),
            sizes,
            f"sizes above max_running_requests={running} are never used by a decode batch",
            f"keep sizes <= {running}",
        )


def _cuda_graph_bs_decode(c: EngineContext) -> Iterator[Finding]:
    yield from _cuda_graph_bs("decode", c)


def _cuda_graph_bs_prefill(c: EngineContext) -> Iterator[Finding]:
    yield from _cuda_graph_bs("prefill", c)


def _dsv4_page_size(c: EngineContext) -> Iterator[Finding]:
    if is_dsv4(c.model_config) and c.get("page_size") not in (None, 256):
        yield Finding(
            c.var("page_size"), c.get("page_size"), "SGLang forces 256 for DeepSeek-V4", "declare 256 or leave it unset"
        )


def _dsv4_fp4_indexer_off(c: EngineContext) -> Iterator[Finding]:
    if is_dsv4(c.model_config) and c.get("enable_deepseek_v4_fp4_indexer"):
        yield Finding(
            c.var("enable_deepseek_v4_fp4_indexer"),
            c.get("enable_deepseek_v4_fp4_indexer"),
            f"SGLang 0.5.23 refuses it at startup on H200 (SM90): '{FP4_INDEXER_REFUSAL}'",
            "remove it; bf16_index_k keeps long-context recall on H200",
        )


def _dsv4_kv_cache_dtype(c: EngineContext) -> Iterator[Finding]:
    if is_dsv4(c.model_config) and c.get("kv_cache_dtype") not in (None, "auto", "fp8_e4m3", "bfloat16"):
        yield Finding(
            c.var("kv_cache_dtype"),
            c.get("kv_cache_dtype"),
            "DeepSeek-V4 allows only fp8_e4m3 or bfloat16",
            "use fp8_e4m3",
        )


def _context_within_model(c: EngineContext) -> Iterator[Finding]:
    model_max, ctx = model_context_len(c.model_config), c.get("context_length")
    if ctx is not None and int(ctx) > model_max:
        yield Finding(
            c.var("context_length"), ctx, f"above the model's maximum {model_max}", f"lower it to <= {model_max}"
        )


def _max_total_tokens_fits_context(c: EngineContext) -> Iterator[Finding]:
    cap, ctx = c.get("max_total_tokens"), c.get("context_length")
    if cap is not None and ctx is not None and int(cap) < int(ctx):
        yield Finding(
            c.var("max_total_tokens"),
            cap,
            f"below one full-length request (context_length={ctx})",
            f"raise it to >= {ctx} or lower context_length",
        )


def _fraction_below_weights(c: EngineContext) -> bool:
    mfs, weights = c.get("mem_fraction_static"), c.weights
    return weights is not None and mfs is not None and c.gib * 2**30 * float(mfs) <= weights < c.gib * 2**30 * 0.9


def _fraction_holds_weights(c: EngineContext) -> Iterator[Finding]:
    if _fraction_below_weights(c):
        mfs, weights = c.get("mem_fraction_static"), c.weights or 0
        yield Finding(
            c.var("mem_fraction_static"),
            mfs,
            f"leaves {c.gib * float(mfs):.1f} GiB per GPU for weights and KV, and the weights alone take "
            f"{weights / 2**30:.1f} GiB at tp_size={c.tp}",
            f"raise it above {weights / (c.gib * 2**30):.2f} (the shared envelope uses 0.78 to 0.83)",
        )


def _gpu_holds_weights(c: EngineContext) -> Iterator[Finding]:
    weights = c.weights
    if weights is None or _fraction_below_weights(c):
        return
    if weights >= c.gib * 2**30 * float(c.get("mem_fraction_static") or 0.9):
        params_b, quantization = c.facts
        yield Finding(
            f"{c.host}: sglang_model.params_b",
            params_b,
            f"the weights alone take {weights / 2**30:.0f} GiB per GPU at tp_size={c.tp} ({quantization}), more "
            f"than sglang_gpu_memory_gib={c.gib:g} x mem_fraction_static allows",
            "check that params_b is in billions and quantization is right, or spread the model over more GPUs",
        )


def _capacity_model(c: EngineContext) -> Iterator[Finding]:
    refusal = c.limits[1] if c.gib > 0 else None
    if refusal is not None:
        where = f"{c.host}: the {c.role} engine's envelope (sglang_engine_common, sglang_{c.role})"
        yield Finding(where, NO_VALUE, *split_fix(refusal))


def _context_within_kv_pool(c: EngineContext) -> Iterator[Finding]:
    limits, ctx = c.limits[0] if c.gib > 0 else None, c.get("context_length")
    if limits is not None and ctx is not None and int(ctx) > limits.max_total_num_tokens:
        yield Finding(
            c.var("context_length"),
            ctx,
            f"above the KV pool this envelope gets ({limits.max_total_num_tokens} tokens)",
            "lower context_length or raise mem_fraction_static",
        )


_BS = ("cuda_graph_bs_{p}", "cuda_graph_max_bs_{p}")
ENGINE_RULES: tuple[Rule, ...] = (
    Rule(
        "engine.not_overridden",
        DECLARED,
        ("disaggregation_mode", "api_key"),
        "a declared key the deployment replaces never runs: disaggregation_mode is the inventory group's role, an "
        "api_key renders as ${SGLANG_API_KEY}, which the role fills from sglang_api_key",
        "remove the key (declare the API key as sglang_api_key; the inventory group sets the mode)",
        _not_overridden,
    ),
    Rule(
        "engine.choice",
        DECLARED,
        ("any key whose flag has choices",),
        "a value must be one of SGLang 0.5.23's choices for its flag",
        "use one of the parser's choices",
        _choice,
    ),
    Rule(
        "engine.port",
        DECLARED,
        ("port", "disaggregation_bootstrap_port"),
        "a port must be from 1 to 65535, and the engine must declare one (else it takes 30000)",
        "declare a free port from 1 to 65535",
        _port,
    ),
    Rule(
        "engine.positive",
        DECLARED,
        POSITIVE,
        "must be >= 1",
        "declare a positive value or remove it",
        _positive,
    ),
    Rule(
        "engine.base_gpu_id_non_negative",
        DECLARED,
        ("base_gpu_id",),
        "base_gpu_id must be non-negative (SGLang)",
        "remove it",
        _base_gpu_id_non_negative,
    ),
    Rule(
        "engine.chunked_prefill_size_valid",
        DECLARED,
        ("chunked_prefill_size",),
        "must be a positive chunk size, or -1 to disable chunked prefill",
        "declare e.g. 8192",
        _chunked_prefill_size_valid,
    ),
    Rule(
        "engine.watchdog_timeout_positive",
        DECLARED,
        ("watchdog_timeout",),
        "must be > 0 seconds",
        "declare e.g. 600",
        _watchdog_timeout_positive,
    ),
    Rule(
        "engine.served_model_name_no_colon",
        DECLARED,
        ("served_model_name",),
        "cannot contain a colon; SGLang reserves it for 'model:adapter'",
        "replace the colon, e.g. by '-'",
        _served_model_name_no_colon,
    ),
    Rule(
        "engine.swa_full_tokens_ratio_range",
        DECLARED,
        ("swa_full_tokens_ratio",),
        "must be in (0, 1] (SGLang)",
        "remove it (DeepSeek-V4 defaults to 0.1) or declare a ratio in (0, 1]",
        _swa_full_tokens_ratio_range,
    ),
    Rule(
        "engine.tp_divides_heads",
        LAYOUT,
        ("tp_size", "sglang_gpus_per_host", "config.json num_attention_heads"),
        "tp_size must divide the model's attention heads",
        "use a tp_size that divides the heads (and the routed experts)",
        _tp_divides_heads,
    ),
    Rule(
        "engine.tp_divides_experts",
        LAYOUT,
        ("tp_size", "sglang_gpus_per_host", "config.json n_routed_experts"),
        "tp_size must divide the model's routed experts",
        "use a tp_size that divides the routed experts (and the heads)",
        _tp_divides_experts,
    ),
    Rule(
        "engine.gpu_count_matches",
        LAYOUT,
        ("gpu_ids", "tp_size", "dp_size"),
        "tp_size x dp_size needs exactly that many GPU ids",
        "list tp_size x dp_size GPU ids, or set tp_size to what the GPU ids give",
        _gpu_count_matches,
    ),
    Rule(
        "engine.gpu_ids_contiguous",
        LAYOUT,
        ("gpu_ids",),
        "SGLang uses base_gpu_id..base_gpu_id+tp_size-1",
        "declare contiguous GPU ids",
        _gpu_ids_contiguous,
    ),
    Rule(
        "engine.base_gpu_id_matches",
        LAYOUT,
        ("base_gpu_id", "gpu_ids"),
        "SGLang starts at base_gpu_id, so it must be the first of gpu_ids",
        "remove base_gpu_id (it is derived from gpu_ids) or make them agree",
        _base_gpu_id_matches,
    ),
    Rule(
        "engine.gpu_ids_exist",
        LAYOUT,
        ("gpu_ids", "sglang_gpus_per_host"),
        "GPU ids are from 0 to sglang_gpus_per_host - 1",
        "use GPU ids that exist on the host",
        _gpu_ids_exist,
    ),
    Rule(
        "engine.mem_fraction_static_range",
        LAYOUT,
        ("mem_fraction_static",),
        "must be in (0, 1)",
        "use e.g. 0.83",
        _mem_fraction_static_range,
    ),
    Rule(
        "engine.max_queued_requests_unset",
        LAYOUT,
        ("max_queued_requests",),
        "SGLang ignores --max-queued-requests in PD mode",
        "remove it and bound the queue with sglang_router.queue_size",
        _max_queued_requests_unset,
    ),
    Rule(
        "engine.chunk_within_max_prefill",
        LAYOUT,
        ("chunked_prefill_size", "max_prefill_tokens"),
        "a chunk larger than max_prefill_tokens is capped by it in every prefill batch",
        "lower chunked_prefill_size to <= max_prefill_tokens or raise max_prefill_tokens",
        _chunk_within_max_prefill,
    ),
    Rule(
        "engine.chunk_page_multiple",
        LAYOUT,
        ("chunked_prefill_size", "page_size"),
        "chunked_prefill_size must be divisible by page_size (SGLang; prefill engines)",
        "use a multiple of page_size",
        _chunk_page_multiple,
    ),
    Rule(
        "engine.cuda_graph_max_bs_within_running",
        LAYOUT,
        ("cuda_graph_max_bs_decode", "max_running_requests"),
        "no decode batch is larger than max_running_requests",
        "lower cuda_graph_max_bs_decode to <= max_running_requests",
        _cuda_graph_max_bs_within_running,
    ),
    Rule(
        "engine.cuda_graph_bs_decode",
        LAYOUT,
        (*(k.format(p="decode") for k in _BS), "max_running_requests"),
        "capture sizes: at least one, each >= 1, none above cuda_graph_max_bs_decode or max_running_requests",
        "list positive sizes within both bounds, or remove the key",
        _cuda_graph_bs_decode,
    ),
    Rule(
        "engine.cuda_graph_bs_prefill",
        LAYOUT,
        tuple(k.format(p="prefill") for k in _BS),
        "capture sizes: at least one, each >= 1, none above cuda_graph_max_bs_prefill",
        "list positive sizes within the bound, or remove the key",
        _cuda_graph_bs_prefill,
    ),
    Rule(
        "engine.dsv4_page_size",
        LAYOUT,
        ("page_size",),
        "SGLang forces 256 for DeepSeek-V4",
        "declare 256 or leave it unset",
        _dsv4_page_size,
    ),
    Rule(
        "engine.dsv4_fp4_indexer_off",
        LAYOUT,
        ("enable_deepseek_v4_fp4_indexer",),
        "SGLang 0.5.23 refuses the DeepSeek-V4 fp4 indexer at startup on H200 (SM90)",
        "remove it; bf16_index_k keeps long-context recall on H200",
        _dsv4_fp4_indexer_off,
    ),
    Rule(
        "engine.dsv4_kv_cache_dtype",
        LAYOUT,
        ("kv_cache_dtype",),
        "DeepSeek-V4 allows only fp8_e4m3 or bfloat16",
        "use fp8_e4m3",
        _dsv4_kv_cache_dtype,
    ),
    Rule(
        "engine.context_within_model",
        LAYOUT,
        ("context_length", "config.json max_position_embeddings"),
        "context_length must not exceed the model's maximum",
        "lower it to the model's maximum or less",
        _context_within_model,
    ),
    Rule(
        "engine.max_total_tokens_fits_context",
        LAYOUT,
        ("max_total_tokens", "context_length"),
        "max_total_tokens must hold one full-length request",
        "raise it to >= context_length or lower context_length",
        _max_total_tokens_fits_context,
    ),
    Rule(
        "engine.fraction_holds_weights",
        WEIGHTS,
        ("mem_fraction_static", "tp_size", "sglang_gpu_memory_gib", "sglang_model"),
        "mem_fraction_static must leave room for the weights on each GPU",
        "raise it above the weights' share (the shared envelope uses 0.78 to 0.83)",
        _fraction_holds_weights,
    ),
    Rule(
        "engine.gpu_holds_weights",
        WEIGHTS,
        ("sglang_model", "tp_size", "sglang_gpu_memory_gib", "mem_fraction_static"),
        "the weights per GPU must fit in sglang_gpu_memory_gib x mem_fraction_static (0.9 unset)",
        "check that params_b is in billions and quantization is right, or spread the model over more GPUs",
        _gpu_holds_weights,
    ),
    Rule(
        "engine.capacity_model",
        CAPACITY,
        ("the whole envelope", "sglang_gpu_memory_gib", "sglang_model"),
        "the capacity model must be able to size the engine's memory",
        "as the capacity model names it",
        _capacity_model,
    ),
    Rule(
        "engine.context_within_kv_pool",
        CAPACITY,
        ("context_length", "the capacity model's KV pool"),
        "one full-length request must fit in the KV pool the envelope gets",
        "lower context_length or raise mem_fraction_static",
        _context_within_kv_pool,
    ),
)
