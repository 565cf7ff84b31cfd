"""The deep check's comparison of declared engine values with what SGLang's own resolution of the command line makes
of them (plugin_utils/sglang_deep.py: resolution_problems, line_problems), each problem written out whole."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_deep import (
    Line,
    line_problems,
    resolution_problems,
)


def changed(var: str, declared: Any, dest: str, resolved: Any, role: str = "decode") -> str:
    return (
        f"gpu-1: {var}={declared!r} is not what the {role} engine would run: SGLang 0.5.23's own resolution of the "
        f"rendered command line makes {dest} {resolved!r}, and every report would show the declared value; fix: "
        f"declare {var}: {resolved!r} (the value SGLang runs) or a value it keeps"
    )


def decode(**sources: tuple[str, Any]) -> Line:
    return Line("gpu-1", "decode", [], {}, dict(sources))


def test_a_page_size_sglang_forces_is_named_with_the_value_it_runs() -> None:
    line = decode(**{"--page-size": ("sglang_decode.page_size", 64)})
    assert resolution_problems(line, {"ok": True, "resolved": {"page_size": 256}}) == [
        "gpu-1: sglang_decode.page_size=64 is not what the decode engine would run: SGLang 0.5.23's own resolution "
        "of the rendered command line makes page_size 256, and every report would show the declared value; fix: "
        "declare sglang_decode.page_size: 256 (the value SGLang runs) or a value it keeps"
    ]


def test_a_prefill_line_names_its_role() -> None:
    line = Line("gpu-1", "prefill", [], {}, {"--attention-backend": ("sglang_prefill.attention_backend", "fa3")})
    assert resolution_problems(line, {"ok": True, "resolved": {"attention_backend": "flashmla"}}) == [
        changed("sglang_prefill.attention_backend", "fa3", "attention_backend", "flashmla", role="prefill")
    ]


# (declared value, what SGLang resolved) that are the same value
SAME = [
    (True, True),
    (False, False),
    (True, 1),
    ("yes", True),
    (0.78, 0.78),
    (2, 2.0),
    ("2", 2),
    ("fa3", "fa3"),
    ("fa3", ["fa3"]),
    (4, [4]),
]
# (declared value, what SGLang resolved) that differ
DIFFERENT = [
    (True, False),
    (False, True),
    (0.78, 0.8),
    ("fa3", "flashmla"),
    ("fa3", ["fa3", "flashmla"]),
    ("fa3", []),
    ("a", {"a": 1}),
    ("None", 0),
]


@pytest.mark.parametrize(("declared", "resolved"), SAME, ids=[f"{d!r}={r!r}" for d, r in SAME])
def test_the_same_value_written_another_way_is_no_problem(declared: Any, resolved: Any) -> None:
    line = decode(**{"--tp-size": ("sglang_decode.tp_size", declared)})
    assert resolution_problems(line, {"ok": True, "resolved": {"tp_size": resolved}}) == []


@pytest.mark.parametrize(("declared", "resolved"), DIFFERENT, ids=[f"{d!r}-{r!r}" for d, r in DIFFERENT])
def test_a_different_value_is_a_problem(declared: Any, resolved: Any) -> None:
    line = decode(**{"--tp-size": ("sglang_decode.tp_size", declared)})
    assert resolution_problems(line, {"ok": True, "resolved": {"tp_size": resolved}}) == [
        changed("sglang_decode.tp_size", declared, "tp_size", resolved)
    ]


def test_values_sglang_chooses_or_that_are_not_compared_are_passed_over() -> None:
    """ "auto" asks SGLang to choose; a secret is never shown; the model path is the controller's copy; a flag
    declared without a value, a flag SGLang did not resolve and an environment variable are not compared. The one
    changed value after them is still found."""
    line = decode(
        **{
            "--attention-backend": ("sglang_decode.attention_backend", "auto"),
            "--api-key": ("sglang_api_key", "<set>"),
            "--model-path": ("sglang_model.path", "/models/M1"),
            "--served-model-name": ("sglang_model.served_name", None),
            "--port": ("sglang_decode.port", 30001),
            "SGLANG_DSV4_BF16_INDEX_K": ("sglang_engine_common.bf16_index_k", True),
            "--mem-fraction-static": ("sglang_decode.mem_fraction_static", 0.9),
        }
    )
    resolved = {
        "attention_backend": "flashmla",
        "api_key": "sk-1",
        "model_path": "/ctl/models/m1",
        "served_model_name": "m1",
        "SGLANG_DSV4_BF16_INDEX_K": False,
        "LANG_DSV4_BF16_INDEX_K": False,
        "mem_fraction_static": 0.85,
    }
    assert resolution_problems(line, {"ok": True, "resolved": resolved}) == [
        changed("sglang_decode.mem_fraction_static", 0.9, "mem_fraction_static", 0.85)
    ]


def test_a_value_sglang_keeps_is_passed_over_and_the_next_one_still_compared() -> None:
    line = decode(
        **{
            "--tp-size": ("sglang_engine_common.tp_size", 2),
            "--kv-cache-dtype": ("sglang_engine_common.kv_cache_dtype", "fp8_e4m3"),
        }
    )
    resolved = {"tp_size": 2, "kv_cache_dtype": "auto"}
    assert resolution_problems(line, {"ok": True, "resolved": resolved}) == [
        changed("sglang_engine_common.kv_cache_dtype", "fp8_e4m3", "kv_cache_dtype", "auto")
    ]


def test_every_changed_value_is_named_in_line_order() -> None:
    line = decode(**{"--tp-size": ("sglang_engine_common.tp_size", 2), "--page-size": ("sglang_decode.page_size", 1)})
    assert resolution_problems(line, {"ok": True, "resolved": {"tp_size": 4, "page_size": 64}}) == [
        changed("sglang_engine_common.tp_size", 2, "tp_size", 4),
        changed("sglang_decode.page_size", 1, "page_size", 64),
    ]


@pytest.mark.parametrize(
    "result",
    [{"ok": False, "resolved": {"page_size": 256}}, {"resolved": {"page_size": 256}}, {"ok": True}, {"ok": True,
     "resolved": None}],
    ids=["refused", "no-ok", "nothing-resolved", "resolved-null"],
)  # fmt: skip
def test_nothing_to_compare_without_an_accepted_resolution(result: dict[str, Any]) -> None:
    line = decode(**{"--page-size": ("sglang_decode.page_size", 64)})
    assert resolution_problems(line, result) == []


def test_a_router_line_is_not_compared() -> None:
    line = Line("gpu-1", "router", [], {}, {"--port": ("sglang_router.port", 8000)})
    assert resolution_problems(line, {"ok": True, "resolved": {"port": 8001}}) == []


def test_a_line_has_its_refusal_or_else_its_changed_values() -> None:
    line = decode(**{"--page-size": ("sglang_decode.page_size", 64)})
    assert line_problems(line, {"ok": True, "resolved": {"page_size": 256}}) == [
        changed("sglang_decode.page_size", 64, "page_size", 256)
    ]
    refused = {"ok": False, "error": "E", "culprits": ["--page-size"], "resolved": {"page_size": 256}}
    assert line_problems(line, refused) == [
        "gpu-1: sglang_decode.page_size=64: SGLang 0.5.23 refuses the rendered decode engine command line at "
        "startup: E; fix: change sglang_decode.page_size so that SGLang 0.5.23's own check accepts it"
    ]
