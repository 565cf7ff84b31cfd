"""Step durations from the project's time model (SGLANG_SIM_STEP_TABLE): a prefill pass, a decode step and the KV
transfer take what sglang_perf says for this engine (prefill_pass_ms, decode_step_ms, transfer_ms over a step table),
divided by SGLANG_SIM_SPEED_FACTOR. The engine's facts (tp, chunk size, bf16 index keys, KV cache dtype, transfer
backend) come from its own resolved arguments through sglang_perf.fleet_shape, as the planner's do."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_capacity import EngineLimits
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import (
    FleetShape,
    StepSource,
    decode_step_ms,
    fleet_shape,
    prefill_pass_ms,
    transfer_ms,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_table import TableSteps

BUILTIN = "builtin"
TABLES = Path(__file__).with_name("step_tables")
UNCHUNKED = 1 << 30  # chunked prefill off: one pass per prompt
CACHE = 8192  # step times kept per kind (prompt lengths and contexts repeat)


class StepClock:
    """Seconds of each step of one engine: the time model's milliseconds / 1000 / speed factor."""

    def __init__(self, fleet: FleetShape, steps: StepSource, speed_factor: float, source: str) -> None:
        if speed_factor <= 0:
            raise ValueError(f"speed factor must be > 0, not {speed_factor}")
        self.fleet, self.steps, self.speed, self.source = fleet, steps, speed_factor, source
        self.prefill_s = functools.lru_cache(CACHE)(self._prefill_s)
        self.decode_s = functools.lru_cache(CACHE)(self._decode_s)

    @property
    def chunk(self) -> int:
        return self.fleet.chunked_prefill_size

    def _prefill_s(self, isl: int, batch: int, prefix: int = 0) -> float:
        """One prefill pass of `batch` prompts of `isl` tokens, `prefix` of them cached (a long prompt: all its
        chunks)."""
        return prefill_pass_ms(self.fleet, isl, batch, self.steps, prefix) / 1000.0 / self.speed

    def _decode_s(self, context: int, batch: int) -> float:
        """One decode step of `batch` sequences at (mean) context `context`."""
        return decode_step_ms(self.fleet, max(1, context), batch, self.steps) / 1000.0 / self.speed

    def transfer_s(self, tokens: int) -> float:
        """The KV of a prompt of `tokens` from the prefill to this decode engine."""
        return transfer_ms(self.fleet, tokens) / 1000.0 / self.speed


def table_path(setting: str, tp: int) -> Path:
    """The step table SGLANG_SIM_STEP_TABLE names: a path, or `builtin` (the packaged table for this tp)."""
    if setting != BUILTIN:
        return Path(setting)
    found = sorted(TABLES.glob(f"*-tp{tp}.json"))
    if len(found) != 1:
        known = ", ".join(p.name for p in sorted(TABLES.glob("*.json"))) or "none"
        raise ValueError(
            f"SGLANG_SIM_STEP_TABLE=builtin: no single packaged step table for tp {tp} (packaged: {known})"
        )
    return found[0]


def step_clock(
    setting: str,
    speed_factor: float,
    args: Mapping[str, Any],
    model_config: Mapping[str, Any],
    limits: EngineLimits,
    bf16_index_k: bool,
) -> StepClock:
    """The clock of an engine with resolved `args`; ValueError when the table is missing or for another tp."""
    tp = int(args.get("tp_size") or 1)
    path = table_path(setting, tp)
    try:
        steps = TableSteps.load(path)
    except (OSError, ValueError, KeyError) as e:
        raise ValueError(f"SGLANG_SIM_STEP_TABLE={setting}: cannot read {path}: {e}") from None
    grid = steps.table.grid
    if grid.tp != tp:
        raise ValueError(f"SGLANG_SIM_STEP_TABLE={setting}: {path.name} holds tp {grid.tp}; this engine runs tp {tp}")
    chunk = args.get("chunked_prefill_size")
    fleet = fleet_shape(
        model_config,
        grid.model,
        tp=tp,
        chunked_prefill_size=int(chunk) if chunk is not None and int(chunk) > 0 else UNCHUNKED,
        decode_max_running=limits.max_running_requests,
        bf16_index_k=bf16_index_k,
        kv_cache_dtype=str(args.get("kv_cache_dtype") or "fp8_e4m3"),
        transfer_backend=str(args.get("disaggregation_transfer_backend") or "mooncake"),
    )
    return StepClock(fleet, steps, speed_factor, f"{path.name} ({steps.table.origin}), speed factor {speed_factor:g}")
