"""TTFT, ITL and output speed of a PD fleet for a workload, composed on per-step times from a StepSource.

The step times (one prefill pass, one decode step) come from measured op-level data through AIConfigurator 0.12.0
(sglang_perf_aic.AicSteps) or, later, from rates measured on the live fleet. What the estimator lacks is our model,
named in every answer (sglang_perf_terms): chunked prefill of long prompts, prompts queueing on a prefill engine,
the KV transfer, the router's admission, the fork's bf16 index keys. Every time carries its error band: the
estimator's published error on the measured part, and "our model, no published error" on the rest.

    prediction = predict(fleet_shape(config, ...), Workload(isl=200_000, osl=2_000, concurrency=55), AicSteps())
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_capacity as cap
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_perf_terms as terms

MAPE_TTFT = 0.51
MAPE_ITL = 0.31
BAND_CITATION = (
    "AIConfigurator 0.12.0's published check against 759 measured single-node points: mean absolute percentage "
    "error 51 % on TTFT, 31 % on TPOT (ai-dynamo aisimulate, pull request 49)"
)
VERSION_NOTE = (
    "step data measured with SGLang {data}; this fleet runs SGLang 0.5.23, whose kernels may differ (not corrected)"
)
OUR_MODEL = "our model"
NVLINK, PCIE = "nvlink", "pcie"  # a host's GPU interconnect (INTERCONNECT): the TP all-reduces' path
INTERCONNECT = "sglang_interconnect"
MEAN_NOT_BOUND = "AIConfigurator's published mean error, not a bound"
# the closed loop's steady decode batch is found to within this many calls
CONVERGED = 1e-6

# AIConfigurator model ids by (models/<name>, quantization); database mode HYBRID everywhere (V4-Flash's MXFP4 experts
# are extrapolated on H200, everything else is measured).
AIC_MODELS = {
    ("deepseek-v4-flash", "mxfp4"): "deepseek-ai/DeepSeek-V4-Flash",
    ("deepseek-v4-flash", "fp8"): "sgl-project/DeepSeek-V4-Flash-FP8",
    ("deepseek-v3.2", "fp8"): "deepseek-ai/DeepSeek-V3.2",
}


@dataclass(frozen=True)
class PrefillQuery:
    """One prefill pass: `batch` sequences of `isl` tokens, `prefix` of them already cached."""

    model: str
    tp: int
    ep: int
    isl: int
    prefix: int
    batch: int
    interconnect: str = NVLINK


@dataclass(frozen=True)
class DecodeQuery:
    """One decode step of `batch` sequences at context `context`."""

    model: str
    tp: int
    ep: int
    context: int
    batch: int  # sequences per attention rank (the engine's batch over attn_dp)
    interconnect: str = NVLINK
    attn_dp: int = 1  # attention data-parallel ranks of the engine (SGLang's attn_dp_size)


@dataclass(frozen=True)
class StepTime:
    """A step's time and where it comes from: ms split by source, and the attention module (it holds the indexer)."""

    ms: float
    measured_ms: float
    extrapolated_ms: float
    sol_ms: float
    attention_ms: float
    origin: str  # "AIConfigurator 0.12.0, SGLang 0.5.14 data" or "live"
    data_version: str = ""
    interconnect_ms: float = 0.0  # the TP all-reduces moved to PCIe (our model on AIConfigurator's PCIe spec)

    def scaled(self, factor: float, note: str = "") -> StepTime:
        """This step `factor` times as long, every part alike; `note` appended to its origin."""
        return StepTime(
            self.ms * factor,
            self.measured_ms * factor,
            self.extrapolated_ms * factor,
            self.sol_ms * factor,
            self.attention_ms * factor,
            f"{self.origin}; {note}" if note else self.origin,
            self.data_version,
            self.interconnect_ms * factor,
        )


@dataclass(frozen=True)
class Band:
    """How far a predicted time may be off: `rel` of the part the step source priced; `why` in words; `bound` False
    where it is a published mean error (a typical miss, not a limit)."""

    rel: float
    why: str
    bound: bool = False


PUBLISHED_BANDS = {
    "prefill": Band(MAPE_TTFT, f"{MEAN_NOT_BOUND} ({MAPE_TTFT:.0%} on TTFT)"),
    "decode": Band(MAPE_ITL, f"{MEAN_NOT_BOUND} ({MAPE_ITL:.0%} on TPOT)"),
}


class StepSource(Protocol):
    """Per-step times. AicSteps asks AIConfigurator; LiveSteps answers from measured rates; the wrappers of
    sglang_perf_corrections and sglang_perf_calibration correct another source's answers."""

    def prefill(self, queries: Sequence[PrefillQuery]) -> list[StepTime]: ...

    def decode(self, queries: Sequence[DecodeQuery]) -> list[StepTime]: ...


@runtime_checkable
class BandedStepSource(Protocol):
    """A StepSource that knows its own error at a step (a calibrated one: from its points' residuals)."""

    def band(self, stage: str, context: int, batch: float) -> Band: ...


def band_of(steps: StepSource, stage: str, context: int, batch: float) -> Band:
    """`steps`' own band for a `stage` step ("prefill" or "decode") at `context` and `batch`, else the published one."""
    if isinstance(steps, BandedStepSource):
        return steps.band(stage, context, batch)
    return PUBLISHED_BANDS[stage]


@runtime_checkable
class BatchedStepSource(Protocol):
    """A StepSource that answers prefill and decode queries in one round (one estimator process)."""

    def both(
        self, prefills: Sequence[PrefillQuery], decodes: Sequence[DecodeQuery]
    ) -> tuple[list[StepTime], list[StepTime]]: ...


def ask(
    steps: StepSource, prefills: Sequence[PrefillQuery], decodes: Sequence[DecodeQuery]
) -> tuple[list[StepTime], list[StepTime]]:
    """`steps`' answers to prefill and decode queries: in one round where the source can (BatchedStepSource)."""
    if isinstance(steps, BatchedStepSource):
        return steps.both(prefills, decodes)
    return steps.prefill(prefills), steps.decode(decodes)


class OneRoundSteps:
    """Base of the step sources whose answers come from one `both` round: prefill and decode alone are that round
    with the other side empty."""

    def both(
        self, prefills: Sequence[PrefillQuery], decodes: Sequence[DecodeQuery]
    ) -> tuple[list[StepTime], list[StepTime]]:
        raise NotImplementedError

    def prefill(self, queries: Sequence[PrefillQuery]) -> list[StepTime]:
        return self.both(queries, [])[0]

    def decode(self, queries: Sequence[DecodeQuery]) -> list[StepTime]:
        return self.both([], queries)[1]


@dataclass(frozen=True)
class FleetShape:
    """What the time model needs of a PD fleet. Per engine: tp, ep, running limit. Per fleet: engine counts, router.
    kv_bytes_per_token is per GPU (sglang_capacity.kv_cost); index_share is the index keys' share of the bytes
    a token adds to what attention reads at long context; key_ratio the bf16/fp8 index-key width (1 = fp8 keys)."""

    model: str
    prefill_engines: int = 1
    decode_engines: int = 1
    prefill_tp: int = 4
    decode_tp: int = 4
    prefill_ep: int = 4
    decode_ep: int = 4
    prefill_interconnect: str = NVLINK
    decode_interconnect: str = NVLINK
    decode_attn_dp: int = 1  # attention data-parallel ranks of a decode engine (SGLang's attn_dp_size)
    chunked_prefill_size: int = 8192
    decode_max_running: int = 64
    kv_bytes_per_token: float = 0.0
    transfer_bytes_per_s: float = math.inf
    transfer_backend: str = "mooncake"
    index_share: float = 0.0
    key_ratio: float = 1.0
    router_max_concurrent: int | None = None
    router_queue_size: int | None = None
    router_queue_timeout_s: float | None = None


@dataclass(frozen=True)
class Workload:
    """Calls of isl input and osl output tokens: a closed loop of `concurrency` calls, or Poisson arrivals."""

    isl: int
    osl: int
    concurrency: int | None = None
    rate_per_s: float | None = None

    def __post_init__(self) -> None:
        if (self.concurrency is None) == (self.rate_per_s is None):
            raise ValueError("a workload is either concurrency=N (closed loop) or rate_per_s=R (arrivals), not both")


@dataclass(frozen=True)
class Figure:
    """A predicted time (ms) with its band and source. `estimated_ms` is the part from the step source (banded by
    its published error); the rest is our model and has no published error."""

    ms: float
    estimated_ms: float
    mape: float  # the band's relative width over estimated_ms (Band.rel)
    source: str
    bound: bool = False  # False: the band is a published mean error, not a bound (Band.bound)

    @property
    def low(self) -> float:
        return self.ms - self.mape * self.estimated_ms

    @property
    def high(self) -> float:
        return self.ms + self.mape * self.estimated_ms

    def text(self, unit: str = "s") -> str:
        if math.isinf(self.ms):
            return "unbounded (the stage is over capacity)"
        scale = 1000.0 if unit == "s" else 1.0
        kind = "" if self.bound else ", mean error"
        return f"{self.ms / scale:,.2f} {unit} ({self.low / scale:,.2f}-{self.high / scale:,.2f}{kind}; {self.source})"


@dataclass(frozen=True)
class Term:
    name: str
    ms: float
    source: str


@dataclass
class Prediction:
    ttft_p50: Figure
    ttft_p90: Figure
    itl_p50: Figure
    itl_p90: Figure
    itl_full: Figure  # every admitted call decoding at once (the running limit), late in the output
    ttft_steady: Figure
    binding: str
    decode_batch: float
    calls_per_s: float
    terms: list[Term] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    rejected: int = 0
    uncalibrated: Prediction | None = None  # the same from the uncalibrated step source, where this one is calibrated

    @property
    def tokens_per_s_per_call(self) -> float:
        return 1000.0 / self.itl_p50.ms if self.itl_p50.ms > 0 else math.inf


def aic_model(name: str, quantization: str) -> str:
    """The AIConfigurator model id for models/<name> at `quantization`."""
    try:
        return AIC_MODELS[(name, quantization)]
    except KeyError:
        raise ValueError(f"no AIConfigurator model for {name} ({quantization}); known: {sorted(AIC_MODELS)}") from None


def index_facts(config: Mapping[str, Any], bf16_index_k: bool) -> tuple[float, float]:
    """(index_share, key_ratio) from the capacity model's own per-token bytes: the index keys a token adds over the
    index keys plus the c128 latents it adds (the two reads that grow with the context at decode), and the bf16/fp8
    key width. DeepSeek-V3.2 and fp8 keys: key_ratio 1 (no adjustment)."""
    if not cap.is_dsv4(config):
        return 0.0, 1.0
    cost = cap.kv_cost(config, "fp8_e4m3", False)
    fp8_key = cap.index_k_bytes(config, False)
    index = cost.detail["c4_layers"] * fp8_key / 4
    share = index / (index + cost.detail["c128"])
    return share, (cap.index_k_bytes(config, True) / fp8_key if bf16_index_k else 1.0)


def fleet_shape(
    config: Mapping[str, Any],
    model: str,
    *,
    prefill_engines: int = 1,
    decode_engines: int = 1,
    tp: int = 4,
    decode_tp: int | None = None,
    chunked_prefill_size: int = 8192,
    decode_max_running: int = 64,
    bf16_index_k: bool = True,
    kv_cache_dtype: str = "fp8_e4m3",
    transfer_backend: str = "mooncake",
    transfer_bytes_per_s: float | None = None,
    router_max_concurrent: int | None = None,
    router_queue_size: int | None = None,
    router_queue_timeout_s: float | None = None,
    prefill_interconnect: str = NVLINK,
    decode_interconnect: str = NVLINK,
    decode_attn_dp: int = 1,
) -> FleetShape:
    """A FleetShape with the KV facts taken from sglang_capacity (bytes per token per GPU, index-key widths)."""
    share, ratio = index_facts(config, bf16_index_k)
    dtp = decode_tp or tp
    bandwidth = transfer_bytes_per_s or terms.transfer_bytes_per_s(transfer_backend)
    return FleetShape(
        model=model,
        prefill_engines=prefill_engines,
        decode_engines=decode_engines,
        prefill_tp=tp,
        decode_tp=dtp,
        prefill_ep=tp,
        decode_ep=dtp,
        chunked_prefill_size=chunked_prefill_size,
        decode_max_running=decode_max_running,
        kv_bytes_per_token=cap.kv_cost(config, kv_cache_dtype, bf16_index_k, tp).per_token,
        transfer_bytes_per_s=bandwidth,
        transfer_backend=transfer_backend,
        index_share=share,
        key_ratio=ratio,
        router_max_concurrent=router_max_concurrent,
        router_queue_size=router_queue_size,
        router_queue_timeout_s=router_queue_timeout_s,
        prefill_interconnect=prefill_interconnect,
        decode_interconnect=decode_interconnect,
        decode_attn_dp=decode_attn_dp,
    )


# ---------------------------------------------------------------- step times (shared with the simulator)


@dataclass(frozen=True)
class PassTime:
    """One prefill pass: the step source's part (estimated_ms) and the bf16 index-key term (ours_ms), with the
    step times it was composed of."""

    estimated_ms: float
    ours_ms: float
    steps: list[StepTime]
    chunks: int

    @property
    def ms(self) -> float:
        return self.estimated_ms + self.ours_ms


def _bf16(fleet: FleetShape) -> bool:
    return fleet.key_ratio != 1.0


def _extra(fleet: FleetShape, step: StepTime, ref: StepTime) -> float:
    return terms.bf16_index_extra_ms(step.attention_ms, ref.attention_ms, fleet.index_share, fleet.key_ratio)


def prefill_pass(fleet: FleetShape, isl: int, batch: int, steps: StepSource, prefix: int = 0) -> PassTime:
    """One prefill pass of `batch` prompts of `isl` tokens on a prefill engine of `fleet` (one round of queries),
    the first `prefix` of them already in the prefix cache (only isl - prefix are computed).
    A prompt whose computed part is longer than the chunk is its chunks one after another (from `prefix` to `isl`),
    each on the prefix already cached (a few chunk positions priced, the rest interpolated: sglang_perf_terms);
    `batch` such prompts take `batch` times that.
    With bf16 index keys each pass adds the index-key term over the same pass without prefix."""
    if isl <= 0 or batch <= 0:
        raise ValueError(f"a prefill pass needs isl > 0 and batch > 0 (isl={isl}, batch={batch})")
    if not 0 <= prefix < isl:
        raise ValueError(f"a prefill pass computes at least one token: 0 <= prefix < isl (prefix={prefix}, isl={isl})")
    m, tp, ep, chunk = fleet.model, fleet.prefill_tp, fleet.prefill_ep, fleet.chunked_prefill_size
    link = fleet.prefill_interconnect
    if isl - prefix <= chunk:
        queries = [PrefillQuery(m, tp, ep, isl, prefix, batch, link)]
        refs = [PrefillQuery(m, tp, ep, isl - prefix, 0, batch, link)] if prefix else queries
        picks, chunks, repeat = [0], 1, 1
    else:
        spans = [(prefix + start, prefix + end) for start, end in terms.chunk_spans(isl - prefix, chunk)]
        picks, chunks, repeat = terms.sampled_chunks(len(spans)), len(spans), batch
        queries = [PrefillQuery(m, tp, ep, spans[i][1], spans[i][0], 1, link) for i in picks]
        refs = [PrefillQuery(m, tp, ep, spans[i][1] - spans[i][0], 0, 1, link) for i in picks]
    bf16 = _bf16(fleet)
    answers = steps.prefill(queries + (refs if bf16 else []))
    times, ref_times = answers[: len(queries)], answers[len(queries) :]
    extra = [_extra(fleet, s, r) for s, r in zip(times, ref_times, strict=True)] if bf16 else [0.0] * len(times)
    if chunks == 1:
        estimated, ours = times[0].ms, extra[0]
    else:
        estimated = terms.interpolate_chunks(chunks, {i: s.ms for i, s in zip(picks, times, strict=True)})
        ours = terms.interpolate_chunks(chunks, dict(zip(picks, extra, strict=True)))
    if repeat != 1:
        estimated, ours = estimated * repeat, ours * repeat
    return PassTime(estimated, ours, times, chunks)


def prefill_pass_ms(fleet: FleetShape, isl: int, batch: int, steps: StepSource, prefix: int = 0) -> float:
    """Milliseconds of one prefill pass of `batch` prompts of `isl` tokens, `prefix` of them cached (prefill_pass:
    chunks, bf16 index keys)."""
    return prefill_pass(fleet, isl, batch, steps, prefix).ms


def decode_steps(
    fleet: FleetShape, points: Sequence[tuple[int, int]], steps: StepSource
) -> list[tuple[StepTime, float]]:
    """Decode steps of a decode engine of `fleet` at (context, batch) points, in one round of queries: each step's
    time from the source and its bf16 index-key term (ms; the same batch at one page of context is the reference)."""
    m, tp, ep, link, adp = (
        fleet.model,
        fleet.decode_tp,
        fleet.decode_ep,
        fleet.decode_interconnect,
        fleet.decode_attn_dp,
    )
    queries = [DecodeQuery(m, tp, ep, context, math.ceil(batch / adp), link, adp) for context, batch in points]
    refs = [DecodeQuery(m, tp, ep, cap.DSV4_PAGE_SIZE, math.ceil(batch / adp), link, adp) for _c, batch in points]
    bf16 = _bf16(fleet)
    answers = steps.decode(queries + (refs if bf16 else []))
    times, ref_times = answers[: len(queries)], answers[len(queries) :]
    if not bf16:
        return [(s, 0.0) for s in times]
    return [(s, _extra(fleet, s, r)) for s, r in zip(times, ref_times, strict=True)]


def decode_step_ms(fleet: FleetShape, context: int, batch: int, steps: StepSource) -> float:
    """Milliseconds of one decode step of `batch` sequences at context `context` (bf16 index keys included)."""
    ((step, extra),) = decode_steps(fleet, [(context, batch)], steps)
    return step.ms + extra


def transfer_ms(fleet: FleetShape, tokens: int) -> float:
    """Milliseconds to move the KV of a prompt of `tokens` from a prefill to a decode engine of `fleet`."""
    return terms.transfer_ms(tokens, fleet.kv_bytes_per_token, fleet.transfer_bytes_per_s)


# ---------------------------------------------------------------- composition


def _source(steps: Sequence[StepTime]) -> tuple[str, str]:
    """A short source string for step times: their origin and the measured / extrapolated shares."""
    total = sum(s.ms for s in steps) or 1.0
    measured = sum(s.measured_ms for s in steps) / total
    sol = sum(s.sol_ms for s in steps) / total
    link = sum(s.interconnect_ms for s in steps) / total
    parts = [f"{measured:.0%} measured"]
    if 1 - measured - sol - link > 0.005:
        parts.append(f"{1 - measured - sol - link:.0%} extrapolated")
    if sol > 0.005:
        parts.append(f"{sol:.0%} SOL")
    if link > 0.005:
        parts.append(f"{link:.0%} PCIe all-reduce ({OUR_MODEL})")
    return steps[0].origin, ", ".join(parts)


def predict(fleet: FleetShape, workload: Workload, steps: StepSource) -> Prediction:
    """TTFT p50/p90, ITL p50/p90 and the binding stage of `workload` on `fleet`, from `steps`' per-step times."""
    isl, osl = workload.isl, workload.osl
    if workload.concurrency is not None:
        admitted = min(workload.concurrency, fleet.router_max_concurrent or workload.concurrency)
    else:
        admitted = fleet.decode_max_running * fleet.decode_engines
    per_engine_max = max(1, min(math.ceil(admitted / fleet.decode_engines), fleet.decode_max_running))
    waiting = math.ceil(admitted / fleet.prefill_engines)
    per_pass = max(1, min(fleet.chunked_prefill_size // isl, waiting)) if isl <= fleet.chunked_prefill_size else 1

    # decode: a ladder of batch sizes at mid-output context (p50), the full batch late in the output (p90);
    # each with the bf16 index-key term over the same batch at one page of context.
    ctx50, ctx90 = isl + osl // 2, isl + (9 * osl) // 10
    ladder = terms.batch_ladder(per_engine_max)
    bf16 = _bf16(fleet)
    one_pass = prefill_pass(fleet, isl, per_pass, steps)
    decoded = decode_steps(fleet, [(ctx50, b) for b in ladder] + [(ctx90, per_engine_max)], steps)
    p_steps = one_pass.steps
    d_steps = [s for s, _e in decoded]
    d_extra = [e for _s, e in decoded]

    # one prompt's prefill on one engine (chunks summed), and its measured part
    pass_aic, pass_ours = one_pass.estimated_ms, one_pass.ours_ms
    pass_ms = pass_aic + pass_ours
    prefill_share = pass_aic / pass_ms if pass_ms else 1.0
    xfer = transfer_ms(fleet, isl)

    step50 = {b: s.ms + e for b, s, e in zip(ladder, d_steps, d_extra, strict=False)}
    step50_aic = {b: s.ms for b, s in zip(ladder, d_steps, strict=False)}
    step90, step90_aic = d_steps[-1].ms + d_extra[-1], d_steps[-1].ms

    # closed-loop steady state: throughput X (calls/ms) bounded by each stage; decode batch by Little's law, but at
    # least the calls one prefill pass hands to a decode engine together (a closed loop's calls stay in those groups,
    # and a call decodes beside its group even when the engine idles between groups); our model
    cap_prefill = fleet.prefill_engines * per_pass / pass_ms
    cap_transfer = fleet.prefill_engines / xfer if xfer > 0 else math.inf
    full_step = terms.interpolate_batch(step50, per_engine_max)
    cap_decode = fleet.decode_engines * per_engine_max / (osl * full_step)
    batch = float(per_engine_max)
    rate = workload.rate_per_s / 1000.0 if workload.rate_per_s is not None else None
    group = max(1.0, per_pass / fleet.decode_engines) if rate is None else 1.0
    throughput = 0.0
    for _round in range(60):
        step = terms.interpolate_batch(step50, batch)
        demand = rate if rate is not None else admitted / (pass_ms + xfer + osl * step)
        throughput = min(demand, cap_prefill, cap_transfer, cap_decode)
        new_batch = min(float(per_engine_max), max(group, throughput * osl * step / fleet.decode_engines))
        if abs(new_batch - batch) < CONVERGED:
            break
        batch = (batch + new_batch) / 2
    step = terms.interpolate_batch(step50, batch)
    step_aic = terms.interpolate_batch(step50_aic, batch)
    # p90 batch, at 90 % of the output (context growth from the full-batch pair); our model. Arrivals at a rate: the
    # calls in decode taken Poisson around the steady batch. A closed loop: the groups one pass hands over arrive
    # every pass_ms / prefill engines, and as many of them decode at once as a call's decode spans such intervals.
    if rate is not None:
        batch90 = min(float(per_engine_max), math.ceil(batch + 1.2816 * math.sqrt(batch)))
    else:
        overlap = math.ceil(osl * step * fleet.prefill_engines / pass_ms - 1e-9) if pass_ms > 0 else per_engine_max
        # the steady batch is known to CONVERGED: a batch within it of a whole number is that number
        whole = math.ceil(batch - CONVERGED)
        batch90 = min(float(per_engine_max), max(whole, math.ceil(group * max(1, overlap) - 1e-9)))
    growth = step90 / terms.interpolate_batch(step50, per_engine_max)
    itl90 = terms.interpolate_batch(step50, batch90) * growth
    itl90_aic = terms.interpolate_batch(step50_aic, batch90) * growth
    stages = {"prefill engine": cap_prefill, "transfer": cap_transfer, "decode engine": cap_decode}
    demand = rate if rate is not None else admitted / (pass_ms + xfer + osl * step)
    binding = min(stages, key=lambda k: stages[k]) if min(stages.values()) <= demand * (1 + 1e-9) else "none"

    # the bands: the step source's own (calibrated: over everything it scales, the bf16 index-key term included),
    # else AIConfigurator's published mean error over its own part
    p_band = band_of(steps, "prefill", isl, per_pass)
    d_band = band_of(steps, "decode", ctx50, batch)
    notes = [p_band.why, d_band.why] if p_band.bound or d_band.bound else [BAND_CITATION]
    notes.append(VERSION_NOTE.format(data=p_steps[0].data_version or "?"))
    rejected = 0
    router_wait = 0.0
    if workload.concurrency is not None and workload.concurrency > admitted:
        binding = "router admission" if binding == "none" else binding
        queued = workload.concurrency - admitted
        if fleet.router_queue_size is not None and queued > fleet.router_queue_size:
            rejected = queued - fleet.router_queue_size
            notes.append(f"{rejected} of {workload.concurrency} calls find the router queue full (HTTP 429)")
        router_wait = (queued - rejected) / throughput
        if fleet.router_queue_timeout_s is not None and router_wait > fleet.router_queue_timeout_s * 1000:
            notes.append(
                f"the router queue wait ({router_wait / 1000:,.0f} s) exceeds queue_timeout_secs "
                f"({fleet.router_queue_timeout_s:g}): queued calls time out"
            )

    # TTFT: steady state and, for a closed loop, the burst of all calls arriving at once (FIFO order statistics)
    p_origin, p_mix = _source(p_steps)
    d_origin, d_mix = _source(d_steps)
    ttft_src = f"{p_origin} ({p_mix}); {OUR_MODEL}: " + _ttft_ours(one_pass.chunks, bf16, xfer, admitted, fleet)
    if rate is not None:
        service = pass_ms / per_pass
        per_engine_rate = rate / fleet.prefill_engines
        rho = per_engine_rate * service
        mean_wait = rho * service / (2 * (1 - rho)) if rho < 1 else math.inf
        t50 = pass_ms + xfer + terms.md1_wait_quantile(per_engine_rate, service, 0.5)
        t90 = pass_ms + xfer + terms.md1_wait_quantile(per_engine_rate, service, 0.9)
        steady = pass_ms + xfer + mean_wait
    else:
        calls = workload.concurrency or admitted
        finish = terms.fifo_finish_times(admitted, fleet.prefill_engines, per_pass, pass_ms)
        burst = [f + xfer for f in finish]
        # calls queued at the router enter as the first ones finish, and queue behind the prefill engines' backlog
        done = sorted(burst)
        free = sorted(finish)[-fleet.prefill_engines :]
        timeout = fleet.router_queue_timeout_s * 1000 if fleet.router_queue_timeout_s is not None else math.inf
        timed_out = 0
        for i in range(calls - admitted - rejected):
            released = done[i % len(done)] + osl * step  # a slot frees when an earlier call ends
            if released > timeout:  # smg answers 408 to a call that waited queue_timeout_secs in its queue
                timed_out += 1
                continue
            engine = free.index(min(free))
            free[engine] = max(released, free[engine]) + pass_ms
            burst.append(free[engine] + xfer)
        if timed_out:
            rejected += timed_out
            notes.append(f"{timed_out} queued calls wait past queue_timeout_secs and are refused; TTFT counts the rest")
        t50, t90 = terms.quantile(burst, 0.5), terms.quantile(burst, 0.9)
        cycle = admitted / throughput
        steady = max(pass_ms + xfer, cycle - osl * step) + router_wait

    def ttft(ms: float) -> Figure:
        scaled = max(0.0, ms - xfer)
        part = scaled if p_band.bound else scaled * prefill_share
        return Figure(ms, part, p_band.rel, ttft_src, p_band.bound)

    def itl(ms: float, aic_ms: float, source: str) -> Figure:
        return Figure(ms, ms if d_band.bound else aic_ms, d_band.rel, source, d_band.bound)

    itl_src = f"{d_origin} ({d_mix}); {OUR_MODEL}: decode batch {batch:.1f}" + (", bf16 index keys" if bf16 else "")
    return Prediction(
        ttft_p50=ttft(t50),
        ttft_p90=ttft(t90),
        itl_p50=itl(step, step_aic, itl_src),
        itl_p90=itl(itl90, itl90_aic, itl_src.replace(f"batch {batch:.1f}", f"p90 batch {batch90:.0f}")),
        itl_full=itl(step90, step90_aic, itl_src.replace(f"batch {batch:.1f}", f"batch {per_engine_max}")),
        ttft_steady=ttft(steady),
        binding=binding,
        decode_batch=batch,
        calls_per_s=throughput * 1000.0,
        terms=[
            Term("prefill of one prompt", pass_aic, f"{p_origin} ({p_mix})"),
            Term("bf16 index keys, prefill", pass_ours, OUR_MODEL),
            Term("KV transfer", xfer, f"{OUR_MODEL} ({fleet.transfer_backend}, declared bandwidth)"),
            Term("decode step at the steady batch", step_aic, f"{d_origin} ({d_mix})"),
            Term("bf16 index keys, decode step", step - step_aic, OUR_MODEL),
        ],
        notes=notes,
        rejected=rejected,
    )


def _ttft_ours(chunks: int, bf16: bool, xfer: float, admitted: int, fleet: FleetShape) -> str:
    parts = []
    if chunks > 1:
        parts.append(f"{chunks} chunks")
    if admitted > fleet.prefill_engines:
        parts.append("queueing")
    if xfer > 0:
        parts.append("transfer")
    if bf16:
        parts.append("bf16 index keys")
    return ", ".join(parts) or "nothing"


class _Recorder:
    """A StepSource that answers 1 ms and writes down what it was asked (predict_many's first pass)."""

    def __init__(self) -> None:
        self.prefills: list[PrefillQuery] = []
        self.decodes: list[DecodeQuery] = []

    def prefill(self, queries: Sequence[PrefillQuery]) -> list[StepTime]:
        self.prefills += queries
        return [StepTime(1.0, 1.0, 0.0, 0.0, 0.0, "recorder") for _query in queries]

    def decode(self, queries: Sequence[DecodeQuery]) -> list[StepTime]:
        self.decodes += queries
        return [StepTime(1.0, 1.0, 0.0, 0.0, 0.0, "recorder") for _query in queries]


class _Table:
    """A StepSource over answers already fetched from `source`, whose bands it keeps."""

    def __init__(
        self, prefills: dict[PrefillQuery, StepTime], decodes: dict[DecodeQuery, StepTime], source: StepSource
    ) -> None:
        self.prefills, self.decodes, self.source = prefills, decodes, source

    def band(self, stage: str, context: int, batch: float) -> Band:
        return band_of(self.source, stage, context, batch)

    def prefill(self, queries: Sequence[PrefillQuery]) -> list[StepTime]:
        return [self.prefills[q] for q in queries]

    def decode(self, queries: Sequence[DecodeQuery]) -> list[StepTime]:
        return [self.decodes[q] for q in queries]


def predict_many(cases: Sequence[tuple[FleetShape, Workload]], steps: StepSource) -> list[Prediction]:
    """predict() for many cases with one round of step queries (one estimator process for all of them)."""
    recorder = _Recorder()
    for fleet, workload in cases:
        predict(fleet, workload, recorder)
    prefills = list(dict.fromkeys(recorder.prefills))
    decodes = list(dict.fromkeys(recorder.decodes))
    p_times, d_times = ask(steps, prefills, decodes)
    table = _Table(dict(zip(prefills, p_times, strict=True)), dict(zip(decodes, d_times, strict=True)), steps)
    return [predict(fleet, workload, table) for fleet, workload in cases]
