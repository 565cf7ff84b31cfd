"""PD pair consistency (plugins/plugin_utils/sglang_pairs.py) and the declared model facts against the model config
(plugins/plugin_utils/sglang_validate.py), table-driven over a fleet of one prefill, one decode and one router host."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_engine_rules import model_facts
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_pairs import fleet_pair_problems
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_validate import check_fleet, model_fact_problems

REPO = Path(__file__).resolve().parents[2]
SHARED = yaml.safe_load((REPO / "group_vars" / "all" / "envelope.yml").read_text())
SHARED["sglang_engine_common"]["host"] = "0.0.0.0"
GROUPS = {"sglang_prefill": ["p1"], "sglang_decode": ["d1"], "sglang_router": ["r1"]}
_P, _D, _C, _R = "sglang_prefill", "sglang_decode", "sglang_engine_common", "sglang_router"


def fleet(**per_host: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """hostvars of p1, d1 and r1: the shared envelope, with per-host overrides merged into each variable's dict
    (a host_vars file that overrides a whole dict is modelled by passing the whole dict)."""
    hosts = {}
    for host in ("p1", "d1", "r1"):
        hv = copy.deepcopy(SHARED)
        for var, changes in per_host.get(host, {}).items():
            hv[var] = {**hv.get(var, {}), **changes} if isinstance(changes, dict) else changes
        hosts[host] = hv
    return hosts


# (id, per-host overrides, fragments of one problem: its rule id, both declared variables (host: variable=value) and
# the rule)
PAIR_CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("kv-dtype", {"d1": {_D: {"kv_cache_dtype": "bfloat16"}}},
     ["[pair.kv_cache_dtype]",
      "p1: sglang_engine_common.kv_cache_dtype='fp8_e4m3'", "d1: sglang_decode.kv_cache_dtype='bfloat16'",
      "KV cache dtype mismatch"]),
    ("kv-dtype-auto-is-fp8-for-v4", {"p1": {_C: {"kv_cache_dtype": None}}, "d1": {_D: {"kv_cache_dtype": "bfloat16"}}},
     ["[pair.kv_cache_dtype]",
      "p1: sglang_prefill.kv_cache_dtype (unset: 'fp8_e4m3')", "d1: sglang_decode.kv_cache_dtype='bfloat16'"]),
    ("kv-layout", {"p1": {"sglang_engine_extra_env": {"SGLANG_DSV4_KV_LAYOUT": "paged"}}},
     ["[pair.kv_layout]",
      "p1: sglang_engine_extra_env.SGLANG_DSV4_KV_LAYOUT='paged'",
      "d1: sglang_engine_extra_env.SGLANG_DSV4_KV_LAYOUT=None", "KV layout mismatch"]),
    ("bf16-index-k", {"d1": {_D: {"bf16_index_k": False}}},
     ["[pair.bf16_index_k]",
      "p1: sglang_engine_common.bf16_index_k=True", "d1: sglang_decode.bf16_index_k=False", "item"]),
    ("transfer-backend", {"p1": {_P: {"disaggregation_transfer_backend": "nixl"}}},
     ["[pair.transfer_backend]",
      "p1: sglang_prefill.disaggregation_transfer_backend='nixl'",
      "d1: sglang_engine_common.disaggregation_transfer_backend='mooncake'", "same KV transfer backend"]),
    ("transfer-backend-tcp", {"d1": {_D: {"disaggregation_transfer_backend": "mooncake_tcp"}}},
     ["[pair.transfer_backend]",
      "p1: sglang_engine_common.disaggregation_transfer_backend='mooncake'",
      "d1: sglang_decode.disaggregation_transfer_backend='mooncake_tcp'", "TCP"]),
    ("ib-device-one-side", {"p1": {_P: {"disaggregation_ib_device": "mlx5_0"}}},
     ["[pair.ib_device]",
      "p1: sglang_prefill.disaggregation_ib_device='mlx5_0'",
      "d1: sglang_decode.disaggregation_ib_device (unset: None)", "auto-discovers"]),
    ("page-size-v32", {"p1": {"sglang_model": {"name": "deepseek-v3.2"}, _P: {"page_size": 64}},
                        "d1": {"sglang_model": {"name": "deepseek-v3.2"}}},
     ["[pair.page_size]",
      "p1: sglang_prefill.page_size=64", "d1: sglang_engine_common.page_size=256", "Page size mismatch"]),
    ("context-decode-shorter", {"d1": {_D: {"context_length": 262144}}},
     ["[pair.context_length]",
      "p1: sglang_engine_common.context_length=524288", "d1: sglang_decode.context_length=262144",
      "raise the decode's context_length to >= 524288"]),
    ("context-decode-unset-is-model-max",
     {"p1": {_P: {"context_length": 1048576}}, "d1": {_C: {"context_length": None}}}, []),
    ("model-path", {"d1": {"sglang_model": {"path": "/models/DeepSeek-V4-Flash-v2"}}},
     ["[pair.model_path]",
      "p1: sglang_model.path='/models/DeepSeek-V4-Flash'", "d1: sglang_model.path='/models/DeepSeek-V4-Flash-v2'",
      "same model"]),
    ("served-name", {"p1": {_P: {"served_model_name": "dsv4-prefill"}}},
     ["[pair.served_model_name]",
      "p1: sglang_prefill.served_model_name='dsv4-prefill'", "d1: sglang_model.served_name='deepseek-v4'"]),
    ("admission-wait-past-bootstrap", {"r1": {_R: {"pd_admission_wait_secs": 300}}},
     ["[pair.admission_wait_within_bootstrap]",
      "r1: sglang_router.pd_admission_wait_secs=300",
      "p1: sglang_engine_extra_env.SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT (unset: SGLang's default 300)",
      "bootstrap"]),
    ("bootstrap-deadline-under-default-wait",
     {"p1": {"sglang_engine_extra_env": {"SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": "20"}}},
     ["[pair.admission_wait_within_bootstrap]",
      "r1: sglang_router.pd_admission_wait_secs (unset: smg's default 30)",
      "p1: sglang_engine_extra_env.SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT='20'"]),
    ("request-timeout-under-admission-wait", {"r1": {_R: {"pd_admission_wait_secs": 120, "request_timeout_secs": 90}}},
     ["[pair.request_timeout_above_wait]",
      "r1: sglang_router.pd_admission_wait_secs=120", "r1: sglang_router.request_timeout_secs=90"]),
]  # fmt: skip


def _without_none(hosts: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """None in an override deletes the key (it is then unset, and SGLang's or smg's default applies)."""
    return {
        h: {
            k: ({kk: vv for kk, vv in v.items() if vv is not None} if isinstance(v, dict) else v) for k, v in hv.items()
        }
        for h, hv in hosts.items()
    }


def _model(hosts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return dict(json.loads((REPO / "models" / hosts["p1"]["sglang_model"]["name"] / "config.json").read_text()))


def test_the_shared_envelope_has_no_pair_problem(dsv4: dict[str, Any]) -> None:
    assert fleet_pair_problems(fleet(), GROUPS, dsv4) == []


@pytest.mark.parametrize(("case", "overrides", "fragments"), PAIR_CASES, ids=[c[0] for c in PAIR_CASES])
def test_pair_rule(case: str, overrides: dict[str, Any], fragments: list[str]) -> None:
    hosts = _without_none(fleet(**overrides))
    problems = fleet_pair_problems(hosts, GROUPS, _model(hosts))
    if not fragments:  # a valid pairing: nothing to report
        assert problems == [], problems
        return
    assert len(problems) == 1, problems
    for fragment in fragments:
        assert fragment in problems[0], f"{fragment!r} missing from: {problems[0]}"
    assert "fix: " in problems[0]


def test_every_pair_of_a_larger_fleet_is_checked(dsv4: dict[str, Any]) -> None:
    """Two prefills and three decodes: one decode that disagrees is reported against each prefill."""
    hosts = {h: copy.deepcopy(SHARED) for h in ("p1", "p2", "d1", "d2", "d3", "r1")}
    hosts["d2"][_D] = {**hosts["d2"][_D], "kv_cache_dtype": "bfloat16"}
    groups = {"sglang_prefill": ["p1", "p2"], "sglang_decode": ["d1", "d2", "d3"], "sglang_router": ["r1"]}
    problems = fleet_pair_problems(hosts, groups, dsv4)
    assert len(problems) == 2 and all("d2: sglang_decode.kv_cache_dtype" in p for p in problems), problems
    assert {p.split(":")[0] for p in problems} == {"p1", "p2"}


def test_pair_problems_reach_the_fleet_validation(dsv4: dict[str, Any]) -> None:
    hosts = fleet(d1={_D: {"bf16_index_k": False}})
    assert any("bf16_index_k" in p and "p1:" in p and "d1:" in p for p in check_fleet(hosts, GROUPS, dsv4))


# Declared model facts (sglang_model.params_b / quantization) against models/<name>/config.json.
FACT_CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("as-declared", {}, []),
    ("taken-from-config", {"params_b": None, "quantization": None}, []),
    ("params-contradict", {"params_b": 671}, ["sglang_model.params_b=671", "num_parameters_b=284"]),
    ("quantization-contradicts", {"quantization": "fp8"}, ["sglang_model.quantization='fp8'", "quantization='mxfp4'"]),
]


@pytest.mark.parametrize(("case", "changes", "fragments"), FACT_CASES, ids=[c[0] for c in FACT_CASES])
def test_model_facts(dsv4: dict[str, Any], case: str, changes: dict[str, Any], fragments: list[str]) -> None:
    model = {k: v for k, v in {**SHARED["sglang_model"], **changes}.items() if v is not None}
    problems = model_fact_problems("p1", {"sglang_model": model}, dsv4)
    assert len(problems) == len(fragments and [1]), problems
    for fragment in fragments:
        assert fragment in problems[0]
    assert model_facts({"sglang_model": model}, dsv4)[0] in (284, 671)


def test_model_facts_absent_everywhere_are_a_problem(dsv4: dict[str, Any]) -> None:
    config = {k: v for k, v in dsv4.items() if k not in ("num_parameters_b", "quantization")}
    model = {k: v for k, v in SHARED["sglang_model"].items() if k not in ("params_b", "quantization")}
    problems = model_fact_problems("p1", {"sglang_model": model}, config)
    assert len(problems) == 2 and "add num_parameters_b to models/deepseek-v4-flash/config.json" in problems[0]


def test_taken_facts_feed_the_capacity_model(dsv4: dict[str, Any]) -> None:
    """An envelope without params_b/quantization validates and sizes exactly like the declared one."""
    hosts = fleet()
    bare = copy.deepcopy(hosts)
    for hv in bare.values():
        hv["sglang_model"] = {k: v for k, v in hv["sglang_model"].items() if k not in ("params_b", "quantization")}
    assert check_fleet(hosts, GROUPS, dsv4) == check_fleet(bare, GROUPS, dsv4) == []
