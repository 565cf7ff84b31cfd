"""The conformance grid: envelopes sized both by the capacity model and by SGLang 0.5.23's own code on CPU.

Shared by tests/component/conformance/test_capacity_conformance.py (which asserts agreement) and
bench/capacity_conformance.py (which prints the whole table). Both sides get the same available bytes: the
model's KV budget (free memory x mem_fraction_static - weights), which on a GPU SGLang measures itself.
"""

from __future__ import annotations

import itertools
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_capacity import resolve_args, resolve_engine, size_pool

REPO = Path(__file__).resolve().parents[3]
PARSER_PYTHON = REPO / ".cache" / "sglang-parser-venv" / "bin" / "python"
HARNESS = Path(__file__).with_name("sglang_pool.py")
GPU_GIB = 141  # H200, as the inventories declare
TOKEN_TOLERANCE = 0.005

MODELS = {
    "deepseek-v4-flash": {"params_b": 284, "quantization": "mxfp4", "tp": (4, 8), "context": (131072, 524288)},
    "deepseek-v3.2": {"params_b": 671, "quantization": "fp8", "tp": (8,), "context": (131072,)},
}
MODES = ("prefill", "decode", "null")
RUNNING = (None, 16, 64, 256)
FRACTIONS = (0.70, 0.75, 0.80, 0.85, 0.90)
INDEX_K = (False, True)


@dataclass(frozen=True)
class Cell:
    model: str
    mode: str
    max_running_requests: int | None
    context_length: int
    tp_size: int
    bf16_index_k: bool
    kv_cache_dtype: str = "fp8_e4m3"
    max_total_tokens: int | None = None
    extra_argv: tuple[str, ...] = ()

    def envelope(self) -> dict[str, Any]:
        env: dict[str, Any] = {
            "tp_size": self.tp_size,
            "context_length": self.context_length,
            "chunked_prefill_size": 8192,
            "kv_cache_dtype": self.kv_cache_dtype,
            "bf16_index_k": self.bf16_index_k,
        }
        if self.mode != "null":
            env["disaggregation_mode"] = self.mode
        if self.max_running_requests is not None:
            env["max_running_requests"] = self.max_running_requests
        if self.max_total_tokens is not None:
            env["max_total_tokens"] = self.max_total_tokens
        if "--dp-size" in self.extra_argv:
            env["dp_size"] = int(self.extra_argv[self.extra_argv.index("--dp-size") + 1])
        return env

    def argv(self) -> list[str]:
        argv = ["--model-path", str(REPO / "models" / self.model), "--tp-size", str(self.tp_size)]
        argv += ["--context-length", str(self.context_length), "--chunked-prefill-size", "8192"]
        argv += ["--kv-cache-dtype", self.kv_cache_dtype, "--mem-fraction-static", "0.8"]
        if self.mode != "null":
            argv += ["--disaggregation-mode", self.mode]
        if self.max_running_requests is not None:
            argv += ["--max-running-requests", str(self.max_running_requests)]
        if self.max_total_tokens is not None:
            argv += ["--max-total-tokens", str(self.max_total_tokens)]
        return argv + list(self.extra_argv)

    def name(self) -> str:
        running = self.max_running_requests or "unset"
        index = "bf16" if self.bf16_index_k else "fp8"
        cap = f" max_total_tokens={self.max_total_tokens}" if self.max_total_tokens else ""
        cap += "".join(f" {arg}" for arg in self.extra_argv)
        return (
            f"{self.model} {self.mode} mrr={running} ctx={self.context_length} tp={self.tp_size} idx={index}"
            f" kv={self.kv_cache_dtype}{cap}"
        )


def grid() -> list[Cell]:
    cells = []
    for model, spec in MODELS.items():
        for mode, running, context, tp, index in itertools.product(
            MODES, RUNNING, spec["context"], spec["tp"], INDEX_K
        ):
            cells.append(Cell(model, mode, running, context, tp, index))
    cells += [Cell("deepseek-v4-flash", "decode", 64, 524288, 4, index, "bfloat16") for index in INDEX_K]
    cells += [Cell("deepseek-v4-flash", mode, 64, 524288, 4, True, max_total_tokens=1_000_000) for mode in MODES]
    cells += [Cell("deepseek-v3.2", "null", None, 131072, 8, False, max_total_tokens=300_000)]
    # Data-parallel replicas (--dp-size): each replica a scheduler with its own pool.
    cells += [
        Cell("deepseek-v4-flash", mode, running, 524288, 2, True, extra_argv=("--dp-size", "2"))
        for mode in ("decode", "prefill")
        for running in (16, 64)
    ]
    return cells


def model_config(name: str) -> dict[str, Any]:
    return json.loads((REPO / "models" / name / "config.json").read_text())


def budget(cell: Cell, fraction: float) -> int:
    """The KV byte budget the capacity model gives this cell at `fraction` (free x fraction - weights)."""
    spec = MODELS[cell.model]
    limits = resolve_engine(
        model_config(cell.model),
        {**cell.envelope(), "mem_fraction_static": fraction},
        GPU_GIB,
        params_b=spec["params_b"],
        quantization=spec["quantization"],
    )
    return limits.kv_budget_bytes


def ours(cell: Cell, available: int) -> dict[str, Any]:
    config = model_config(cell.model)
    pool = size_pool(config, resolve_args(config, cell.envelope(), GPU_GIB), available)
    return {
        "max_total_num_tokens": pool.max_total_num_tokens,
        "swa_max_total_num_tokens": pool.swa_tokens,
        "bytes_per_full_token": pool.bytes_per_token,
        "fixed_bytes": pool.fixed_bytes,
        "max_running_requests": pool.max_running_requests,
    }


def sglang(cells: list[Cell], budgets: list[list[int]]) -> list[list[dict[str, Any]]]:
    """SGLang's own figures for each cell and budget (tests/component/conformance/sglang_pool.py in the parser venv)."""
    request = {
        "cases": [
            {"argv": cell.argv(), "budgets": cell_budgets, "bf16_index_k": cell.bf16_index_k}
            for cell, cell_budgets in zip(cells, budgets, strict=True)
        ]
    }
    run = subprocess.run(
        [str(PARSER_PYTHON), str(HARNESS)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if run.returncode != 0:
        raise RuntimeError(f"SGLang's pool sizing failed: {run.stderr[-3000:]}")
    return json.loads(run.stdout)


def compare(ours_row: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    """The terms that differ beyond the tolerance (tokens within 0.5 %, running requests exact)."""
    problems = []
    if "error" in theirs:
        return [f"SGLang refused: {theirs['error']}"]
    for term in ("max_total_num_tokens", "swa_max_total_num_tokens"):
        want, got = theirs[term] or 0, ours_row[term]
        if abs(got - want) > TOKEN_TOLERANCE * max(want, 1):
            problems.append(f"{term}: model {got:,} vs SGLang {want:,} ({(got - want) / max(want, 1):+.2%})")
    for term in ("bytes_per_full_token", "fixed_bytes"):
        want = theirs.get(term)
        if want is not None and abs(ours_row[term] - want) > TOKEN_TOLERANCE * max(want, 1):
            problems.append(f"{term}: model {ours_row[term]:,.2f} vs SGLang {want:,.2f}")
    if ours_row["max_running_requests"] != theirs["max_running_requests"]:
        problems.append(
            f"max_running_requests: model {ours_row['max_running_requests']} vs SGLang {theirs['max_running_requests']}"
        )
    return problems
