"""The time model on a declared fleet: from the inventory (host variables, groups, the model's config.json) to the
time model's FleetShape, and the predicted TTFT / ITL of workload shapes on it, for the planner, the risks,
check-request, the audit and bench/perf_table.py.

Nothing here sizes memory: engine counts, running limits, the resolved chunk size and the router's admission come
from the capacity model and the fleet answer (sglang_plan.engines / fleet_answer, sglang_engine_rules.engine_limits);
the times come from sglang_perf.predict_many over a StepSource (AIConfigurator's measured H200 data by default).
Without the estimator's venv every answer says so ("time: not predicted (make perf-venv)") instead of failing.

A call of T tokens (the planner's unit: prompt + output) is taken as T - osl prompt tokens and osl output tokens,
osl = DEFAULT_OUTPUT_TOKENS unless given; the calls arrive at once (a closed loop of N calls).

The default SLO of the time risks (DEFAULT_SLO: TTFT p90 60 s, ITL p90 80 ms) is this module's; the plan command's
--ttft-p90 / --itl-p90 / --tokens-per-s replace it. The call length the risks are judged at is the plan's asked
shape, else sglang_workload.p90_context_tokens, else TYPICAL_TOKENS.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_argspec import default_of
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_capacity import KV_DTYPES
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_declared import (
    GROUPS,
    engine_envelope,
    router_envelope,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_engine_rules import engine_limits
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_fleet import router_queue
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import (
    INTERCONNECT,
    NVLINK,
    PCIE,
    Figure,
    FleetShape,
    Prediction,
    StepSource,
    Workload,
    aic_model,
    fleet_shape,
    predict_many,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_calibration import (
    VARIABLE,
    CalibratedSteps,
    MeasuredPoint,
    calibrated,
    parse_points,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_corrections import (
    default_corrections,
    source_text,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_live import LiveSteps
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_terms import transfer_bytes_per_s
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_plan import (
    ADMIT,
    Fleet,
    Option,
    Plan,
    Price,
    Shape,
    change,
    extend,
    fleet_answer,
    fleet_from_inventory,
    gpus_of,
    parse_shape,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_risks import Finding, fix_of

DEFAULT_OUTPUT_TOKENS = 1000
TYPICAL_TOKENS = 32_768
NOT_PREDICTED = "time: not predicted (make perf-venv)"
MAX_EXTRA_PREFILL_HOSTS = 48
CHUNK_CHOICES = (8192, 16384, 32768)
UNCHUNKED = 1 << 30  # chunked prefill off: one pass per prompt


class TimeUnavailable(RuntimeError):
    """No step source: the estimator's venv is missing, or it failed."""


# ---------------------------------------------------------------- SLO


def parse_duration_ms(text: str, default_unit: str = "s") -> float:
    """`60s`, `1.5m`, `80ms`, `60` (default_unit) as milliseconds."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|min)?\s*", str(text))
    if not match:
        raise ValueError(f"{text!r}: expected a duration such as 60s, 1.5m or 80ms")
    value, unit = float(match.group(1)), match.group(2) or default_unit
    scale = {"ms": 1.0, "s": 1000.0, "m": 60_000.0, "min": 60_000.0}[unit]
    if value <= 0:
        raise ValueError(f"{text!r}: a duration must be > 0")
    return value * scale


def _seconds(ms: float) -> str:
    return f"{ms / 1000:g} s" if ms >= 1000 else f"{ms:g} ms"


@dataclass(frozen=True)
class Slo:
    """Service-level objectives per call: TTFT p90, ITL p90 (ms) and output tokens/s (at ITL p50); None: not asked."""

    ttft_p90_ms: float | None = None
    itl_p90_ms: float | None = None
    tokens_per_s: float | None = None

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.ttft_p90_ms, self.itl_p90_ms, self.tokens_per_s))

    def text(self) -> str:
        parts = []
        if self.ttft_p90_ms is not None:
            parts.append(f"TTFT p90 <= {_seconds(self.ttft_p90_ms)}")
        if self.itl_p90_ms is not None:
            parts.append(f"ITL p90 <= {_seconds(self.itl_p90_ms)}")
        if self.tokens_per_s is not None:
            parts.append(f">= {self.tokens_per_s:g} output tokens/s per call")
        return ", ".join(parts)

    def misses(self, pred: Prediction) -> list[str]:
        """What `pred` misses of this SLO, in words (empty: it meets it)."""
        out = []
        if self.ttft_p90_ms is not None and not pred.ttft_p90.ms <= self.ttft_p90_ms:
            out.append(f"TTFT p90 {pred.ttft_p90.ms / 1000:,.1f} s > {_seconds(self.ttft_p90_ms)}")
        if self.itl_p90_ms is not None and not pred.itl_p90.ms <= self.itl_p90_ms:
            out.append(f"ITL p90 {pred.itl_p90.ms:,.1f} ms > {_seconds(self.itl_p90_ms)}")
        if self.tokens_per_s is not None and not pred.tokens_per_s_per_call >= self.tokens_per_s:
            out.append(f"{pred.tokens_per_s_per_call:,.0f} output tokens/s per call < {self.tokens_per_s:g}")
        return out


DEFAULT_SLO = Slo(ttft_p90_ms=60_000.0, itl_p90_ms=80.0)


# ---------------------------------------------------------------- the fleet's shape


def default_steps() -> StepSource | None:
    """AIConfigurator's step source with the default corrections (sglang_perf_corrections) when its venv is
    installed, else None."""
    from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_aic import AicSteps

    steps = AicSteps()
    return default_corrections(steps) if steps.ready() else None


def interconnect_of(fleet: Fleet, role: str) -> str:
    """The GPU interconnect of a role's engines: PCIe when any of its hosts declares it (the slowest engine sets the
    pace of the calls it serves), else NVLink."""
    declared = {str(fleet.hostvars[h].get(INTERCONNECT) or NVLINK) for h in fleet.hosts(role)}
    unknown = declared - {NVLINK, PCIE}
    if unknown:
        raise ValueError(f"{INTERCONNECT}={sorted(unknown)[0]!r}: must be {NVLINK} or {PCIE}; fix: declare per host")
    return PCIE if PCIE in declared else NVLINK


def measured_points(fleet: Fleet) -> list[MeasuredPoint]:
    """The fleet's declared measurements (sglang_perf_measured of the first host that declares them: a group
    variable)."""
    for host in sorted(fleet.hostvars):
        raw = fleet.hostvars[host].get(VARIABLE)
        if raw:
            return parse_points(raw)
    return []


def fleet_steps(fleet: Fleet, model_config: Mapping[str, Any], steps: StepSource | None) -> StepSource | None:
    """The step source for this fleet's time: `steps` calibrated to the fleet's declared measurements, unless it is
    the live fleet's own or already calibrated. None (no time model) stays None."""
    if steps is None or isinstance(steps, CalibratedSteps | LiveSteps):
        return steps
    return calibrated(steps, measured_points(fleet), lambda tokens: shape_of(fleet, model_config, tokens))


def _chunk(model_config: Mapping[str, Any], env: Mapping[str, Any], hostvars: Mapping[str, Any]) -> int:
    """The chunk size SGLang resolves on a prefill engine (UNCHUNKED: chunked prefill off)."""
    chunk = engine_limits(model_config, env, hostvars).resolved.get("chunked_prefill_size")
    return int(chunk) if chunk is not None and int(chunk) > 0 else UNCHUNKED


def _transfer_backend(env: Mapping[str, Any]) -> str:
    return str(env.get("disaggregation_transfer_backend") or default_of("prefill", "disaggregation_transfer_backend"))


def _model_of(fleet: Fleet, hosts: Sequence[str]) -> str:
    """The AIConfigurator model the engines serve; ValueError when they declare different models."""
    declared = [fleet.hostvars[h].get("sglang_model") or {} for h in hosts]
    models = {(str(m.get("name")), str(m.get("quantization"))) for m in declared}
    if len(models) > 1:
        listed = ", ".join(f"{n} ({q})" for n, q in sorted(models))
        raise ValueError(f"the engines declare different sglang_model ({listed}); fix: declare it once in group_vars")
    name, quantization = next(iter(models))
    return aic_model(name, quantization)


def shape_of(fleet: Fleet, model_config: Mapping[str, Any], tokens: int | None = None) -> FleetShape:
    """The time model's view of a declared fleet. smg sends a call to any prefill and any decode engine, so where
    the engines differ the one engine the time model prices is the slowest of each setting on its path, whichever
    host the inventory lists first: the fewest GPUs (tp) and the smallest chunk SGLang resolves of the prefill
    engines (more passes a prompt, fewer prompts a pass); the fewest GPUs and attention-DP ranks of the decode
    engines; bf16 index keys and the widest KV cache dtype when any engine holds them (wider keys to read and more
    bytes to move); the slowest KV transfer backend. Where the engines differ in more than one setting this composite
    is slower than any one engine, so the predicted times bound every call the fleet admits. Per fleet: the engine
    counts and the routers' admission, summed as the fleet answer does. The decode running limit is per engine, the
    smallest over decode engines; for calls of `tokens` it is what the fleet answer runs of them at once (the KV pool
    may bind below the running slots)."""
    prefill_hosts, decode_hosts = fleet.hosts("prefill"), fleet.hosts("decode")
    if not prefill_hosts or not decode_hosts:
        raise ValueError("the time model needs a prefill and a decode engine; fix: declare both groups")
    p_envs = [(fleet.hostvars[h], engine_envelope("prefill", fleet.hostvars[h])) for h in prefill_hosts]
    d_envs = [engine_envelope("decode", fleet.hostvars[h]) for h in decode_hosts]
    every = [env for _hv, env in p_envs] + d_envs
    chunk = min(_chunk(model_config, env, hv) for hv, env in p_envs)
    kv_dtype = max((str(env.get("kv_cache_dtype") or "fp8_e4m3") for env in every),
                   key=lambda dtype: (KV_DTYPES.get(dtype, 0), dtype))  # fmt: skip
    backend = min((_transfer_backend(env) for env in every),
                  key=lambda name: (transfer_bytes_per_s(name), name))  # fmt: skip
    memory = fleet_answer(fleet, model_config, tokens).memory
    per_engine = [c.per_engine for c in memory.decode]
    running = [c.running_per_engine for c in memory.decode]
    limit = min(per_engine) if tokens is not None and min(per_engine) > 0 else min(running)
    routers = [router_envelope(fleet.hostvars[h]) for h in fleet.hosts("router")]
    queue = router_queue(routers)
    return fleet_shape(
        model_config,
        _model_of(fleet, [*prefill_hosts, *decode_hosts]),
        prefill_engines=len(prefill_hosts),
        decode_engines=len(decode_hosts),
        tp=min(int(env.get("tp_size") or 1) for _hv, env in p_envs),
        decode_tp=min(int(env.get("tp_size") or 1) for env in d_envs),
        chunked_prefill_size=chunk,
        decode_max_running=max(1, limit),
        prefill_interconnect=interconnect_of(fleet, "prefill"),
        decode_interconnect=interconnect_of(fleet, "decode"),
        decode_attn_dp=min(int(env.get("attn_dp_size") or 1) for env in d_envs),
        bf16_index_k=any(bool(env.get("bf16_index_k")) for env in every),
        kv_cache_dtype=kv_dtype,
        transfer_backend=backend,
        router_max_concurrent=memory.router_admits,
        router_queue_size=queue.size if queue else None,
        router_queue_timeout_s=queue.shortest_wait_secs if queue else None,  # when queued calls start to be refused
    )


def fleet_shape_of(
    hostvars: Mapping[str, Any], groups: Mapping[str, list[str]], model_config: Mapping[str, Any], tokens: int | None
) -> FleetShape:
    """shape_of for an inventory's host variables and groups (as the CLI and the audit read them)."""
    return shape_of(fleet_from_inventory(hostvars, groups), model_config, tokens)


SIM_SPEED_FACTOR = "SGLANG_SIM_SPEED_FACTOR"


def sim_speed_factor(hostvars: Mapping[str, Any], groups: Mapping[str, list[str]]) -> float | None:
    """The time scale of an inventory's simulated engines: SGLANG_SIM_SPEED_FACTOR of sglang_engine_extra_env on the
    engine hosts whose sglang_engine_command runs the simulator (`sglang_sim`). The simulator's clock runs at that
    factor of the modelled speed, so a predicted time divided by it is what the simulator shows (0.5: times x 2).
    None: real engines, or a simulator without the variable. ValueError when it is not a number > 0 or the
    simulated engines declare different ones."""
    found: dict[str, float] = {}
    for role in ("prefill", "decode"):
        for host in groups.get(GROUPS[role], []):
            hv = hostvars.get(host) or {}
            command = hv.get("sglang_engine_command") or ""
            words = command if isinstance(command, list | tuple) else [command]
            if not any("sglang_sim" in str(word) for word in words):
                continue
            raw = (hv.get("sglang_engine_extra_env") or {}).get(SIM_SPEED_FACTOR)
            if raw is None or str(raw).strip() == "":
                continue
            try:
                value = float(str(raw))
            except ValueError:
                value = math.nan
            if not (math.isfinite(value) and value > 0):
                raise ValueError(
                    f"{host}: sglang_engine_extra_env.{SIM_SPEED_FACTOR}={raw!r} is not a number > 0; fix: declare "
                    "the simulator's speed factor as a plain number, e.g. '0.5'"
                )
            found[host] = value
    if len(set(found.values())) > 1:
        listed = ", ".join(f"{h} {v:g}" for h, v in sorted(found.items()))
        raise ValueError(f"the simulated engines declare different {SIM_SPEED_FACTOR}s ({listed}); fix: one value")
    return next(iter(found.values()), None)


def workload(calls: int, tokens: int, osl: int = DEFAULT_OUTPUT_TOKENS) -> Workload:
    """`calls` calls of `tokens` tokens arriving at once: tokens - osl prompt tokens, osl output tokens."""
    out = max(1, min(osl, tokens - 1))
    return Workload(isl=tokens - out, osl=out, concurrency=max(1, calls))


def time_source(steps: StepSource) -> str:
    """Where a step source's times come from, in words (the live fleet's figures, or the estimator with its
    corrections and, where calibrated, the fit)."""
    return steps.describe() if isinstance(steps, LiveSteps) else source_text(steps)


def time_header(steps: StepSource) -> str:
    """One line on top of every time answer: where its step times come from, and whether they are this fleet's
    (calibrated to its measured points) or a generic H200's."""
    if isinstance(steps, LiveSteps):
        return f"time from: {steps.describe()}"
    if isinstance(steps, CalibratedSteps):
        try:
            return f"time from: {source_text(steps)}"
        except (RuntimeError, OSError, ValueError) as exc:  # the fit needs the step source's answers
            return f"time: not predicted ({str(exc).splitlines()[0][:200]})"
    return (
        f"time: UNCALIBRATED, a generic H200's step times and not this fleet's (no {VARIABLE} declared; "
        f"docs/time.md); from: {source_text(steps)}"
    )


def predict_shapes(cases: Sequence[tuple[FleetShape, Workload]], steps: StepSource | None) -> list[Prediction]:
    """sglang_perf.predict_many, raising TimeUnavailable (with the reason) when there is no step source or it fails."""
    if steps is None:
        raise TimeUnavailable(NOT_PREDICTED)
    try:
        preds = predict_many(list(cases), steps)
        if isinstance(steps, CalibratedSteps):  # each calibrated answer carries the base source's beside it
            for pred, twin in zip(preds, predict_many(list(cases), steps.base), strict=True):
                pred.uncalibrated = twin
        return preds
    except (RuntimeError, OSError, ValueError) as exc:
        raise TimeUnavailable(f"time: not predicted ({str(exc).splitlines()[0][:200]})") from exc


# ---------------------------------------------------------------- text


def describe(pred: Prediction, work: Workload) -> str:
    """The workload and its binding stage, in words."""
    binding = "nothing (every stage keeps up)" if pred.binding == "none" else f"the {pred.binding}"
    calls = (
        f"{work.concurrency} call(s) of {work.isl:,} in + {work.osl:,} out arriving at once"
        if work.rate_per_s is None
        else f"calls of {work.isl:,} in + {work.osl:,} out arriving at {work.rate_per_s:g}/s (Poisson)"
    )
    return f"{calls}: bound by {binding}, decode batch {pred.decode_batch:.1f}"


def figure_lines(pred: Prediction) -> list[str]:
    """TTFT p50/p90 and ITL p50/p90, each with its band and source (and, when calibrated, the uncalibrated figure)."""
    twin = pred.uncalibrated
    lines = []
    for label, name, unit in (
        ("TTFT p50", "ttft_p50", "s"),
        ("TTFT p90", "ttft_p90", "s"),
        ("ITL p50", "itl_p50", "ms"),
        ("ITL p90", "itl_p90", "ms"),
    ):
        line = f"{label} {getattr(pred, name).text(unit)}"
        other = getattr(twin, name).ms if twin is not None else None
        if other is not None and not math.isclose(other, getattr(pred, name).ms, rel_tol=0.005):
            line += f" [uncalibrated: {other / (1000.0 if unit == 's' else 1.0):,.2f} {unit}]"
        lines.append(line)
    if pred.rejected:
        lines.append(f"{pred.rejected} call(s) refused by the router's queue (full or timed out); TTFT counts the rest")
    return lines


def time_lines(pred: Prediction, work: Workload, slo: Slo | None = None) -> list[str]:
    lines = [f"time: {describe(pred, work)}"] + [f"  {line}" for line in figure_lines(pred)]
    if slo:
        misses = slo.misses(pred)
        lines.append(f"  SLO ({slo.text()}): " + ("met" if not misses else "missed: " + "; ".join(misses)))
    return lines


def as_dict(pred: Prediction, work: Workload, slo: Slo | None = None) -> dict[str, Any]:
    """A prediction as plain, json-able data: each figure's ms and its text (with band and source)."""
    out: dict[str, Any] = {
        "calls": work.concurrency,
        "isl": work.isl,
        "osl": work.osl,
        "binding": pred.binding,
        "decode_batch": round(pred.decode_batch, 2),
        "rejected": pred.rejected,
        "tokens_per_s_per_call": round(pred.tokens_per_s_per_call, 1),
        "notes": list(pred.notes),
    }
    for name in ("ttft_p50", "ttft_p90", "itl_p50", "itl_p90"):
        fig = getattr(pred, name)
        out[name] = {
            "ms": fig.ms,
            "low_ms": fig.low,
            "high_ms": fig.high,
            "source": fig.source,
            "text": fig.text("s" if name.startswith("ttft") else "ms"),
        }
    if slo:
        out["slo"] = slo.text()
        out["slo_misses"] = slo.misses(pred)
    return out


def predicted_times(
    hostvars: Mapping[str, Any],
    groups: Mapping[str, list[str]],
    model_config: Mapping[str, Any],
    shapes: Sequence[str | Shape | tuple[int, int]],
    *,
    osl: int = DEFAULT_OUTPUT_TOKENS,
    steps: StepSource | None = None,
    slo: Slo | None = None,
) -> list[dict[str, Any]]:
    """Predicted TTFT / ITL of each shape (`100x200k`, a Shape or (calls, tokens)) on the declared fleet, as plain
    dicts (as_dict, plus "shape"). steps None: AIConfigurator when installed (default_steps). Without a step source
    each dict is {"shape", "error": "time: not predicted (make perf-venv)"}."""
    fleet = fleet_from_inventory(hostvars, groups)
    source = fleet_steps(fleet, model_config, steps if steps is not None else default_steps())
    parsed = [parse_shape(s) if isinstance(s, str) else s if isinstance(s, Shape) else Shape(*s) for s in shapes]
    cases = [(shape_of(fleet, model_config, s.tokens), workload(s.calls, s.tokens, osl)) for s in parsed]
    try:
        preds = predict_shapes(cases, source)
    except TimeUnavailable as exc:
        return [{"shape": str(s), "error": str(exc)} for s in parsed]
    return [{"shape": str(s)} | as_dict(p, w, slo) for s, p, (_f, w) in zip(parsed, preds, cases, strict=True)]


def at_speed(pred: Prediction, factor: float | None) -> Prediction:
    """`pred` as engines running at `factor` times the modelled speed show it (sim_speed_factor): every time divided
    by the factor, the factor named in each figure's source; None or 1: `pred` itself."""
    if not factor or factor == 1:
        return pred

    def scaled(fig: Figure) -> Figure:
        source = f"{fig.source}; divided by {factor:g}, the simulator's {SIM_SPEED_FACTOR}"
        return dataclasses.replace(fig, ms=fig.ms / factor, estimated_ms=fig.estimated_ms / factor, source=source)

    return dataclasses.replace(
        pred,
        ttft_p50=scaled(pred.ttft_p50),
        ttft_p90=scaled(pred.ttft_p90),
        itl_p50=scaled(pred.itl_p50),
        itl_p90=scaled(pred.itl_p90),
        itl_full=scaled(pred.itl_full),
        ttft_steady=scaled(pred.ttft_steady),
        calls_per_s=pred.calls_per_s * factor,
        terms=[dataclasses.replace(t, ms=t.ms / factor) for t in pred.terms],
    )


def two_figures(tokens: int) -> int:
    """`tokens` to two significant figures (1,542 -> 1,500; 32 -> 32), at least 1."""
    return max(1, int(float(f"{tokens:.2g}")))


def on_grid(load: tuple[int, int, int]) -> tuple[int, int, int]:
    """A measured load (prompt tokens, output tokens, concurrency) with its token counts to two significant figures
    (at most 5 % off, against the audit's +-50 % tolerance): the load moves a little with every Prometheus window, and
    on the grid successive audits of a steady load ask the estimator the same steps, which it answers from its cache
    instead of a new process (about 3 s)."""
    isl, osl, calls = load
    return two_figures(isl), two_figures(osl), calls


def audit_predictions(
    hostvars: Mapping[str, Any],
    groups: Mapping[str, list[str]],
    model_config: Mapping[str, Any],
    load: tuple[int, int, int] | None = None,
    steps: StepSource | None = None,
    speed_factor: float | None = None,
) -> dict[str, Any]:
    """The audit's predictions in one round of step queries: `predicted`, the longest call (the served per-call
    context) and the typical one (sglang_workload.p90_context_tokens, else TYPICAL_TOKENS), each at the router's
    admitted concurrency (else what the decode fleet runs at once), as {shape, ttft_p50, ttft_p90, itl_p50, itl_p90,
    binding} texts or {shape, unavailable}; and `at_load`, the prediction at the measured load `load` = (prompt
    tokens, output tokens, concurrency) (sglang_latency.measured_load) as as_dict gives it, with its `workload`, at
    the simulator's `speed_factor` (at_speed), the token counts on_grid; {} without a load, {unavailable} without a
    step source."""
    fleet = fleet_from_inventory(hostvars, groups)
    memory = fleet_answer(fleet, model_config, None).memory
    work = next((hv.get("sglang_workload") for hv in hostvars.values() if hv.get("sglang_workload")), None) or {}
    typical = min(int(work.get("p90_context_tokens") or TYPICAL_TOKENS), memory.served_tokens)
    named = [("the longest call", memory.served_tokens), ("a typical call", typical)]
    labels, cases = [], []
    for label, tokens in named:
        calls = memory.router_admits or fleet_answer(fleet, model_config, tokens).memory.parallel
        labels.append(f"{label}, {calls} x {tokens:,} tokens at the router's admission")
        cases.append((shape_of(fleet, model_config, tokens), workload(calls, tokens)))
    if load is not None:
        load = on_grid(load)
        isl, osl, calls = load
        cases.append((shape_of(fleet, model_config, isl + osl), Workload(isl=isl, osl=osl, concurrency=calls)))
    try:
        preds = predict_shapes(cases, fleet_steps(fleet, model_config, steps if steps is not None else default_steps()))
    except TimeUnavailable as exc:
        return {
            "predicted": [{"shape": label, "unavailable": str(exc)} for label in labels],
            "at_load": {"unavailable": str(exc)} if load is not None else {},
        }
    predicted = []
    for label, pred, (_shape, work_) in zip(labels, preds, cases, strict=False):
        found = as_dict(pred, work_)
        texts = {k: found[k]["text"] for k in ("ttft_p50", "ttft_p90", "itl_p50", "itl_p90")}
        refused = f"; {found['rejected']} refused by the router's queue" if found["rejected"] else ""
        predicted.append({"shape": label, **texts, "binding": found["binding"] + refused})
    at_load: dict[str, Any] = {}
    if load is not None:
        isl, osl, calls = load
        at_load = as_dict(at_speed(preds[-1], speed_factor), cases[-1][1]) | {
            "workload": {"isl": isl, "osl": osl, "concurrency": calls},
            "speed_factor": speed_factor,
        }
    return {"predicted": predicted, "at_load": at_load}


# ---------------------------------------------------------------- the planner in time


DEDICATED_PREFILL_TP = 8


def goodput_per_gpu(pred: Prediction, work: Workload, gpus: int, slo: Slo | None) -> float:
    """Output tokens/s per GPU of the calls that meet `slo` (DistServe's goodput): the steady output rate when the
    p90 figures meet it (at least 90 % of the calls do), else 0; with no SLO, the steady output rate."""
    if slo and slo.misses(pred):
        return 0.0
    return pred.calls_per_s * work.osl / max(1, gpus)


def price(pred: Prediction, work: Workload, gpus: int, slo: Slo | None) -> Price:
    meets = (not slo.misses(pred)) if slo else None
    return Price(gpus, goodput_per_gpu(pred, work, gpus, slo), pred.ttft_p90.ms, pred.itl_p90.ms, meets)


def arrivals_of(shape: Shape, rate_per_s: float | None) -> str:
    if rate_per_s is None:
        return f"all {shape.calls} calls arrive at once (a closed loop: each call is followed by the next)"
    return f"Poisson arrivals at {rate_per_s:g} calls/s (at most {shape.calls} at once)"


def plan_workload(calls: int, tokens: int, osl: int, rate_per_s: float | None) -> Workload:
    """The planner's workload: `calls` at once (workload), or Poisson arrivals at `rate_per_s`."""
    work = workload(calls, tokens, osl)
    return work if rate_per_s is None else Workload(isl=work.isl, osl=work.osl, rate_per_s=rate_per_s)


@dataclass(frozen=True)
class Lever:
    """One way to make the calls start sooner: `k` more prefill engines of the declared kind, or `k` engines of
    their own at DEDICATED_PREFILL_TP in place of the declared ones, with `decode` more decode hosts, or the decode
    engines' attention data-parallel; `chunks` the chunk sizes tried."""

    name: str
    dedicated_tp: int | None = None
    decode: int = 0
    attn_dp: bool = False
    chunks: tuple[int, ...] = ()

    def shape(self, base: FleetShape, k: int, chunk: int) -> FleetShape:
        prefill = k if self.dedicated_tp else base.prefill_engines + k
        tp = self.dedicated_tp or base.prefill_tp
        return dataclasses.replace(
            base,
            prefill_engines=prefill,
            prefill_tp=tp,
            prefill_ep=tp,
            decode_engines=base.decode_engines + self.decode,
            decode_attn_dp=base.decode_tp if self.attn_dp else base.decode_attn_dp,
            chunked_prefill_size=chunk,
        )

    def title(self, k: int) -> str:
        hosts = f"{k} prefill host{'s' if k > 1 else ''}"
        parts = [f"prefill on {hosts} of their own at tp {self.dedicated_tp}" if self.dedicated_tp else f"add {hosts}"]
        if self.decode:
            parts.append(f"{self.decode} more decode host{'s' if self.decode > 1 else ''} (the prefill:decode ratio)")
        if self.attn_dp:
            parts.append("decode with dp attention")
        return ", ".join(parts)


def levers(base: FleetShape) -> list[Lever]:
    """The levers the planner tries in time: more prefill engines as declared (with larger chunks), prefill at tp 8
    on hosts of its own, the prefill:decode ratio (one more decode host with the prefill engines), and decode with
    attention data-parallel over its tp GPUs (SGLang's attn_dp_size)."""
    declared = (base.chunked_prefill_size,)
    found = [
        Lever("more prefill engines", chunks=tuple(dict.fromkeys([*declared, *CHUNK_CHOICES]))),
        Lever(f"prefill at tp {DEDICATED_PREFILL_TP}", dedicated_tp=DEDICATED_PREFILL_TP, chunks=declared),
        Lever("the prefill:decode ratio", decode=1, chunks=declared),
    ]
    if base.decode_tp > 1 and base.decode_attn_dp == 1:
        found.append(Lever("decode with dp attention", attn_dp=True, chunks=declared))
    return found


def plan_in_time(
    result: Plan,
    fleet: Fleet,
    model_config: Mapping[str, Any],
    slo: Slo | None,
    steps: StepSource | None,
    osl: int = DEFAULT_OUTPUT_TOKENS,
    rate_per_s: float | None = None,
    tried: Callable[[FleetShape], list[Lever]] | None = None,
) -> Plan:
    """Adds the predicted times and prices to a memory plan: today's, each option's, and with an SLO whether each
    meets it; where an answer (or today's fleet, when it fits in memory) misses the SLO, the fewest engines of each
    lever (`tried`, default levers()) that meet it, as options of their own. Answers are ranked by goodput per GPU,
    then GPUs added (sglang_plan.RANKING_NOTE). The plan is changed in place and returned."""
    shape = result.shape
    steps = fleet_steps(fleet, model_config, steps)
    result.slo = slo.text() if slo else ""
    result.arrivals = arrivals_of(shape, rate_per_s)
    options = result.options + result.shorter
    cases = [(shape_of(fleet, model_config, shape.tokens), plan_workload(shape.calls, shape.tokens, osl, rate_per_s))]
    for option in options:
        tokens = option.tokens(shape)
        cases.append(
            (
                shape_of(option.changed_fleet(), model_config, tokens),
                plan_workload(shape.calls, tokens, osl, rate_per_s),
            )
        )
    try:
        preds = predict_shapes(cases, steps)
    except TimeUnavailable as exc:
        result.today_times = [str(exc)]
        for option in options:
            option.times = [str(exc)]
        return result
    result.today_times = time_lines(preds[0], cases[0][1], slo)
    result.today_meets_slo = not slo.misses(preds[0]) if slo else None
    result.today_price = price(preds[0], cases[0][1], gpus_of(fleet), slo)
    for option, pred, (_f, work) in zip(options, preds[1:], cases[1:], strict=True):
        option.times = time_lines(pred, work, slo)
        option.meets_slo = not slo.misses(pred) if slo else None
        option.price = price(pred, work, option.gpus(), slo)
    if slo:
        _meet_slo(_Ask(result, fleet, model_config, slo, steps, osl, rate_per_s), cases, tried or levers)
    _rank(result, gpus_of(fleet))
    return result


@dataclass(frozen=True)
class _Ask:
    """What the planner's search in time works with: the plan, the declared fleet, the SLO, the step source, the
    output length and the arrivals."""

    result: Plan
    fleet: Fleet
    model_config: Mapping[str, Any]
    slo: Slo
    steps: StepSource | None
    osl: int
    rate_per_s: float | None


def _meet_slo(ask: _Ask, cases: list[tuple[FleetShape, Workload]], tried: Callable[[FleetShape], list[Lever]]) -> None:
    """Options that meet the SLO on top of each base that misses it (today's fleet when it fits in memory, each
    answer), one per lever (the fewest engines that meet it); the levers that find none are noted."""
    result = ask.result
    options = result.options + result.shorter
    bases: list[tuple[Option | None, FleetShape, Workload]] = []
    if result.fits_today and result.today_meets_slo is False:
        bases.append((None, cases[0][0], cases[0][1]))
    for option, (shape_, work) in zip(options, cases[1:], strict=True):
        if option.exact and option.meets_slo is False:
            bases.append((option, shape_, work))
    added: list[tuple[Option | None, Option]] = []
    for base, base_shape, work in bases:
        for lever in tried(base_shape):
            if lever.name not in result.tried:
                result.tried.append(lever.name)
            found = _fewest(ask, base, base_shape, work, lever)
            if isinstance(found, Option):
                added.append((base, found))
            else:
                result.refused.append(found)
    for base, option in added:
        at = result.options.index(base) + 1 if base is not None else 0
        result.options.insert(at, option)


def _fewest(ask: _Ask, base: Option | None, base_shape: FleetShape, work: Workload, lever: Lever) -> Option | str:
    """The fewest prefill engines of `lever` (then the first of its chunk sizes) on top of `base` (None: today's
    fleet) whose predicted times meet `slo`, as an option the validation passes; a sentence when none within
    MAX_EXTRA_PREFILL_HOSTS does."""
    result, fleet, model_config, slo, steps = ask.result, ask.fleet, ask.model_config, ask.slo, ask.steps
    grid = [(k, c) for k in range(1, MAX_EXTRA_PREFILL_HOSTS + 1) for c in lever.chunks]
    try:
        preds = predict_shapes([(lever.shape(base_shape, k, c), work) for k, c in grid], steps)
    except TimeUnavailable as exc:
        return str(exc)
    name = base.title if base is not None else "today's fleet"
    refused = ""
    for (k, c), pred in zip(grid, preds, strict=True):
        if slo.misses(pred):
            continue
        settings: list[tuple[str, str, Any]] = []
        if c != base_shape.chunked_prefill_size:
            settings.append(("prefill", "chunked_prefill_size", c))
        if lever.attn_dp:
            settings.append(("decode", "attn_dp_size", base_shape.decode_tp))
        title = lever.title(k) + (f", chunked_prefill_size {c}" if c != base_shape.chunked_prefill_size else "")
        source = base if base is not None else Option(ADMIT, fleet=fleet.copy())
        option = extend(
            source,
            model_config,
            result.shape,
            title,
            settings,
            add_prefill_hosts=k,
            prefill_tp=lever.dedicated_tp,
            add_decode_hosts=lever.decode,
        )
        if option.refused:
            refused = refused or f"{option.title}: {option.refused[0]}"
            continue
        tokens = option.tokens(result.shape)
        shape_ = shape_of(option.changed_fleet(), model_config, tokens)
        final_work = plan_workload(result.shape.calls, tokens, ask.osl, ask.rate_per_s)
        try:
            (final,) = predict_shapes([(shape_, final_work)], steps)
        except TimeUnavailable as exc:
            return str(exc)
        option.times = time_lines(final, final_work, slo)
        option.meets_slo = not slo.misses(final)
        option.price = price(final, final_work, option.gpus(), slo)
        return option
    if refused:
        return f"{name}, {lever.name}: every option that meets the SLO is refused by validation; the first: {refused}"
    best = min(preds, key=lambda p: p.ttft_p90.ms)
    return (
        f"{name}, {lever.name}: no option within {MAX_EXTRA_PREFILL_HOSTS} prefill hosts and chunk sizes "
        f"{', '.join(str(c) for c in lever.chunks)} meets the SLO ({slo.text()}); the best gives TTFT p90 "
        f"{best.ttft_p90.text()}, ITL p90 {best.itl_p90.text('ms')}"
    )


def _rank(result: Plan, today_gpus: int) -> None:
    """The answers by goodput per GPU, then GPUs added (RANKING); options without a price keep their order after."""

    def key(option: Option) -> tuple[float, int]:
        if option.price is None:
            return (math.inf, 0)
        return (-option.price.goodput_per_gpu, option.price.gpus - today_gpus)

    result.options = sorted(result.options, key=key)


# ---------------------------------------------------------------- risks in time


def time_risks(
    fleet: Fleet,
    model_config: Mapping[str, Any],
    tokens: int,
    slo: Slo = DEFAULT_SLO,
    steps: StepSource | None = None,
    osl: int = DEFAULT_OUTPUT_TOKENS,
) -> list[dict[str, Any]]:
    """Time findings (as sglang_risks.Finding.as_dict gives them) for calls of `tokens` tokens:
    - router_admits_beyond_prefill_slo: the router admits more calls than the prefill engines start within the
      TTFT p90 SLO (all admitted calls arriving at once);
    - decode_batch_beyond_itl_slo: a decode batch at the running limit gives an ITL above the ITL p90 SLO.
    Without a step source: one info finding that says time was not predicted."""
    shape = shape_of(fleet, model_config, tokens)
    steps = fleet_steps(fleet, model_config, steps)
    admitted = shape.router_max_concurrent or shape.decode_max_running * shape.decode_engines
    running = shape.decode_max_running
    work = workload(admitted, tokens, osl)
    full = workload(running * shape.decode_engines, tokens, osl)
    try:
        at_admitted, at_full = predict_shapes([(shape, work), (shape, full)], steps)
    except TimeUnavailable as exc:
        summary = f"the time risks were not judged: {exc}"
        return [_finding("time_not_predicted", "info", summary, {"tokens_per_call": tokens}, [])]
    findings = []
    prefill = [f"{h} prefill" for h in fleet.hosts("prefill")]
    if slo.ttft_p90_ms is not None and at_admitted.ttft_p90.ms > slo.ttft_p90_ms:
        one = sum(t.ms for t in at_admitted.terms[:2])  # one prompt's prefill on one engine
        xfer = at_admitted.terms[2].ms
        per_pass = max(1, shape.chunked_prefill_size // work.isl) if work.isl <= shape.chunked_prefill_size else 1
        rounds = max(0, math.floor((slo.ttft_p90_ms - xfer) / one)) if one > 0 else 0
        # the p90 call is the ceil(0.9 N)-th to start: N calls meet the SLO when that one starts in time
        starts = math.floor(shape.prefill_engines * rounds * per_pass / 0.9)
        engines_needed = math.ceil(math.ceil(0.9 * admitted) / max(1, rounds * per_pass)) if rounds else None
        fixes = []
        if engines_needed is not None and engines_needed > shape.prefill_engines:
            extra = engines_needed - shape.prefill_engines
            fixes.append(
                change(
                    fleet,
                    model_config,
                    f"add {extra} prefill host{'s' if extra > 1 else ''}",
                    [],
                    add_prefill_hosts=extra,
                )
            )
        if starts >= 1:
            fixes.append(
                change(
                    fleet,
                    model_config,
                    f"admit only what the prefill engines start within {_seconds(slo.ttft_p90_ms)}",
                    [("router", "max_concurrent_requests", starts)],
                )
            )
        findings.append(
            _finding(
                "router_admits_beyond_prefill_slo",
                "warn",
                f"the router admits {admitted} parallel calls of {tokens:,} tokens, but {shape.prefill_engines} "
                f"prefill engine(s) start about {starts} of them within the TTFT p90 SLO of "
                f"{_seconds(slo.ttft_p90_ms)} (one prompt's prefill {one / 1000:,.1f} s): predicted TTFT p90 "
                f"{at_admitted.ttft_p90.text()}",
                {
                    "router_admits": admitted,
                    "prefill_engines": shape.prefill_engines,
                    "starts_within_slo": starts,
                    "ttft_p90_s": round(at_admitted.ttft_p90.ms / 1000, 1),
                    "slo_ttft_p90_s": slo.ttft_p90_ms / 1000,
                    "tokens_per_call": tokens,
                },
                prefill,
                fixes,
            )
        )
    findings += _beyond_timeouts(fleet, model_config, shape, work, at_admitted, tokens)
    if slo.itl_p90_ms is not None and at_full.itl_full.ms > slo.itl_p90_ms:
        findings.append(
            _finding(
                "decode_batch_beyond_itl_slo",
                "warn",
                f"a decode batch at the running limit ({running} calls of {tokens:,} tokens per engine) gives an ITL "
                f"of {at_full.itl_full.text('ms')}, above the ITL p90 SLO of {_seconds(slo.itl_p90_ms)}",
                {
                    "decode_running_limit": running,
                    "itl_at_limit_ms": round(at_full.itl_full.ms, 1),
                    "slo_itl_p90_ms": slo.itl_p90_ms,
                    "tokens_per_call": tokens,
                },
                [f"{h} decode" for h in fleet.hosts("decode")],
                [change(fleet, model_config, "a second decode engine halves the batch", [], add_decode_hosts=1)],
            )
        )
    return findings


def e2e_p90_ms(pred: Prediction, work: Workload) -> float:
    """A late call's whole time: its TTFT p90 and its output at ITL p90 (our model)."""
    return pred.ttft_p90.ms + (work.osl - 1) * pred.itl_p90.ms


def call_high_s(pred: Prediction, work: Workload) -> float:
    """A call's whole time at the band's high end, in seconds: its TTFT p90 and its output at ITL p90, each at the
    high end of its band (what a timeout that holds the whole call must allow)."""
    return (pred.ttft_p90.high + (work.osl - 1) * pred.itl_p90.high) / 1000


@dataclass(frozen=True)
class LongestCallTime:
    """The longest call the envelope admits (one call of the served per-call context on an idle fleet), at the band's
    high end of the time model: the whole call, and its first token (the prompt's prefill and its KV transfer)."""

    tokens: int
    call_s: float
    ttft_s: float
    source: str  # whose step times, in words: calibrated to this fleet or a generic H200's, the simulator's speed


def longest_call_time(
    hostvars: Mapping[str, Any],
    groups: Mapping[str, list[str]],
    model_config: Mapping[str, Any],
    steps: StepSource | None = None,
) -> LongestCallTime:
    """The time model's LongestCallTime of a declared fleet (steps None: AIConfigurator when installed, calibrated
    to the fleet's sglang_perf_measured; on simulated engines at their speed factor, at_speed). Raises
    TimeUnavailable, with the reason, without a step source or for a fleet the model cannot shape."""
    fleet = fleet_from_inventory(hostvars, groups)
    try:
        tokens = fleet_answer(fleet, model_config, None).memory.served_tokens
        shape = shape_of(fleet, model_config, tokens)
        factor = sim_speed_factor(hostvars, groups)
    except (ValueError, KeyError, TypeError) as exc:
        raise TimeUnavailable(f"time: not predicted ({str(exc).splitlines()[0][:200]})") from exc
    source = fleet_steps(fleet, model_config, steps if steps is not None else default_steps())
    if source is None:
        raise TimeUnavailable(NOT_PREDICTED)
    work = workload(1, tokens)
    (pred,) = predict_shapes([(shape, work)], source)
    pred = at_speed(pred, factor)
    if isinstance(source, LiveSteps):
        whose = "from the live fleet's measured rates"
    elif isinstance(source, CalibratedSteps):
        generic = [stage for stage in ("prefill", "decode") if not source.calibration.stage_points(stage)]
        whose = "calibrated to this fleet" + (f" (its {generic[0]} steps a generic H200's)" if generic else "")
    else:
        whose = f"uncalibrated (no {VARIABLE} declared): {source_text(source).split(';')[0]}"  # less its corrections
    if factor and factor != 1:
        whose += f", divided by {factor:g}, the simulator's {SIM_SPEED_FACTOR}"
    return LongestCallTime(tokens, call_high_s(pred, work), pred.ttft_p90.high / 1000, whose)


def _beyond_timeouts(
    fleet: Fleet, model_config: Mapping[str, Any], shape: FleetShape, work: Workload, pred: Prediction, tokens: int
) -> list[dict[str, Any]]:
    """call_beyond_request_timeout: the calls the routers admit at once, of `tokens` each, take longer (TTFT p90 +
    the output at ITL p90) than the smallest request_timeout_secs of the routers (smg's default where none is
    declared). smg 1.13.0 holds each attempt upstream to that deadline, from sending it to its last byte: a stream
    already answered ends with a stream_error event, a call not yet answered is tried again, up to retry_max_retries
    attempts, then 502 (measured: tests/component/sim/test_smg_request_timeout.py)."""
    routers = [(h, router_envelope(fleet.hostvars[h])) for h in fleet.hosts("router")]
    if not routers:
        return []
    limits = [
        (h, float(env.get("request_timeout_secs") or default_of("router", "request_timeout_secs")))
        for h, env in routers
    ]
    host, timeout_s = min(limits, key=lambda hl: hl[1])
    e2e = e2e_p90_ms(pred, work)
    if e2e <= timeout_s * 1000:
        return []
    needed = math.ceil(call_high_s(pred, work))
    fixes = [
        change(
            fleet,
            model_config,
            f"raise request_timeout_secs to the band's high end of the call's time ({needed:,} s)",
            [("router", "request_timeout_secs", needed)],
        )
    ]
    return [
        _finding(
            "call_beyond_request_timeout",
            "warn",
            f"{work.concurrency} calls of {tokens:,} tokens admitted at once take up to {e2e / 1000:,.0f} s each "
            f"(TTFT p90 {pred.ttft_p90.text()}, then {work.osl - 1:,} tokens at ITL p90 {pred.itl_p90.ms:,.1f} ms), "
            f"beyond {host}'s request_timeout_secs={timeout_s:g}: smg ends each attempt at that deadline, so a stream "
            "ends in a stream_error event and a call not yet answered is retried, then refused with 502",
            {
                "calls": work.concurrency,
                "tokens_per_call": tokens,
                "e2e_p90_s": round(e2e / 1000, 1),
                "ttft_p90_s": round(pred.ttft_p90.ms / 1000, 1),
                "request_timeout_secs": timeout_s,
            },
            [f"{h} router" for h, _env in routers],
            fixes,
        )
    ]


def _finding(
    id_: str,
    severity: str,
    summary: str,
    numbers: dict[str, Any],
    servers: list[str],
    fixes: Sequence[Option] = (),
) -> dict[str, Any]:
    return Finding(id_, severity, summary, numbers, servers, [fix_of(o) for o in fixes]).as_dict()


# ---------------------------------------------------------------- one request


def request_times(
    fleet: Fleet,
    model_config: Mapping[str, Any],
    input_tokens: int,
    new_tokens: int,
    steps: StepSource | None,
) -> list[str]:
    """Predicted TTFT / ITL of one call of `input_tokens` + `new_tokens` on an idle fleet, and with as many such
    calls as the router admits (the decode running slots when it admits without bound) arriving at once."""
    tokens = input_tokens + new_tokens
    shape = shape_of(fleet, model_config, tokens)
    steps = fleet_steps(fleet, model_config, steps)
    admitted = shape.router_max_concurrent or shape.decode_max_running * shape.decode_engines
    idle = Workload(isl=max(1, input_tokens), osl=max(1, new_tokens), concurrency=1)
    busy = Workload(isl=max(1, input_tokens), osl=max(1, new_tokens), concurrency=admitted)
    try:
        one, many = predict_shapes([(shape, idle), (shape, busy)], steps)
    except TimeUnavailable as exc:
        return [str(exc)]
    who = "the router's max_concurrent_requests" if shape.router_max_concurrent else "the decode running slots"
    lines = ["idle fleet, " + time_lines(one, idle)[0]] + [f"  {line}" for line in figure_lines(one)]
    lines += [f"at the admitted concurrency ({admitted}, {who}), " + time_lines(many, busy)[0]]
    lines += [f"  {line}" for line in figure_lines(many)]
    for work, pred in ((idle, one), (busy, many)):
        for risk in _beyond_timeouts(fleet, model_config, shape, work, pred, tokens):
            lines.append(f"risk: {risk['id']}: {risk['summary']}")
    return lines
