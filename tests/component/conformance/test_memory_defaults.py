"""chunked_prefill_size left unset: the capacity model resolves what SGLang 0.5.23's own memory hook resolves, run on
CPU in the parser venv with the GPU's memory set to each size (80 GiB H100, 141 GiB H200, 192 GiB B200, and the
thresholds' neighbours); on a PD prefill engine mem_fraction_static too, which SGLang derives from the chunk."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_capacity import resolve_args
from pool_grid import PARSER_PYTHON, REPO

HARNESS = Path(__file__).with_name("sglang_memory_defaults.py")
GIBS = (40, 60, 80, 141, 159, 160, 192)
ENVELOPES = (
    {"disaggregation_mode": "prefill"},
    {"disaggregation_mode": "decode", "max_running_requests": 64},
    {},
)


def _argv(envelope: dict[str, object]) -> list[str]:
    argv = ["--model-path", str(REPO / "models" / "deepseek-v4-flash"), "--tp-size", "4", "--context-length", "524288"]
    for key, value in envelope.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return argv


def test_memory_defaults_follow_sglang_by_gpu_size() -> None:
    if not PARSER_PYTHON.exists():
        pytest.fail(f"{PARSER_PYTHON} is missing; fix: run `make parser-venv` (make test does it)")
    request = {"argvs": [_argv(e) for e in ENVELOPES], "gibs": list(GIBS)}
    run = subprocess.run(
        [str(PARSER_PYTHON), str(HARNESS)], input=json.dumps(request), capture_output=True, text=True, timeout=600,
        check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    config = json.loads((REPO / "models" / "deepseek-v4-flash" / "config.json").read_text())
    differ = []
    for envelope, theirs in zip(ENVELOPES, json.loads(run.stdout), strict=True):
        for gib, sglang in zip(GIBS, theirs, strict=True):
            ours = resolve_args(config, {"tp_size": 4, "context_length": 524288, **envelope}, gib)
            keys = (
                ("chunked_prefill_size", "mem_fraction_static")
                if envelope == ENVELOPES[0]
                else ("chunked_prefill_size",)
            )
            mine, sglang = {k: ours[k] for k in keys}, {k: sglang[k] for k in keys}
            if mine != sglang:
                differ.append(f"{envelope} at {gib} GiB: ours {mine}, SGLang {sglang}")
    assert not differ, "\n".join(differ)
