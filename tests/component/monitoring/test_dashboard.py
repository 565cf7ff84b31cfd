"""The dashboard: generated from the inventory, read back unchanged through Grafana's typed schema
(grafana-foundation-sdk), its first row drawn against the declared and predicted limits, and every metric it
queries exported by SGLang 0.5.23, smg 1.13.0 or the drift exporter."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_alerts import DASHBOARD_FILE, Policy, fleet
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_dashboard import build, validate
from sglang_envelope_cli.commands import (
    load_inventory,
    model_config_for,
    monitoring_files,
)

REPO = Path(__file__).resolve().parents[3]
SGLANG_METRICS = (
    REPO / ".cache/sglang-parser-venv/lib/python3.11/site-packages/sglang/srt/observability/metrics_collector.py"
)


@pytest.fixture(scope="module")
def board(lab_inventory: Any) -> dict[str, Any]:
    hostvars, groups = lab_inventory
    return build(fleet(hostvars, groups, model_config_for(hostvars["lab1"])), Policy(ttft_p99_slo_s=2.0))


def _exprs(board: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in board["panels"] for t in p.get("targets", [])]


def test_the_json_is_grafanas_schema(board: dict[str, Any]) -> None:
    assert validate(board) == []
    assert board["uid"] and board["schemaVersion"] >= 39


def test_validate_catches_what_the_schema_does_not_hold(board: dict[str, Any]) -> None:
    broken = copy.deepcopy(board)
    broken["panels"][1]["gridPosition"] = {"h": 1}
    broken["refresh"] = 30
    problems = validate(broken)
    assert any("gridPosition: not in Grafana's schema" in p for p in problems), problems


def test_first_row_draws_the_declared_limits(board: dict[str, Any], lab_inventory: Any) -> None:
    hostvars = lab_inventory[0]["lab1"]
    titles = [p["title"] for p in board["panels"]]
    assert titles[:4] == [
        "What limits are we running with, and how close are we?",
        "Parallel calls",
        "Total context (KV tokens)",
        "Per-call context (prompt length)",
    ]
    calls, context, per_call = board["panels"][1:4]
    exprs = {t["expr"] for t in calls["targets"]}
    assert f"vector({hostvars['sglang_decode']['max_running_requests']})" in exprs
    assert f"vector({hostvars['sglang_router']['max_concurrent_requests']})" in exprs
    assert f"vector({hostvars['sglang_router']['queue_size']})" in exprs
    assert any(t["legendFormat"].startswith("predicted pool") for t in context["targets"])
    assert "sglang:prompt_tokens_histogram_bucket" in per_call["targets"][0]["expr"]
    assert f"{hostvars['sglang_engine_common']['context_length']:,}" in per_call["description"]


def test_every_queried_metric_is_exported(board: dict[str, Any]) -> None:
    source = SGLANG_METRICS.read_text()
    names = {n for e in _exprs(board) for n in re.findall(r"\b((?:sglang:|smg_)[A-Za-z_]+)", e)}
    smg = {"smg_admission_inflight", "smg_admission_queue_depth", "smg_http_responses_total"}
    for name in sorted(names):
        family = re.sub(r"_(total|bucket)$", "", name)
        assert name in smg or f'"{family}"' in source or f'"{name}"' in source, name


def test_the_cli_writes_the_dashboard(lab_inventory: Any) -> None:
    files = monitoring_files(*lab_inventory)
    assert validate(json.loads(files[DASHBOARD_FILE])) == []


@pytest.mark.parametrize("name", ["production", "multinode"])
def test_other_inventories(name: str) -> None:
    hostvars, groups = load_inventory(str(REPO / "inventories" / name))
    first = hostvars[groups["sglang_engine"][0]]
    assert validate(build(fleet(hostvars, groups, model_config_for(first)), Policy())) == []
