"""`sglang-envelope bench --inventory INV`: SGLang's own benchmark client against the deployed fleet's router, each
measured figure beside the time model's prediction for the same wave.

The client is `sglang.benchmark.serving` of the pinned SGLang wheel, run in the parser venv through
roles/sglang_validate/files/bench_serving_run.py; nothing here measures. A level is one wave: `concurrency` calls of
one shape sent at once (`--max-concurrency C --request-rate inf`), which is the time model's closed-loop burst of
C calls arriving together (sglang_perf_fleet). A lab router is reached inside its host's network namespace; any
other router only with --production-load-ok.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import Any

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_capacity import CapacityError
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_declared import (
    GROUPS,
    WILDCARDS,
    http_url,
    local_url,
    router_envelope,
)
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_flags import API_KEY_VAR
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_schema import EnvelopeError
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_paths
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_perf_fleet as perf
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_chart import _polyline, _scale_log
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_deep import FILES_DIR
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import StepSource
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_plan import (
    PlanError,
    fleet_answer,
    fleet_from_inventory,
    parse_shape,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_sidedoors import is_loopback

from .output import ANSWERED, DOES_NOT_FIT, OUT, jsonable, progress

REPO = sglang_paths.project_dir()  # SGLANG_DSV4_HOME: reports/ and the caches (sglang_paths.py)
PARSER_VENV = sglang_paths.parser_venv()  # SGLANG_DSV4_PARSER_VENV
PERF_VENV = sglang_paths.perf_venv()  # SGLANG_DSV4_PERF_VENV
RUNNER = FILES_DIR / "bench_serving_run.py"  # the collection's sglang_validate role files
TOKENIZERS = REPO / ".cache" / "bench-tokenizer"
LAB_GROUP = "sglang_lab_hosts"
ROUTER_DEFAULT_PORT = 30000  # smg's --port default
DASH = "—"
E2E_SOURCE = "TTFT p50 + (OSL-1) x ITL p50 (the model has no E2E of its own)"
NO_P99 = "the model has no p99"


class BenchError(Exception):
    """A one-line reason the benchmark cannot run, with its fix."""


@dataclass(frozen=True)
class Target:
    """Where the client sends: the router's inventory host, its URL and the network namespace to run in (None:
    from this machine)."""

    host: str
    url: str
    netns: str | None


@dataclass(frozen=True)
class Level:
    """One wave: `prompts` calls of `isl` + `osl` tokens, at most `concurrency` in flight, all sent at once."""

    shape: str
    concurrency: int
    prompts: int
    isl: int
    osl: int

    def text(self) -> str:
        more = f", {self.prompts} prompts" if self.prompts > self.concurrency else ""
        return f"{self.concurrency} call(s) of {self.isl:,} in + {self.osl:,} out at once{more}"


# ---------------------------------------------------------------- the inventory


def inventory_name(inventory: str) -> str:
    path = Path(inventory)
    return path.parent.name if path.suffix in (".yml", ".yaml", ".ini") else path.name


def routers(groups: Mapping[str, list[str]]) -> list[str]:
    return list(groups.get(GROUPS["router"], []))


def refusal(inventory: str, groups: Mapping[str, list[str]]) -> str | None:
    """Why the benchmark must not run against this inventory without --production-load-ok (None: it may)."""
    found = routers(groups)
    outside = [h for h in found if h not in set(groups.get(LAB_GROUP, []))]
    if found and not outside:
        return None
    who = f"router {', '.join(outside)} is" if outside else "no router is declared, so nothing is"
    return (
        f"{inventory}: {who} not a lab host (group {LAB_GROUP}), and bench puts full load on the router it measures; "
        "fix: use a lab inventory, or pass --production-load-ok to load this fleet on purpose"
    )


def router_target(hostvars: Mapping[str, Any], groups: Mapping[str, list[str]], url: str | None = None) -> Target:
    """The first router of the inventory: a lab host is reached on its own loopback inside its network namespace
    (its ansible_host); any other host at its listen address, else at the first of sglang_advertise_host,
    ansible_host and its name that is not loopback (a single-host fleet advertises loopback to its own router)."""
    found = routers(groups)
    host = found[0] if found else ""
    if url:
        return Target(host or "(--url)", url.rstrip("/"), None)
    if not found:
        raise BenchError("the inventory declares no host in sglang_router; fix: declare the router, or pass --url")
    hv = hostvars.get(host) or {}
    envelope = router_envelope(hv)
    port = envelope.get("port") or ROUTER_DEFAULT_PORT
    if host in set(groups.get(LAB_GROUP, [])):
        return Target(host, local_url(envelope.get("host"), port), str(hv.get("ansible_host") or host))
    listen = str(envelope.get("host") or "0.0.0.0")
    if is_loopback(listen):
        raise BenchError(
            f"{host}: the router listens on {listen} only, so it is not reachable from here; fix: run the bench on "
            "that host with --url"
        )
    if listen not in WILDCARDS:
        return Target(host, http_url(listen, port), None)
    names = (hv.get("sglang_advertise_host"), hv.get("ansible_host"), host)
    address = next(str(a) for a in names if a and (not is_loopback(str(a)) or a == host))
    return Target(host, http_url(address, port), None)


def router_api_key(hostvars: Mapping[str, Any], host: str, environ: Mapping[str, str]) -> str | None:
    """The key the router wants (sglang_router_api_key, else sglang_api_key); $SGLANG_API_KEY overrides it. A vaulted
    or templated key is not read here: the environment must give it."""
    if environ.get(API_KEY_VAR):
        return environ[API_KEY_VAR]
    hv = hostvars.get(host) or {}
    for name in ("sglang_router_api_key", "sglang_api_key"):
        value = hv.get(name)
        if value is None or value == "":
            continue
        if isinstance(value, str) and "{{" not in value and "{%" not in value:
            return value
        raise BenchError(
            f"{host}: {name} is vaulted or templated, so its value is not read here; fix: export {API_KEY_VAR}=<key>"
        )
    return None


def sim_keeps_model_time(hostvars: Mapping[str, Any], groups: Mapping[str, list[str]]) -> bool | None:
    """Whether the simulated engines run the model's step times (SGLANG_SIM_STEP_TABLE declared); None: real
    engines."""
    engines = [h for role in ("prefill", "decode") for h in groups.get(GROUPS[role], [])]
    simulated = [h for h in engines if "sglang_sim" in str(hostvars.get(h, {}).get("sglang_engine_command") or "")]
    if not simulated:
        return None
    return all((hostvars[h].get("sglang_engine_extra_env") or {}).get("SGLANG_SIM_STEP_TABLE") for h in simulated)


# ---------------------------------------------------------------- what runs


def parse_concurrency(text: str) -> list[int]:
    """`64,8,1`: the levels, highest first, each once."""
    try:
        values = [int(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        raise BenchError(f"--concurrency {text!r}: expected numbers separated by commas, e.g. 64,8,1") from None
    if not values or any(v <= 0 for v in values):
        raise BenchError(f"--concurrency {text!r}: every level must be a number > 0")
    return sorted(set(values), reverse=True)


def default_levels(top: int) -> list[int]:
    """The admitted concurrency, a quarter of it and 1."""
    return sorted({v for v in (top, top // 4, 1) if v > 0}, reverse=True)


def plan_levels(
    hostvars: Mapping[str, Any],
    groups: Mapping[str, list[str]],
    model_config: Mapping[str, Any],
    wants: Sequence[str],
    osl: int,
    concurrency: Sequence[int] = (),
    prompts: int = 0,
) -> list[Level]:
    """The waves to send. Shapes: each --want (its calls are the top level), else sglang_workload.p90_context_tokens,
    else the audit's typical call (perf.TYPICAL_TOKENS), at the router's admitted concurrency (the fleet answer's
    router_admits, else what the decode fleet runs at once of that length). Levels: `concurrency`, else the top,
    a quarter of it and 1. Each wave sends max(level, prompts) calls."""
    fleet = fleet_from_inventory(dict(hostvars), dict(groups))
    shapes: list[tuple[str, int, int | None]] = []  # (label, tokens, calls asked)
    if wants:
        for want in wants:
            shape = parse_shape(want)
            shapes.append((want, shape.tokens, shape.calls))
    else:
        served = fleet_answer(fleet, model_config, None).memory.served_tokens
        work = next((hv.get("sglang_workload") for hv in hostvars.values() if hv.get("sglang_workload")), None) or {}
        declared = work.get("p90_context_tokens")
        tokens = min(int(declared or perf.TYPICAL_TOKENS), served)
        label = "sglang_workload.p90_context_tokens" if declared else "the audit's typical call"
        shapes.append((f"{label}: {tokens:,} tokens", tokens, None))
    levels = []
    for label, tokens, calls in shapes:
        if calls is None:
            memory = fleet_answer(fleet, model_config, tokens).memory
            calls = memory.router_admits or memory.parallel
        work = perf.workload(1, tokens, osl)
        for c in concurrency or default_levels(calls):
            levels.append(Level(label, c, max(c, prompts), work.isl, work.osl))
    return levels


def predict_levels(
    hostvars: Mapping[str, Any],
    groups: Mapping[str, list[str]],
    model_config: Mapping[str, Any],
    levels: Sequence[Level],
    steps: StepSource | None,
) -> list[dict[str, Any]]:
    """The model's prediction of each wave (sglang_perf_fleet.as_dict), or {"error": why not}."""
    fleet = fleet_from_inventory(dict(hostvars), dict(groups))
    try:
        cases = [
            (
                perf.shape_of(fleet, model_config, level.isl + level.osl),
                perf.Workload(isl=level.isl, osl=level.osl, concurrency=level.concurrency),
            )
            for level in levels
        ]
        preds = perf.predict_shapes(cases, perf.fleet_steps(fleet, model_config, steps))
    except (perf.TimeUnavailable, ValueError) as exc:
        text = str(exc) if isinstance(exc, perf.TimeUnavailable) else f"time: not predicted ({exc})"
        return [{"error": text} for _level in levels]
    return [perf.as_dict(p, w) for p, (_shape, w) in zip(preds, cases, strict=True)]


def bench_argv(level: Level, url: str, tokenizer: str, output: Path, seed: int = 1) -> list[str]:
    """bench_serving's command line of one wave. Its prompts are drawn from `seed`: a seed of their own per wave keeps
    a wave's prompts out of the engines' prefix cache (filled by earlier waves, or by a warm-up request, which is
    off for that reason), so every call pays its prefill, as the model prices a cold burst."""
    return [
        "--seed", str(seed),
        "--warmup-requests", "0",
        "--backend", "sglang",
        "--base-url", url,
        "--dataset-name", "random-ids",
        "--tokenize-prompt",
        "--random-range-ratio", "1",
        "--random-input-len", str(level.isl),
        "--random-output-len", str(level.osl),
        "--num-prompts", str(level.prompts),
        "--max-concurrency", str(level.concurrency),
        "--request-rate", "inf",
        "--pd-separated",
        "--tokenizer", tokenizer,
        "--output-file", str(output),
        "--output-details",
    ]  # fmt: skip


# ---------------------------------------------------------------- measured beside predicted


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


Predicted = tuple[float, float | None, float | None, str]  # value, band low, band high, source
Banded = tuple[float, float, float, str]


def _figure(predicted: Mapping[str, Any], name: str, factor: float) -> Banded:
    fig = predicted[name]
    return fig["ms"] / factor, fig["low_ms"] / factor, fig["high_ms"] / factor, str(fig["source"])


def compare(
    level: Level, result: Mapping[str, Any] | None, predicted: Mapping[str, Any], factor: float | None = None
) -> list[dict[str, Any]]:
    """One row per figure: measured (bench_serving's result), predicted (the model's, divided by the simulator's
    speed factor), its band and source, and measured / predicted. Times in ms, throughput in output tokens/s."""
    scale = factor or 1.0
    got = result or {}
    rows: list[dict[str, Any]] = []

    def row(name: str, unit: str, measured: Any, pred: Predicted | None, source: str) -> None:
        value, low, high, text = pred if pred is not None else (None, None, None, source)
        m = _finite(measured)
        ratio = m / value if m is not None and value is not None and value > 0 and math.isfinite(value) else None
        rows.append(
            {"figure": name, "unit": unit, "measured": m, "predicted": value, "low": low, "high": high}
            | {"ratio": ratio, "source": text}
        )

    timed = "error" not in predicted
    none = str(predicted.get("error", ""))

    def fig(name: str) -> Predicted | None:
        return _figure(predicted, name, scale) if timed else None

    row("TTFT p50", "ms", got.get("median_ttft_ms"), fig("ttft_p50"), none)
    row("TTFT p90", "ms", got.get("p90_ttft_ms"), fig("ttft_p90"), none)
    row("TTFT p99", "ms", got.get("p99_ttft_ms"), None, NO_P99 if timed else none)
    row("ITL p50", "ms", got.get("median_itl_ms"), fig("itl_p50"), none)
    row("ITL p90", "ms", got.get("p90_itl_ms"), fig("itl_p90"), none)
    row("ITL p99", "ms", got.get("p99_itl_ms"), None, NO_P99 if timed else none)
    e2e: Predicted | None = None
    tput: Predicted | None = None
    if timed:
        t50, i50 = _figure(predicted, "ttft_p50", scale), _figure(predicted, "itl_p50", scale)
        n = level.osl - 1
        e2e = (t50[0] + n * i50[0], t50[1] + n * i50[1], t50[2] + n * i50[2], E2E_SOURCE)
        if level.prompts == level.concurrency:
            t90 = _figure(predicted, "ttft_p90", scale)
            tokens = level.prompts * level.osl * 1000.0

            def rate(ttft: float, itl: float) -> float:
                return tokens / (ttft + n * itl) if ttft + n * itl > 0 else math.inf

            tput = (
                rate(t90[0], i50[0]),
                rate(t90[2], i50[2]),
                rate(t90[1], i50[1]),
                "the wave's output over the model's TTFT p90 + (OSL-1) x ITL p50",
            )
    row("E2E p50", "ms", got.get("median_e2e_latency_ms"), e2e, E2E_SOURCE if timed else none)
    many = "more prompts than one wave: the model predicts one wave"
    row("output tok/s", "tok/s", got.get("output_throughput"), tput, many if timed else none)
    completed = got.get("completed")
    errors = level.prompts - int(completed) if completed is not None else None
    rejected: Predicted = (float(predicted.get("rejected", 0)), None, None, "calls the router's queue refuses")
    row("errors", "calls", errors, rejected if timed else None, none)
    rows[-1]["ratio"] = None
    return rows


def _amount(value: float | None, unit: str) -> str:
    if value is None:
        return DASH
    if unit == "ms":
        return f"{value / 1000:,.2f} s" if value >= 1000 else f"{value:,.2f} ms"
    if unit == "tok/s":
        return f"{value:,.1f} tok/s"
    return f"{value:,.0f}"


def _band(low: float | None, high: float | None, unit: str) -> str:
    if low is None or high is None:
        return ""
    if unit == "ms" and high < 1000:
        return f"{low:,.2f}-{high:,.2f} ms"
    if unit == "ms":
        return f"{low / 1000:,.2f}-{high / 1000:,.2f} s"
    return f"{low:,.1f}-{high:,.1f} {unit}"


def render_rows(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Plain aligned text: figure, measured, predicted, band, measured/predicted, source."""
    table = [["figure", "measured", "predicted", "band", "ratio", "source"]]
    for r in rows:
        band = _band(r["low"], r["high"], r["unit"])
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else DASH
        table.append([r["figure"], _amount(r["measured"], r["unit"]), _amount(r["predicted"], r["unit"])])
        table[-1] += [band, ratio, r["source"]]
    widths = [max(len(line[i]) for line in table) for i in range(5)]
    right = (False, True, True, True, True)
    out = []
    for line in table:
        cells = [c.rjust(w) if r else c.ljust(w) for c, w, r in zip(line[:5], widths, right, strict=True)]
        out.append("  ".join([*cells, line[5]]).rstrip())
    return out


# ---------------------------------------------------------------- the chart

W, H = 900, 440
LEFT, RIGHT, TOP, BOTTOM = 80, 300, 40, 50
SERIES = (("TTFT p50", "ttft_p50", "#1f77b4"), ("TTFT p90", "ttft_p90", "#ff7f0e"), ("ITL p50", "itl_p50", "#2ca02c"))


def bench_svg(title: str, points: Sequence[Mapping[str, Any]]) -> str:
    """Measured (solid, dots) against predicted (dashed, with its band shaded) TTFT p50/p90 and ITL p50 per
    concurrency, both axes log scale. `points`: one per level, {"concurrency", "rows"} (compare's rows)."""
    xs = sorted({int(p["concurrency"]) for p in points})
    values = [
        v
        for p in points
        for r in p["rows"]
        if r["figure"] in {s[0] for s in SERIES}
        for v in (r["measured"], r["predicted"], r["low"], r["high"])
        if v is not None and math.isfinite(v) and v > 0
    ]
    x_lo, x_hi = (xs[0], xs[-1]) if len(xs) > 1 else (xs[0] / 2, xs[0] * 2)
    y_lo, y_hi = (min(values) / 1.5, max(values) * 1.5) if values else (1.0, 10.0)

    def px(x: float) -> float:
        return _scale_log(x, x_lo, x_hi, LEFT, W - RIGHT)

    def py(y: float) -> float:
        return _scale_log(min(max(y, y_lo), y_hi), y_lo, y_hi, H - BOTTOM, TOP)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
        f'<rect width="{W}" height="{H}" fill="white"/>',
        f'<text x="{LEFT}" y="22" font-size="14" font-weight="bold">{escape(title)}</text>',
        f'<line x1="{LEFT}" y1="{H - BOTTOM}" x2="{W - RIGHT}" y2="{H - BOTTOM}" stroke="black"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{H - BOTTOM}" stroke="black"/>',
        f'<text x="{(LEFT + W - RIGHT) / 2}" y="{H - 12}" text-anchor="middle">calls at once (log scale)</text>',
        f'<text x="16" y="{(TOP + H - BOTTOM) / 2}" transform="rotate(-90 16 {(TOP + H - BOTTOM) / 2})" '
        'text-anchor="middle">ms (log scale)</text>',
    ]
    for x in xs:
        parts.append(f'<text x="{px(x):.1f}" y="{H - BOTTOM + 16}" text-anchor="middle">{x}</text>')
    tick = 10 ** math.floor(math.log10(y_lo))
    while tick <= y_hi:
        if tick >= y_lo:
            y = py(tick)
            parts.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{W - RIGHT}" y2="{y:.1f}" stroke="#eee"/>')
            parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{tick:g}</text>')
        tick *= 10
    legend: list[tuple[str, str, str]] = []
    for label, _key, color in SERIES:
        found = sorted(
            ((int(p["concurrency"]), r) for p in points for r in p["rows"] if r["figure"] == label),
            key=lambda item: item[0],
        )
        band = [(x, r) for x, r in found if r["low"] is not None and r["high"] is not None]
        if band:
            upper = [f"{px(x):.1f},{py(r['high']):.1f}" for x, r in band]
            lower = [f"{px(x):.1f},{py(r['low']):.1f}" for x, r in reversed(band)]
            parts.append(
                f'<polygon fill="{color}" fill-opacity="0.12" stroke="none" points="{" ".join(upper + lower)}"/>'
            )
        predicted = [(px(x), py(r["predicted"])) for x, r in found if r["predicted"] is not None]
        if predicted:
            parts.append(_polyline(predicted, color, 2, "6,4"))
            legend.append((color, "6,4", f"{label} predicted (band shaded)"))
        measured = [(px(x), py(r["measured"])) for x, r in found if r["measured"] is not None and r["measured"] > 0]
        if measured:
            parts.append(_polyline(measured, color, 2.5))
            parts += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{color}"/>' for x, y in measured]
            legend.append((color, "", f"{label} measured"))
    for i, (color, dash, label) in enumerate(legend):
        y = TOP + 10 + i * 20
        parts.append(_polyline([(W - RIGHT + 12, y), (W - RIGHT + 40, y)], color, 2.5, dash))
        parts.append(f'<text x="{W - RIGHT + 46}" y="{y + 4}">{escape(label)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


# ---------------------------------------------------------------- running it


def parser_python() -> Path:
    python = PARSER_VENV / "bin" / "python"
    if not (PARSER_VENV / ".installed").exists() or not python.exists():
        raise BenchError(
            f"{PARSER_VENV} is not installed (SGLang's benchmark client runs there); fix: make parser-venv"
        )
    return python


def sim_tokenizer(model_name: str, vocab_size: int) -> Path:
    """The simulator's tokenizer for bench_serving (bench_serving_run.py tokenizer), made once under .cache/."""
    target = TOKENIZERS / f"{model_name}-{vocab_size}"
    if (target / "tokenizer.json").is_file():
        return target
    TOKENIZERS.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f"{target.name}.", dir=TOKENIZERS))
    try:
        cmd = [str(parser_python()), str(RUNNER), "tokenizer", str(building), str(vocab_size)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise BenchError(f"making the simulator's tokenizer failed: {done.stderr.strip()[-500:]}")
        building.rename(target)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return target


def _version(venv: Path, name: str) -> str | None:
    for site in sorted(venv.glob("lib/python*/site-packages")):
        for dist in importlib.metadata.distributions(path=[str(site)]):
            if dist.metadata["Name"] and dist.metadata["Name"].lower().replace("_", "-") == name:
                return str(dist.version)
    return None


def versions() -> dict[str, str | None]:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    return {
        "sglang (bench_serving)": _version(PARSER_VENV, "sglang"),
        "aiconfigurator-core (time model)": _version(PERF_VENV, "aiconfigurator-core"),
        "repository commit": commit,
    }


plain = jsonable  # bench.json's values: JSON-able, NaN and infinities as null


def last_result(path: Path) -> dict[str, Any] | None:
    """bench_serving's result dict: the last line of its output file (None: it wrote none)."""
    if not path.is_file():
        return None
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    return dict(json.loads(lines[-1])) if lines else None


def run_levels(
    levels: Sequence[Level], target: Target, tokenizer: str, out: Path, api_key: str | None
) -> list[dict[str, Any] | None]:
    """Every wave through the runner, in one process (its output and bench_serving's progress bars go to the
    terminal); bench_serving's result of each."""
    files = [out / f"level-{i + 1}-c{level.concurrency}.jsonl" for i, level in enumerate(levels)]
    seed = time.time_ns() // 1000 % 1_000_000_000
    runs = [
        {
            "title": f"[level {i + 1}/{len(levels)}] {level.shape}: {level.text()} -> {target.url}",
            "argv": bench_argv(level, target.url, tokenizer, files[i], seed + i),
        }
        for i, level in enumerate(levels)
    ]
    (out / "runs.json").write_text(json.dumps(runs, indent=1) + "\n")
    cmd = [str(parser_python()), str(RUNNER), "runs", str(out / "runs.json")]
    if target.netns:
        if os.geteuid() != 0:
            raise BenchError(f"the router {target.host} listens in network namespace {target.netns}: run as root")
        cmd = ["ip", "netns", "exec", target.netns, *cmd]
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "API_KEY")}
    if api_key:
        env["OPENAI_API_KEY"] = api_key  # bench_serving sends it as "Authorization: Bearer <key>"
    sys.stdout.flush()
    # With --json, stdout carries the document only: the runner's lines go to stderr.
    with load_ends_with_this_process(), subprocess.Popen(cmd, env=env, stdout=2 if OUT.json else None) as runner:
        try:
            runner.wait()
        finally:
            stop(runner)
    return [last_result(f) for f in files]


def _terminated(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def load_ends_with_this_process() -> Iterator[None]:
    """SIGTERM (a `timeout`, a test's teardown, systemd) ends this command through its `finally` blocks, so the
    runner it started stops sending too: left alone, the runner would go on loading the router after we are gone."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def stop(runner: subprocess.Popen[bytes]) -> None:
    """The runner ended: terminated if it still runs, killed if it does not stop within 10 s."""
    if runner.poll() is not None:
        return
    runner.terminate()
    try:
        runner.wait(timeout=10)
    except subprocess.TimeoutExpired:
        runner.kill()
        runner.wait()


def report(
    inventory: str,
    target: Target,
    levels: Sequence[Level],
    results: Sequence[Mapping[str, Any] | None],
    predictions: Sequence[Mapping[str, Any]],
    factor: float | None,
    notes: Sequence[str],
    extra: Mapping[str, Any],
) -> tuple[dict[str, Any], list[str]]:
    """(the JSON document, the printed lines) of a finished run."""
    doc: dict[str, Any] = {
        "inventory": inventory,
        "router": asdict(target),
        "speed_factor": factor,
        "notes": list(notes),
        **extra,
        "levels": [],
    }
    lines = [
        f"bench of {inventory}: router {target.host} at {target.url}"
        + (f" (netns {target.netns})" if target.netns else "")
    ]
    lines += [f"  {note}" for note in notes]
    for i, (level, result, predicted) in enumerate(zip(levels, results, predictions, strict=True)):
        rows = compare(level, result, predicted, factor)
        doc["levels"].append(
            {
                **asdict(level),
                "result": result,
                "predicted": predicted,
                "rows": rows,
            }
        )
        lines += ["", f"level {i + 1}/{len(levels)}: {level.shape}: {level.text()}"]
        if result is None:
            lines.append("  no result: bench_serving failed (its output is above)")
        else:
            lines.append(
                f"  completed {result.get('completed')} of {level.prompts} in {result.get('duration', 0):.2f} s"
            )
        if "error" not in predicted:
            lines.append(f"  predicted: bound by {predicted['binding']}, decode batch {predicted['decode_batch']}")
        lines += [f"  {line}" for line in render_rows(rows)]
    return doc, lines


def bench_command(
    args: argparse.Namespace,
    load_inventory: Callable[[str], tuple[dict[str, Any], dict[str, list[str]]]],
    model_config_for: Callable[[Mapping[str, Any]], dict[str, Any]],
    steps: StepSource | None,
) -> int:
    """The `bench` subcommand (commands.main parses its options)."""
    try:
        hostvars, groups = load_inventory(args.inventory)
        why = refusal(args.inventory, groups)
        if why and not args.production_load_ok:
            return OUT.error(why)
        target = router_target(hostvars, groups, args.url)
        key = router_api_key(hostvars, target.host, os.environ)
        fleet = fleet_from_inventory(hostvars, groups)
        first = fleet.hosts("decode")[:1] or fleet.hosts("prefill")[:1]
        if not first:
            raise BenchError(f"{args.inventory} declares no engine host; fix: add hosts to sglang_decode")
        config = model_config_for(hostvars[first[0]])
        concurrency = parse_concurrency(args.concurrency) if args.concurrency else []
        levels = plan_levels(hostvars, groups, config, args.want or [], args.output_tokens, concurrency, args.prompts)
        factor = perf.sim_speed_factor(hostvars, groups)
        if args.tokenizer:
            tokenizer = args.tokenizer
        elif sim_keeps_model_time(hostvars, groups) is None:
            raise BenchError(
                f"{args.inventory}: the engines are not the simulator, whose tokenizer bench generates; fix: pass "
                "--tokenizer with the served model's tokenizer directory"
            )
        else:
            name = str((hostvars[first[0]].get("sglang_model") or {}).get("name"))
            tokenizer = str(sim_tokenizer(name, int(config["vocab_size"])))
        python = parser_python()
    except (BenchError, PlanError, EnvelopeError, CapacityError, ValueError, KeyError) as exc:
        return OUT.error(str(exc))
    notes = []
    if factor is not None:
        notes.append(f"simulator at speed factor {factor:g}: predicted times x {1 / factor:g}")
    if sim_keeps_model_time(hostvars, groups) is False:
        notes.append(
            "the simulated engines do not run the model's step times (no SGLANG_SIM_STEP_TABLE in "
            "sglang_engine_extra_env): the ratios compare the model with the simulator's own settings"
        )
    if any(level.prompts > level.concurrency for level in levels):
        notes.append("--prompts above a level: the model's figures are of the first wave")
    OUT.say(f"bench: {len(levels)} level(s) against {target.url}; predicting ...")
    with progress("predicting each level's times (the time model)"):
        predictions = predict_levels(hostvars, groups, config, levels, steps)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = Path(args.out) if args.out else REPO / "reports" / f"bench-{inventory_name(args.inventory)}-{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    try:
        results = run_levels(levels, target, tokenizer, out, key)
    except BenchError as exc:
        return OUT.error(str(exc))
    extra = {"started_utc": stamp, "tokenizer": tokenizer, "client": str(python), "versions": versions()}
    doc, lines = report(args.inventory, target, levels, results, predictions, factor, notes, extra)
    json_path = out / "bench.json"
    json_path.write_text(json.dumps(plain(doc), indent=1, allow_nan=False) + "\n")
    (out / "bench.txt").write_text("\n".join(lines) + "\n")
    svgs: list[Path] = []
    for shape in dict.fromkeys(level.shape for level in levels):
        points = [
            {"concurrency": entry["concurrency"], "rows": entry["rows"]}
            for entry in doc["levels"]
            if entry["shape"] == shape
        ]
        path = out / (f"bench-{len(svgs) + 1}.svg" if len({lv.shape for lv in levels}) > 1 else "bench.svg")
        path.write_text(bench_svg(f"{inventory_name(args.inventory)}: {shape}, measured vs predicted", points))
        svgs.append(path)
    OUT.say("\n".join(lines))
    OUT.say(f"\nwritten: {json_path}")
    for path in svgs:
        OUT.say(f"written: {path}")
    OUT.say(f"written: {out / 'bench.txt'} and bench_serving's own files {out}/level-*.jsonl")
    OUT.put("bench", doc)
    OUT.put("files", [str(json_path), *map(str, svgs), str(out / "bench.txt")])
    failed = [i + 1 for i, r in enumerate(results) if r is None or not r.get("completed")]
    if failed:
        print(f"error: level(s) {', '.join(map(str, failed))} completed no call", file=sys.stderr)
        return DOES_NOT_FIT
    return ANSWERED


def add_output_tokens(parser: argparse.ArgumentParser, of: str, count: Callable[[str], int]) -> None:
    """--output-tokens: the output tokens of each call, out of `of` (plan and bench share it); None when not given
    (the command then takes perf.DEFAULT_OUTPUT_TOKENS, and refuses a given value the call cannot hold)."""
    parser.add_argument(
        "--output-tokens",
        type=count,
        default=None,
        metavar="N",
        help=f"output tokens of each call, out of {of} (default {perf.DEFAULT_OUTPUT_TOKENS}; e.g. 1k)",
    )


def add_options(bench: argparse.ArgumentParser, count: Callable[[str], int]) -> None:
    """The `bench` subcommand's own options (commands.build_parser adds --inventory and the global ones)."""
    bench.add_argument(
        "--want", action="append", metavar="CALLSxTOKENS", help="shape, as plan --want (e.g. 64x32k); repeatable"
    )
    add_output_tokens(bench, "its length", count)
    bench.add_argument("--concurrency", metavar="C,C,...", help="levels, e.g. 64,8,1 (default: admitted, /4, 1)")
    bench.add_argument("--prompts", type=int, default=0, metavar="N", help="calls per level, if above the level")
    bench.add_argument("--tokenizer", metavar="PATH", help="the model's tokenizer directory (real engines)")
    bench.add_argument("--url", help="send to this router URL from here instead of the inventory's router")
    bench.add_argument("--out", help="report directory (default reports/bench-<inventory>-<UTC time>/)")
    bench.add_argument(
        "--production-load-ok", action="store_true", help="allow a router that is not a lab host: it gets full load"
    )
