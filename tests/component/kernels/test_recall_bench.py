"""Smoke test of bench/index_k_recall.py: it runs SGLang's patched scoring in the parser venv and prints the table."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PARSER_PYTHON = REPO / ".cache/sglang-parser-venv/bin/python"


def test_prints_selection_table() -> None:
    if not PARSER_PYTHON.exists():
        pytest.fail(f"{PARSER_PYTHON} is missing; fix: run `make parser-venv` (make test does it)")
    cmd = [str(PARSER_PYTHON), str(REPO / "bench/index_k_recall.py"), "--lengths", "256", "4096"]
    proc = subprocess.run([*cmd, "--trials", "2", "--depths", "0.5"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = proc.stdout.splitlines()
    assert "fp8_paged_mqa_logits_torch" in lines[0] and "bf16_paged_mqa_logits" in lines[0]
    assert lines[2].split() == ["context", "depth", "|", "exact", "bf16", "fp8", "|", "bf16", "fp8"]
    rows = {int(line.split()[0]): [float(v) for v in line.replace("|", " ").split()[2:]] for line in lines[4:6]}
    assert set(rows) == {256, 4096}
    assert rows[256] == [1.0] * 5  # a context shorter than top-k keeps every key, in every format
    exact, bf16, _fp8, selected_bf16, selected_fp8 = rows[4096]
    assert exact == bf16 == 1.0
    # bf16 keys keep most of the exact top-512, fp8 keys lose a large share of it.
    assert selected_bf16 > 0.9 > 0.7 > selected_fp8, rows[4096]
