"""An edge of `sglang-envelope monitoring` (cli/sglang_envelope_cli/commands.monitoring_files): the YAML files
fold a long line at the first space past column 1000, and the folded text reads back whole. The inventory is
synthetic: one decode host with a 402-character name, which puts a space of one rule's expr at column 1001."""

from __future__ import annotations

from typing import Any

import ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_dashboard  # noqa: F401  (the grafana SDK loads at import, not inside the test)
import sglang_envelope_cli.commands as cli
import yaml

HOST = "h" * 402
HOSTVARS: dict[str, dict[str, Any]] = {
    HOST: {
        "sglang_model": {
            "name": "deepseek-v4-flash",
            "params_b": 284,
            "path": "/models/DeepSeek-V4-Flash",
            "quantization": "mxfp4",
            "served_name": "deepseek-v4",
        },
        "sglang_gpu_memory_gib": 141,
        "sglang_engine_common": {
            "context_length": 524288,
            "page_size": 256,
            "tp_size": 4,
            "kv_cache_dtype": "fp8_e4m3",
            "enable_metrics": True,
        },
        "sglang_decode": {"gpu_ids": [4, 5, 6, 7], "max_running_requests": 64, "port": 30001},
    }
}


def test_a_line_past_column_1000_folds_at_the_next_space() -> None:
    rules = cli.monitoring_files(HOSTVARS, {"sglang_decode": [HOST]})["sglang_rules.yml"]
    lines = rules.splitlines()
    at = next(i for i, line in enumerate(lines) if "num_running_reqs" in line and line.endswith(" =="))
    assert (len(lines[at]), lines[at + 1]) == (1001, "      0")
    assert max(len(line) for line in lines) == 1001
    exprs = [r["expr"] for g in yaml.safe_load(rules)["groups"] for r in g["rules"]]
    stalled = next(e for e in exprs if "num_running_reqs" in e and e.endswith(" == 0"))
    assert "\n" not in stalled and len(stalled) == 1001 - len("    expr: ") + len(" 0")
