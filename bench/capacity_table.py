"""Time the capacity table for a large fleet: resolve limits, bf16 loss and the concurrency ladder per host.

Run: .venv/bin/python bench/capacity_table.py [hosts]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_capacity import (
    bf16_index_loss,
    concurrency_table,
    default_context_lens,
)

MODEL = json.loads((Path(__file__).resolve().parent.parent / "models/deepseek-v4-flash/config.json").read_text())


def main() -> None:
    hosts = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    envelopes = [
        {
            "tp_size": 4,
            "mem_fraction_static": 0.78 + (i % 6) / 100,
            "context_length": 524288,
            "chunked_prefill_size": 8192,
            "disaggregation_mode": ("prefill", "decode")[i % 2],
            "bf16_index_k": True,
        }
        for i in range(hosts)
    ]
    start = time.perf_counter()
    rows = 0
    for env in envelopes:
        live, fp8, _ = bf16_index_loss(MODEL, env, 141)
        rows += len(concurrency_table(live, default_context_lens(524288), 256, fp8))
    elapsed = time.perf_counter() - start
    print(f"hosts={hosts} rows={rows} seconds={elapsed:.3f} per_host_ms={elapsed / hosts * 1000:.3f}")


if __name__ == "__main__":
    main()
