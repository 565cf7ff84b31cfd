"""Per-step times from NVIDIA AIConfigurator 0.12.0, run inside its own venv (make perf-venv).

Reads a JSON list of step requests on stdin and writes one JSON result per request on stdout, in order. One
process answers a whole batch: the perf database loads once (5-7 s), then a fraction of a second a request. The
database version is resolved once per system and handed to each estimate: cli_estimate would otherwise look it up
again for each request, parsing the packaged databases' YAML each time (0.8 s of the 1.2 s a request took). The
project calls this through plugins/plugin_utils/sglang_perf_aic.py, which caches the answers; nothing in the project
imports aiconfigurator.

A request: {"mode": "static_ctx" | "static_gen", "model": ..., "system": "h200_sxm", "database_mode": "HYBRID",
"tp": 4, "ep": 4, "isl": N, "prefix": P, "batch": B}. static_ctx is one prefill pass of B sequences of isl tokens of
which prefix are already cached; static_gen is one decode step of B sequences at context isl. With "attn_dp": D, the
engine's tp GPUs run attention data-parallel in D ranks (SGLang's attn_dp_size) and B counts the sequences of one rank.
With "interconnect": "pcie" the answer adds the op `tp_allreduce_pcie`:
the TP all-reduces of the step (two a layer: attention out and MoE out, as AIConfigurator's dispatch ops count them)
moved from NVLink to PCIe, priced as a ring all-reduce on AIConfigurator's own PCIe node spec (systems/h100_pcie.yaml:
intra_node_bw per GPU and p2p_latency per hop) less the same all-reduce as AIConfigurator measured it on H200 NVLink
(comm/sglang/<version>/custom_allreduce_perf.parquet, CUDA-graph kernel), never below 0; layers and hidden size from
AIConfigurator's own copy of the model's config (model_configs/).
A result: {"ms", "ops": {op: ms}, "sources": {op: tag}, "backend_version", "oom"} or {"error": "..."}.
Source tags are AIConfigurator's: silicon (measured table data), empirical (formula fallback), estimated (modeled
from measured components), sol (speed of light), mixed (a sum over several of these); and pcie_model for the term
above.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Callable
from functools import cache, partial
from typing import Any

BACKEND = "sglang"
PCIE_SPEC = "h100_pcie.yaml"  # AIConfigurator's PCIe node (no NVLink): 64 GB/s per GPU, 10 us per hop
PCIE_TAG = "pcie_model"


def _systems_dir() -> str:
    import os

    import aiconfigurator_core

    return os.path.join(os.path.dirname(aiconfigurator_core.__file__), "systems")


@cache
def _pcie_node() -> tuple[float, float]:
    """(bytes/s per GPU, seconds per hop) of AIConfigurator's PCIe node spec."""
    import os

    import yaml

    with open(os.path.join(_systems_dir(), PCIE_SPEC)) as f:
        node = yaml.safe_load(f)["node"]
    return float(node["intra_node_bw"]), float(node["p2p_latency"])


@cache
def _nvlink_allreduce(system: str, version: str, gpus: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """AIConfigurator's measured custom all-reduce on `system` (message sizes in elements, latency in ms)."""
    import os

    import pandas as pd

    path = os.path.join(_systems_dir(), "data", system, "comm", BACKEND, version, "custom_allreduce_perf.parquet")
    table = pd.read_parquet(path)
    rows = table[(table.num_gpus == gpus) & (table.backend == "sglang_graph")].sort_values("message_size")
    return tuple(float(v) for v in rows.message_size), tuple(float(v) for v in rows.latency)


def _interp(x: float, xs: tuple[float, ...], ys: tuple[float, ...]) -> float:
    """Linear in between the measured sizes, proportional beyond the largest, the smallest's below it."""
    import numpy as np

    return ys[-1] * x / xs[-1] if x >= xs[-1] else float(np.interp(x, xs, ys))


@cache
def _model_dims(model: str) -> tuple[int, int]:
    """(layers, hidden size) of `model` from AIConfigurator's packaged config."""
    import os

    path = os.path.join(os.path.dirname(_systems_dir()), "model_configs", model.replace("/", "--") + "_config.json")
    with open(path) as f:
        config = json.load(f)
    return int(config["num_hidden_layers"]), int(config["hidden_size"])


def pcie_allreduce_ms(req: dict[str, Any], version: str) -> float:
    """The extra ms of a step's TP all-reduces on PCIe over AIConfigurator's measured NVLink ones (module docstring)."""
    gpus = int(req["tp"])
    if gpus <= 1:
        return 0.0
    tokens = int(req["batch"]) * (int(req["isl"]) - int(req.get("prefix", 0)) if req["mode"] == "static_ctx" else 1)
    layers, hidden = _model_dims(str(req["model"]))
    elements = tokens * hidden
    bandwidth, hop = _pcie_node()
    ring_ms = (2 * (gpus - 1) * hop + 2 * (gpus - 1) / gpus * 2 * elements / bandwidth) * 1000
    sizes, latency = _nvlink_allreduce(req.get("system", "h200_sxm"), version, gpus)
    return max(0.0, ring_ms - _interp(elements, sizes, latency)) * 2 * layers


def _estimate(cli_estimate: Any, version: Callable[[str], str | None], req: dict[str, Any]) -> dict[str, Any]:
    mode = req["mode"]
    if mode not in ("static_ctx", "static_gen"):
        return {"error": f"unknown mode {mode!r}"}
    system = req.get("system", "h200_sxm")
    result = cli_estimate(
        req["model"],
        system,
        mode=mode,
        backend_name=BACKEND,
        backend_version=version(system),
        database_mode=req.get("database_mode", "HYBRID"),
        isl=int(req["isl"]),
        osl=2,
        prefix=int(req.get("prefix", 0)),
        batch_size=int(req["batch"]),
        **_parallel(req),
    )
    summary = result.summary
    if mode == "static_ctx":
        ms, ops, sources = result.ttft, summary.get_context_latency_dict(), summary.get_context_source_dict()
    else:
        ms, ops, sources = result.tpot, summary.get_generation_latency_dict(), summary.get_generation_source_dict()
    out_ops = {name: float(value) for name, value in ops.items()}
    out_sources = {name: str(tag) for name, tag in sources.items()}
    if req.get("interconnect") == "pcie":
        extra = pcie_allreduce_ms(req, str(result.backend_version))
        out_ops["tp_allreduce_pcie"], out_sources["tp_allreduce_pcie"] = extra, PCIE_TAG
        ms = float(ms) + extra
    return {
        "ms": float(ms),
        "ops": out_ops,
        "sources": out_sources,
        "backend_version": str(result.backend_version),
        "oom": result.kv_cache_warning or None,
    }


def _parallel(req: dict[str, Any]) -> dict[str, int]:
    """The estimator's parallel sizes of an engine of tp GPUs: attention TP over `tp`, or with "attn_dp" ranks of
    attention data parallelism, attention TP tp / attn_dp on each (batch is then per rank); the experts over ep."""
    dp = int(req.get("attn_dp", 1))
    if dp <= 1:
        return {"tp_size": int(req["tp"]), "moe_ep_size": int(req["ep"])}
    return {"tp_size": int(req["tp"]) // dp, "attention_dp_size": dp, "moe_ep_size": int(req["ep"]), "moe_tp_size": 1}


def parse_yaml_in_c() -> None:
    """AIConfigurator reads its database descriptions with yaml.safe_load (about 230 files a process, 2.5 s in
    PyYAML's Python parser); libyaml's parser, which the venv's PyYAML carries, reads the same documents into the
    same values in 0.1 s."""
    import yaml

    if getattr(yaml, "__with_libyaml__", False):
        yaml.safe_load = partial(yaml.load, Loader=yaml.CSafeLoader)


def main() -> int:
    logging.disable(logging.WARNING)
    requests = json.load(sys.stdin)
    out = []
    with contextlib.redirect_stdout(sys.stderr):  # the package prints notes; stdout carries only the answer
        parse_yaml_in_c()
        # the venv's package; the project never imports it
        from aiconfigurator.cli.api import cli_estimate
        from aiconfigurator.sdk.perf_database import get_latest_database_version

        # What cli_estimate resolves when given no version (the latest database of the system for the backend).
        version = cache(lambda system: get_latest_database_version(system=system, backend=BACKEND))
        for req in requests:
            try:
                out.append(_estimate(cli_estimate, version, req))
            except Exception as exc:  # one bad request must not lose the batch's other answers
                out.append({"error": f"{type(exc).__name__}: {exc}"})
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
