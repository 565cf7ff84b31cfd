"""The capacity command and its chart, against a small inventory written by the test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_capacity import concurrency_table, resolve_engine
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_chart import render_svg

INVENTORY = """all:
  children:
    sglang_engine:
      children:
        sglang_prefill: {hosts: {node1: {}}}
        sglang_decode: {hosts: {node1: {}, node2: {sglang_decode: {gpu_ids: [0, 1, 2, 3], port: 30001}}}}
    sglang_router: {hosts: {node1: {}}}
  vars:
    sglang_model: {name: deepseek-v4-flash, path: /m, served_name: dsv4, params_b: 284, quantization: mxfp4}
    sglang_gpu_memory_gib: 141
    sglang_engine_common: {context_length: 131072, tp_size: 4, bf16_index_k: true}
    sglang_prefill: {gpu_ids: [0, 1, 2, 3], port: 30000, mem_fraction_static: 0.78}
    sglang_decode: {gpu_ids: [4, 5, 6, 7], port: 30001, mem_fraction_static: 0.83}
    sglang_router: {port: 8000, max_concurrent_requests: 128}
"""


def test_capacity_command_prints_every_engine_and_writes_charts(tmp_path: Path) -> None:
    (tmp_path / "hosts.yml").write_text(INVENTORY)
    out = tmp_path / "report"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "sglang_envelope_cli",
            "--no-time",
            "capacity",
            "-i",
            str(tmp_path / "hosts.yml"),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert "## node1 prefill" in run.stdout and "## node1 decode" in run.stdout and "## node2 decode" in run.stdout
    assert "| 131072 |" in run.stdout
    for name in ("node1-prefill.svg", "node1-decode.svg", "node2-decode.svg", "capacity.md"):
        assert (out / name).is_file()
    ElementTree.fromstring((out / "node2-decode.svg").read_text())


def test_capacity_command_reports_a_bad_envelope(tmp_path: Path) -> None:
    (tmp_path / "hosts.yml").write_text(INVENTORY.replace("bf16_index_k: true", "bf16_index_k: true, ctx_len: 5"))
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "sglang_envelope_cli",
            "capacity",
            "-i",
            str(tmp_path / "hosts.yml"),
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert "sglang_engine_common.ctx_len=5: not a known" in run.stderr


def test_chart_marks_declared_context_and_limits(dsv4: dict) -> None:
    limits = resolve_engine(
        dsv4,
        {"tp_size": 4, "mem_fraction_static": 0.83, "disaggregation_mode": "decode", "context_length": 524288},
        141,
    )
    rows = concurrency_table(limits, [8192, 131072, 524288], 100)
    svg = render_svg(rows, 524288, limits.max_running_requests, 100)
    root = ElementTree.fromstring(svg)
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "declared context 512Ki" in texts
    assert "router max_concurrent 100" in texts
    assert f"max_running_requests {limits.max_running_requests}" in texts
