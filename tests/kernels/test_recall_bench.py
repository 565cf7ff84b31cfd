"""Smoke test of bench/index_k_recall.py: it runs and prints the table."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import index_k_recall


def test_prints_recall_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert index_k_recall.main(["--lengths", "256", "4096", "--trials", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["context", "|", "exact", "|", "bf16", "|", "fp8"]
    rows = {int(line.split("|")[0]): [float(v) for v in line.split("|")[1:]] for line in lines[3:5]}
    assert rows[256] == [1.0, 1.0, 1.0]  # a context shorter than top-k always keeps every key
    assert set(rows) == {256, 4096}
