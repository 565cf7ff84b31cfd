"""Startup resolution: flags + the model's config.json + simulated GPU memory -> the engine's limits.

All capacity arithmetic is delegated to ansible_collections.sglang.dsv4.plugins.module_utils.sglang_capacity (the
project's capacity model), so the simulator and the audit/validation code agree by construction.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_capacity import (
    CapacityError,
    EngineLimits,
    model_context_len,
    resolve_engine,
)

from .server_args_defaults import SERVER_ARGS_DEFAULTS
from .settings import SimSettings
from .timing import StepClock, step_clock

logger = logging.getLogger("sglang_sim")

DSV4_ARCH = "DeepseekV4ForCausalLM"

# Envelope keys handed to the capacity model (SGLang dest names).
ENVELOPE_KEYS = (
    "context_length",
    "max_total_tokens",
    "max_running_requests",
    "chunked_prefill_size",
    "max_prefill_tokens",
    "mem_fraction_static",
    "page_size",
    "kv_cache_dtype",
    "tp_size",
    "dp_size",
    "disaggregation_mode",
    "swa_full_tokens_ratio",
    "disable_radix_cache",
)


class StartupError(RuntimeError):
    """The engine cannot start with these arguments (the real one dies at startup too)."""


@dataclass(frozen=True)
class EngineConfig:
    """Everything fixed at startup: resolved args, model facts and limits."""

    args: dict[str, Any]  # every ServerArgs field, resolved where the simulator models it
    model_config: dict[str, Any]
    limits: EngineLimits
    launch_command: str
    settings: SimSettings
    unmodelled: dict[str, Any] = field(default_factory=dict)
    startup_time: float = field(default_factory=time.time)
    clock: StepClock | None = None  # the time model's step times (SGLANG_SIM_STEP_TABLE); None = the fixed pace

    @property
    def mode(self) -> str:
        return str(self.args["disaggregation_mode"])

    @property
    def served_model_name(self) -> str:
        return str(self.args["served_model_name"])

    @property
    def engine_type(self) -> str:
        return self.mode if self.mode in ("prefill", "decode") else "unified"

    @property
    def dp_size(self) -> int:
        return int(self.args["dp_size"] or 1)


def load_model_config(model_path: str) -> dict[str, Any]:
    path = Path(model_path) / "config.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise StartupError(f"Can't load the configuration of '{model_path}': {path} does not exist.") from None
    except (OSError, ValueError) as e:
        raise StartupError(f"Can't load the configuration of '{model_path}': {e}") from None
    if not isinstance(data, dict):
        raise StartupError(f"Can't load the configuration of '{model_path}': {path} is not a JSON object.")
    return data


def _check_context_length(args: dict[str, Any], model_config: dict[str, Any], settings: SimSettings) -> None:
    """SGLang refuses a --context-length above the model's derived one unless the override env var is set."""
    requested = args.get("context_length")
    derived = model_context_len(model_config)
    if requested is None or requested <= derived:
        return
    msg = (
        f"Warning: User-specified context_length ({requested}) is greater than the derived context_length "
        f"({derived}). This may lead to incorrect model outputs or CUDA errors. Note that the derived "
        "context_length may differ from max_position_embeddings in the model's config."
    )
    if not settings.allow_longer_context:
        raise StartupError(
            f"{msg} To allow overriding this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
        )
    logger.warning(msg)


def _decode_graph_batch_sizes(args: dict[str, Any], max_running: int) -> tuple[int, list[int]]:
    """Decode CUDA-graph batch sizes (schematic): the given list, else 1,2,4,8 then steps of 8 to max_bs."""
    if args.get("cuda_graph_bs_decode"):
        sizes = sorted(set(args["cuda_graph_bs_decode"]))
        return max(sizes), sizes
    max_bs = args.get("cuda_graph_max_bs_decode")
    if max_bs is None:
        max_bs = min(512 if int(args["tp_size"]) >= 4 else 256, max_running)
    sizes = [b for b in (1, 2, 4, 8) if b <= max_bs] + list(range(16, max_bs + 1, 8))
    if max_bs not in sizes:
        sizes.append(max_bs)
    return max_bs, sizes


def resolve_config(
    modelled: dict[str, Any], unmodelled: dict[str, Any], argv: list[str], settings: SimSettings
) -> EngineConfig:
    """Apply model overrides and the capacity model. Raises StartupError when the real engine would not start."""
    model_config = load_model_config(str(modelled["model_path"]))
    archs = model_config.get("architectures") or []
    arch = str(archs[0]) if archs else ""
    _check_context_length(modelled, model_config, settings)

    envelope = {k: modelled.get(k) for k in ENVELOPE_KEYS}
    envelope["bf16_index_k"] = settings.bf16_index_k
    try:
        limits = resolve_engine(model_config, envelope, settings.gpu_memory_gib, settings.weights_gib_per_gpu)
    except CapacityError as e:
        raise StartupError(str(e)) from None

    args: dict[str, Any] = dict(SERVER_ARGS_DEFAULTS)
    args.update({k: v for k, v in unmodelled.items() if k in args})
    args.update(modelled)
    args.update({k: v for k, v in limits.resolved.items() if k in args})
    args["served_model_name"] = modelled.get("served_model_name") or modelled["model_path"]
    args["tokenizer_path"] = unmodelled.get("tokenizer_path") or modelled["model_path"]
    if arch == DSV4_ARCH:
        args["attention_backend"] = "dsv4"
        if args.get("dsv4_attn_backend") in (None, "auto"):
            args["dsv4_attn_backend"] = "flashmla"
        logger.info(f"Use dsv4 attention backend for {arch}, setting page_size to {limits.page_size}.")
    max_bs, sizes = _decode_graph_batch_sizes(args, limits.max_running_requests)
    args["cuda_graph_max_bs_decode"] = max_bs
    args["cuda_graph_bs_decode"] = sizes
    args["cuda_graph_config"] = {
        "decode": {"backend": "full", "max_bs": max_bs, "bs": sizes},
        "prefill": {
            "backend": "disabled",
            "max_bs": args.get("cuda_graph_max_bs_prefill"),
            "bs": args.get("cuda_graph_bs_prefill"),
        },
    }
    clock = None
    if settings.step_table is not None:
        try:
            clock = step_clock(
                settings.step_table, settings.speed_factor, args, model_config, limits, settings.bf16_index_k
            )
        except ValueError as e:
            raise StartupError(str(e)) from None
        logger.info(f"Step times from the time model: {clock.source}")
    return EngineConfig(
        args=args,
        model_config=model_config,
        limits=limits,
        launch_command=" ".join(argv),
        settings=settings,
        unmodelled=unmodelled,
        clock=clock,
    )
