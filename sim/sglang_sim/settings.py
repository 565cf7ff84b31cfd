"""Simulator settings read from the environment (everything that is not an SGLang flag)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from .profiles import Profile, parse
from .recall import bf16_index_k_switch


def _float(env: Mapping[str, str], name: str, default: float, minimum: float = 0.0) -> float:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number") from None
    if value < minimum:
        raise ValueError(f"{name}={raw!r} must be >= {minimum}")
    return value


@dataclass(frozen=True)
class SimSettings:
    """Environment variables the simulator reads (README.md lists them with their meaning)."""

    gpu_memory_gib: float = 141.0  # SGLANG_SIM_GPU_MEMORY_GIB: simulated memory per GPU (H200)
    weights_gib_per_gpu: float | None = None  # SGLANG_SIM_WEIGHTS_GIB_PER_GPU: overrides the weights estimate
    bf16_index_k: bool = False  # SGLANG_DSV4_BF16_INDEX_K=1/true: bf16 indexer keys (fewer KV tokens, recall)
    allow_longer_context: bool = False  # SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1, as in SGLang
    startup_delay_s: float = 0.0  # SGLANG_SIM_STARTUP_DELAY_S: /health answers 503 this long
    ttft_ms: float = 20.0  # SGLANG_SIM_TTFT_MS: admission to first token
    prefill_tokens_per_sec: float = 0.0  # SGLANG_SIM_PREFILL_TOKENS_PER_SEC: extra prefill time; 0 = none
    tokens_per_sec: float = 100.0  # SGLANG_SIM_TOKENS_PER_SEC: decode speed of each running request
    default_output_tokens: int = 128  # SGLANG_SIM_DEFAULT_OUTPUT_TOKENS: EOS point when no max is given
    step_ms: float = 20.0  # SGLANG_SIM_STEP_MS: shortest scheduler step (tokens per stream chunk)
    # SGLANG_SIM_STEP_TABLE: a step table's path, or `builtin` (the packaged one): prefill passes, decode steps and KV
    # transfer take the time model's times (timing.py) instead of the fixed pace above; unset = the fixed pace.
    step_table: str | None = None
    speed_factor: float = 1.0  # SGLANG_SIM_SPEED_FACTOR: step times are the model's / this (0.5 = twice as slow)
    pd_timeout_s: float = 30.0  # SGLANG_SIM_PD_TIMEOUT_S: decode gives up on its prefill after this
    room_ttl_s: float = 300.0  # SGLANG_SIM_ROOM_TTL_S: prefill keeps a finished room this long
    shutdown_timeout_s: float = 30.0  # SGLANG_SIM_SHUTDOWN_TIMEOUT_S: SIGTERM drain limit
    clip_max_new_tokens: int = 4096  # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION, as in SGLang
    # Fault injection (the deploy's failure tests): never turn ready; exit 1 this long after turning ready.
    never_ready: bool = False  # SGLANG_SIM_NEVER_READY=1: /health answers 503 forever
    crash_after_s: float = 0.0  # SGLANG_SIM_CRASH_AFTER_S: exit 1 this long after turning ready; 0 = never
    # SGLANG_SIM_PROFILE: the scripted load/fault profile at start (profiles.py); POST /sim/profile switches it.
    profile: Profile = field(default_factory=Profile)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SimSettings:
        e = os.environ if env is None else env
        weights = e.get("SGLANG_SIM_WEIGHTS_GIB_PER_GPU")
        return cls(
            gpu_memory_gib=_float(e, "SGLANG_SIM_GPU_MEMORY_GIB", cls.gpu_memory_gib, 0.001),
            weights_gib_per_gpu=_float(e, "SGLANG_SIM_WEIGHTS_GIB_PER_GPU", 0.0) if weights else None,
            bf16_index_k=bf16_index_k_switch(e),
            allow_longer_context=e.get("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "").lower() in ("1", "true"),
            startup_delay_s=_float(e, "SGLANG_SIM_STARTUP_DELAY_S", cls.startup_delay_s),
            ttft_ms=_float(e, "SGLANG_SIM_TTFT_MS", cls.ttft_ms),
            prefill_tokens_per_sec=_float(e, "SGLANG_SIM_PREFILL_TOKENS_PER_SEC", cls.prefill_tokens_per_sec),
            tokens_per_sec=_float(e, "SGLANG_SIM_TOKENS_PER_SEC", cls.tokens_per_sec, 0.001),
            default_output_tokens=int(_float(e, "SGLANG_SIM_DEFAULT_OUTPUT_TOKENS", cls.default_output_tokens)),
            step_ms=_float(e, "SGLANG_SIM_STEP_MS", cls.step_ms, 0.1),
            step_table=e.get("SGLANG_SIM_STEP_TABLE", "").strip() or None,
            speed_factor=_float(e, "SGLANG_SIM_SPEED_FACTOR", cls.speed_factor, 0.001),
            pd_timeout_s=_float(e, "SGLANG_SIM_PD_TIMEOUT_S", cls.pd_timeout_s, 0.01),
            room_ttl_s=_float(e, "SGLANG_SIM_ROOM_TTL_S", cls.room_ttl_s, 0.01),
            shutdown_timeout_s=_float(e, "SGLANG_SIM_SHUTDOWN_TIMEOUT_S", cls.shutdown_timeout_s),
            clip_max_new_tokens=int(_float(e, "SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION", cls.clip_max_new_tokens, 1)),
            never_ready=e.get("SGLANG_SIM_NEVER_READY") == "1",
            crash_after_s=_float(e, "SGLANG_SIM_CRASH_AFTER_S", cls.crash_after_s),
            profile=_profile(e),
        )


def _profile(env: Mapping[str, str]) -> Profile:
    raw = env.get("SGLANG_SIM_PROFILE", "").strip()
    if not raw:
        return Profile()
    try:
        return parse(raw)
    except ValueError as e:
        raise ValueError(f"SGLANG_SIM_PROFILE: {e}") from None
