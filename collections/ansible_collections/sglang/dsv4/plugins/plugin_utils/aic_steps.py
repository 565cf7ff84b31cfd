"""Per-step times from NVIDIA AIConfigurator 0.12.0, run inside its own venv (make perf-venv).

Reads a JSON list of step requests on stdin and writes one JSON result per request on stdout, in order. One
process answers a whole batch: the perf database loads once (5-7 s), then a fraction of a second a request. The
database version is resolved once per system and handed to each estimate: cli_estimate would otherwise look it up
again for each request, parsing the packaged databases' YAML each time (0.8 s of the 1.2 s a request took). The
project calls this through plugins/plugin_utils/sglang_perf_aic.py, which caches the answers; nothing in the project
imports aiconfigurator.

A request: {"mode": "static_ctx" | "static_gen", "model": ..., "system": "h200_sxm", "database_mode": "HYBRID",
"tp": 4, "ep": 4, "isl": N, "prefix": P, "batch": B}. static_ctx is one prefill pass of B sequences of isl tokens of
which prefix are already cached; static_gen is one decode step of B sequences at context isl.
A result: {"ms", "ops": {op: ms}, "sources": {op: tag}, "backend_version", "oom"} or {"error": "..."}.
Source tags are AIConfigurator's: silicon (measured table data), empirical (formula fallback), estimated (modeled
from measured components), sol (speed of light), mixed (a sum over several of these).
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
        tp_size=int(req["tp"]),
        moe_ep_size=int(req["ep"]),
    )
    summary = result.summary
    if mode == "static_ctx":
        ms, ops, sources = result.ttft, summary.get_context_latency_dict(), summary.get_context_source_dict()
    else:
        ms, ops, sources = result.tpot, summary.get_generation_latency_dict(), summary.get_generation_source_dict()
    return {
        "ms": float(ms),
        "ops": {name: float(value) for name, value in ops.items()},
        "sources": {name: str(tag) for name, tag in sources.items()},
        "backend_version": str(result.backend_version),
        "oom": result.kv_cache_warning or None,
    }


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
