"""The Prometheus alert rules generated from a declared envelope (plugins/plugin_utils/sglang_alerts.py): each rule's
PromQL, threshold, window, severity, labels and annotations, and the promtool cases generated beside it.

The engines and routers here are synthetic, with small round figures, so that every threshold can be checked by
hand against the formula it comes from; one test runs promtool on the rules of the shared envelope."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_schema import EnvelopeError
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_alerts import (
    BURN_WINDOWS,
    DASHBOARD_FILE,
    DRIFT_JOB,
    DRIFT_METRIC,
    DRIFT_RUN_METRIC,
    ENGINE_JOB,
    GENERATION_PATHS,
    NEAR_LIMITS,
    ROUTER_JOB,
    RULES_FILE,
    RULES_TEST_FILE,
    TTFT_BUCKETS,
    TTFT_METRIC,
    Alert,
    Case,
    EngineTarget,
    MonitoringError,
    Policy,
    RouterTarget,
    Targets,
    _flat,
    _gauge_cases,
    _minutes,
    _num,
    _ramp,
    _sel,
    _ttft_case_buckets,
    all_alerts,
    drift_alerts,
    engine_alerts,
    expand_labels,
    fleet,
    model_inputs,
    promtool_tests,
    router_alerts,
    rule_file,
)

REPO = Path(__file__).resolve().parents[3]
SHARED = yaml.safe_load((REPO / "group_vars" / "all" / "envelope.yml").read_text())
SHARED["sglang_engine_common"]["host"] = "0.0.0.0"  # the template ansible would render
DSV4 = json.loads((REPO / "models" / "deepseek-v4-flash" / "config.json").read_text())

# Synthetic decode engine: a predicted pool of 10,000 tokens (bf16 keys; fp8 keys would give 11,000), 16-token
# pages, an effective max_running_requests of 40 (the declared 50 capped by the model), context length 4096.
DECODE = EngineTarget(
    "e1",
    "decode",
    "http://10.0.0.5:30001",
    {
        "port": 30001,
        "page_size": 16,
        "mem_fraction_static": 0.8,
        "bf16_index_k": True,
        "context_length": 4096,
        "max_running_requests": 50,
        "watchdog_timeout": 300,
        "disaggregation_transfer_backend": "nixl",
    },
    {"max_total_tokens": 10000, "max_running_requests": 40, "pool_by_index_k": {"bf16": 10000, "fp8": 11000}},
)
# Synthetic prefill engine: nothing declared but its port, no predicted pool, the model's own context length 2048.
PREFILL = EngineTarget("e2", "prefill", "http://e2:30000", {"port": 30000}, {"context_length": 2048})
# Synthetic router: 64 requests in flight, a queue of 256, three workers behind it.
ROUTER = RouterTarget(
    "r1", {"max_concurrent_requests": 64, "queue_size": 256, "queue_timeout_secs": 60, "prometheus_port": 29000}, 3
)
SLOW = Policy(for_short="2m", for_long="7m", rate_window="3m")

E1 = '{job="sglang_engine",server="e1:decode"}'
E2 = '{job="sglang_engine",server="e2:prefill"}'
R1 = '{job="sglang_router",server="r1:router"}'


def _by_name(alerts: list[Alert]) -> dict[str, Alert]:
    out = {a.name: a for a in alerts}
    assert len(out) == len(alerts), [a.name for a in alerts]
    return out


def _labels(severity: str, guards: str, server: str) -> dict[str, str]:
    return {"severity": severity, "guards": guards, "server": server}


def _gauge(series: list[tuple[str, float, float]], minutes: int) -> list[Case]:
    """A firing case at the first values and a silent one at the second, both held `minutes` and read at the end."""
    at = f"{minutes}m"
    return [
        Case([(s, f"{fire}x{minutes}") for s, fire, _ in series], at, True),
        Case([(s, f"{calm}x{minutes}") for s, _, calm in series], at, False),
    ]


def _counter(series: str, minutes: int) -> list[Case]:
    return [
        Case([(series, f"0+1x{minutes}")], f"{minutes}m", True),
        Case([(series, f"7x{minutes}")], f"{minutes}m", False),
    ]


# ---------------------------------------------------------------- small helpers


@pytest.mark.parametrize(
    ("duration", "minutes"),
    [
        ("30s", 1),
        ("60s", 1),
        ("61s", 2),
        ("90s", 2),
        ("0m", 1),
        ("1m", 1),
        ("5m", 5),
        ("1.5m", 2),
        ("1h", 60),
        ("2h", 120),
        ("1d", 1440),
    ],
)
def test_minutes_rounds_a_duration_up_to_whole_minutes(duration: str, minutes: int) -> None:
    """promtool cases run on a one-minute grid: a duration counts as the whole minutes that cover it, at least 1."""
    assert _minutes(duration) == minutes


def test_minutes_refuses_an_unknown_unit() -> None:
    with pytest.raises(KeyError):
        _minutes("5w")


def test_series_values_use_promtool_notation() -> None:
    """Whole numbers print without a decimal point, others as Python's shortest repr."""
    assert (_num(3), _num(3.0), _num(0.5), _num(0.072), _num(1e6)) == ("3", "3", "0.5", "0.072", "1000000")
    assert _flat(7, 4) == "7x4"
    assert _flat(0.25, 2) == "0.25x2"
    assert _ramp(0, 1, 8) == "0+1x8"
    assert _ramp(500, 40.5, 3) == "500+40.5x3"


def test_selector_has_job_then_server_then_extra_labels() -> None:
    assert _sel("j", "h:decode") == '{job="j",server="h:decode"}'
    assert _sel("j", "h:decode", le="0.5", path="/x") == '{job="j",server="h:decode",le="0.5",path="/x"}'


def test_metric_and_file_names() -> None:
    """The scrape jobs, the drift exporter's families and the files the role writes."""
    assert (ENGINE_JOB, ROUTER_JOB, DRIFT_JOB) == ("sglang_engine", "sglang_router", "sglang_drift")
    assert (DRIFT_METRIC, DRIFT_RUN_METRIC) == ("sglang_envelope_drift", "sglang_envelope_audit_timestamp_seconds")
    assert (RULES_FILE, RULES_TEST_FILE, DASHBOARD_FILE) == (
        "sglang_rules.yml",
        "sglang_rules_test.yml",
        "sglang_dashboard.json",
    )
    assert GENERATION_PATHS == "/generate|/v1/chat/completions|/v1/completions"
    assert BURN_WINDOWS == (("page", "1h", "5m", 14.4), ("page", "6h", "30m", 6.0), ("ticket", "1d", "2h", 3.0))
    assert TTFT_METRIC == "sglang:time_to_first_token_seconds"
    # SGLang 0.5.23's default TTFT buckets (tests/component/monitoring/test_rules.py reads them from its source)
    assert TTFT_BUCKETS == (
        *("0.1", "0.2", "0.4", "0.6", "0.8", "1", "2", "4", "6", "8", "10"),
        *("20", "40", "60", "80", "100", "200", "400"),
    )


@pytest.mark.parametrize(
    ("slo", "calm", "slow"),
    [
        (2.0, "2", "4"),  # calm: the largest bound at or under the SLO; slow: the bucket above the bound at the SLO
        (1.5, "1", "4"),  # (1, 2] could read 1.99 or 1.2: the slow bucket starts at or above the SLO, (2, 4]
        (1.0, "1", "2"),
        (0.1, "0.1", "0.2"),  # the first bound: calm reads at most 0.1, which is not above 0.1
        (0.15, "0.1", "0.4"),
        (10.0, "10", "20"),
        (45.5, "40", "80"),
        (399.0, "200", "+Inf"),  # past the last bound: the p99 of the +Inf bucket reads as 400
        (400.0, "400", "+Inf"),  # refused by the policy (400 is not above 400): see below
        (500.0, "400", "+Inf"),  # refused too
        (0.05, "0.1", "0.2"),  # refused by the policy (0.1 is above 0.05, the calm case would fire)
    ],
)
def test_ttft_case_buckets_straddle_the_slo(slo: float, calm: str, slow: str) -> None:
    assert _ttft_case_buckets(slo) == (calm, slow)


@pytest.mark.parametrize("slo", [0.1, 0.15, 1.5, 10, 59.9, 399.9])
def test_a_ttft_slo_within_sglangs_buckets_is_accepted(slo: float) -> None:
    """Every p99 the calm bucket can read lies at or under the SLO, every one the slow bucket can read above it."""
    assert Policy.from_vars({"ttft_p99_slo_s": slo}).ttft_p99_slo_s == slo
    calm, slow = _ttft_case_buckets(slo)
    bounds = [0.0, *(float(b) for b in TTFT_BUCKETS)]
    assert float(calm) <= slo
    assert slow == "+Inf" or bounds[bounds.index(float(slow)) - 1] >= slo
    assert slow != "+Inf" or float(TTFT_BUCKETS[-1]) > slo


@pytest.mark.parametrize("slo", [0.05, 0.0999, 400, 1000])
def test_a_ttft_slo_outside_sglangs_buckets_is_refused(slo: float) -> None:
    """Below 0.1 s no bucket lies under the SLO; from 400 s on, the p99 of the last bucket reads as 400."""
    with pytest.raises(MonitoringError) as error:
        Policy.from_vars({"ttft_p99_slo_s": slo})
    assert str(error.value) == (
        f"sglang_monitoring_ttft_p99_slo_s={slo!r}: must be from 0.1 to under 400 seconds, the span of SGLang's "
        "TTFT buckets (sglang:time_to_first_token_seconds; below it no bucket lies under the SLO; from 400 on the "
        "p99 of the last bucket reads as 400); fix: e.g. 2"
    )


def test_expand_labels_fills_templated_labels_only() -> None:
    text = "{{ $labels.server }}: {{ $labels.key }} on {{ $labels.layer }} ({{ $labels.other }})"
    assert expand_labels(text, {"server": "h:decode", "key": "context_length", "layer": "running"}) == (
        "h:decode: context_length on running ({{ $labels.other }})"
    )
    assert expand_labels(text, {}) == text


def test_gauge_cases_need_a_value_for_each_series() -> None:
    with pytest.raises(ValueError):
        _gauge_cases(["a", "b"], [1], [1, 2], "1m")
    with pytest.raises(ValueError):
        _gauge_cases(["a", "b"], [1, 2], [1], "1m")
    assert _gauge_cases(["a"], [2], [1], "1m", extra_min=0) == [
        Case([("a", "2x1")], "1m", True),
        Case([("a", "1x1")], "1m", False),
    ]


# ---------------------------------------------------------------- targets and the fleet


def test_engine_target_reads_limits_from_declared_and_predicted() -> None:
    assert DECODE.server == "e1:decode"
    assert DECODE.context_length == 4096  # the declared one wins
    assert DECODE.pool == 10000
    assert DECODE.pool_tolerance == 250  # a quarter of the bf16/fp8 gap of 1,000 tokens
    assert DECODE.max_running == 40  # the predicted (capped) one wins over the declared 50
    assert PREFILL.context_length == 2048  # the model's own, predicted
    assert (PREFILL.pool, PREFILL.pool_tolerance, PREFILL.max_running) == (None, None, None)


def test_engine_target_falls_back_when_one_side_is_missing() -> None:
    only_declared = EngineTarget("h", "decode", "u", {"max_running_requests": "12", "context_length": "100"}, {})
    assert (only_declared.max_running, only_declared.context_length) == (12, 100)
    no_keys = EngineTarget("h", "decode", "u", {}, {"max_total_tokens": 5050})
    assert no_keys.pool_tolerance == 101  # 2 % of the pool without the two key predictions
    assert EngineTarget("h", "decode", "u", {}, {"max_total_tokens": 0}).pool is None
    assert EngineTarget("h", "decode", "u", {"context_length": 0}, {"context_length": 0}).context_length is None
    swapped = EngineTarget("h", "d", "u", {}, {"max_total_tokens": 9, "pool_by_index_k": {"bf16": 1000, "fp8": 600}})
    assert swapped.pool_tolerance == 100


def test_router_target_server_label() -> None:
    assert ROUTER.server == "r1:router"


def test_model_inputs_are_the_audit_roles() -> None:
    hv = {"sglang_model": {"params_b": 284, "quantization": "mxfp4"}, "sglang_gpu_memory_gib": 141}
    assert model_inputs(hv, {"k": 1}) == {
        "config": {"k": 1},
        "gpu_memory_gib": 141,
        "params_b": 284,
        "quantization": "mxfp4",
    }
    assert model_inputs({}, {}) == {"config": {}, "gpu_memory_gib": 0, "params_b": None, "quantization": None}


def _hosts(**extra: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {}
    for host in ("h1", "h2"):
        hv = copy.deepcopy(SHARED)
        hv.update(extra.get(host, {}))
        out[host] = hv
    return out


def test_fleet_lists_prefill_then_decode_with_urls_and_router_workers() -> None:
    hostvars = _hosts(h2={"ansible_host": "10.1.1.2"})
    groups = {"sglang_prefill": ["h1"], "sglang_decode": ["h1", "h2"], "sglang_router": ["h2"]}
    fl = fleet(hostvars, groups, {})  # no model config: nothing predicted
    assert [(e.host, e.role, e.url) for e in fl.engines] == [
        ("h1", "prefill", "http://h1:30000"),
        ("h1", "decode", "http://h1:30001"),
        ("h2", "decode", "http://10.1.1.2:30001"),
    ]
    assert all(e.predicted == {} for e in fl.engines)
    assert fl.engines[1].declared["max_running_requests"] == 64
    assert [(r.host, r.workers, r.declared["queue_size"]) for r in fl.routers] == [("h2", 3, 256)]


def test_fleet_predicts_each_engines_pool() -> None:
    fl = fleet(_hosts(), {"sglang_decode": ["h1"]}, DSV4)
    (engine,) = fl.engines
    assert engine.pool == engine.predicted["max_total_tokens"] == engine.predicted["pool_by_index_k"]["bf16"]
    assert fl.routers == []


def test_fleet_needs_an_engine_and_the_capacity_model() -> None:
    with pytest.raises(
        EnvelopeError, match=r"^the inventory has no host in sglang_prefill or sglang_decode: nothing to monitor$"
    ):
        fleet(_hosts(), {"sglang_router": ["h1"]}, DSV4)
    with pytest.raises(MonitoringError, match=r"^h2 decode: capacity model: .* the rules need the capacity model's KV"):
        fleet(_hosts(h2={"sglang_gpu_memory_gib": 0}), {"sglang_decode": ["h1", "h2"]}, DSV4)


# ---------------------------------------------------------------- engine rules


def test_decode_engine_has_its_rules_in_order() -> None:
    assert [a.name for a in engine_alerts(DECODE, Policy())] == [
        "SGLangKVPoolNearFull",
        "SGLangKVPoolFull",
        "SGLangRunningNearLimit",
        "SGLangContextLengthDrift",
        "SGLangKVPoolDrift",
        "SGLangEngineDown",
        "SGLangDecodeStalled",
        "SGLangBootstrapFailures",
        "SGLangRetractions",
        "SGLangAbortedRequests",
    ]


def test_kv_pool_rules_compare_usage_with_the_live_pool() -> None:
    """Warning above 0.9, critical above 0.97 of the live pool; cases a page above and below the line."""
    by = _by_name(engine_alerts(DECODE, Policy()))
    ratio = f"sum by (server) (sglang:num_used_tokens{E1}) / sum by (server) (sglang:max_total_num_tokens{E1})"
    tail = (
        "of the live pool (sglang:max_total_num_tokens); the capacity model predicts a pool of 10,000 tokens for "
        "sglang_decode (mem_fraction_static 0.8, bf16_index_k True); new requests wait or running ones are retracted"
    )
    used, total = f"sglang:num_used_tokens{E1}", f"sglang:max_total_num_tokens{E1}"
    for name, severity, frac, pct, fire, calm in (
        ("SGLangKVPoolNearFull", "warning", "0.9", 90, 9016, 8984),  # 9,000 +/- one 16-token page
        ("SGLangKVPoolFull", "critical", "0.97", 97, 9716, 9684),  # 9,700 +/- one page
    ):
        assert by[name].rule() == {
            "alert": name,
            "expr": f"{ratio} > {frac}",
            "for": "1m",
            "labels": _labels(severity, "max_total_num_tokens", "e1:decode"),
            "annotations": {
                "summary": f"e1:decode: KV pool {pct} % full",
                "description": f"KV tokens in use on e1:decode stay above {frac} {tail}",
            },
        }
        assert by[name].cases == _gauge([(used, fire, calm), (total, 10000, 10000)], 3)


def test_kv_pool_rules_without_a_prediction_test_on_a_million_tokens() -> None:
    """No predicted pool: the expression still reads the live pool; cases use 1,000,000 tokens and 1-token pages."""
    by = _by_name(engine_alerts(PREFILL, Policy(kv_usage_warning=0.5, kv_usage_critical=0.75, for_short="2m")))
    used, total = f"sglang:num_used_tokens{E2}", f"sglang:max_total_num_tokens{E2}"
    near, full = by["SGLangKVPoolNearFull"], by["SGLangKVPoolFull"]
    assert near.expr.endswith(f"(sglang:max_total_num_tokens{E2}) > 0.5") and near.for_ == "2m"
    assert full.expr.endswith(" > 0.75") and full.summary == "e2:prefill: KV pool 75 % full"
    assert near.description == (
        "KV tokens in use on e2:prefill stay above 0.5 of the live pool (sglang:max_total_num_tokens) "
        "(mem_fraction_static None, bf16_index_k False); new requests wait or running ones are retracted"
    )
    assert near.cases == _gauge([(used, 500001, 499999), (total, 1000000, 1000000)], 4)
    whole = _by_name(engine_alerts(PREFILL, Policy(kv_usage_critical=1)))["SGLangKVPoolFull"]
    assert whole.summary == "e2:prefill: KV pool 100 % full" and whole.expr.endswith(" > 1")
    assert full.cases == _gauge([(used, 750001, 749999), (total, 1000000, 1000000)], 4)


def test_running_rule_fires_at_the_warning_fraction_of_effective_max_running() -> None:
    """ceil(40 x 0.9) = 36 running requests of the effective 40, held for `for_long`."""
    a = _by_name(engine_alerts(DECODE, Policy()))["SGLangRunningNearLimit"]
    assert a.rule() == {
        "alert": "SGLangRunningNearLimit",
        "expr": f"sum by (server) (sglang:num_running_reqs{E1}) >= 36",
        "for": "5m",
        "labels": _labels("warning", "max_running_requests", "e1:decode"),
        "annotations": {
            "summary": "e1:decode: 36+ requests running of 40",
            "description": "Running requests on e1:decode reached 0.9 of the effective max_running_requests 40 "
            "(declared sglang_decode.max_running_requests=50, capped by the KV pool as SGLang does); further "
            "requests queue at the engine",
        },
    }
    assert a.cases == _gauge([(f"sglang:num_running_reqs{E1}", 36, 35)], 7)
    other = _by_name(engine_alerts(DECODE, Policy(running_warning=0.51, for_long="3m")))["SGLangRunningNearLimit"]
    assert other.expr.endswith(">= 21") and other.for_ == "3m"  # ceil(40 x 0.51) = 21, not 20
    assert other.cases == _gauge([(f"sglang:num_running_reqs{E1}", 21, 20)], 5)


def test_context_rule_fires_on_any_other_live_context_length() -> None:
    a = _by_name(engine_alerts(DECODE, Policy()))["SGLangContextLengthDrift"]
    assert a.rule() == {
        "alert": "SGLangContextLengthDrift",
        "expr": f"max by (server) (sglang:context_len{E1}) != 4096",
        "for": "1m",
        "labels": _labels("critical", "context_length", "e1:decode"),
        "annotations": {
            "summary": "e1:decode: live context length is not 4096",
            "description": "The engine e1:decode runs with another context length than declared "
            "(sglang_decode.context_length=4096): restarted by hand or with other flags; per-call context limits "
            "differ from the envelope",
        },
    }
    assert a.cases == _gauge([(f"sglang:context_len{E1}", 2048, 4096)], 3)
    odd = EngineTarget("e7", "decode", "u", {"context_length": 1001}, {})
    sel = '{job="sglang_engine",server="e7:decode"}'
    odd_rule = _by_name(engine_alerts(odd, Policy()))["SGLangContextLengthDrift"]
    assert odd_rule.cases == _gauge([(f"sglang:context_len{sel}", 500, 1001)], 3)  # half, in whole tokens


def test_pool_drift_rule_allows_a_quarter_of_the_key_gap() -> None:
    """|live - 10,000| > 250; the firing case is the fp8 keys' 11,000, the silent one half the tolerance off."""
    a = _by_name(engine_alerts(DECODE, Policy()))["SGLangKVPoolDrift"]
    assert a.rule() == {
        "alert": "SGLangKVPoolDrift",
        "expr": f"abs(max by (server) (sglang:max_total_num_tokens{E1}) - 10000) > 250",
        "for": "1m",
        "labels": _labels("critical", "max_total_num_tokens", "e1:decode"),
        "annotations": {
            "summary": "e1:decode: live KV pool is not the predicted 10,000 tokens",
            "description": "The live KV pool of e1:decode lies more than 250 tokens from the 10,000 the capacity "
            "model predicts for the declared sglang_decode; bf16 index keys give 10,000 tokens, fp8 keys 11,000 (a "
            "pool near the other figure means the engine lost or gained SGLANG_DSV4_BF16_INDEX_K)",
        },
    }
    assert a.cases == _gauge([(f"sglang:max_total_num_tokens{E1}", 11000, 10125)], 3)


def test_pool_drift_rule_with_fp8_keys_fires_on_the_bf16_pool() -> None:
    fp8 = EngineTarget(
        "e3",
        "decode",
        "u",
        {"bf16_index_k": False},
        {"max_total_tokens": 11000, "pool_by_index_k": DECODE.predicted["pool_by_index_k"]},
    )
    a = _by_name(engine_alerts(fp8, Policy()))["SGLangKVPoolDrift"]
    sel = '{job="sglang_engine",server="e3:decode"}'
    assert a.expr == f"abs(max by (server) (sglang:max_total_num_tokens{sel}) - 11000) > 250"
    assert a.cases == _gauge([(f"sglang:max_total_num_tokens{sel}", 10000, 11125)], 3)


def test_pool_drift_rule_without_key_predictions_allows_two_percent() -> None:
    plain = EngineTarget("e4", "prefill", "u", {}, {"max_total_tokens": 5050})
    a = _by_name(engine_alerts(plain, Policy(for_short="30s")))["SGLangKVPoolDrift"]
    sel = '{job="sglang_engine",server="e4:prefill"}'
    assert a.expr == f"abs(max by (server) (sglang:max_total_num_tokens{sel}) - 5050) > 101"
    assert a.for_ == "30s"
    assert a.description == (
        "The live KV pool of e4:prefill lies more than 101 tokens from the 5,050 the capacity model predicts for "
        "the declared sglang_prefill"
    )
    # twice the pool fires; half the tolerance (in whole tokens) off does not
    assert a.cases == _gauge([(f"sglang:max_total_num_tokens{sel}", 10100, 5100)], 3)


def test_optional_engine_rules_need_their_limit() -> None:
    """No pool tolerance (a 49-token pool), no running limit and no context length: those rules are left out."""
    tiny = EngineTarget("e5", "prefill", "u", {}, {"max_total_tokens": 49})
    assert [a.name for a in engine_alerts(tiny, Policy())] == [
        "SGLangKVPoolNearFull",
        "SGLangKVPoolFull",
        "SGLangEngineDown",
        "SGLangAbortedRequests",
    ]
    assert [a.name for a in engine_alerts(PREFILL, Policy())] == [
        "SGLangKVPoolNearFull",
        "SGLangKVPoolFull",
        "SGLangContextLengthDrift",
        "SGLangEngineDown",
        "SGLangAbortedRequests",
    ]


def test_prefill_rules_follow_the_policy_windows() -> None:
    by = _by_name(engine_alerts(PREFILL, SLOW))
    ctx = by["SGLangContextLengthDrift"]
    assert ctx.expr == f"max by (server) (sglang:context_len{E2}) != 2048" and ctx.for_ == "2m"
    assert ctx.description == (
        "The engine e2:prefill runs with another context length than declared (the model's own context length): "
        "restarted by hand or with other flags; per-call context limits differ from the envelope"
    )
    assert ctx.cases == _gauge([(f"sglang:context_len{E2}", 1024, 2048)], 4)
    down = by["SGLangEngineDown"]
    assert down.rule() == {
        "alert": "SGLangEngineDown",
        "expr": f"max by (server) (up{E2}) == 0",
        "for": "2m",
        "labels": _labels("critical", "enable_metrics", "e2:prefill"),
        "annotations": {
            "summary": "e2:prefill: /metrics unreachable",
            "description": "Prometheus cannot scrape http://e2:30000/metrics (sglang_prefill.port=30000, "
            "enable_metrics=true): the engine is down, restarting or started without --enable-metrics",
        },
    }
    assert down.cases == _gauge([(f"up{E2}", 0, 1)], 4)
    aborted = by["SGLangAbortedRequests"]
    assert aborted.rule() == {
        "alert": "SGLangAbortedRequests",
        "expr": f"sum by (server) (increase(sglang:num_aborted_requests_total{E2}[3m])) > 0",
        "for": "0m",
        "labels": _labels("warning", "request_timeout_secs", "e2:prefill"),
        "annotations": {
            "summary": "e2:prefill: aborted requests in the last 3m",
            "description": "The engine e2:prefill aborted requests (client gone, a failed KV transfer, or a request "
            "the router timed out after sglang_router.request_timeout_secs)",
        },
    }
    assert aborted.cases == _counter(f"sglang:num_aborted_requests_total{E2}", 6)  # 3m window + 1 + 2


def test_engine_down_rule_of_the_decode_engine() -> None:
    down = _by_name(engine_alerts(DECODE, Policy()))["SGLangEngineDown"]
    assert down.expr == f"max by (server) (up{E1}) == 0" and down.for_ == "1m"
    assert down.description.startswith(
        "Prometheus cannot scrape http://10.0.0.5:30001/metrics (sglang_decode.port=30001, enable_metrics=true)"
    )
    assert down.cases == _gauge([(f"up{E1}", 0, 1)], 3)


def test_decode_stall_rule_needs_running_requests_and_no_tokens() -> None:
    a = _by_name(engine_alerts(DECODE, Policy()))["SGLangDecodeStalled"]
    assert a.rule() == {
        "alert": "SGLangDecodeStalled",
        "expr": f"sum by (server) (sglang:num_running_reqs{E1}) > 0 and "
        f"sum by (server) (rate(sglang:generation_tokens_total{E1}[5m])) == 0",
        "for": "1m",
        "labels": _labels("critical", "watchdog_timeout", "e1:decode"),
        "annotations": {
            "summary": "e1:decode: requests running, no tokens generated",
            "description": "The decode engine e1:decode holds running requests and generated no token for 5m, while "
            "its watchdog (sglang_decode.watchdog_timeout=300 s) has not restarted it and /health may still answer "
            "200",
        },
    }
    running = f"sglang:num_running_reqs{E1}"
    gen = 'sglang:generation_tokens_total{job="sglang_engine",server="e1:decode",is_streaming="false"}'
    assert a.cases == [  # 5m window + 1m for + 2
        Case([(running, "4x8"), (gen, "500x8")], "8m", True),
        Case([(running, "4x8"), (gen, "500+40x8")], "8m", False),
        Case([(running, "0x8"), (gen, "500x8")], "8m", False),
    ]
    slow = _by_name(engine_alerts(DECODE, SLOW))["SGLangDecodeStalled"]
    assert "[3m])) == 0" in slow.expr and slow.for_ == "2m" and "no token for 3m" in slow.description
    assert [c.eval_time for c in slow.cases] == ["7m"] * 3 and slow.cases[1].series[1][1] == "500+40x7"


def test_decode_counter_rules_fire_on_any_increase() -> None:
    by = _by_name(engine_alerts(DECODE, Policy()))
    boot, retract = by["SGLangBootstrapFailures"], by["SGLangRetractions"]
    assert boot.rule() == {
        "alert": "SGLangBootstrapFailures",
        "expr": f"sum by (server) (increase(sglang:num_bootstrap_failed_reqs_total{E1}[5m])) > 0",
        "for": "0m",
        "labels": _labels("warning", "disaggregation_transfer_backend", "e1:decode"),
        "annotations": {
            "summary": "e1:decode: BootstrapFailures in the last 5m",
            "description": "KV handshakes with the prefill failed on e1:decode (sglang_decode."
            "disaggregation_transfer_backend=nixl): the prefill's bootstrap port is down or unreachable",
        },
    }
    assert boot.cases == _counter(f"sglang:num_bootstrap_failed_reqs_total{E1}", 8)
    assert retract.rule() == {
        "alert": "SGLangRetractions",
        "expr": f"sum by (server) (increase(sglang:num_retracted_requests_total{E1}[5m])) > 0",
        "for": "0m",
        "labels": _labels("warning", "max_total_num_tokens", "e1:decode"),
        "annotations": {
            "summary": "e1:decode: Retractions in the last 5m",
            "description": "The decode engine e1:decode retracted running requests: the KV pool (10000 tokens "
            "predicted) could not grow them; lower max_running_requests or raise mem_fraction_static",
        },
    }
    assert retract.cases == _counter(f"sglang:num_retracted_requests_total{E1}", 8)
    aborted = by["SGLangAbortedRequests"]
    assert aborted.expr == f"sum by (server) (increase(sglang:num_aborted_requests_total{E1}[5m])) > 0"
    assert aborted.cases == _counter(f"sglang:num_aborted_requests_total{E1}", 8)
    unknown_pool = EngineTarget("e6", "decode", "u", {}, {})
    assert (
        "the KV pool (? tokens predicted)"
        in _by_name(engine_alerts(unknown_pool, Policy()))["SGLangRetractions"].description
    )


# ---------------------------------------------------------------- router rules


def test_router_rules_in_order() -> None:
    assert [a.name for a in router_alerts(ROUTER, Policy())] == [
        "SMGAdmissionNearLimit",
        "SMGQueueNearFull",
        "SMGRejecting429",
        "SMGWorkersUnhealthy",
        "SMGRouterDown",
    ]


def test_admission_and_queue_rules_fire_at_their_fractions() -> None:
    """ceil(64 x 0.9) = 58 in flight (for_long), ceil(256 x 0.8) = 205 queued (for_short)."""
    by = _by_name(router_alerts(ROUTER, Policy()))
    assert by["SMGAdmissionNearLimit"].rule() == {
        "alert": "SMGAdmissionNearLimit",
        "expr": f"max by (server) (smg_admission_inflight{R1}) >= 58",
        "for": "5m",
        "labels": _labels("warning", "max_concurrent_requests", "r1:router"),
        "annotations": {
            "summary": "r1:router: 58+ requests in flight of 64",
            "description": "Requests in flight at the router r1:router reached 0.9 of "
            "sglang_router.max_concurrent_requests=64; further requests wait in its queue",
        },
    }
    assert by["SMGAdmissionNearLimit"].cases == _gauge([(f"smg_admission_inflight{R1}", 58, 57)], 7)
    assert by["SMGQueueNearFull"].rule() == {
        "alert": "SMGQueueNearFull",
        "expr": f"max by (server) (smg_admission_queue_depth{R1}) >= 205",
        "for": "1m",
        "labels": _labels("warning", "queue_size", "r1:router"),
        "annotations": {
            "summary": "r1:router: router queue 205+ of 256",
            "description": "The router queue on r1:router holds 0.8 of sglang_router.queue_size=256: when it is "
            "full, requests get 429; queued ones time out after queue_timeout_secs=60",
        },
    }
    assert by["SMGQueueNearFull"].cases == _gauge([(f"smg_admission_queue_depth{R1}", 205, 204)], 3)
    custom = _by_name(router_alerts(ROUTER, Policy(admission_warning=0.5, queue_warning=0.25, for_short="3m")))
    assert custom["SMGAdmissionNearLimit"].expr.endswith(">= 32")
    assert custom["SMGQueueNearFull"].expr.endswith(">= 64") and custom["SMGQueueNearFull"].for_ == "3m"


def test_admission_and_queue_rules_need_a_positive_limit() -> None:
    one = RouterTarget("r2", {"max_concurrent_requests": 1, "queue_size": "1"}, 1)
    by = _by_name(router_alerts(one, Policy()))
    assert by["SMGAdmissionNearLimit"].expr.endswith(">= 1")
    assert by["SMGQueueNearFull"].expr.endswith(">= 1")
    for declared in (
        {"max_concurrent_requests": None, "queue_size": 0},
        {"max_concurrent_requests": -1, "queue_size": -5},
        {"max_concurrent_requests": "0", "queue_size": "0"},
        {},
    ):
        names = [a.name for a in router_alerts(RouterTarget("r2", declared, 1), Policy())]
        assert names == ["SMGRejecting429", "SMGWorkersUnhealthy", "SMGRouterDown"], declared


def test_429_rule_counts_refusals_of_any_path() -> None:
    a = _by_name(router_alerts(ROUTER, Policy(rate_window="2m")))["SMGRejecting429"]
    assert a.rule() == {
        "alert": "SMGRejecting429",
        "expr": 'sum by (server) (increase(smg_http_responses_total{job="sglang_router",server="r1:router",'
        'status_code="429"}[2m])) > 0',
        "for": "0m",
        "labels": _labels("warning", "queue_size", "r1:router"),
        "annotations": {
            "summary": "r1:router: requests refused with 429 in the last 2m",
            "description": "The router r1:router refused requests with 429: max_concurrent_requests=64 in flight and "
            "queue_size=256 queued were exceeded",
        },
    }
    series = (
        'smg_http_responses_total{job="sglang_router",server="r1:router",path="/generate",status_code="429",'
        'error_code=""}'
    )
    assert a.cases == _counter(series, 5)


def test_workers_rule_fires_below_the_declared_worker_count() -> None:
    a = _by_name(router_alerts(ROUTER, Policy()))["SMGWorkersUnhealthy"]
    assert a.rule() == {
        "alert": "SMGWorkersUnhealthy",
        "expr": f"sum by (server) (smg_worker_health{R1}) < 3",
        "for": "1m",
        "labels": _labels("critical", "workers", "r1:router"),
        "annotations": {
            "summary": "r1:router: fewer than 3 healthy workers",
            "description": "The router r1:router sees fewer healthy workers than the 3 the inventory declares "
            "(groups sglang_prefill and sglang_decode)",
        },
    }
    w = [f'smg_worker_health{{job="sglang_router",server="r1:router",worker="http://w{i}"}}' for i in range(3)]
    assert a.cases == _gauge([(w[0], 1, 1), (w[1], 1, 1), (w[2], 0, 1)], 3)


def test_router_down_rule() -> None:
    a = _by_name(router_alerts(ROUTER, SLOW))["SMGRouterDown"]
    assert a.rule() == {
        "alert": "SMGRouterDown",
        "expr": f"max by (server) (up{R1}) == 0",
        "for": "2m",
        "labels": _labels("critical", "prometheus_port", "r1:router"),
        "annotations": {
            "summary": "r1:router: router metrics unreachable",
            "description": "Prometheus cannot scrape the router's metrics port (sglang_router.prometheus_port=29000): "
            "the router is down",
        },
    }
    assert a.cases == _gauge([(f"up{R1}", 0, 1)], 4)


def test_ttft_rule_on_each_decode_engine_compares_its_p99_with_the_slo() -> None:
    """SGLang's own TTFT histogram of the decode engine (from the call's arrival to its first token, the prefill's
    queue and the KV transfer included), summed over is_streaming."""
    a = _by_name(engine_alerts(DECODE, Policy(ttft_p99_slo_s=2.0)))["SGLangTTFTAboveSLO"]
    assert a.rule() == {
        "alert": "SGLangTTFTAboveSLO",
        "expr": "histogram_quantile(0.99, sum by (server, le) (rate(sglang:time_to_first_token_seconds_bucket"
        f"{E1}[5m]))) > 2",
        "for": "5m",
        "labels": _labels("warning", "ttft_p99_slo_s", "e1:decode"),
        "annotations": {
            "summary": "e1:decode: TTFT p99 above 2 s",
            "description": "The p99 time to first token of the calls the decode engine e1:decode serves "
            "(sglang:time_to_first_token_seconds: from the call's arrival to its first token, the wait for the "
            "prefill and the KV transfer included) stays above the declared SLO sglang_monitoring_ttft_p99_slo_s=2 s "
            "over 5m",
        },
    }

    def buckets(first_hit: int) -> list[tuple[str, str]]:
        """100 calls a minute in the bucket `first_hit` (index into the bounds and +Inf)."""
        bounds = [*TTFT_BUCKETS, "+Inf"]
        return [
            ('sglang:time_to_first_token_seconds_bucket{job="sglang_engine",server="e1:decode",is_streaming="true",'
             f'le="{le}"}}', f"0+{100 if i >= first_hit else 0}x12")
            for i, le in enumerate(bounds)
        ]  # fmt: skip

    # 5m window + 5m for + 2; calls in (2, 4] fire, calls in (1, 2] do not.
    assert a.cases == [Case(buckets(7), "12m", True), Case(buckets(6), "12m", False)]


def test_ttft_rule_with_a_large_slo_puts_slow_calls_past_the_last_bound() -> None:
    a = _by_name(engine_alerts(DECODE, Policy(ttft_p99_slo_s=345.5, rate_window="1m", for_long="30s")))[
        "SGLangTTFTAboveSLO"
    ]
    assert a.expr.endswith("[1m]))) > 345.5") and a.summary == "e1:decode: TTFT p99 above 345.5 s"
    assert a.for_ == "30s"
    fire, calm = a.cases
    assert (fire.fires, calm.fires, fire.eval_time) == (True, False, "4m")  # 1m window + 30s for (1m) + 2
    assert [v for _, v in fire.series] == ["0+0x4"] * 18 + ["0+100x4"]  # +Inf only
    assert [v for _, v in calm.series] == ["0+0x4"] * 16 + ["0+100x4"] * 3  # (100, 200]


def test_the_ttft_rule_is_the_decode_engines_and_needs_the_slo() -> None:
    """Only a decode engine's TTFT is the call's (a prefill engine's first token is the prefill's own), and only a
    declared SLO adds the rule, last; the router has none (smg_pd_ttft_seconds misses the wait for the prefill)."""
    names = [a.name for a in engine_alerts(DECODE, Policy(ttft_p99_slo_s=2.0))]
    assert names == [a.name for a in engine_alerts(DECODE, Policy())] + ["SGLangTTFTAboveSLO"]
    assert "SGLangTTFTAboveSLO" not in {a.name for a in engine_alerts(PREFILL, Policy(ttft_p99_slo_s=2.0))}
    router = router_alerts(ROUTER, Policy(ttft_p99_slo_s=2.0))
    assert [a.name for a in router] == [a.name for a in router_alerts(ROUTER, Policy())]
    assert not any("ttft" in a.expr for a in router)


def test_burn_rules_follow_the_multiwindow_burn_rates() -> None:
    """SLO 0.995: a budget of 0.005 and lines 14.4x, 6x and 3x of it over (1h, 5m), (6h, 30m) and (1d, 2h)."""
    by = _by_name(router_alerts(ROUTER, Policy(availability_slo=0.995)))
    ratio = (
        'sum by (server) (rate(smg_http_responses_total{{job="sglang_router",server="r1:router",path=~"{p}",'
        'status_code=~"5.."}}[{w}])) / sum by (server) (rate(smg_http_responses_total{{job="sglang_router",'
        'server="r1:router",path=~"{p}"}}[{w}]))'
    )
    prefix = 'smg_http_responses_total{job="sglang_router",server="r1:router",path='
    ok = prefix + '"/generate",status_code="200",error_code=""}'
    bad = prefix + '"/generate",status_code="503",error_code="no_available_workers"}'
    probes = prefix + '"/readiness",status_code="200",error_code=""}'
    for name, long_w, short_w, line, factor, severity, for_, minutes, hot, cold in (
        ("SMGErrorBudgetBurn1h", "1h", "5m", "0.072", "14.4", "critical", "0m", 65, 145, 36),
        ("SMGErrorBudgetBurn6h", "6h", "30m", "0.03", "6.0", "critical", "0m", 365, 61, 15),
        ("SMGErrorBudgetBurn1d", "1d", "2h", "0.015", "3.0", "warning", "15m", 1445, 31, 7),
    ):
        a = by[name]
        long_r = ratio.format(p=GENERATION_PATHS, w=long_w)
        short_r = ratio.format(p=GENERATION_PATHS, w=short_w)
        assert a.rule() == {
            "alert": name,
            "expr": f"({long_r}) > {line} and ({short_r}) > {line}",
            "for": for_,
            "labels": _labels(severity, "availability_slo", "r1:router"),
            "annotations": {
                "summary": f"r1:router: error budget burning {factor}x over {long_w}",
                "description": "5xx answers to generation requests at the router r1:router burn the error budget of "
                f"the declared availability SLO sglang_monitoring_availability_slo=0.995 at {factor}x or more over "
                f"{long_w} and {short_w}",
            },
        }
        at = f"{minutes}m"  # the long window + 5 minutes
        assert a.cases == [
            Case(
                [(ok, f"0+{1000 - hot}x{minutes}"), (bad, f"0+{hot}x{minutes}"), (probes, f"0+100000x{minutes}")],
                at,
                True,
            ),
            Case([(ok, f"0+{1000 - cold}x{minutes}"), (bad, f"0+{cold}x{minutes}")], at, False),
        ], name


def test_burn_rule_cases_keep_at_least_one_error_a_minute() -> None:
    """A loose SLO: twice the line still rounds up to whole errors; half of it rounds down."""
    by = _by_name(router_alerts(ROUTER, Policy(availability_slo=0.99999)))
    hot_1h = by["SMGErrorBudgetBurn1h"].cases[0].series[1][1]
    cold_1d = by["SMGErrorBudgetBurn1d"].cases[1].series[1][1]
    assert by["SMGErrorBudgetBurn1h"].expr.endswith("> 0.000144")
    assert (hot_1h, cold_1d) == ("0+1x65", "0+0x1445")


def test_burn_rule_cases_straddle_the_line() -> None:
    """SLO 0.9825, 1h line 0.252: 504 errors in 1000 (twice the line, rounded up) fire, 125 (half, rounded down) not."""
    a = _by_name(router_alerts(ROUTER, Policy(availability_slo=0.9825)))["SMGErrorBudgetBurn1h"]
    assert a.expr.endswith(" > 0.252")
    assert [v for _, v in a.cases[0].series] == ["0+496x65", "0+504x65", "0+100000x65"]
    assert [v for _, v in a.cases[1].series] == ["0+875x65", "0+125x65"]


def test_burn_lines_are_rounded_to_six_decimals() -> None:
    """Six nines: 14.4 x 1e-06 prints as 1.4e-05 (a 14x burn), the 6h and 1d lines stay exact."""
    by = _by_name(router_alerts(ROUTER, Policy(availability_slo=0.999999)))
    assert [by[f"SMGErrorBudgetBurn{w}"].expr.rsplit(" > ", 1)[1] for w in ("1h", "6h", "1d")] == [
        "1.4e-05",
        "6e-06",
        "3e-06",
    ]


@pytest.mark.parametrize(("slo", "hot"), [(0.96, 1000), (0.9306, 1000), (0.97, 865)])
def test_burn_firing_case_counts_rise_for_a_loose_slo(slo: float, hot: int) -> None:
    """Twice the 1h line can exceed every request: the firing case then fails every request, never more."""
    a = _by_name(router_alerts(ROUTER, Policy.from_vars({"availability_slo": slo})))["SMGErrorBudgetBurn1h"]
    assert not any("+-" in values for _, values in a.cases[0].series)
    assert [values.split("+")[1].split("x")[0] for _, values in a.cases[0].series[:2]] == [str(1000 - hot), str(hot)]


@pytest.mark.parametrize("slo", [0.9305, 0.9])
def test_an_slo_whose_page_cannot_fire_is_refused(slo: float) -> None:
    with pytest.raises(MonitoringError) as error:
        Policy.from_vars({"availability_slo": slo})
    ratio = {0.9305: "1.0008", 0.9: "1.44"}[slo]
    assert str(error.value) == (
        f"sglang_monitoring_availability_slo={slo}: the 1h page fires at 14.4x the error budget, an error ratio of "
        f"{ratio}: above 1, it can never fire; fix: declare more than 0.9306"
    )


def test_slo_rules_are_added_only_when_declared() -> None:
    names = [a.name for a in router_alerts(ROUTER, Policy(ttft_p99_slo_s=1.5, availability_slo=0.9))]
    assert names[5:] == ["SMGErrorBudgetBurn1h", "SMGErrorBudgetBurn6h", "SMGErrorBudgetBurn1d"]
    assert [a.name for a in router_alerts(ROUTER, Policy(availability_slo=0.9))][5:] == [
        "SMGErrorBudgetBurn1h",
        "SMGErrorBudgetBurn6h",
        "SMGErrorBudgetBurn1d",
    ]


# ---------------------------------------------------------------- drift rules


def test_drift_rule_fires_on_any_drifted_key() -> None:
    drift, stale = drift_alerts(Policy(), ["e1:decode", "e2:prefill"])
    assert drift.rule() == {
        "alert": "SGLangEnvelopeDrift",
        "expr": "max by (server, key, layer) (sglang_envelope_drift) > 0",
        "for": "0m",
        "labels": {"severity": "critical", "guards": "envelope"},
        "annotations": {
            "summary": "{{ $labels.server }}: {{ $labels.key }} drifted on the {{ $labels.layer }} layer",
            "description": "The four-layer audit (the drift exporter, every 60 s) finds {{ $labels.key }} of "
            "{{ $labels.server }} leaving the declared envelope on the {{ $labels.layer }} layer; run audit.yml for "
            "the explanation, site.yml to restore the declaration",
        },
    }
    series = 'sglang_envelope_drift{job="sglang_drift",server="e1:decode",key="context_length",layer="running"}'
    assert drift.cases == [
        Case([(series, "1x3")], "2m", True, {"server": "e1:decode", "key": "context_length", "layer": "running"}),
        Case([(series, "0x3")], "2m", False),
    ]
    assert stale.rule() == {
        "alert": "SGLangDriftAuditStale",
        "expr": "time() - max by (server) (sglang_envelope_audit_timestamp_seconds) > 180",
        "for": "0m",
        "labels": {"severity": "warning", "guards": "envelope"},
        "annotations": {
            "summary": "{{ $labels.server }}: no drift audit for 180 s",
            "description": "The drift exporter's timer (every 60 s) has not written an audit of {{ $labels.server }} "
            "for 180 s: drift would go unnoticed",
        },
    }
    run = 'sglang_envelope_audit_timestamp_seconds{job="sglang_drift",server="e1:decode"}'
    assert stale.cases == [  # three periods are 3 minutes: read at 5m, a stopped clock fires, a running one not
        Case([(run, "0x6")], "5m", True, {"server": "e1:decode"}),
        Case([(run, "0+60x6")], "5m", False),
    ]


def test_stale_audit_rule_scales_with_the_drift_period() -> None:
    drift, stale = drift_alerts(Policy(drift_period_s=100), [])
    assert "every 100 s" in drift.description
    assert drift.cases[0].labels["server"] == "host:decode"  # no engine: a placeholder server
    assert stale.expr.endswith("> 300") and stale.summary.endswith("no drift audit for 300 s")
    run = 'sglang_envelope_audit_timestamp_seconds{job="sglang_drift",server="host:decode"}'
    assert stale.cases == [
        Case([(run, "0x8")], "7m", True, {"server": "host:decode"}),
        Case([(run, "0+60x8")], "7m", False),
    ]
    _, lab = drift_alerts(Policy(drift_period_s=15), ["x:prefill"])
    assert lab.expr.endswith("> 45") and [c.eval_time for c in lab.cases] == ["3m", "3m"]


# ---------------------------------------------------------------- the rule file and its promtool tests


def _small_fleet() -> Targets:
    return Targets([PREFILL, DECODE], [ROUTER])


def test_all_alerts_has_a_group_per_engine_and_router_and_the_drift_group() -> None:
    groups = all_alerts(_small_fleet(), Policy())
    assert list(groups) == ["sglang-e2-prefill", "sglang-e1-decode", "smg-r1", "sglang-envelope-drift"]
    assert [a.name for a in groups["sglang-envelope-drift"]] == ["SGLangEnvelopeDrift", "SGLangDriftAuditStale"]
    assert groups["sglang-envelope-drift"][0].cases[0].labels["server"] == "e2:prefill"  # the first engine
    assert [a.server for a in groups["smg-r1"]] == ["r1:router"] * 5
    assert [a.name for a in groups["sglang-e1-decode"]] == [a.name for a in engine_alerts(DECODE, Policy())]


def test_rule_file_has_one_rule_group_per_alert_group() -> None:
    groups = all_alerts(_small_fleet(), Policy())
    out = rule_file(groups)
    assert [g["name"] for g in out["groups"]] == list(groups)
    assert out["groups"][2]["rules"] == [a.rule() for a in groups["smg-r1"]]
    assert list(out) == ["groups"] and list(out["groups"][0]) == ["name", "rules"]


def test_alert_labels_add_the_server_and_extra_labels() -> None:
    a = Alert("A", "warning", "h:decode", "up == 0", "1m", "s", "port", "d", [], {"team": "llm"})
    assert a.labels == {"severity": "warning", "guards": "port", "server": "h:decode", "team": "llm"}
    assert list(a.rule()) == ["alert", "expr", "for", "labels", "annotations"]
    assert Alert("B", "critical", "", "x", "0m", "s", "g", "d", []).labels == {"severity": "critical", "guards": "g"}


def test_promtool_tests_expect_the_alert_on_firing_cases_only() -> None:
    alert = _by_name(engine_alerts(DECODE, Policy()))["SGLangEngineDown"]
    drift = drift_alerts(Policy(), ["e1:decode"])
    out = promtool_tests({"g": [alert], "d": drift}, "rules.yml")
    assert list(out) == ["rule_files", "evaluation_interval", "tests"]
    assert out["rule_files"] == ["rules.yml"] and out["evaluation_interval"] == "1m"
    assert [t["name"] for t in out["tests"]] == [
        "SGLangEngineDown e1:decode fires",
        "SGLangEngineDown e1:decode silent",
        "SGLangEnvelopeDrift  fires",
        "SGLangEnvelopeDrift  silent",
        "SGLangDriftAuditStale  fires",
        "SGLangDriftAuditStale  silent",
    ]
    assert out["tests"][0] == {
        "name": "SGLangEngineDown e1:decode fires",
        "interval": "1m",
        "input_series": [{"series": f"up{E1}", "values": "0x3"}],
        "alert_rule_test": [
            {
                "eval_time": "3m",
                "alertname": "SGLangEngineDown",
                "exp_alerts": [
                    {
                        "exp_labels": _labels("critical", "enable_metrics", "e1:decode"),
                        "exp_annotations": {"summary": alert.summary, "description": alert.description},
                    }
                ],
            }
        ],
    }
    assert out["tests"][1]["alert_rule_test"] == [
        {"eval_time": "3m", "alertname": "SGLangEngineDown", "exp_alerts": []}
    ]
    assert out["tests"][1]["input_series"] == [{"series": f"up{E1}", "values": "1x3"}]
    (expected,) = out["tests"][2]["alert_rule_test"][0]["exp_alerts"]
    assert expected == {  # the case's own labels, and the templates filled with them
        "exp_labels": {
            "server": "e1:decode",
            "key": "context_length",
            "layer": "running",
            "severity": "critical",
            "guards": "envelope",
        },
        "exp_annotations": {
            "summary": "e1:decode: context_length drifted on the running layer",
            "description": "The four-layer audit (the drift exporter, every 60 s) finds context_length of e1:decode "
            "leaving the declared envelope on the running layer; run audit.yml for the explanation, site.yml to "
            "restore the declaration",
        },
    }
    assert out["tests"][3]["alert_rule_test"][0]["exp_alerts"] == []


def test_promtool_tests_without_case_labels_use_the_alert_server() -> None:
    """Templates are filled with the alert's own server; an alert without one leaves them to its case labels."""
    case = Case([("x", "1x2")], "1m", True)
    a = Alert("A", "warning", "h:decode", "x", "0m", "{{ $labels.server }} s", "g", "d {{ $labels.server }}", [case])
    (expected,) = promtool_tests({"g": [a]}, "r.yml")["tests"][0]["alert_rule_test"][0]["exp_alerts"]
    assert expected == {
        "exp_labels": {"severity": "warning", "guards": "g", "server": "h:decode"},
        "exp_annotations": {"summary": "h:decode s", "description": "d h:decode"},
    }
    b = Alert("B", "warning", "", "x", "0m", "{{ $labels.server }} s", "g", "d", [case])
    (expected,) = promtool_tests({"g": [b]}, "r.yml")["tests"][0]["alert_rule_test"][0]["exp_alerts"]
    assert expected == {
        "exp_labels": {"severity": "warning", "guards": "g"},
        "exp_annotations": {"summary": "{{ $labels.server }} s", "description": "d"},
    }


def test_promtool_passes_the_generated_tests_of_the_shared_envelope(tmp_path: Path) -> None:
    """The cases generated beside each rule agree with the rule as Prometheus evaluates it: a prefill and a decode
    host on the shared envelope (the decode one with fp8 index keys), the lab's short windows and a TTFT SLO (the
    day-long burn-rate cases are left to the slower monitoring suite)."""
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    if not Path(promtool).exists():
        pytest.skip("promtool is missing (`make apt` installs it)")
    hostvars = _hosts(h2={"sglang_advertise_host": "10.0.0.2"})
    hostvars["h2"]["sglang_decode"] = {**hostvars["h2"]["sglang_decode"], "bf16_index_k": False}
    groups = {"sglang_prefill": ["h1"], "sglang_decode": ["h2"], "sglang_router": ["h1"]}
    policy = Policy(for_short="15s", rate_window="1m", drift_period_s=15, ttft_p99_slo_s=2.0)
    alerts = all_alerts(fleet(hostvars, groups, DSV4), policy)
    (tmp_path / RULES_FILE).write_text(yaml.safe_dump(rule_file(alerts), sort_keys=False, width=1000))
    tests = promtool_tests(alerts, RULES_FILE)
    assert len(tests["tests"]) == 2 * 25 + 1  # 7 + 11 + 5 + 2 rules of two cases each; the decode stall has three
    (tmp_path / RULES_TEST_FILE).write_text(yaml.safe_dump(tests, sort_keys=False, width=1000))
    done = subprocess.run(
        [promtool, "test", "rules", RULES_TEST_FILE], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]


def test_each_near_limit_row_reads_a_policy_share_and_fires_in_the_fleet() -> None:
    fields = Policy.__dataclass_fields__
    assert all(row.share in fields and row.hold in ("for_short", "for_long") for row in NEAR_LIMITS.values())
    fired = {a.name for group in all_alerts(_small_fleet(), Policy()).values() for a in group}
    assert set(NEAR_LIMITS) <= fired, set(NEAR_LIMITS) - fired


def test_a_near_limit_alert_fires_at_the_share_of_its_declared_limit_by_hand() -> None:
    # ROUTER's queue_size 256 at a share of 0.55: 140.8, so the line is 141 queued; 140 stays calm
    (queue,) = [a for a in router_alerts(ROUTER, Policy(queue_warning=0.55)) if a.name == "SMGQueueNearFull"]
    assert queue.expr == 'max by (server) (smg_admission_queue_depth{job="sglang_router",server="r1:router"}) >= 141'
    assert [c.fires for c in queue.cases] == [True, False]
    assert [c.series[0][1].split("x")[0] for c in queue.cases] == ["141", "140"]
    assert queue.summary == "r1:router: router queue 141+ of 256"


def test_behind_a_front_each_router_has_the_out_of_front_alert_and_promtool_agrees(tmp_path: Path) -> None:
    hostvars = _hosts(h2={"sglang_advertise_host": "10.0.0.2"})
    groups = {"sglang_prefill": ["h1"], "sglang_decode": ["h2"], "sglang_router": ["h1", "h2"]}
    fl = fleet({**hostvars}, groups, DSV4)
    assert not any(a.name == "SGLangRouterOutOfFront" for g in all_alerts(fl, Policy()).values() for a in g)
    alerts = all_alerts(fl, Policy(front_out_for="3m"), fronted=True)
    out = {g: [a for a in alerts[g] if a.name == "SGLangRouterOutOfFront"] for g in ("smg-h1", "smg-h2")}
    (h1,), (h2,) = out.values()
    assert h1.rule() == {
        "alert": "SGLangRouterOutOfFront",
        "expr": 'min by (server) (haproxy_server_status{job="sglang_frontend",server="h1",state="UP"}) == 0',
        "for": "3m",
        "labels": {"severity": "warning", "guards": "sglang_frontend", "server": "h1:router"},
        "annotations": {
            "summary": "h1:router: out of the HAProxy front for 3m",
            "description": "A front (group sglang_frontend) has not sent new connections to the router h1:router for "
            "3m: its /readiness fails, or it was drained or put in maintenance and not put back. The other routers "
            "serve its share, and the fleet admits max_concurrent_requests=64 fewer calls at once",
        },
    }
    assert 'server="h2"' in h2.expr and h2.server == "h2:router"
    # HAProxy's status gauge is 0 or 1 per state: the router out of UP for the hold and 2 minutes more, then in UP
    up = 'haproxy_server_status{job="sglang_frontend",server="h1",state="UP"}'
    assert [(c.series, c.eval_time, c.fires) for c in h1.cases] == [([(up, "0x5")], "5m", True),
                                                                      ([(up, "1x5")], "5m", False)]  # fmt: skip
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    (tmp_path / RULES_FILE).write_text(yaml.safe_dump(rule_file(out), sort_keys=False, width=1000))
    tests = promtool_tests(out, RULES_FILE)
    assert [t["name"] for t in tests["tests"]] == [
        "SGLangRouterOutOfFront h1:router fires", "SGLangRouterOutOfFront h1:router silent",
        "SGLangRouterOutOfFront h2:router fires", "SGLangRouterOutOfFront h2:router silent",
    ]  # fmt: skip
    (tmp_path / RULES_TEST_FILE).write_text(yaml.safe_dump(tests, sort_keys=False, width=1000))
    done = subprocess.run(
        [promtool, "test", "rules", RULES_TEST_FILE], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
