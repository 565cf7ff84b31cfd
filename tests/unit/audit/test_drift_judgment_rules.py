"""The rules under each drift judgment, pinned value by value: when two layer values mean the same setting
(`same`), which live facts explain an effective value (`live_context`), what the capacity model predicts
(`predict`), when the KV pool tells the index-key dtype (`infer_index_k`), which keys and layers a comparison
holds (`compare`), which layer a departure is charged to (`_judge`) and how one server is judged from its
readers' snapshots (`judge`, `worker_drift`).

Layer values, pools and facts are synthetic unless a case says it uses the lab's DeepSeek-V4-Flash inputs.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_drift import (
    LiveContext,
    compare,
    effective_gap,
    host_drift,
    infer_index_k,
    interrupted_deploy,
    judge,
    live_context,
    predict,
    same,
    worker_drift,
)
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_flags import REDACTED
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_schema import truthy
from audit_helpers import model_inputs

DSV4 = model_inputs("deepseek-v4-flash")
DECODE = {"tp_size": 4, "context_length": 131072, "disaggregation_mode": "decode"}
POOL_1000_OF_1001 = (
    "the pool is min(profiled, --max-total-tokens): the memory profile holds only 1000 tokens "
    "(mem_fraction_static and the weights leave no room for 1001)"
)
HAND_START = "the process runs with a value its files do not have (started or restarted by hand)"

# ---------------------------------------------------------------- equality


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, True),
        ("1", True),
        ("true", True),
        (False, False),
        (None, False),
        ("", False),
        (0, False),
        ("0", False),
        ("false", False),
        ("False", False),
    ],
)
def test_bool_reading_of_a_layer_value(value: Any, expected: bool) -> None:
    """A bool setting is off when unset, falsy, or the text 0 / false / False."""
    assert truthy(value) is expected


SAME_CASES = [
    # (id, key, a, b, same?)
    ("bool_unset_is_false", "enable_metrics", None, False, True),
    ("bool_unset_is_not_true", "enable_metrics", None, True, False),
    ("bool_text_zero_is_false", "enable_metrics", "0", False, True),
    ("bool_text_False_is_unset", "enable_metrics", "False", None, True),
    ("bool_text_false_is_unset", "enable_metrics", "false", None, True),
    ("str_unset_is_not_the_text_None", "log_level", None, "None", False),
    ("size_unset_is_not_a_value", "context_length", None, 131072, False),
    ("size_value_is_not_unset", "context_length", 131072, None, False),
    ("both_unset", "context_length", None, None, True),
    ("pd_mode_unset_left_is_null", "disaggregation_mode", None, "null", True),
    ("pd_mode_unset_right_is_null", "disaggregation_mode", "null", None, True),
    ("pd_mode_both_unset", "disaggregation_mode", None, None, True),
    ("pd_mode_decode_is_not_unset", "disaggregation_mode", "decode", None, False),
    ("pd_mode_unset_is_not_decode", "disaggregation_mode", None, "decode", False),
    ("float_within_a_millionth", "mem_fraction_static", 0.8, 0.8000001, True),
    ("float_int_and_float", "mem_fraction_static", 1, 1.0, True),
    ("float_apart", "mem_fraction_static", 0.8, 0.81, False),
    ("int_int_and_float", "max_running_requests", 64, 64.0, True),
    ("size_int_and_float", "context_length", 131072, 131072.0, True),
    ("intlist_ints_and_texts", "cuda_graph_bs_decode", [1, 2], ["1", "2"], True),
    ("intlist_apart", "cuda_graph_bs_decode", [1, 2], [1, 4], False),
    ("unparsable_size", "context_length", "lots", 131072, False),
    ("unparsable_float", "mem_fraction_static", "most", 0.8, False),
    ("secret_both_set", "api_key", "sk-a", "<redacted>", True),
    ("unknown_key_exact", "not_a_key", "1", 1, False),
]


@pytest.mark.parametrize(("key", "a", "b", "expected"), [pytest.param(*c[1:], id=c[0]) for c in SAME_CASES])
def test_two_layer_values_mean_the_same_setting(key: str, a: Any, b: Any, expected: bool) -> None:
    """Each key compares by its schema kind; an unset PD mode is `null`, an unset bool is false."""
    assert same(key, a, b) is expected


# ---------------------------------------------------------------- live facts


@pytest.mark.parametrize(
    ("effective", "facts", "requested", "expected"),
    [
        pytest.param(
            {"max_total_tokens": 1000, "page_size": 256},
            {"token_capacity": 2000, "attn_dp_size": 4, "disaggregation_mode": "decode"},
            {"max_running_requests": 64},
            LiveContext(1000, 4, "decode", {"max_running_requests": 64}, 256),
            id="applied_pool_before_memory_report",
        ),
        pytest.param(
            {},
            {"token_capacity": 2000, "attn_dp_size": "2", "disaggregation_mode": "prefill"},
            {},
            LiveContext(2000, 2, "prefill", {}, None),
            id="memory_report_when_no_applied_pool",
        ),
        pytest.param({}, {}, None, LiveContext(None, 1, "null", {}, None), id="nothing_reported"),
        pytest.param(
            {"max_total_tokens": 0},
            {"attn_dp_size": 0, "disaggregation_mode": ""},
            {"context_length": 4096},
            LiveContext(None, 1, "null", {"context_length": 4096}, None),
            id="empty_answers_are_defaults",
        ),
    ],
)
def test_live_context_from_an_engine_answer(
    effective: dict[str, Any], facts: dict[str, Any], requested: dict[str, Any] | None, expected: LiveContext
) -> None:
    assert live_context(effective, facts, requested) == expected  # type: ignore[arg-type]


def test_live_context_copies_the_echoed_arguments() -> None:
    requested = {"max_running_requests": 64}
    ctx = live_context({}, {}, requested)
    requested["max_running_requests"] = 1
    assert ctx.requested == {"max_running_requests": 64}


# ---------------------------------------------------------------- prediction (lab inputs: DeepSeek-V4-Flash, 141 GiB)

DSV4_DECODE_PREDICTION = {
    "tp_size": 4,
    "context_length": 131072,
    "disaggregation_mode": "decode",
    "bf16_index_k": False,
    "chunked_prefill_size": 8192,
    "max_prefill_tokens": 16384,
    "page_size": 256,
    "kv_cache_dtype": "fp8_e4m3",
    "max_running_requests": 256,
    "swa_full_tokens_ratio": 0.1,
    "disable_radix_cache": True,
    "mem_fraction_static": 0.929,
    "max_total_tokens": 14000128,
    "bf16_index_share": 0.0841,
    "dsv4": True,
    "pool_by_index_k": {"bf16": 12822272, "fp8": 14000128},
}


def test_prediction_of_the_lab_decode_engine() -> None:
    """Non-secret resolved keys plus the pool, both pools by index-key dtype and the share bf16 keys cost."""
    assert predict(DSV4, DECODE) == (DSV4_DECODE_PREDICTION, None)


def test_prediction_leaves_out_deploy_keys_and_the_api_key() -> None:
    declared = {**DECODE, "gpu_ids": [4, 5, 6, 7], "enabled": True, "api_key": "sk-lab-secret-123"}
    assert predict(DSV4, declared) == (DSV4_DECODE_PREDICTION, None)


def test_a_redacted_value_is_treated_as_unset() -> None:
    """A value read back redacted is not a value: the model default applies (1M context)."""
    predicted, why = predict(DSV4, {"tp_size": 4, "context_length": REDACTED})
    assert (why, predicted["context_length"], predicted["max_total_tokens"]) == (None, 1048576, 13554688)
    assert predict(DSV4, {"tp_size": 4, "context_length": REDACTED}) == predict(DSV4, {"tp_size": 4})


def test_prediction_with_bf16_index_keys_takes_the_bf16_pool() -> None:
    predicted, why = predict(DSV4, {**DECODE, "bf16_index_k": True})
    assert why is None
    assert {k: predicted[k] for k in ("bf16_index_k", "max_total_tokens", "bf16_index_share", "pool_by_index_k")} == {
        "bf16_index_k": True,
        "max_total_tokens": 12822272,
        "bf16_index_share": 0.0841,
        "pool_by_index_k": {"bf16": 12822272, "fp8": 14000128},
    }


def test_prediction_uses_the_declared_weights() -> None:
    """params_b and quantization of the inventory override the config's own (284, mxfp4): synthetic 200 B fp8."""
    predicted, why = predict({**DSV4, "params_b": 200, "quantization": "fp8"}, {"tp_size": 4})
    assert why is None
    assert (predicted["max_total_tokens"], predicted["pool_by_index_k"]) == (
        11820032,
        {"bf16": 10825472, "fp8": 11820032},
    )


def test_prediction_of_a_model_without_dsv4_pools() -> None:
    """DeepSeek-V3.2: no index-key pools, no default running limit, no bf16 share."""
    model = {**DSV4, "config": model_inputs("deepseek-v3.2")["config"], "params_b": 671, "quantization": "fp8"}
    assert predict(model, {"tp_size": 8}) == (
        {
            "tp_size": 8,
            "bf16_index_k": False,
            "disaggregation_mode": "null",
            "chunked_prefill_size": 8192,
            "max_prefill_tokens": 16384,
            "kv_cache_dtype": "auto",
            "page_size": 64,
            "mem_fraction_static": 0.904,
            "context_length": 163840,
            "max_total_tokens": 663872,
            "max_running_requests": None,
            "bf16_index_share": 0.0,
            "dsv4": False,
        },
        None,
    )


def test_an_empty_pool_has_no_bf16_share() -> None:
    """A synthetic cap below one page leaves no pool: the share is unknown (None), not NaN."""
    predicted, why = predict(DSV4, {"tp_size": 4, "max_total_tokens": 100})
    assert why is None
    assert (predicted["max_total_tokens"], predicted["bf16_index_share"], predicted["pool_by_index_k"]) == (
        0,
        None,
        {"bf16": 0, "fp8": 0},
    )


@pytest.mark.parametrize(
    ("model", "why"),
    [
        ({**DSV4, "gpu_memory_gib": None}, "capacity model: gpu_memory_gib=0.0 must be > 0 (GiB per GPU)"),
        ({**DSV4, "gpu_memory_gib": 0}, "capacity model: gpu_memory_gib=0.0 must be > 0 (GiB per GPU)"),
        (None, None),
        ({"gpu_memory_gib": 141}, None),
    ],
    ids=["gpu_memory_unknown", "gpu_memory_zero", "no_model", "no_config"],
)
def test_no_prediction_and_why(model: dict[str, Any] | None, why: str | None) -> None:
    assert predict(model, DECODE) == ({}, why)


# ---------------------------------------------------------------- index keys from the pool (synthetic pools)

POOLS = {"pool_by_index_k": {"bf16": 1000, "fp8": 2000}}  # gap 1000: a quarter is 250


def _rule(pool: int, nearer: str) -> str:
    return (
        f"inferred from the KV pool: {pool:,} tokens; the capacity model predicts 1,000 with bf16 index keys "
        f"and 2,000 with fp8 keys, and the pool lies within a quarter of their gap of the {nearer} figure"
    )


@pytest.mark.parametrize(
    ("pool", "expected"),
    [
        (1000, (True, _rule(1000, "bf16"))),
        (1220, (True, _rule(1220, "bf16"))),
        (1249, (True, _rule(1249, "bf16"))),
        (1250, None),
        (751, (True, _rule(751, "bf16"))),
        (750, None),
        (1751, (False, _rule(1751, "fp8"))),
        (1750, None),
        (2249, (False, _rule(2249, "fp8"))),
        (2250, None),
        (1500, None),
        (0, None),
        (None, None),
    ],
)
def test_index_keys_inferred_within_a_quarter_of_the_gap(pool: int | None, expected: tuple[bool, str] | None) -> None:
    assert infer_index_k(pool, POOLS) == expected


def test_equal_pools_tell_nothing() -> None:
    assert infer_index_k(1000, {"pool_by_index_k": {"bf16": 1000, "fp8": 1000}}) is None


# ---------------------------------------------------------------- compare: keys, values, origins


def _row(audit: Any, key: str) -> dict[str, Any]:
    return next(asdict(r) for r in audit.rows if r.key == key)


LIMITS = ["context_length", "max_total_tokens", "max_running_requests", "chunked_prefill_size", "mem_fraction_static"]


@pytest.mark.parametrize(
    ("layers", "row", "drift"),
    [
        (
            ({"log_level": "info"}, None, None, None),
            {"key": "log_level", "limit": False, "values": {"declared": "info"}, "marks": {}},
            [],
        ),
        (
            ({}, {"log_level": "debug"}, None, None),
            {
                "key": "log_level",
                "limit": False,
                "values": {"declared": None, "on_disk": "debug"},
                "marks": {"on_disk": "drift"},
            },
            [("log_level", "on_disk", ["on_disk"], "the files on the host differ from the declaration")],
        ),
        (
            ({}, None, {"log_level": "debug"}, None),
            {
                "key": "log_level",
                "limit": False,
                "values": {"declared": None, "running": "debug"},
                "marks": {"running": "drift"},
            },
            [("log_level", "running", ["running"], HAND_START)],
        ),
        (
            ({}, None, None, {"log_level": "debug"}),
            {"key": "log_level", "limit": False, "values": {"declared": None, "effective": "debug"}, "marks": {}},
            [],
        ),
    ],
    ids=["declared_only", "on_disk_only", "running_only", "effective_only"],
)
def test_a_key_of_any_one_layer_gets_a_row(layers: tuple[Any, ...], row: dict[str, Any], drift: list[Any]) -> None:
    """A non-limit key is compared when any layer holds it; limit keys always are, in schema order."""
    audit = compare("decode", *layers)
    assert [r.key for r in audit.rows] == [*LIMITS, "log_level", "bf16_index_k"]
    assert _row(audit, "log_level") == row
    assert [(d.key, d.layer, d.layers, d.explanation) for d in audit.drift] == drift


def test_a_key_missing_from_a_read_layer() -> None:
    """Files and argv read without the key hold it unset; an engine that does not report it is unknown."""
    audit = compare("decode", {"context_length": 131072}, {}, {}, {})
    assert _row(audit, "context_length") == {
        "key": "context_length",
        "limit": True,
        "values": {"declared": 131072, "on_disk": None, "running": None},
        "marks": {"on_disk": "drift", "running": "drift"},
    }
    assert _row(audit, "max_total_tokens")["values"] == {"declared": None, "on_disk": None, "running": None}
    assert [asdict(d) for d in audit.drift] == [
        {
            "key": "context_length",
            "layer": "on_disk",
            "layers": ["on_disk", "running"],
            "declared": 131072,
            "live": None,
            "severity": "drift",
            "explanation": "edited on the host (or the declaration changed without a deploy) and applied by a restart",
        }
    ]


INTERRUPTED = {"since": "2026-11-30T10:00:00Z", "envelope": {"context_length": 262144}}


@pytest.mark.parametrize(
    ("layers", "deployed", "origin", "explanation"),
    [
        (
            ({"context_length": 262144}, {"context_length": 131072}, {"context_length": 131072}, None),
            {"context_length": 131072},
            "declared",
            "interrupted deploy of context_length 131072 -> 262144 at 2026-11-30T10:00:00Z: rerun site.yml",
        ),
        (
            ({"context_length": 262144}, {"context_length": 131072}, {"context_length": 131072}, None),
            {"context_length": 262144},
            "on_disk",
            "interrupted deploy of the same envelope at 2026-11-30T10:00:00Z: rerun site.yml",
        ),
        (
            ({"context_length": 262144}, {"context_length": 262144}, {"context_length": 131072}, None),
            None,
            "running",
            "interrupted deploy of context_length None -> 262144 at 2026-11-30T10:00:00Z: rerun site.yml",
        ),
        (
            ({"context_length": 262144}, None, None, {"context_length": 131072}),
            None,
            "effective",
            "/v1/models max_model_len is 131072, the declaration 262144",
        ),
    ],
    ids=["declared", "on_disk", "running", "effective"],
)
def test_an_unfinished_deploy_explains_host_side_departures(
    layers: tuple[Any, ...], deployed: dict[str, Any] | None, origin: str, explanation: str
) -> None:
    """Declared, on-disk and running departures are the unfinished deploy; an effective one keeps its own words."""
    audit = compare("decode", *layers, deployed=deployed, in_progress=INTERRUPTED)
    assert [(d.layer, d.explanation) for d in audit.drift] == [(origin, explanation)]


@pytest.mark.parametrize(
    ("layers", "deployed", "expected"),
    [
        (
            ({"context_length": 131072}, None, {"context_length": 65536}),
            {"context_length": 131072},
            ("running", ["running"], 65536, HAND_START),
        ),
        (
            ({"context_length": 262144}, None, {"context_length": 131072}),
            {"context_length": 131072},
            (
                "declared",
                ["running"],
                131072,
                "the declaration changed since the last deploy, which wrote 131072: run site.yml",
            ),
        ),
        (
            ({"context_length": 262144}, {"context_length": 65536}, {"context_length": 65536}),
            {"context_length": 131072},
            (
                "on_disk",
                ["on_disk", "running"],
                65536,
                "edited on the host (or the declaration changed without a deploy) and applied by a restart",
            ),
        ),
        (
            ({"context_length": 262144}, {"context_length": 65536}, None),
            {"context_length": 131072},
            ("on_disk", ["on_disk"], 65536, "the files on the host differ from the declaration"),
        ),
        (
            ({"context_length": 262144}, {"context_length": 65536}, None),
            {"max_total_tokens": 1000},
            ("on_disk", ["on_disk"], 65536, "the files on the host differ from the declaration"),
        ),
    ],
    ids=[
        "deployed_as_declared",
        "declaration_changed_files_unread",
        "files_unlike_the_deploy_too",
        "files_unlike_the_deploy_without_process",
        "key_not_recorded_by_the_deploy",
    ],
)
def test_when_the_declaration_itself_is_the_origin(
    layers: tuple[Any, ...], deployed: dict[str, Any], expected: tuple[Any, ...]
) -> None:
    """Only a deploy record unlike the declaration, with files as it wrote them (or unread), blames the declaration."""
    audit = compare("decode", *layers, deployed=deployed)
    assert [(d.layer, d.layers, d.live, d.explanation) for d in audit.drift] == [expected]


def test_an_unset_bool_argv_does_not_excuse_an_effective_departure() -> None:
    """Declared off, absent from the argv (off), on in the engine: the effective layer keeps its explanation."""
    audit = compare("decode", {"disable_radix_cache": False}, None, {}, {"disable_radix_cache": True})
    assert [asdict(d) for d in audit.drift] == [
        {
            "key": "disable_radix_cache",
            "layer": "effective",
            "layers": ["effective"],
            "declared": False,
            "live": True,
            "severity": "drift",
            "explanation": "the engine applies True, the declaration says False",
        }
    ]


@pytest.mark.parametrize(
    ("page_size", "gap"),
    [
        (None, ("drift", POOL_1000_OF_1001)),
        (1, ("drift", POOL_1000_OF_1001)),
        (2, None),
    ],
    ids=["page_unknown_is_one_token", "page_of_one_token", "page_of_two_tokens"],
)
def test_a_pool_cap_is_page_aligned_only_by_a_known_page(page_size: int | None, gap: tuple[str, str] | None) -> None:
    """A synthetic odd cap of 1001 tokens: only a reported page size excuses the pool rounded down to 1000."""
    assert effective_gap("max_total_tokens", 1001, 1000, {}, LiveContext(page_size=page_size)) == gap


# ---------------------------------------------------------------- judge


def test_judge_assumes_no_pending_restart() -> None:
    """Without a restart_pending answer, a process value the files lack was started by hand (no model: synthetic)."""
    live = {"live": {"context_length": 65536}}
    host = {"on_disk": {"context_length": 131072}, "running": {"context_length": 65536}}
    verdict = judge("decode", {"context_length": 131072}, host, live, None)
    assert (verdict.predicted, verdict.warnings) == ({}, [])
    assert [asdict(d) for d in verdict.drift] == [
        {
            "key": "context_length",
            "layer": "running",
            "layers": ["running", "effective"],
            "declared": 131072,
            "live": 65536,
            "severity": "drift",
            "explanation": HAND_START,
        }
    ]
    assert live == {"live": {"context_length": 65536}}  # the snapshot is not changed


def test_judge_records_the_inferred_index_keys() -> None:
    """The lab decode engine reports no index-key dtype; its pool equals the bf16 prediction, so bf16 is inferred."""
    live = {"live": {"max_total_tokens": 12822272}, "live_facts": {"attn_dp_size": 1}}
    verdict = judge("decode", {**DECODE, "bf16_index_k": True}, None, live, DSV4)
    rule = (
        "inferred from the KV pool: 12,822,272 tokens; the capacity model predicts 12,822,272 with bf16 index keys "
        "and 14,000,128 with fp8 keys, and the pool lies within a quarter of their gap of the bf16 figure"
    )
    assert (verdict.warnings, verdict.predicted["pool_by_index_k"]) == ([], {"bf16": 12822272, "fp8": 14000128})
    assert verdict.effective == {"max_total_tokens": 12822272, "bf16_index_k": True}
    assert verdict.notes == {"bf16_index_k": rule}
    assert verdict.sources == {"bf16_index_k": "KV pool size (capacity model)"}
    assert verdict.drift == []
    assert _row(verdict, "bf16_index_k")["values"] == {"declared": True, "effective": True}
    assert live["live"] == {"max_total_tokens": 12822272}


def test_judge_without_a_live_answer_compares_the_files_only() -> None:
    verdict = judge("decode", {"context_length": 131072}, {"on_disk": {"context_length": 65536}}, {"live": None})
    assert verdict.effective is None
    assert _row(verdict, "context_length")["values"] == {"declared": 131072, "on_disk": 65536}
    assert [(d.key, d.layer, d.layers) for d in verdict.drift] == [("context_length", "on_disk", ["on_disk"])]


def test_judge_warns_when_the_model_predicts_nothing() -> None:
    bad = {**DSV4, "gpu_memory_gib": 1}
    verdict = judge("decode", DECODE, None, {"live": {}}, bad)
    assert verdict.predicted == {}
    (warning,) = verdict.warnings
    assert warning.startswith("capacity model: ") and warning.endswith("; unset keys are not compared")


def test_judge_adds_the_host_findings_to_the_engine_drift() -> None:
    host = {
        "on_disk": {"context_length": 131072},
        "running": {"context_length": 131072},
        "files": {"script": {"path": "/s", "exists": True, "owner": "root", "group": "root", "mode": "0700"}},
        "backups": ["/s.1.2026~"],
        "releases": ["/r/old"],
        "release_switch": {"to": "r2", "from": "r1", "since": "t"},
    }
    declared_files = {"script": {"owner": "root", "group": "root", "mode": "0755"}}
    verdict = judge("decode", {"context_length": 131072}, host, None, declared_files=declared_files)
    assert [(d.key, d.severity) for d in verdict.drift] == [
        ("release", "drift"), ("file:script", "drift"), ("backups", "drift"), ("releases", "info"),
    ]  # fmt: skip
    assert verdict.as_dict()["drift_count"] == 3


def test_judge_router_limits_come_from_its_argv_and_the_hosts_cores() -> None:
    host = {"on_disk": {"port": 8000}, "running": {"port": 8000}, "cpus": 8}
    verdict = judge("router", {"port": 8000}, host, {"router": {"workers": []}}, expected_workers={})
    assert verdict.effective is not None
    assert verdict.effective["max_concurrent_requests"] == 8192
    assert verdict.notes["max_concurrent_requests"] == "-1: smg derives 1024 per core (8), at least 4096"
    assert verdict.sources == {"*": "running argv + smg defaults"}
    assert verdict.drift == []


def test_judge_router_without_argv_says_so() -> None:
    verdict = judge("router", {"port": 8000}, {"on_disk": {"port": 8000}, "running": None}, None)
    assert verdict.effective is None
    assert verdict.notes == {"*": "the router's argv is unknown: smg reports no limits over HTTP"}


EXPECTED = {"prefill": [{"url": "http://10.0.0.1:30000/", "bootstrap_port": 8998}], "decode": ["http://10.0.0.2:30001"]}


def test_worker_drift_names_missing_and_unexpected_workers() -> None:
    workers = [
        {"type": "prefill", "url": "http://10.0.0.1:30000", "healthy": True},
        {"type": "decode", "url": "http://10.0.0.9:30001/", "healthy": True},
    ]
    assert [asdict(d) for d in worker_drift(workers, EXPECTED)] == [
        {
            "key": "workers", "layer": "effective", "layers": ["effective"], "declared": "http://10.0.0.2:30001",
            "live": None, "severity": "drift",
            "explanation": "decode worker http://10.0.0.2:30001 missing: the router does not route to it; site.yml "
            "puts it back",
        },
        {
            "key": "workers", "layer": "effective", "layers": ["effective"], "declared": None,
            "live": "http://10.0.0.9:30001", "severity": "drift",
            "explanation": "decode worker http://10.0.0.9:30001 unexpected: the inventory does not declare it",
        },
    ]  # fmt: skip


@pytest.mark.parametrize(("workers", "expected"), [(None, EXPECTED), ([], None)])
def test_worker_drift_needs_both_lists(workers: list[dict[str, Any]] | None, expected: Any) -> None:
    assert worker_drift(workers, expected) == []


def test_worker_drift_in_the_router_verdict() -> None:
    live = {"router": {"workers": [{"type": "prefill", "url": "http://10.0.0.1:30000", "healthy": True}]}}
    verdict = judge("router", {}, {"running": {}}, live, expected_workers=EXPECTED)
    assert [(d.key, d.declared) for d in verdict.drift] == [("workers", "http://10.0.0.2:30001")]


# ---------------------------------------------------------------- host findings


def test_an_interrupted_deploy_lists_every_file() -> None:
    in_progress = {"since": "2026-11-30T10:00:00Z", "files": ["script", "unit", "env_file"]}
    assert interrupted_deploy(in_progress, None) == (
        "interrupted deploy of files script, unit, env_file at 2026-11-30T10:00:00Z: rerun site.yml"
    )


def test_a_file_not_read_does_not_hide_the_next_one() -> None:
    root = {"owner": "root", "group": "root"}
    declared = {"unit": {**root, "mode": "0644"}, "script": {**root, "mode": "0755"}}
    files = {"unit": {"exists": False}, "script": {"path": "/s", "exists": True, **root, "mode": "0777"}}
    assert [(d.key, d.declared, d.live) for d in host_drift(files, declared, [], None)] == [
        ("file:script", "root:root 0755", "root:root 0777")
    ]
