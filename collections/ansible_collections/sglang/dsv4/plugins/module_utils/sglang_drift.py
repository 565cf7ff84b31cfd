"""The four-layer comparison: declared, on disk, running and effective values of one server, key by key.

Every layer is an envelope (same keys). A drift item names the key, the layer where the value first leaves
the declaration (the origin), every layer that differs, and, where SGLang's semantics explain the gap, why.

- on disk and running: compared with the declaration; an unset key must stay unset (a bool unset = false).
- effective: a declared key must be applied as declared; an unset key is compared with what the capacity
  model predicts (resolve_engine), and for memory-profile keys only as information.
- max_running_requests: SGLang applies min(requested // attn_dp_size, token_capacity // 2) per DP rank.
- max_queued_requests: ignored when disaggregation_mode is prefill or decode.

judge() is the one entry point: one server from what its host readers returned (the layer and live snapshots),
for the audit's report, the verify suite and the drift exporter alike.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from .sglang_capacity import CapacityError, bf16_index_loss, clamp_running_requests, is_dsv4
from .sglang_engine_live import IGNORED, EngineLive
from .sglang_flags import REDACTED
from .sglang_hostfs import meta_differs
from .sglang_schema import BY_NAME, DEPLOY_KEYS, keys_for, limit_keys, normal_form, truthy
from .smg_live import router_effective

# The four layers of a value, in the order the audit reads and reports them.
LAYERS = ("declared", "on_disk", "running", "effective")
# Keys whose unset value SGLang derives from the GPU's memory profile: a gap to the prediction is information.
PROFILE_KEYS = frozenset(
    {"max_total_tokens", "mem_fraction_static", "chunked_prefill_size", "max_prefill_tokens", "swa_full_tokens_ratio"}
)
# Resolutions that are not drift: declared value -> values SGLang may turn it into.
RESOLVES = {("kv_cache_dtype", "auto"): {"fp8_e4m3", "bfloat16", "bf16", "auto"}}


@dataclass
class Drift:
    key: str
    layer: str  # where the value first leaves the declaration
    layers: list[str]  # every layer whose value differs
    declared: Any
    live: Any  # the value at `layer` (for layer "declared": the value deployed on the host)
    severity: str  # drift | info
    explanation: str


@dataclass
class Row:
    key: str
    limit: bool
    values: dict[str, Any]  # layer -> value (absent: unknown)
    marks: dict[str, str] = field(default_factory=dict)  # layer -> drift | info


@dataclass
class Audit:
    rows: list[Row]
    drift: list[Drift]


# ---------------------------------------------------------------- prediction


def predict(model: Mapping[str, Any] | None, declared: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """What the capacity model expects this engine to apply (envelope keys), or ({}, why not)."""
    if not model or not model.get("config"):
        return {}, None
    envelope = {k: v for k, v in declared.items() if k not in DEPLOY_KEYS and v != REDACTED}
    kwargs = {"params_b": model.get("params_b"), "quantization": model.get("quantization")}
    try:
        bf16, fp8, share = bf16_index_loss(model["config"], envelope, float(model.get("gpu_memory_gib") or 0), **kwargs)
        limits = bf16 if envelope.get("bf16_index_k") else fp8
    except (CapacityError, KeyError, TypeError, ValueError) as exc:
        return {}, f"capacity model: {exc}"
    out = {k: v for k, v in limits.resolved.items() if k in BY_NAME and not BY_NAME[k].secret}
    out.update(
        {
            "context_length": limits.context_len,
            "max_total_tokens": limits.max_total_num_tokens,
            "max_running_requests": limits.resolved.get("max_running_requests"),
            "bf16_index_share": None if math.isnan(share) else round(share, 4),
            "dsv4": is_dsv4(model["config"]),
        }
    )
    if out["dsv4"]:
        out["pool_by_index_k"] = {"bf16": bf16.max_total_num_tokens, "fp8": fp8.max_total_num_tokens}
    return out, None


def infer_index_k(pool: int | None, predicted: Mapping[str, Any]) -> tuple[bool, str] | None:
    """(bf16 keys?, the rule) from the live KV pool, when it lies within a quarter of the two predictions' gap of one.

    bf16 keys cost DeepSeek-V4 about 8 % of its pool, so a pool within 2 % of one prediction tells which keys the
    engine budgets; a pool farther from both (weights or free memory unlike the model's) tells nothing.
    """
    pools = predicted.get("pool_by_index_k")
    if not pool or not pools:
        return None
    bf16, fp8 = int(pools["bf16"]), int(pools["fp8"])
    gap = abs(fp8 - bf16) / 4
    nearer = "bf16" if abs(pool - bf16) <= abs(pool - fp8) else "fp8"
    if abs(pool - int(pools[nearer])) >= gap:
        return None
    rule = (
        f"inferred from the KV pool: {pool:,} tokens; the capacity model predicts {bf16:,} with bf16 index keys "
        f"and {fp8:,} with fp8 keys, and the pool lies within a quarter of their gap of the {nearer} figure"
    )
    return nearer == "bf16", rule


# ---------------------------------------------------------------- equality


def same(key: str, a: Any, b: Any) -> bool:
    """Whether two layer values of `key` mean the same setting: its kind's equality (unset bool = false, 128k =
    128000 ...; sglang_schema.Kind.same), a secret by presence only, unset disaggregation_mode = "null", and
    SGLang's <ignored> equal only to itself."""
    spec = BY_NAME.get(key)
    if spec is None:
        return a == b
    if spec.secret:
        return (a is None) == (b is None)
    if key == "disaggregation_mode" and (a is None or b is None):
        return str(a or "null") == str(b or "null")
    if a is not None and b is not None and IGNORED in (a, b):
        return a == b
    try:
        return spec.type.same(normal_form(key, a), normal_form(key, b))
    except (TypeError, ValueError):
        return False


# ---------------------------------------------------------------- effective layer


@dataclass
class LiveContext:
    """Live facts that explain effective values."""

    token_capacity: int | None = None
    attn_dp_size: int = 1
    disaggregation_mode: str = "null"
    requested: dict[str, Any] = field(default_factory=dict)
    page_size: int | None = None


def live_context(effective: Mapping[str, Any], facts: Mapping[str, Any], requested: Mapping[str, Any]) -> LiveContext:
    """The live facts that explain effective values, from an engine's normalized answer (sglang_engine_live.EngineLive):
    the pool as the engine applies it (else the memory report), attention-DP width, PD mode, echoed arguments."""
    return LiveContext(
        token_capacity=effective.get("max_total_tokens") or facts.get("token_capacity"),
        attn_dp_size=int(facts.get("attn_dp_size") or 1),
        disaggregation_mode=str(facts.get("disaggregation_mode") or "null"),
        requested=dict(requested or {}),
        page_size=effective.get("page_size"),
    )


def expected_running(requested: int | None, ctx: LiveContext) -> int | None:
    """max_running_requests SGLang applies for a request, given the live pool (all DP ranks)."""
    if requested is None or not ctx.token_capacity:
        return None
    return clamp_running_requests(int(requested), int(ctx.token_capacity), ctx.attn_dp_size) * ctx.attn_dp_size


def effective_gap(
    key: str, declared: Any, live: Any, predicted: Mapping[str, Any], ctx: LiveContext
) -> tuple[str, str] | None:
    """(severity, explanation) when the effective value is not what the declaration asks for, else None."""
    if live is None:
        return None
    if declared is None:
        return _unset_gap(key, live, predicted, ctx)
    if key == "max_total_tokens":
        page = int(ctx.page_size or 1)
        if int(declared) // page * page <= int(live) <= int(declared):
            return None
    if same(key, declared, live) or str(live) in RESOLVES.get((key, str(declared)), set()):
        return None
    return "drift", _explain(key, declared, live, predicted, ctx)


def _unset_gap(key: str, live: Any, predicted: Mapping[str, Any], ctx: LiveContext) -> tuple[str, str] | None:
    if key == "max_running_requests":
        expected = expected_running(predicted.get("max_running_requests"), ctx)
    elif key == "max_queued_requests" or key not in predicted:
        return None
    else:
        expected = predicted[key]
    if expected is None or same(key, expected, live):
        return None
    severity = "info" if key in PROFILE_KEYS else "drift"
    return severity, f"declared unset: the capacity model predicts {expected}, the engine applies {live}"


def _explain(key: str, declared: Any, live: Any, predicted: Mapping[str, Any], ctx: LiveContext) -> str:
    echoed = ctx.requested.get(key)
    if key == "max_queued_requests" and live == IGNORED:
        return (
            f"SGLang ignores --max-queued-requests when disaggregation_mode={ctx.disaggregation_mode}: "
            "bound the queue with the router's queue_size instead"
        )
    if key == "max_running_requests":
        expected = expected_running(declared, ctx)
        cap = (ctx.token_capacity or 0) // 2
        echo = f"; /server_info echoes {echoed}" if echoed is not None else ""
        if expected is not None and int(live) == expected and int(live) < int(declared):
            return (
                f"SGLang applies min(requested // attn_dp_size, token_capacity // 2) per DP rank: the live pool "
                f"holds {ctx.token_capacity} tokens, so token_capacity // 2 = {cap}{echo}"
            )
        return f"the scheduler applies {live}, not {declared}; token_capacity // 2 = {cap} does not explain it{echo}"
    if key == "max_total_tokens" and int(live) < int(declared):
        return (
            f"the pool is min(profiled, --max-total-tokens): the memory profile holds only {live} tokens "
            f"(mem_fraction_static and the weights leave no room for {declared})"
        )
    if key == "context_length":
        return f"/v1/models max_model_len is {live}, the declaration {declared}"
    if key == "bf16_index_k" and truthy(declared) and not truthy(live):
        return (
            "the engine budgets fp8 index keys although bf16 is declared: needles beyond about 2,000 tokens are "
            "lost again; check SGLANG_DSV4_BF16_INDEX_K in the env file and that the release is the patched fork"
        )
    if key == "page_size" and predicted.get("dsv4") and int(live) == 256:
        return "SGLang forces page_size 256 for DeepSeek-V4"
    return f"the engine applies {live}, the declaration says {declared}"


# ---------------------------------------------------------------- the comparison


def _keys(role: str, *layers: Mapping[str, Any] | None) -> list[str]:
    names = [k.name for k in keys_for(role)]
    present = set().union(*[set(layer) for layer in layers if layer])
    return [n for n in names if n in present or n in limit_keys(role)]


def compare(
    role: str,
    declared: Mapping[str, Any],
    on_disk: Mapping[str, Any] | None = None,
    running: Mapping[str, Any] | None = None,
    effective: Mapping[str, Any] | None = None,
    *,
    predicted: Mapping[str, Any] | None = None,
    live: LiveContext | None = None,
    deployed: Mapping[str, Any] | None = None,
    restart_pending: bool = False,
    effective_from_running: bool = False,
    in_progress: Mapping[str, Any] | None = None,
) -> Audit:
    """Compare the four layers of one server. None for a layer means it was not read.

    `deployed` is the envelope the last deploy recorded on the host (local facts): a key that differs between
    it and the declaration, while the files match it, means the declaration changed and was not deployed.
    `effective_from_running` (the router) skips effective-layer drift: those values derive from the argv.
    `in_progress` is the marker of a deploy that started and did not finish: a declared, on-disk or running gap is
    then explained as that deploy, not as a hand edit.
    """
    predicted = predicted or {}
    ctx = live or LiveContext()
    rows: list[Row] = []
    drift: list[Drift] = []
    limits = set(limit_keys(role))
    for key in _keys(role, declared, on_disk, running, effective):
        d = declared.get(key)
        values: dict[str, Any] = {"declared": d}
        for name, layer in (("on_disk", on_disk), ("running", running), ("effective", effective)):
            if layer is not None and (key in layer or name != "effective"):
                values[name] = layer.get(key)
        row = Row(key, key in limits, values)
        rows.append(row)
        item = _judge(key, values, predicted, ctx, deployed, restart_pending, effective_from_running)
        if item and in_progress is not None and item.layer in ("declared", "on_disk", "running"):
            item.explanation = interrupted_deploy(in_progress, deployed)
        if item:
            drift.append(item)
            for marked in item.layers:
                row.marks[marked] = item.severity
    return Audit(rows, drift)


def _judge(
    key: str,
    values: Mapping[str, Any],
    predicted: Mapping[str, Any],
    ctx: LiveContext,
    deployed: Mapping[str, Any] | None,
    restart_pending: bool,
    effective_from_running: bool,
) -> Drift | None:
    d = values["declared"]
    differs = [n for n in ("on_disk", "running") if n in values and not same(key, values[n], d)]
    gap = None
    if "effective" in values and not effective_from_running:
        gap = effective_gap(key, d, values["effective"], predicted, ctx)
        if gap:
            differs.append("effective")
    if not differs:
        return None
    on_disk, running = values.get("on_disk"), values.get("running")
    if deployed is not None and key in deployed and not same(key, deployed.get(key), d):
        if "on_disk" not in values or same(key, on_disk, deployed.get(key)):
            return Drift(
                key, "declared", differs, d, deployed.get(key), "drift",
                f"the declaration changed since the last deploy, which wrote {deployed.get(key)}: run site.yml",
            )  # fmt: skip
    if "on_disk" in differs:
        if "running" in values and same(key, running, d):
            why = "edited on the host; the process still runs the declared value (a restart would apply the edit)"
        elif "running" in values and same(key, running, on_disk):
            why = "edited on the host (or the declaration changed without a deploy) and applied by a restart"
        else:
            why = "the files on the host differ from the declaration"
        return Drift(key, "on_disk", differs, d, on_disk, "drift", why)
    if "running" in differs:
        why = (
            "the files changed after the process started: restart the unit to apply them"
            if restart_pending
            else "the process runs with a value its files do not have (started or restarted by hand)"
        )
        return Drift(key, "running", differs, d, running, "drift", why)
    if gap is None:
        raise ValueError(f"{key}: no layer differs, so no drift to describe")
    return Drift(key, "effective", differs, d, values["effective"], gap[0], gap[1])


def _worker_urls(items: Any) -> set[str]:
    return {str(w["url"] if isinstance(w, Mapping) else w).rstrip("/") for w in items or []}


def worker_drift(workers: list[Mapping[str, Any]] | None, expected: Mapping[str, Any] | None) -> list[Drift]:
    """The workers the router lists (smg_live.reduce_workers) against the inventory's (sglang_declared.workers):
    a declared worker it does not route to, and a worker it routes to that the inventory does not declare."""
    if workers is None or expected is None:
        return []
    seen = {(str(w["type"]), str(w["url"]).rstrip("/")) for w in workers}
    want = {(kind, url) for kind in ("prefill", "decode") for url in _worker_urls(expected.get(kind))}
    missing = "missing: the router does not route to it; site.yml puts it back"
    out = [Drift("workers", "effective", ["effective"], url, None, "drift", f"{kind} worker {url} {missing}")
           for kind, url in sorted(want - seen)]  # fmt: skip
    unexpected = "unexpected: the inventory does not declare it"
    out += [Drift("workers", "effective", ["effective"], None, url, "drift", f"{kind} worker {url} {unexpected}")
            for kind, url in sorted(seen - want)]  # fmt: skip
    return out


@dataclass
class Verdict:
    """One server judged: its rows and drift, what the capacity model predicts, and the effective layer judged
    (an engine's live values, with what the judge inferred; a router's argv with smg's defaults)."""

    rows: list[Row]
    drift: list[Drift]
    predicted: dict[str, Any] = field(default_factory=dict)
    effective: dict[str, Any] | None = None
    sources: dict[str, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["drift_count"] = sum(1 for d in self.drift if d.severity == "drift")
        return out


def _engine(live: Mapping[str, Any]) -> EngineLive | None:
    if live.get("live") is None:
        return None
    return EngineLive(
        effective=dict(live["live"]),
        requested=dict(live.get("requested") or {}),
        sources=dict(live.get("sources") or {}),
        notes=dict(live.get("notes") or {}),
        facts=dict(live.get("live_facts") or {}),
    )


def judge(
    role: str,
    declared: Mapping[str, Any],
    host: Mapping[str, Any] | None = None,
    live: Mapping[str, Any] | None = None,
    model: Mapping[str, Any] | None = None,
    *,
    declared_files: Mapping[str, Mapping[str, Any]] | None = None,
    expected_workers: Mapping[str, Any] | None = None,
) -> Verdict:
    """Judge one server from what its readers returned, wherever it runs: `host` is the layer reader's snapshot
    (sglang_layers.Layers.snapshot, the sglang_layers_info module), `live` the live reader's
    (sglang_http.ServerLive.snapshot, the sglang_live_info module), `model` the capacity model's inputs. None for
    a side means it was not read. The audit's report, the verify suite and the drift exporter all judge here.

    An engine's index-key dtype, when it does not report it, is inferred from its KV pool (infer_index_k). The
    router's effective limits are its argv with smg's defaults (its cores from the host snapshot)."""
    host, live = host or {}, live or {}
    layers: dict[str, Any] = {
        "deployed": host.get("deployed"),
        "restart_pending": bool(host.get("restart_pending")),
        "in_progress": host.get("in_progress"),
    }
    on_disk, running = host.get("on_disk"), host.get("running")
    if role == "router":
        if running is None:
            effective, notes = None, {"*": "the router's argv is unknown: smg reports no limits over HTTP"}
        else:
            effective, notes = router_effective(running, host.get("cpus"))
        audit = compare(role, declared, on_disk, running, effective, effective_from_running=True, **layers)
        workers = worker_drift((live.get("router") or {}).get("workers"), expected_workers)
        out = Verdict(audit.rows, audit.drift + workers, effective=effective, notes=notes,
                      sources={"*": "running argv + smg defaults"})  # fmt: skip
    else:
        predicted, why = predict(model, declared)
        engine = _engine(live)
        if engine and "bf16_index_k" not in engine.effective:
            inferred = infer_index_k(engine.effective.get("max_total_tokens"), predicted)
            if inferred:
                engine.effective["bf16_index_k"], engine.notes["bf16_index_k"] = inferred
                engine.sources["bf16_index_k"] = "KV pool size (capacity model)"
        ctx = live_context(engine.effective, engine.facts, engine.requested) if engine else LiveContext()
        audit = compare(role, declared, on_disk, running, engine.effective if engine else None,
                        predicted=predicted, live=ctx, **layers)  # fmt: skip
        out = Verdict(audit.rows, audit.drift, predicted)
        if engine:
            out.effective, out.sources, out.notes = engine.effective, engine.sources, engine.notes
        if why:
            out.warnings.append(f"{why}; unset keys are not compared")
    out.drift += host_drift(host.get("files") or {}, declared_files, list(host.get("backups") or []),
                            host.get("deployed"), host.get("in_progress"), list(host.get("releases") or []),
                            host.get("release_switch"))  # fmt: skip
    return out


# ---------------------------------------------------------------- the host: deploy markers, file metadata, leftovers


def change_summary(deployed: Mapping[str, Any] | None, target: Mapping[str, Any] | None, **extra: Any) -> str:
    """What a deploy applies, against what the host last recorded: `key old -> new, ...` (four at most)."""
    before, after = deployed or {}, target or {}
    changed = [k for k in sorted(set(before) | set(after)) if not same(k, before.get(k), after.get(k))]
    parts = [f"{k} {before.get(k)} -> {after.get(k)}" for k in changed[:4]]
    if len(changed) > 4:
        parts.append(f"{len(changed) - 4} more keys")
    parts += [f"{k} {v}" for k, v in extra.items() if v]
    return ", ".join(parts) or "the same envelope"


def interrupted_deploy(in_progress: Mapping[str, Any], deployed: Mapping[str, Any] | None) -> str:
    """The audit's explanation of a server whose deploy started and did not finish."""
    files = ", ".join(in_progress.get("files") or [])
    what = change_summary(deployed, in_progress.get("envelope"), release=in_progress.get("release"), files=files)
    return f"interrupted deploy of {what} at {in_progress.get('since', 'an unknown time')}: rerun site.yml"


def _meta(value: Mapping[str, Any]) -> str:
    return f"{value.get('owner')}:{value.get('group')} {value.get('mode')}"


def host_drift(
    files: Mapping[str, Mapping[str, Any]],
    declared_files: Mapping[str, Mapping[str, Any]] | None,
    backups: list[str],
    deployed: Mapping[str, Any] | None,
    in_progress: Mapping[str, Any] | None = None,
    releases: list[str] | None = None,
    release_switch: Mapping[str, Any] | None = None,
) -> list[Drift]:
    """Drift of one server's host beyond the envelope keys: an unfinished deploy or release switch, a file whose
    owner, group or mode is not what the roles declare, and backup copies a finished deploy would have removed."""
    out: list[Drift] = []
    if release_switch is not None:
        why = (
            f"interrupted switch to release {release_switch.get('to')} (from {release_switch.get('from')}) at "
            f"{release_switch.get('since', 'an unknown time')}: not every engine of the host runs the current "
            "release; rerun site.yml"
        )
        out.append(Drift("release", "on_disk", ["on_disk"], None, release_switch.get("to"), "drift", why))
    if in_progress is not None:
        why = interrupted_deploy(in_progress, deployed)
        out.append(Drift("deploy", "on_disk", ["on_disk"], None, in_progress.get("since"), "drift", why))
    for name, want in (declared_files or {}).items():
        have = files.get(name) or {}
        if not have.get("exists") or "mode" not in have:
            continue
        wrong = meta_differs(have, want)
        if wrong:
            why = (
                f"{have.get('path')} is {_meta(have)}, the roles declare {_meta(want)} ({', '.join(wrong)} differ): "
                "changed on the host or left by an interrupted rollback; rerun site.yml"
            )
            out.append(Drift(f"file:{name}", "on_disk", ["on_disk"], _meta(want), _meta(have), "drift", why))
    if backups:
        why = (
            "backup copies left by a deploy that did not finish (a finished deploy removes them once the server "
            "passed its gate): rerun site.yml"
        )
        out.append(Drift("backups", "on_disk", ["on_disk"], [], list(backups), "drift", why))
    if releases:
        why = (
            "releases that are neither current, previous nor among the newest kept (one without manifest.json is an "
            "install or switch that did not finish); the next release install prunes them, or remove them by hand"
        )
        out.append(Drift("releases", "on_disk", ["on_disk"], [], list(releases), "info", why))
    return out
