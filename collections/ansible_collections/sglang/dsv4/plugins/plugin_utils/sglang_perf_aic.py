"""The StepSource of the time model backed by AIConfigurator 0.12.0: one subprocess into its venv
(.cache/aiconfigurator-venv, `make perf-venv`) per batch of uncached requests, running aic_steps.py; answers cached
under .cache/perf/ by the hash of the request, the installed aiconfigurator-core version and aic_steps.py itself."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_paths
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import (
    NVLINK,
    PCIE,
    DecodeQuery,
    OneRoundSteps,
    PrefillQuery,
    StepTime,
)

VENV = sglang_paths.perf_venv()  # SGLANG_DSV4_PERF_VENV (sglang_paths.py)
CACHE = sglang_paths.perf_cache()  # SGLANG_DSV4_PERF_CACHE
SCRIPT = Path(__file__).with_name("aic_steps.py")
SYSTEM = "h200_sxm"
DATABASE_MODE = "HYBRID"
# AIConfigurator's source tags, in the words of the output
MEASURED_TAGS = {"silicon"}
SOL_TAGS = {"sol"}
PCIE_TAG = "pcie_model"  # aic_steps.py's tag of the PCIe all-reduce term


class PerfVenvMissing(RuntimeError):
    """The estimator's venv is not installed."""


class AicSteps(OneRoundSteps):
    """Per-step times from AIConfigurator's measured H200 data for SGLang (HYBRID: measured where present)."""

    def __init__(self, venv: Path = VENV, cache: Path | None = CACHE, timeout_s: float = 900) -> None:
        self.venv, self.cache, self.timeout_s = venv, cache, timeout_s
        self.calls = 0  # subprocesses started (tests read it)

    def ready(self) -> bool:
        return (self.venv / ".installed").exists()

    def version(self) -> str:
        found = sorted(self.venv.glob("lib/python*/site-packages/aiconfigurator_core-*.dist-info"))
        if not found or not self.ready():
            raise PerfVenvMissing(f"{self.venv} is not installed; fix: run `make perf-venv`")
        return found[-1].name.removeprefix("aiconfigurator_core-").removesuffix(".dist-info")

    def both(
        self, prefills: Sequence[PrefillQuery], decodes: Sequence[DecodeQuery]
    ) -> tuple[list[StepTime], list[StepTime]]:
        """Prefill passes and decode steps in one round: at most one estimator process."""
        reqs = [
            {"mode": "static_ctx", "model": q.model, "tp": q.tp, "ep": q.ep, "isl": q.isl, "prefix": q.prefix}
            | {"batch": q.batch}
            | _link(q.interconnect)
            for q in prefills
        ] + [
            {"mode": "static_gen", "model": q.model, "tp": q.tp, "ep": q.ep, "isl": q.context, "prefix": 0}
            | {"batch": q.batch}
            | _link(q.interconnect)
            | ({"attn_dp": q.attn_dp} if q.attn_dp > 1 else {})
            for q in decodes
        ]
        answers = [self._step(r) for r in self.raw(reqs)] if reqs else []
        return answers[: len(prefills)], answers[len(prefills) :]

    def raw(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """aic_steps.py's answers to `requests` (system and database mode filled in), from the cache or one run."""
        full = [{"system": SYSTEM, "database_mode": DATABASE_MODE} | r for r in requests]
        salt = self.version() + hashlib.sha256(SCRIPT.read_bytes()).hexdigest()
        keys = [hashlib.sha256((salt + json.dumps(r, sort_keys=True)).encode()).hexdigest()[:32] for r in full]
        answers: dict[str, dict[str, Any]] = {}
        if self.cache is not None:
            for key in keys:
                path = self.cache / f"{key}.json"
                if path.exists():
                    answers[key] = json.loads(path.read_text())
        missing = list(dict.fromkeys(k for k in keys if k not in answers))
        if missing:
            todo = [full[keys.index(k)] for k in missing]
            for key, answer in zip(missing, self._run(todo), strict=True):
                answers[key] = answer
                if self.cache is not None and "error" not in answer:
                    self.cache.mkdir(parents=True, exist_ok=True)
                    tmp = self.cache / f".{key}.{os.getpid()}"
                    tmp.write_text(json.dumps(answer))
                    tmp.replace(self.cache / f"{key}.json")
        out = [answers[k] for k in keys]
        for req, answer in zip(full, out, strict=True):
            if "error" in answer:
                raise RuntimeError(f"AIConfigurator refused {req}: {answer['error']}")
        return out

    def _run(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.calls += 1
        proc = subprocess.run(
            [str(self.venv / "bin" / "python"), str(SCRIPT)],
            input=json.dumps(requests),
            capture_output=True,
            text=True,
            timeout=self.timeout_s,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"aic_steps.py failed ({proc.returncode}): {proc.stderr[-2000:]}")
        answers: list[dict[str, Any]] = json.loads(proc.stdout)
        return answers

    @staticmethod
    def _step(answer: dict[str, Any]) -> StepTime:
        ops: dict[str, float] = answer["ops"]
        sources: dict[str, str] = answer["sources"]
        measured = sum(ms for op, ms in ops.items() if sources.get(op) in MEASURED_TAGS)
        sol = sum(ms for op, ms in ops.items() if sources.get(op) in SOL_TAGS)
        link = sum(ms for op, ms in ops.items() if sources.get(op) == PCIE_TAG)
        attention = sum(ms for op, ms in ops.items() if op.endswith("_attention"))
        version = str(answer.get("backend_version", ""))
        return StepTime(
            ms=float(answer["ms"]),
            measured_ms=measured,
            extrapolated_ms=float(answer["ms"]) - measured - sol - link,
            sol_ms=sol,
            attention_ms=attention,
            origin=f"AIConfigurator 0.12.0 (SGLang {version} data on H200)",
            data_version=version,
            interconnect_ms=link,
        )


def _link(interconnect: str) -> dict[str, str]:
    """The request's interconnect: NVLink is what AIConfigurator measured (nothing to add); PCIe adds aic_steps.py's
    all-reduce term."""
    if interconnect not in (NVLINK, PCIE):
        raise ValueError(f"interconnect {interconnect!r}: expected {NVLINK} or {PCIE}")
    return {"interconnect": PCIE} if interconnect == PCIE else {}
