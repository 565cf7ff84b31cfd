"""The generated alert rules: promtool accepts them, each one has a passing promtool test, the tests catch a wrong
threshold, and every metric a rule reads is one SGLang 0.5.23 or smg 1.13.0 really exports."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_alerts import (
    DRIFT_METRIC,
    DRIFT_RUN_METRIC,
    RULES_FILE,
    RULES_TEST_FILE,
    TTFT_BUCKETS,
    MonitoringError,
    Policy,
    all_alerts,
    fleet,
    promtool_tests,
    rule_file,
)
from promtools import run_promtool, write
from sglang_envelope_cli.commands import (
    load_inventory,
    model_config_for,
    monitoring_files,
)

REPO = Path(__file__).resolve().parents[3]
SGLANG_METRICS = (
    REPO / ".cache/sglang-parser-venv/lib/python3.11/site-packages/sglang/srt/observability/metrics_collector.py"
)
SLOS = Policy(ttft_p99_slo_s=2.0, availability_slo=0.995)


def _alerts(inventory: tuple[dict[str, Any], dict[str, list[str]]], policy: Policy) -> dict[str, list[Any]]:
    hostvars, groups = inventory
    engines = groups["sglang_engine"]
    return all_alerts(fleet(hostvars, groups, model_config_for(hostvars[engines[0]])), policy)


@pytest.mark.parametrize("name", ["lab", "production", "multinode"])
def test_promtool_checks_and_tests_the_rules(name: str, promtool: str, tmp_path: Path) -> None:
    hostvars, groups = load_inventory(str(REPO / "inventories" / name))
    for file, text in monitoring_files(hostvars, groups).items():
        (tmp_path / file).write_text(text)
    checked = run_promtool(promtool, "check", "rules", RULES_FILE, cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = run_promtool(promtool, "test", "rules", RULES_TEST_FILE, cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_declared_slos_add_their_alerts_and_pass(lab_inventory: Any, promtool: str, tmp_path: Path) -> None:
    groups = _alerts(lab_inventory, SLOS)
    names = {a.name for alerts in groups.values() for a in alerts}
    assert {"SGLangTTFTAboveSLO", "SMGErrorBudgetBurn1h", "SMGErrorBudgetBurn6h", "SMGErrorBudgetBurn1d"} <= names
    assert not any("ttft" in a.expr for a in groups["smg-lab1"])
    write(tmp_path / RULES_FILE, rule_file(groups))
    write(tmp_path / RULES_TEST_FILE, promtool_tests(groups, RULES_FILE))
    tested = run_promtool(promtool, "test", "rules", RULES_TEST_FILE, cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_rule_has_a_firing_and_a_silent_case(lab_inventory: Any) -> None:
    for alerts in _alerts(lab_inventory, SLOS).values():
        for a in alerts:
            assert any(c.fires for c in a.cases) and any(not c.fires for c in a.cases), a.name
            assert a.guards and a.description, a.name


def test_thresholds_come_from_the_envelope(lab_inventory: Any) -> None:
    hostvars, _ = lab_inventory
    by = {(a.name, a.server): a for alerts in _alerts(lab_inventory, Policy()).values() for a in alerts}
    ctx = hostvars["lab1"]["sglang_engine_common"]["context_length"]
    assert by[("SGLangContextLengthDrift", "lab1:decode")].expr.endswith(f"!= {ctx}")
    mrr = hostvars["lab1"]["sglang_decode"]["max_running_requests"]
    assert by[("SGLangRunningNearLimit", "lab1:decode")].expr.endswith(f">= {-(-mrr * 9 // 10)}")
    queue = hostvars["lab1"]["sglang_router"]["queue_size"]
    assert by[("SMGQueueNearFull", "lab1:router")].expr.endswith(f">= {-(-queue * 8 // 10)}")
    assert "sglang_router.queue_size=256" in by[("SMGQueueNearFull", "lab1:router")].description


@pytest.mark.parametrize(
    ("alert", "find", "replace"),
    [
        ("SGLangKVPoolNearFull", "> 0.9", "> 0.95"),
        ("SGLangContextLengthDrift", "!= 524288", "!= 262144"),
        ("SMGWorkersUnhealthy", "< 2", "< 1"),
        ("SGLangDecodeStalled", "== 0", "< 0"),
    ],
)
def test_a_wrong_threshold_fails_its_promtool_test(
    alert: str, find: str, replace: str, lab_inventory: Any, promtool: str, tmp_path: Path
) -> None:
    groups = _alerts(lab_inventory, Policy())
    write(tmp_path / RULES_TEST_FILE, promtool_tests(groups, RULES_FILE))
    rules = rule_file(groups)
    hits = 0
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule["alert"] == alert and find in rule["expr"]:
                rule["expr"] = rule["expr"].replace(find, replace)
                hits += 1
    assert hits, f"{alert}: no rule has {find!r}"
    write(tmp_path / RULES_FILE, rules)
    tested = run_promtool(promtool, "test", "rules", RULES_TEST_FILE, cwd=tmp_path)
    assert tested.returncode != 0 and alert in tested.stdout + tested.stderr


def test_bad_policy_names_the_variable() -> None:
    with pytest.raises(MonitoringError, match=r"sglang_monitoring_kv_usage_warning=1.5: must be a fraction"):
        Policy.from_vars({"kv_usage_warning": 1.5})
    with pytest.raises(MonitoringError, match=r"sglang_monitoring_kv_usage_warnin: unknown setting"):
        Policy.from_vars({"kv_usage_warnin": 0.5})


def _metric_names(groups: dict[str, list[Any]]) -> set[str]:
    names: set[str] = set()
    for alerts in groups.values():
        for a in alerts:
            names |= set(re.findall(r"\b((?:sglang:|smg_|sglang_envelope_)[A-Za-z_]+)\{?", a.expr))
    return names


def test_sglang_metric_names_are_in_sglang_0_5_23(lab_inventory: Any) -> None:
    """Every `sglang:` name a rule reads is registered by SGLang 0.5.23's own metrics collector."""
    assert SGLANG_METRICS.is_file(), f"{SGLANG_METRICS} is missing: run `make parser-venv`"
    source = SGLANG_METRICS.read_text()
    for name in sorted(n for n in _metric_names(_alerts(lab_inventory, SLOS)) if n.startswith("sglang:")):
        family = re.sub(r"_(total|bucket)$", "", name)
        assert f'"{family}"' in source or f'"{name}"' in source, f"{name} is not an SGLang 0.5.23 metric"


def test_ttft_buckets_are_sglangs() -> None:
    """The TTFT alert's cases and the SLO's allowed span use SGLang 0.5.23's default bounds of
    sglang:time_to_first_token_seconds (the list it assigns to bucket_time_to_first_token)."""
    tree = ast.parse(SGLANG_METRICS.read_text())
    (default,) = [
        n.value for n in ast.walk(tree)
        if isinstance(n, ast.Assign) and [ast.unparse(t) for t in n.targets] == ["bucket_time_to_first_token"]
    ]  # fmt: skip
    assert tuple(float(b) for b in TTFT_BUCKETS) == tuple(float(v) for v in ast.literal_eval(default))


def test_drift_metric_names_are_the_exporters(lab_inventory: Any) -> None:
    names = {n for n in _metric_names(_alerts(lab_inventory, SLOS)) if n.startswith("sglang_envelope_")}
    assert names == {DRIFT_METRIC, DRIFT_RUN_METRIC}


def test_rule_file_is_plain_yaml(lab_inventory: Any) -> None:
    text = yaml.safe_dump(rule_file(_alerts(lab_inventory, Policy())))
    assert yaml.safe_load(text)["groups"]
