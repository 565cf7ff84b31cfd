"""JSON and text bodies of the information endpoints, in SGLang 0.5.23's shapes."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from . import SGLANG_VERSION
from .engine import Engine
from .metrics import Exposition
from .scheduler import Scheduler

ACCELERATOR = "NVIDIA H200 (simulated)"
LOAD_SECTIONS = frozenset({"core", "memory", "spec", "lora", "disagg", "queues", "all"})


def _graph_gb(engine: Engine, phase: str) -> float:
    return float(engine.limits.memory_usage.get("graph", {}).get(phase, 0.0))


def internal_state(engine: Engine, sched: Scheduler) -> dict[str, Any]:
    cfg, lim = engine.cfg, engine.limits
    return {
        **cfg.args,
        "world_size": int(cfg.args["tp_size"]) * int(cfg.args.get("pp_size") or 1),
        "startup_time": cfg.startup_time,
        "effective_max_running_requests_per_dp": lim.max_running_requests,
        "last_gen_throughput": round(sched.last_gen_throughput, 3),
        "memory_usage": dict(lim.memory_usage),
        "disaggregation_mode": cfg.mode,
        "decode_cuda_graph_bs": list(cfg.args["cuda_graph_bs_decode"]),
        "decode_cuda_graph_memory_gb": _graph_gb(engine, "decode"),
        # What the DeepSeek-V4 indexer stores, as the patched SGLang reports it (patches/sglang-0.5.23, 0001).
        "dsv4_index_k_dtype": index_k_dtype(engine),
    }


def index_k_dtype(engine: Engine) -> str:
    """ "fp4" with the fp4 indexer, else "bf16" when SGLANG_DSV4_BF16_INDEX_K is 1/true, else "fp8"."""
    if engine.cfg.args.get("enable_deepseek_v4_fp4_indexer"):
        return "fp4"
    return "bf16" if engine.settings.bf16_index_k else "fp8"


def server_info(engine: Engine) -> dict[str, Any]:
    cfg, lim = engine.cfg, engine.limits
    return {
        **cfg.args,
        "launch_command": cfg.launch_command,
        "status": "ready",
        "max_total_num_tokens": lim.max_total_num_tokens,
        "max_req_input_len": lim.max_req_input_len,
        "startup_time": cfg.startup_time,
        "hicache_object_layout": {
            "enabled": False,
            "backend": None,
            "page_size": lim.page_size,
            "hicache_object_layout": {"pools": []},
            "reason": "Hierarchical cache is disabled",
        },
        "kv_events": None,
        "internal_states": [internal_state(engine, s) for s in engine.schedulers],
        "version": SGLANG_VERSION,
        "frontend": "python",
    }


def model_info(engine: Engine) -> dict[str, Any]:
    cfg, mc = engine.cfg, engine.cfg.model_config
    return {
        "model_path": cfg.args["model_path"],
        "served_model_name": cfg.served_model_name,
        "tokenizer_path": cfg.args["tokenizer_path"],
        "is_generation": True,
        "preferred_sampling_params": cfg.args.get("preferred_sampling_params"),
        "weight_version": cfg.args.get("weight_version", "default"),
        "load_format": cfg.args.get("load_format", "auto"),
        "reasoning_parser": cfg.args.get("reasoning_parser"),
        "tool_call_parser": cfg.args.get("tool_call_parser"),
        "disaggregation_mode": cfg.mode,
        "has_image_understanding": False,
        "has_audio_understanding": False,
        "model_type": mc.get("model_type"),
        "architectures": mc.get("architectures"),
    }


def model_card(engine: Engine, name: str) -> dict[str, Any]:
    return {
        "id": name,
        "object": "model",
        "created": int(engine.cfg.startup_time),
        "owned_by": "sglang",
        "root": name,
        "parent": None,
        "max_model_len": engine.limits.context_len,
    }


def model_list(engine: Engine) -> dict[str, Any]:
    return {"object": "list", "data": [model_card(engine, engine.cfg.served_model_name)]}


def load_snapshot(engine: Engine, sched: Scheduler, include: set[str] | None) -> dict[str, Any]:
    """One dp rank's LoadSnapshot.to_dict(include)."""
    lim = engine.limits
    snap = sched.snapshot()
    used = snap["num_used_tokens"]
    transfer_tokens = sum(r.held for r in sched.active if r.phase.value == "transfer")
    busy = snap["num_running_reqs"] + snap["num_transfer_reqs"]
    prompt_tokens = engine.stats.streaming.prompt_tokens + engine.stats.non_streaming.prompt_tokens
    load: dict[str, Any] = {
        "timestamp": time.time(),
        "dp_rank": sched.dp_rank,
        "num_running_reqs": snap["num_running_reqs"],
        "num_waiting_reqs": snap["num_waiting_reqs"],
        "num_waiting_uncached_tokens": snap["num_waiting_uncached_tokens"],
        "num_used_tokens": used,
        "num_total_tokens": used,
        "num_active_tokens": used - transfer_tokens,
        "num_prealloc_ready_tokens": 0,
        "max_total_num_tokens": lim.max_total_num_tokens,
        "max_running_requests": lim.max_running_requests,
        "token_usage": round(sched.token_usage(), 4),
        "gen_throughput": round(sched.last_gen_throughput, 3),
        "cache_hit_rate": 0.0,
        "utilization": round(min(1.0, busy / lim.max_running_requests), 4),
        "total_prefill_uncached_tokens": prompt_tokens,
        "total_prefill_busy_us": 0,
        "decode_moments": None,
    }
    sections = LOAD_SECTIONS if include is None or "all" in include else include
    if "memory" in sections:
        load["memory"] = {
            "weight_gb": lim.memory_usage.get("weight", 0.0),
            "kv_cache_gb": lim.memory_usage.get("kvcache", 0.0),
            "graph_gb": _graph_gb(engine, "decode") + _graph_gb(engine, "prefill"),
            "token_capacity": lim.max_total_num_tokens,
        }
    if engine.cfg.mode != "null" and "disagg" in sections:
        prefill = engine.cfg.mode == "prefill"
        load["disaggregation"] = {
            "mode": engine.cfg.mode,
            "prefill_bootstrap_queue_reqs": snap["num_waiting_reqs"] if prefill else 0,
            "prefill_inflight_queue_reqs": 0,
            "decode_prealloc_queue_reqs": 0 if prefill else snap["num_waiting_reqs"],
            "decode_transfer_queue_reqs": 0 if prefill else snap["num_transfer_reqs"],
            "decode_retracted_queue_reqs": 0,
            "kv_transfer_speed_gb_s": 0.0,
            "kv_transfer_latency_ms": 0.0,
        }
    if "queues" in sections:
        load["queues"] = {
            "waiting": snap["num_waiting_reqs"],
            "grammar": 0,
            "paused": 0,
            "retracted": 0,
            "prealloc_ready": 0,
        }
    return load


def loads(engine: Engine, dp_rank: int | None, include: set[str] | None) -> dict[str, Any]:
    """The /v1/loads body. Raises ValueError for an unknown include section."""
    if include is not None and "all" not in include and not include <= LOAD_SECTIONS:
        raise ValueError(f"Invalid include sections: {include - LOAD_SECTIONS}. Valid options: {sorted(LOAD_SECTIONS)}")
    scheds = [s for s in engine.schedulers if dp_rank is None or s.dp_rank == dp_rank]
    return {
        "timestamp": datetime.now(UTC).isoformat(),
        "version": SGLANG_VERSION,
        "accelerator": ACCELERATOR,
        "num_accelerators": int(engine.cfg.args["tp_size"]),
        "loads": [load_snapshot(engine, s, include) for s in scheds],
    }


def loads_prometheus(body: dict[str, Any]) -> str:
    """/v1/loads?format=prometheus: every numeric field as a gauge per dp_rank."""
    prefixes = {"speculative": "spec", "disaggregation": "disagg"}
    samples: dict[str, list[tuple[int, float]]] = {}
    for load in body["loads"]:
        rank = load["dp_rank"]
        for key, value in load.items():
            if key == "dp_rank":
                continue
            if isinstance(value, dict):
                for sub, v in value.items():
                    if isinstance(v, (int, float)) and not isinstance(v, bool):
                        samples.setdefault(f"sglang_{prefixes.get(key, key)}_{sub}", []).append((rank, v))
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                samples.setdefault(f"sglang_{key}", []).append((rank, value))
    lines = []
    for name, rows in samples.items():
        lines.append(f"# TYPE {name} gauge")
        lines.extend(f'{name}{{dp_rank="{rank}"}} {value}' for rank, value in rows)
    return "\n".join(lines) + "\n"


def metrics_text(engine: Engine) -> str:
    """The /metrics page (only served with --enable-metrics)."""
    cfg, lim, st = engine.cfg, engine.limits, engine.stats
    base = {"model_name": cfg.served_model_name, "engine_type": cfg.engine_type}
    sched_labels = {**base, "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}

    def per_rank(value_of: Any) -> list[tuple[dict[str, str], float]]:
        if len(engine.schedulers) == 1:
            return [(sched_labels, float(value_of(engine.schedulers[0])))]
        return [({**sched_labels, "dp_rank": str(s.dp_rank)}, float(value_of(s))) for s in engine.schedulers]

    def const(value: float) -> list[tuple[dict[str, str], float]]:
        return per_rank(lambda _s: value)

    x = Exposition()
    x.family("sglang:num_running_reqs", "gauge", "The number of running requests.", per_rank(lambda s: s.num_running))
    x.family(
        "sglang:num_queue_reqs",
        "gauge",
        "The number of requests in the waiting queue.",
        per_rank(lambda s: s.num_waiting),
    )
    x.family(
        "sglang:gen_throughput",
        "gauge",
        "The generation throughput (token/s).",
        per_rank(lambda s: s.last_gen_throughput),
    )
    x.family("sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.", const(0.0))
    x.family("sglang:token_usage", "gauge", "The token usage.", per_rank(lambda s: s.token_usage()))
    x.family("sglang:num_used_tokens", "gauge", "The number of used tokens.", per_rank(lambda s: s.used))
    x.family(
        "sglang:kv_available_tokens",
        "gauge",
        "Number of free token slots in the KV cache pool.",
        per_rank(lambda s: s.capacity - s.used),
    )
    x.family(
        "sglang:kv_used_tokens",
        "gauge",
        "Number of actively used token slots in the KV cache pool.",
        per_rank(lambda s: s.used),
    )
    x.family(
        "sglang:utilization",
        "gauge",
        "The utilization.",
        per_rank(lambda s: min(1.0, len(s.active) / lim.max_running_requests)),
    )
    x.family(
        "sglang:num_retracted_reqs",
        "gauge",
        "The number of retracted requests.",
        per_rank(lambda s: sum(1 for r in s.waiting if r.retractions)),
    )
    if cfg.mode == "prefill":
        x.family(
            "sglang:num_prefill_bootstrap_queue_reqs",
            "gauge",
            "The number of requests in the prefill bootstrap queue.",
            per_rank(lambda s: s.num_waiting),
        )
    if cfg.mode == "decode":
        x.family(
            "sglang:num_decode_prealloc_queue_reqs",
            "gauge",
            "The number of requests in the decode prealloc queue.",
            per_rank(lambda s: s.num_waiting),
        )
        x.family(
            "sglang:num_decode_transfer_queue_reqs",
            "gauge",
            "The number of requests in the decode transfer queue.",
            per_rank(lambda s: s.num_transfer),
        )
        x.family(
            "sglang:num_bootstrap_failed_reqs",
            "counter",
            "The number of bootstrap failed requests.",
            [(sched_labels, float(st.bootstrap_failed))],
        )
    x.family(
        "sglang:max_total_num_tokens",
        "gauge",
        "Maximum total number of tokens in the KV cache pool.",
        const(lim.max_total_num_tokens),
    )
    if lim.token_capacity_swa is not None:
        x.family(
            "sglang:max_total_num_tokens_swa",
            "gauge",
            "Maximum total number of tokens in the SWA KV cache pool.",
            const(lim.token_capacity_swa),
        )
    x.family(
        "sglang:weight_memory_usage_gb",
        "gauge",
        "Memory used by model weights in GB.",
        const(lim.memory_usage.get("weight", 0.0)),
    )
    x.family(
        "sglang:kv_cache_memory_usage_gb",
        "gauge",
        "Memory used by the KV cache pools in GB.",
        const(lim.memory_usage.get("kvcache", 0.0)),
    )
    x.family(
        "sglang:graph_memory_usage_gb",
        "gauge",
        "Memory used by captured device graphs in GB.",
        [({**sched_labels, "phase": phase}, float(gb)) for phase, gb in lim.memory_usage.get("graph", {}).items()],
    )
    x.family("sglang:page_size", "gauge", "KV cache page size in tokens.", const(lim.page_size))
    x.family("sglang:num_pages", "gauge", "Number of KV cache pages.", const(lim.max_total_num_tokens // lim.page_size))
    x.family("sglang:context_len", "gauge", "Maximum context length.", const(lim.context_len))
    x.family(
        "sglang:startup_available_gpu_memory_gb",
        "gauge",
        "Available GPU memory in GB at startup.",
        const(lim.memory_usage.get("startup_available", 0.0)),
    )
    x.family(
        "sglang:num_retracted_requests",
        "counter",
        "Total number of retracted requests.",
        [(sched_labels, float(st.retracted))],
    )

    def split(value_of: Any) -> list[tuple[dict[str, str], float]]:
        return [({**base, "is_streaming": flag}, float(value_of(st.of(flag == "true")))) for flag in ("false", "true")]

    x.family("sglang:prompt_tokens", "counter", "Number of prefill tokens processed.", split(lambda r: r.prompt_tokens))
    x.family(
        "sglang:generation_tokens",
        "counter",
        "Number of generation tokens processed.",
        split(lambda r: r.generation_tokens),
    )
    x.family("sglang:num_requests", "counter", "Number of requests processed.", split(lambda r: r.requests))
    x.family("sglang:num_aborted_requests", "counter", "Number of requests aborted.", [(base, float(st.aborted))])
    x.histogram(
        "sglang:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        [({**base, "is_streaming": f}, st.of(f == "true").ttft) for f in ("false", "true")],
    )
    x.histogram("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", [(base, st.itl)])
    x.histogram(
        "sglang:e2e_request_latency_seconds",
        "Histogram of End-to-end request latency in seconds",
        [({**base, "is_streaming": f}, st.of(f == "true").e2e) for f in ("false", "true")],
    )
    x.histogram("sglang:queue_time_seconds", "Histogram of queueing time in seconds.", [(sched_labels, st.queue_time)])
    x.histogram("sglang:prompt_tokens_histogram", "Histogram of prompt token length.", [(base, st.prompt_len)])
    return x.text()
