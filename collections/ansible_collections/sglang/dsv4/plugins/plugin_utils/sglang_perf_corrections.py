"""Corrections of AIConfigurator's step times where its data is thin, each a StepSource wrapping another, each cited:

- Fp4Experts: the MXFP4 expert layers of DeepSeek-V4-Flash are not measured on H200 (AIConfigurator 0.12.0 extrapolates
  them; 66-70 % of a prefill pass). SGLang's cookbook measures the single-call TTFT of the MXFP4 and the FP8
  checkpoint on the same harness (H200, tp 4, SGLang 0.5.15): 237 ms and 178 ms, a ratio of 1.33, where the
  estimator gives 2.27. The extrapolated part of every MXFP4 prefill pass is scaled by the one factor that makes the
  estimator's ratio the cookbook's at that cell (FP8 is fully measured). Decode is left as the estimator has it: the
  cookbook's TPOT runs EAGLE speculative decoding (a verify step of 4 tokens), not a plain decode step.
- LongContext: AIConfigurator's measured decode attention for DeepSeek-V4 stops at 64k of context (batch 8; 16k at
  batch 32); beyond it its own extrapolation dips (batch 8: 9.19 ms at 64k, 8.45 ms at 192k). A decode step beyond
  MEASURED_CONTEXT is the step at MEASURED_CONTEXT plus the growth of its last measured doubling, linear in the
  context (what decode attention reads grows with it) and never negative; the growth is attention time, so the bf16
  index-key term grows with it too.

default_corrections() stacks both over a source; sglang_perf_fleet.default_steps() uses it, and the simulator's step
table is built over it (make sim-steps). A corrected step keeps its origin (the data it comes from); describe() says
what was corrected, and the CLI prints it once, on top.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import (
    DecodeQuery,
    OneRoundSteps,
    PrefillQuery,
    StepSource,
    StepTime,
    ask,
)

MXFP4_MODEL = "deepseek-ai/DeepSeek-V4-Flash"
FP8_MODEL = "sgl-project/DeepSeek-V4-Flash-FP8"
COOKBOOK = (
    "SGLang's DeepSeek-V4 cookbook (docs_new/src/snippets/configs/deepseek-ai/deepseek-v4-benchmarks.jsx, H200 flash "
    "low-latency, SGLang 0.5.15): TTFT at concurrency 1 of 237 ms (fp4) and 178 ms (fp8)"
)
COOKBOOK_FP4_OVER_FP8 = 237.0 / 178.0
# the cookbook cell: bench_serving's random dataset with --random-input-len 8192 and --random-range-ratio 0 (its
# default) draws prompts uniformly from 1 to 8,192 tokens; 4,096 is their median. tp 4 as its recipe (--tp 4).
COOKBOOK_ISL = 4096
COOKBOOK_TP = 4
MEASURED_CONTEXT = 65536


class Fp4Experts(OneRoundSteps):
    """`base` with the extrapolated part of MXFP4 prefill passes scaled to the cookbook's fp4/fp8 ratio (module
    docstring); every other answer as `base` gives it."""

    def __init__(self, base: StepSource) -> None:
        self.base = base
        self.factor: float | None = None  # the scale of the extrapolated part, once asked

    def describe(self) -> str:
        factor = f" x{self.factor:.2f}" if self.factor is not None else ""
        return (
            f"{source_text(self.base)}; the MXFP4 experts' extrapolated prefill{factor}, to the fp4/fp8 TTFT ratio "
            f"{COOKBOOK_FP4_OVER_FP8:.2f} of {COOKBOOK}"
        )

    def both(
        self, prefills: Sequence[PrefillQuery], decodes: Sequence[DecodeQuery]
    ) -> tuple[list[StepTime], list[StepTime]]:
        if not any(q.model == MXFP4_MODEL for q in prefills):
            return ask(self.base, prefills, decodes)
        cells = [PrefillQuery(m, COOKBOOK_TP, COOKBOOK_TP, COOKBOOK_ISL, 0, 1) for m in (MXFP4_MODEL, FP8_MODEL)]
        p_times, d_times = ask(self.base, [*prefills, *cells], decodes)
        fp4, fp8 = p_times[-2:]
        self.factor = fp4_factor(fp4, fp8)
        out = [
            self._corrected(t, self.factor) if q.model == MXFP4_MODEL else t
            for q, t in zip(prefills, p_times, strict=False)
        ]
        return out, d_times

    @staticmethod
    def _corrected(step: StepTime, factor: float) -> StepTime:
        extra = step.extrapolated_ms * (factor - 1)
        return replace(step, ms=step.ms + extra, extrapolated_ms=step.extrapolated_ms + extra)


def fp4_factor(fp4: StepTime, fp8: StepTime) -> float:
    """The scale of `fp4`'s extrapolated part that makes fp4 / fp8 the cookbook's ratio (never below 0)."""
    if fp4.extrapolated_ms <= 0:
        return 1.0
    target = COOKBOOK_FP4_OVER_FP8 * fp8.ms
    return max(0.0, (target - (fp4.ms - fp4.extrapolated_ms)) / fp4.extrapolated_ms)


class LongContext(OneRoundSteps):
    """`base` with decode steps beyond MEASURED_CONTEXT extended linearly from its last measured doubling (module
    docstring); every other answer as `base` gives it."""

    def __init__(self, base: StepSource) -> None:
        self.base = base

    def describe(self) -> str:
        return f"{source_text(self.base)}; decode beyond {MEASURED_CONTEXT:,} tokens of context linear in the context"

    def both(
        self, prefills: Sequence[PrefillQuery], decodes: Sequence[DecodeQuery]
    ) -> tuple[list[StepTime], list[StepTime]]:
        asked: list[DecodeQuery] = []
        where: list[tuple[int, ...]] = []  # per query: its answer's index, or those of the half and the edge
        for q in decodes:
            if q.context > MEASURED_CONTEXT:
                where.append((len(asked), len(asked) + 1))
                asked += [replace(q, context=MEASURED_CONTEXT // 2), replace(q, context=MEASURED_CONTEXT)]
            else:
                where.append((len(asked),))
                asked.append(q)
        p_times, answers = ask(self.base, prefills, asked)
        out = [
            extend(answers[at[0]], answers[at[1]], q.context) if len(at) == 2 else answers[at[0]]
            for q, at in zip(decodes, where, strict=True)
        ]
        return p_times, out


def extend(half: StepTime, edge: StepTime, context: int) -> StepTime:
    """The step at `context` (> MEASURED_CONTEXT) from the steps at half of it and at it: the edge plus the last
    doubling's growth per token (at least 0) times the tokens beyond; the growth is attention, and extrapolated."""
    slope = max(0.0, edge.ms - half.ms) / (MEASURED_CONTEXT - MEASURED_CONTEXT // 2)
    extra = slope * (context - MEASURED_CONTEXT)
    return replace(
        edge,
        ms=edge.ms + extra,
        extrapolated_ms=edge.extrapolated_ms + extra,
        attention_ms=edge.attention_ms + extra,
    )


def source_text(steps: StepSource) -> str:
    """Where a step source's times come from, in words: its own describe(), else AIConfigurator's version."""
    own = getattr(steps, "describe", None)
    if callable(own):
        return str(own())
    version = getattr(steps, "version", None)
    return f"AIConfigurator {version()} (its measured H200 step data)" if callable(version) else type(steps).__name__


def default_corrections(base: StepSource) -> StepSource:
    """The corrections every prediction gets by default: the long-context rule over the MXFP4 expert correction."""
    return LongContext(Fp4Experts(base))
