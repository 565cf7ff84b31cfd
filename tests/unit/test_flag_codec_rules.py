"""The flag codec's rules, one by one: how each value kind is rendered, how argv and env files are read back.

The envelopes here are synthetic (small dicts typed for each rule); the option strings are SGLang's and smg's
own, from the argument tables generated from their parsers.
"""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_flags import (
    REDACTED,
    from_argv,
    from_environ,
    parse_env_file,
    parse_script,
    render_args,
    to_argv,
    to_environ,
)
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_schema import EnvelopeError


@pytest.mark.parametrize(
    ("envelope", "argv"),
    [
        ({"enable_metrics": True}, ["--enable-metrics"]),
        ({"enable_metrics": False}, []),
        ({"mem_fraction_static": 1}, ["--mem-fraction-static", "1.0"]),
        ({"mem_fraction_static": 0.83}, ["--mem-fraction-static", "0.83"]),
        ({"cuda_graph_bs_decode": [1, 2, 4]}, ["--cuda-graph-bs-decode", "1", "2", "4"]),
        ({"context_length": 524288}, ["--context-length", "524288"]),
        ({"kv_cache_dtype": "fp8_e4m3", "page_size": None}, ["--kv-cache-dtype", "fp8_e4m3"]),
    ],
    ids=["bool-true", "bool-false", "float-int", "float", "intlist", "size", "none-skipped"],
)
def test_each_kind_renders_as_sglang_reads_it(envelope: dict[str, Any], argv: list[str]) -> None:
    """A bool is a bare switch (absent when false), a float always has its decimal point, a list is one
    value per token."""
    assert to_argv("decode", envelope) == argv


def test_the_secret_is_an_env_reference_unless_asked() -> None:
    envelope = {"api_key": "s3cret", "port": 30001}
    assert to_argv("decode", envelope) == ["--port", "30001", "--api-key", "${SGLANG_API_KEY}"]
    assert to_argv("decode", envelope, secrets_as_env=False) == ["--port", "30001", "--api-key", "s3cret"]


@pytest.mark.parametrize(("value", "env"), [(True, "1"), (False, "0")])
def test_the_index_key_switch_is_one_or_zero_in_the_environment(value: bool, env: str) -> None:
    assert to_environ("decode", {"bf16_index_k": value}) == {"SGLANG_DSV4_BF16_INDEX_K": env}
    assert to_environ("decode", {"bf16_index_k": None}) == {}


def test_script_lines_group_each_flag_with_its_quoted_values() -> None:
    envelope = {
        "model_path": "/models/deep seek",
        "api_key": "s3cret",
        "cuda_graph_bs_decode": [1, 2],
        "enable_metrics": True,
    }
    assert render_args("decode", envelope) == [
        "--model-path '/models/deep seek'",
        '--api-key "${SGLANG_API_KEY}"',
        "--cuda-graph-bs-decode 1 2",
        "--enable-metrics",
    ]


@pytest.mark.parametrize(
    ("role", "argv", "expected"),
    [
        ("decode", ["--port=30001"], {"port": 30001}),
        ("decode", ["--tp", "4"], {"tp_size": 4}),
        ("decode", ["--po", "30001"], {"port": 30001}),
        ("decode", ["--p", "30001"], {}),
        ("decode", ["--", "4"], {}),
        ("decode", ["--enable-dp-attention", "--tp-size", "4"], {"tp_size": 4}),
        ("decode", ["--enable-metrics", "--tp-size", "4"], {"enable_metrics": True, "tp_size": 4}),
        ("decode", ["--unknown", "7", "--port", "30001"], {"port": 30001}),
        ("decode", ["--disaggregation-bootstrap-port", "8998"], {}),
        ("prefill", ["--disaggregation-bootstrap-port", "8998"], {"disaggregation_bootstrap_port": 8998}),
        ("decode", ["--cuda-graph-bs-decode", "1", "2", "4"], {"cuda_graph_bs_decode": [1, 2, 4]}),
        ("decode", ["--cuda-graph-bs-decode=1", "2", "--port", "1"], {"cuda_graph_bs_decode": [1], "port": 1}),
        ("decode", ["--cuda-graph-bs-decode", "8", "--page-size", "1"], {"cuda_graph_bs_decode": [8], "page_size": 1}),
        ("decode", ["--context-length", "512k"], {"context_length": 512000}),
        ("decode", ["--mem-fraction-static", "0.8"], {"mem_fraction_static": 0.8}),
        ("decode", ["--api-key", "s3cret"], {"api_key": REDACTED}),
        ("router", ["--host", "::", "--max-concurrent-requests", "-1"], {"host": "::", "max_concurrent_requests": -1}),
        ("router", ["--tp-size", "4"], {}),
    ],
    ids=[
        "inline-value", "abbreviation", "unique-prefix", "ambiguous-prefix", "bare-dashes", "unknown-switch",
        "switch-then-flag", "unknown-flag-then-known", "other-role's-flag", "own-role's-flag", "list-at-end",
        "inline-list", "list-then-switch", "size-suffix", "float", "secret", "router", "engine-flag-on-router",
    ],
)  # fmt: skip
def test_argv_is_read_as_the_role_parser_reads_it(role: str, argv: list[str], expected: dict[str, Any]) -> None:
    assert from_argv(role, argv) == expected


@pytest.mark.parametrize("argv", [["--port"], ["--tp-size", "4", "--context-length"]])
def test_a_flag_without_its_value_is_an_error(argv: list[str]) -> None:
    with pytest.raises(EnvelopeError) as error:
        from_argv("decode", argv)
    assert str(error.value) == f"flag {argv[-1]} has no value in the command line"


def test_environment_switches_read_back() -> None:
    assert from_environ("decode", {"SGLANG_DSV4_BF16_INDEX_K": "1"}) == {"bf16_index_k": True}
    assert from_environ("prefill", {"SGLANG_DSV4_BF16_INDEX_K": "0"}) == {"bf16_index_k": False}
    assert from_environ("decode", {}) == {"bf16_index_k": False}
    assert from_environ("router", {"SGLANG_DSV4_BF16_INDEX_K": "1"}) == {}


def test_env_file_lines() -> None:
    text = "\n".join(
        [
            "# SGLANG_DSV4_BF16_INDEX_K=0",
            "",
            "   ",
            "not a pair",
            " SGLANG_DSV4_BF16_INDEX_K = 1 ",
            'QUOTED="a b"',
            "SINGLE='c'",
            "EQUALS=x=y",
            'CPU="Xeon X"',
            "MODEL='Xs'",
        ]
    )
    assert parse_env_file(text) == {
        "SGLANG_DSV4_BF16_INDEX_K": "1",
        "QUOTED": "a b",
        "SINGLE": "c",
        "EQUALS": "x=y",
        "CPU": "Xeon X",
        "MODEL": "Xs",
    }


def test_the_exec_line_is_split_as_a_shell_would() -> None:
    script = (
        "#!/bin/sh\nset -e\nexec /opt/sglang/bin/python -m sglang.launch_server \\\n  --model-path '/m/a b' --port 1\n"
    )
    assert parse_script(script) == [
        "/opt/sglang/bin/python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/m/a b",
        "--port",
        "1",
    ]


def test_a_script_without_exec_names_the_fix() -> None:
    with pytest.raises(EnvelopeError) as error:
        parse_script("#!/bin/sh\necho hi\n")
    assert str(error.value) == "the serve script has no exec line; fix: redeploy it from the template"
