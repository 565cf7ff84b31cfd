"""Schema normalization, the flag codec round trip and fleet validation messages."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_argspec import SGLANG
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
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_schema import (
    KEYS,
    EnvelopeError,
    normalize,
    parse_size,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_validate import check_fleet

DECODE = {
    "model_path": "/models/x",
    "context_length": 524288,
    "mem_fraction_static": 0.83,
    "tp_size": 4,
    "cuda_graph_bs_decode": [1, 2, 4, 8],
    "enable_metrics": True,
    "api_key": "s3cret",
    "bf16_index_k": True,
    "kv_cache_dtype": "fp8_e4m3",
    "max_running_requests": None,
}


@pytest.mark.parametrize(
    ("text", "value"), [("128k", 128000), ("128Ki", 131072), ("1M", 1_000_000), ("524288", 524288), ("0.5k", 500)]
)
def test_human_readable_sizes_follow_sglang(text: str, value: int) -> None:
    assert parse_size(text) == value


def test_size_suffixes_are_case_sensitive_as_in_sglang() -> None:
    with pytest.raises(ValueError, match="Suffixes are case-sensitive"):
        parse_size("128K")
    with pytest.raises(ValueError, match="Decimals are not allowed with IEC suffixes"):
        parse_size("1.5Ki")
    with pytest.raises(EnvelopeError, match=r"sglang_decode\.context_length='128K' is not a valid size; fix"):
        normalize("decode", {"context_length": "128K"}, "sglang_decode")


def test_argv_round_trips_and_keeps_the_secret_out() -> None:
    argv = to_argv("decode", DECODE)
    assert "s3cret" not in argv
    assert argv[argv.index("--api-key") + 1] == "${SGLANG_API_KEY}"
    assert "--max-running-requests" not in argv  # None means unset: the engine default applies
    back = from_argv("decode", argv)
    assert back["api_key"] == REDACTED
    assert {k: v for k, v in back.items() if k != "api_key"} == {
        k: v for k, v in DECODE.items() if v is not None and k not in ("api_key", "bf16_index_k")
    }


def test_env_carries_bf16_index_keys_both_ways() -> None:
    env = to_environ("decode", DECODE)
    assert env == {"SGLANG_DSV4_BF16_INDEX_K": "1"}
    assert from_environ("decode", parse_env_file('SGLANG_DSV4_BF16_INDEX_K="1"\n# c\n'))["bf16_index_k"] is True
    assert from_environ("decode", {"SGLANG_DSV4_BF16_INDEX_K": "0"})["bf16_index_k"] is False


def test_rendered_script_lines_parse_back() -> None:
    script = "#!/usr/bin/env bash\nset -euo pipefail\nexec /opt/sglang/current/bin/sglang serve \\\n  "
    script += " \\\n  ".join(render_args("decode", DECODE)) + "\n"
    argv = parse_script(script)
    assert argv[:2] == ["/opt/sglang/current/bin/sglang", "serve"]
    assert from_argv("decode", argv)["cuda_graph_bs_decode"] == [1, 2, 4, 8]


def test_unknown_and_removed_keys_are_errors_naming_the_variable_and_fix() -> None:
    with pytest.raises(EnvelopeError, match=r"sglang_decode\.context_lenght=1: .*did you mean context_length.*fix"):
        normalize("decode", {"context_lenght": 1}, "sglang_decode")
    with pytest.raises(
        EnvelopeError,
        match=r"cuda_graph_max_bs is a flag SGLang 0.5.23 removed; fix: use "
        r"cuda_graph_max_bs_decode",
    ):
        normalize("decode", {"cuda_graph_max_bs": 64}, "sglang_decode")
    with pytest.raises(EnvelopeError) as deprecated:
        normalize("decode", {"enable_dp_attention": True}, "sglang_decode")
    assert str(deprecated.value) == (
        "sglang_decode.enable_dp_attention is a flag SGLang 0.5.23 deprecated for --attn-dp-size, which the envelope "
        "does not declare (its engines run attention tensor-parallel over tp_size); fix: remove "
        "sglang_decode.enable_dp_attention"
    )
    with pytest.raises(EnvelopeError, match=r"sglang_decode\.tp_size='four' is not a valid int; fix"):
        normalize("decode", {"tp_size": "four"}, "sglang_decode")


def test_the_deprecated_dp_attention_flag_message_holds_for_sglang_and_the_schema() -> None:
    """What the enable_dp_attention refusal says, against SGLang's own table (test_flag_tables proves it is SGLang's
    parser): the flag is a deprecated store-true action, --attn-dp-size its replacement, and no role's envelope
    declares attn_dp_size."""
    assert SGLANG["enable_dp_attention"].action == "DeprecatedStoreTrueAction"
    assert SGLANG["attn_dp_size"].options[0] == "--attn-dp-size"
    assert all(key.name != "attn_dp_size" for key in KEYS)


def _fleet(**decode: Any) -> tuple[dict[str, Any], dict[str, list[str]]]:
    hv = {
        "sglang_model": {"path": "/m", "served_name": "dsv4", "params_b": 284, "quantization": "mxfp4"},
        "sglang_gpu_memory_gib": 141,
        "sglang_engine_common": {
            "context_length": 524288,
            "chunked_prefill_size": 8192,
            "tp_size": 4,
            "enable_metrics": True,
        },
        "sglang_prefill": {
            "gpu_ids": [0, 1, 2, 3],
            "port": 30000,
            "disaggregation_bootstrap_port": 8998,
            "mem_fraction_static": 0.78,
        },
        "sglang_decode": {"gpu_ids": [4, 5, 6, 7], "port": 30001, "mem_fraction_static": 0.83, **decode},
        "sglang_router": {"port": 8000, "max_concurrent_requests": 256},
    }
    return {"h": hv}, {"sglang_prefill": ["h"], "sglang_decode": ["h"], "sglang_router": ["h"]}


def test_the_production_envelope_validates(dsv4: dict[str, Any]) -> None:
    assert check_fleet(*_fleet(), dsv4) == []


@pytest.mark.parametrize(
    ("decode", "expected"),
    [
        ({"gpu_ids": [3, 4, 5, 6]}, "sglang_decode.gpu_ids=[3, 4, 5, 6]: GPU 3 is already used"),
        ({"gpu_ids": [4, 5, 6]}, "tp_size=4 needs exactly 4 GPUs"),
        ({"port": 8998}, "sglang_decode.port=8998: port already used by sglang_prefill"),
        ({"context_length": 2_000_000}, "above the model's maximum 1048576"),
        ({"context_length": 1048576, "mem_fraction_static": 0.31}, "above the KV pool this envelope gets"),
        ({"max_total_tokens": 1000}, "below one full-length request"),
        ({"mem_fraction_static": 1.5}, "must be in (0, 1)"),
        ({"chunked_prefill_size": 32768, "max_prefill_tokens": 16384}, "larger than max_prefill_tokens=16384"),
        ({"page_size": 64}, "SGLang forces 256 for DeepSeek-V4"),
        ({"max_queued_requests": 100}, "bound the queue with sglang_router.queue_size"),
        ({"max_running_requests": 16}, "max_concurrent_requests=256: above what the decode fleet runs at once (16)"),
        ({"nsa_prefill_backend": "flashmla"}, "use dsa_prefill_backend"),
        (
            {"mem_fraction_static": 0.2},
            "h: sglang_decode.mem_fraction_static=0.2: leaves 28.2 GiB per GPU for weights and KV",
        ),
    ],
)
def test_each_bad_input_names_variable_and_fix(dsv4: dict[str, Any], decode: dict[str, Any], expected: str) -> None:
    errors = check_fleet(*_fleet(**decode), dsv4)
    assert any(expected in e and "fix:" in e for e in errors), errors


def test_a_value_from_the_shared_engine_dict_is_named_there(dsv4: dict[str, Any]) -> None:
    all_hostvars, groups = _fleet()
    all_hostvars["h"]["sglang_engine_common"]["context_length"] = 2_000_000
    errors = check_fleet(all_hostvars, groups, dsv4)
    assert any(e.startswith("h: sglang_engine_common.context_length=2000000") for e in errors), errors


@pytest.mark.parametrize(
    ("declared", "live", "same"),
    [
        # SGLang's resolution writes the IB devices back compactly (tests/component/contract/test_deep_check.py KEPT).
        ('{"0": "mlx5_0", "1": "mlx5_1"}', '{"0":"mlx5_0","1":"mlx5_1"}', True),
        ("mlx5_0, mlx5_1", "mlx5_0,mlx5_1", True),
        ("mlx5_0,mlx5_0", "mlx5_0", True),
        ("mlx5_0", "mlx5_1", False),
        ('{"0": "mlx5_0"}', '{"1":"mlx5_0"}', False),
        ("mlx5_0", None, False),
    ],
)
def test_ib_devices_compare_in_sglangs_normal_form(declared: str, live: str | None, same: bool) -> None:
    from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_drift import same as drift_same

    assert drift_same("disaggregation_ib_device", declared, live) is same
