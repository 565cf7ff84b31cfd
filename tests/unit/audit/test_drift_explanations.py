"""The exact words of each drift judgment: why an effective value leaves the declaration (`_explain`), when a gap is
no drift at all (`effective_gap`, `_unset_gap`), and which layer and explanation `compare` gives each departure.

All layer values here are synthetic, chosen so each rule is the one that decides.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_drift import (
    IGNORED,
    LiveContext,
    _explain,
    _unset_gap,
    compare,
    effective_gap,
)

QUEUE_HINT = "bound the queue with the router's queue_size instead"
FP8_KEYS = (
    "the engine budgets fp8 index keys although bf16 is declared: needles beyond about 2,000 tokens are lost again; "
    "check SGLANG_DSV4_BF16_INDEX_K in the env file and that the release is the patched fork"
)
RULE = "SGLang applies min(requested // attn_dp_size, token_capacity // 2) per DP rank: the live pool holds "


def _ctx(**kwargs: Any) -> LiveContext:
    return LiveContext(**kwargs)


EXPLAIN_CASES = [
    # (id, key, declared, live, predicted, context, expected text)
    (
        "queued_ignored_in_prefill",
        "max_queued_requests", 16, IGNORED, {}, _ctx(disaggregation_mode="prefill"),
        f"SGLang ignores --max-queued-requests when disaggregation_mode=prefill: {QUEUE_HINT}",
    ),
    (
        "queued_ignored_in_decode",
        "max_queued_requests", 16, IGNORED, {}, _ctx(disaggregation_mode="decode"),
        f"SGLang ignores --max-queued-requests when disaggregation_mode=decode: {QUEUE_HINT}",
    ),
    (
        "queued_applied_otherwise",
        "max_queued_requests", 16, 32, {}, _ctx(disaggregation_mode="decode"),
        "the engine applies 32, the declaration says 16",
    ),
    (
        "other_key_ignored_is_plain",
        "chunked_prefill_size", 8192, IGNORED, {}, _ctx(disaggregation_mode="decode"),
        "the engine applies <ignored>, the declaration says 8192",
    ),
    (
        "running_cut_by_pool_with_echo",
        "max_running_requests", 128, 50, {}, _ctx(token_capacity=101, requested={"max_running_requests": 128}),
        RULE + "101 tokens, so token_capacity // 2 = 50; /server_info echoes 128",
    ),
    (
        "running_cut_by_pool_without_echo",
        "max_running_requests", 128, 50, {}, _ctx(token_capacity=101, requested={"context_length": 4096}),
        RULE + "101 tokens, so token_capacity // 2 = 50",
    ),
    (
        "running_cut_per_dp_rank",
        "max_running_requests", 100, 99, {}, _ctx(token_capacity=1001, attn_dp_size=3),
        RULE + "1001 tokens, so token_capacity // 2 = 500",
    ),
    (
        "running_echo_of_zero_is_shown",
        "max_running_requests", 128, 50, {}, _ctx(token_capacity=101, requested={"max_running_requests": 0}),
        RULE + "101 tokens, so token_capacity // 2 = 50; /server_info echoes 0",
    ),
    (
        "running_unexplained_with_echo",
        "max_running_requests", 128, 40, {}, _ctx(token_capacity=101, requested={"max_running_requests": 128}),
        "the scheduler applies 40, not 128; token_capacity // 2 = 50 does not explain it; /server_info echoes 128",
    ),
    (
        "running_unexplained_without_pool",
        "max_running_requests", 128, 40, {}, _ctx(),
        "the scheduler applies 40, not 128; token_capacity // 2 = 0 does not explain it",
    ),
    (
        "running_equal_to_declared_is_not_the_rule",
        "max_running_requests", 50, 50, {}, _ctx(token_capacity=1000),
        "the scheduler applies 50, not 50; token_capacity // 2 = 500 does not explain it",
    ),
    (
        "running_above_declared_is_unexplained",
        "max_running_requests", 64, 96, {}, _ctx(token_capacity=1000),
        "the scheduler applies 96, not 64; token_capacity // 2 = 500 does not explain it",
    ),
    (
        "pool_smaller_than_declared",
        "max_total_tokens", 1_000_000, 900_000, {}, _ctx(),
        "the pool is min(profiled, --max-total-tokens): the memory profile holds only 900000 tokens "
        "(mem_fraction_static and the weights leave no room for 1000000)",
    ),
    (
        "pool_equal_is_plain",
        "max_total_tokens", 900_000, 900_000, {}, _ctx(),
        "the engine applies 900000, the declaration says 900000",
    ),
    (
        "pool_larger_is_plain",
        "max_total_tokens", 900_000, 1_000_000, {}, _ctx(),
        "the engine applies 1000000, the declaration says 900000",
    ),
    (
        "context_length",
        "context_length", 131072, 65536, {}, _ctx(),
        "/v1/models max_model_len is 65536, the declaration 131072",
    ),
    ("bf16_declared_fp8_live", "bf16_index_k", True, False, {}, _ctx(), FP8_KEYS),
    ("bf16_declared_as_text", "bf16_index_k", "true", "false", {}, _ctx(), FP8_KEYS),
    (
        "bf16_not_declared_but_live",
        "bf16_index_k", False, True, {}, _ctx(),
        "the engine applies True, the declaration says False",
    ),
    (
        "bf16_declared_and_live",
        "bf16_index_k", True, True, {}, _ctx(),
        "the engine applies True, the declaration says True",
    ),
    (
        "other_bool_switched_off",
        "disable_radix_cache", True, False, {}, _ctx(),
        "the engine applies False, the declaration says True",
    ),
    (
        "page_forced_for_dsv4",
        "page_size", 64, 256, {"dsv4": True}, _ctx(),
        "SGLang forces page_size 256 for DeepSeek-V4",
    ),
    (
        "page_256_other_model",
        "page_size", 64, 256, {"dsv4": False}, _ctx(),
        "the engine applies 256, the declaration says 64",
    ),
    (
        "page_256_unknown_model",
        "page_size", 64, 256, {}, _ctx(),
        "the engine applies 256, the declaration says 64",
    ),
    (
        "page_other_size_dsv4",
        "page_size", 64, 128, {"dsv4": True}, _ctx(),
        "the engine applies 128, the declaration says 64",
    ),
    (
        "page_257_dsv4",
        "page_size", 64, 257, {"dsv4": True}, _ctx(),
        "the engine applies 257, the declaration says 64",
    ),
    (
        "another_key_at_256_dsv4",
        "chunked_prefill_size", 8192, 256, {"dsv4": True}, _ctx(),
        "the engine applies 256, the declaration says 8192",
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("key", "declared", "live", "predicted", "ctx", "text"),
    [pytest.param(*case[1:], id=case[0]) for case in EXPLAIN_CASES],
)
def test_each_explanation_word_for_word(
    key: str, declared: Any, live: Any, predicted: dict[str, Any], ctx: LiveContext, text: str
) -> None:
    """Each departure of an effective value has one exact explanation, chosen by key, values and live facts."""
    assert _explain(key, declared, live, predicted, ctx) == text


def test_running_rule_is_judged_on_the_pool_alone() -> None:
    """A declared max_running_requests is checked against the pool alone (token_capacity // 2)."""
    ctx = _ctx(token_capacity=101)
    assert _explain("max_running_requests", 128, 50, {}, ctx) == RULE + "101 tokens, so token_capacity // 2 = 50"


GAP_CASES = [
    # (id, key, declared, live, predicted, context, expected (severity, explanation) or None)
    ("not_reported", "context_length", 131072, None, {}, _ctx(), None),
    ("same_value", "context_length", 131072, 131072, {}, _ctx(), None),
    ("same_value_as_text", "context_length", "131072", 131072, {}, _ctx(), None),
    (
        "context_shorter", "context_length", 131072, 65536, {}, _ctx(),
        ("drift", "/v1/models max_model_len is 65536, the declaration 131072"),
    ),
    ("pool_rounded_down_to_page", "max_total_tokens", 1000, 768, {}, _ctx(page_size=256), None),
    ("pool_exact", "max_total_tokens", 1000, 1000, {}, _ctx(page_size=256), None),
    (
        "pool_below_the_page", "max_total_tokens", 1000, 767, {}, _ctx(page_size=256),
        (
            "drift",
            "the pool is min(profiled, --max-total-tokens): the memory profile holds only 767 tokens "
            "(mem_fraction_static and the weights leave no room for 1000)",
        ),
    ),
    (
        "pool_without_page_is_exact", "max_total_tokens", 1000, 999, {}, _ctx(),
        (
            "drift",
            "the pool is min(profiled, --max-total-tokens): the memory profile holds only 999 tokens "
            "(mem_fraction_static and the weights leave no room for 1000)",
        ),
    ),
    (
        "pool_above_declared", "max_total_tokens", 1000, 1001, {}, _ctx(page_size=256),
        ("drift", "the engine applies 1001, the declaration says 1000"),
    ),
    ("kv_auto_resolves_to_fp8", "kv_cache_dtype", "auto", "fp8_e4m3", {}, _ctx(), None),
    ("kv_auto_resolves_to_bf16", "kv_cache_dtype", "auto", "bf16", {}, _ctx(), None),
    (
        "kv_auto_not_to_e5m2", "kv_cache_dtype", "auto", "fp8_e5m2", {}, _ctx(),
        ("drift", "the engine applies fp8_e5m2, the declaration says auto"),
    ),
    (
        "kv_fp8_not_to_bf16", "kv_cache_dtype", "fp8_e4m3", "bfloat16", {}, _ctx(),
        ("drift", "the engine applies bfloat16, the declaration says fp8_e4m3"),
    ),
    (
        "queue_ignored", "max_queued_requests", 16, IGNORED, {}, _ctx(disaggregation_mode="prefill"),
        ("drift", f"SGLang ignores --max-queued-requests when disaggregation_mode=prefill: {QUEUE_HINT}"),
    ),
    (
        "unset_profile_key_is_information", "chunked_prefill_size", None, 8192, {"chunked_prefill_size": 16384},
        _ctx(), ("info", "declared unset: the capacity model predicts 16384, the engine applies 8192"),
    ),
    (
        "unset_mem_fraction_is_information", "mem_fraction_static", None, 0.8, {"mem_fraction_static": 0.85},
        _ctx(), ("info", "declared unset: the capacity model predicts 0.85, the engine applies 0.8"),
    ),
    (
        "unset_limit_key_is_drift", "context_length", None, 65536, {"context_length": 131072}, _ctx(),
        ("drift", "declared unset: the capacity model predicts 131072, the engine applies 65536"),
    ),
    ("unset_as_predicted", "context_length", None, 131072, {"context_length": 131072}, _ctx(), None),
    ("unset_not_predicted", "context_length", None, 65536, {"page_size": 256}, _ctx(), None),
    ("unset_prediction_none", "context_length", None, 65536, {"context_length": None}, _ctx(), None),
    ("unset_queue_is_never_judged", "max_queued_requests", None, 7, {"max_queued_requests": 3}, _ctx(), None),
    (
        "unset_running_from_the_live_pool", "max_running_requests", None, 64,
        {"max_running_requests": 256}, _ctx(token_capacity=101, attn_dp_size=1),
        ("drift", "declared unset: the capacity model predicts 50, the engine applies 64"),
    ),
    (
        "unset_running_as_the_pool_allows", "max_running_requests", None, 50,
        {"max_running_requests": 256}, _ctx(token_capacity=101), None,
    ),
    (
        "unset_running_without_pool", "max_running_requests", None, 64, {"max_running_requests": 256}, _ctx(), None,
    ),
    ("unset_running_not_predicted", "max_running_requests", None, 64, {}, _ctx(token_capacity=101), None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("key", "declared", "live", "predicted", "ctx", "gap"),
    [pytest.param(*case[1:], id=case[0]) for case in GAP_CASES],
)
def test_effective_gap_severity_and_words(
    key: str, declared: Any, live: Any, predicted: dict[str, Any], ctx: LiveContext, gap: tuple[str, str] | None
) -> None:
    """When an effective value is drift, information or nothing, and the words that say so."""
    assert effective_gap(key, declared, live, predicted, ctx) == gap


def test_unset_gap_reads_the_prediction_of_its_own_key() -> None:
    """An unset key is compared with the prediction for that key only; no prediction, no judgment."""
    predicted = {"max_prefill_tokens": 16384, "swa_full_tokens_ratio": 0.1}
    assert _unset_gap("max_prefill_tokens", 8192, predicted, _ctx()) == (
        "info",
        "declared unset: the capacity model predicts 16384, the engine applies 8192",
    )
    assert _unset_gap("swa_full_tokens_ratio", 0.2, predicted, _ctx()) == (
        "info",
        "declared unset: the capacity model predicts 0.1, the engine applies 0.2",
    )
    assert _unset_gap("max_total_tokens", 1000, predicted, _ctx()) is None


def _drift(audit: Any) -> list[dict[str, Any]]:
    return [asdict(d) for d in audit.drift]


def test_compare_names_origin_layers_and_words_of_a_hand_edit() -> None:
    """Edited files with the declared value still running: on_disk origin, the restart would apply the edit."""
    audit = compare(
        "decode",
        {"context_length": 131072},
        {"context_length": 65536},
        {"context_length": 131072},
        {"context_length": 131072},
    )
    assert _drift(audit) == [
        {
            "key": "context_length",
            "layer": "on_disk",
            "layers": ["on_disk"],
            "declared": 131072,
            "live": 65536,
            "severity": "drift",
            "explanation": "edited on the host; the process still runs the declared value (a restart would apply "
            "the edit)",
        }
    ]
    row = next(r for r in audit.rows if r.key == "context_length")
    assert (row.limit, row.values, row.marks) == (
        True,
        {"declared": 131072, "on_disk": 65536, "running": 131072, "effective": 131072},
        {"on_disk": "drift"},
    )


def test_compare_edit_applied_by_a_restart_marks_every_layer() -> None:
    """An edit that a restart applied leaves on disk, running and the effective value; all three are marked."""
    audit = compare(
        "decode",
        {"context_length": 131072},
        {"context_length": 65536},
        {"context_length": 65536},
        {"context_length": 65536},
    )
    assert _drift(audit) == [
        {
            "key": "context_length",
            "layer": "on_disk",
            "layers": ["on_disk", "running", "effective"],
            "declared": 131072,
            "live": 65536,
            "severity": "drift",
            "explanation": "edited on the host (or the declaration changed without a deploy) and applied by a restart",
        }
    ]
    assert audit.rows[0].marks == {"on_disk": "drift", "running": "drift", "effective": "drift"}


def test_compare_files_unlike_both_declaration_and_process() -> None:
    """Files that match neither the declaration nor the process: the plain on-disk explanation."""
    audit = compare("decode", {"context_length": 131072}, {"context_length": 65536}, {"context_length": 32768})
    assert [(d.layer, d.layers, d.explanation) for d in audit.drift] == [
        ("on_disk", ["on_disk", "running"], "the files on the host differ from the declaration")
    ]


@pytest.mark.parametrize(
    ("restart_pending", "why"),
    [
        (True, "the files changed after the process started: restart the unit to apply them"),
        (False, "the process runs with a value its files do not have (started or restarted by hand)"),
    ],
)
def test_compare_running_departure(restart_pending: bool, why: str) -> None:
    """A process value its files do not have: pending restart or a hand start, by the layers' report."""
    audit = compare(
        "decode",
        {"context_length": 131072},
        {"context_length": 131072},
        {"context_length": 65536},
        restart_pending=restart_pending,
    )
    assert _drift(audit) == [
        {
            "key": "context_length",
            "layer": "running",
            "layers": ["running"],
            "declared": 131072,
            "live": 65536,
            "severity": "drift",
            "explanation": why,
        }
    ]


def test_compare_declaration_changed_since_the_deploy() -> None:
    """Files as the last deploy wrote them but a new declaration: the origin is the declaration itself."""
    audit = compare(
        "decode",
        {"context_length": 262144},
        {"context_length": 131072},
        {"context_length": 131072},
        deployed={"context_length": 131072},
    )
    assert _drift(audit) == [
        {
            "key": "context_length",
            "layer": "declared",
            "layers": ["on_disk", "running"],
            "declared": 262144,
            "live": 131072,
            "severity": "drift",
            "explanation": "the declaration changed since the last deploy, which wrote 131072: run site.yml",
        }
    ]


def test_compare_effective_follows_the_running_argv() -> None:
    """An effective value that follows a departed argv carries no explanation of its own."""
    audit = compare(
        "decode",
        {"context_length": 131072},
        None,
        {"context_length": 65536},
        {"context_length": 65536},
    )
    assert [(d.layer, d.layers, d.explanation) for d in audit.drift] == [
        ("running", ["running", "effective"], "the process runs with a value its files do not have (started or "
         "restarted by hand)")
    ]  # fmt: skip


def test_compare_effective_only_carries_the_explanation_and_severity() -> None:
    """A gap in the effective layer alone: origin effective, severity and words from the live judgment."""
    ctx = LiveContext(token_capacity=101, requested={"max_running_requests": 128})
    audit = compare(
        "decode",
        {"max_running_requests": 128, "chunked_prefill_size": None},
        {"max_running_requests": 128},
        {"max_running_requests": 128},
        {"max_running_requests": 50, "chunked_prefill_size": 8192},
        predicted={"chunked_prefill_size": 16384},
        live=ctx,
    )
    assert _drift(audit) == [
        {
            "key": "max_running_requests",
            "layer": "effective",
            "layers": ["effective"],
            "declared": 128,
            "live": 50,
            "severity": "drift",
            "explanation": RULE + "101 tokens, so token_capacity // 2 = 50; /server_info echoes 128",
        },
        {
            "key": "chunked_prefill_size",
            "layer": "effective",
            "layers": ["effective"],
            "declared": None,
            "live": 8192,
            "severity": "info",
            "explanation": "declared unset: the capacity model predicts 16384, the engine applies 8192",
        },
    ]


def test_compare_router_effective_values_are_not_judged() -> None:
    """The router's effective values derive from its argv: no effective drift of their own."""
    audit = compare(
        "router",
        {"max_concurrent_requests": 64},
        {"max_concurrent_requests": 64},
        {"max_concurrent_requests": 64},
        {"max_concurrent_requests": 32},
        effective_from_running=True,
    )
    assert audit.drift == []
