"""An edge of the running layer's environment (plugins/module_utils/sglang_layers.running_envelope): an entry of
/proc/<pid>/environ is NAME=VALUE split at its first '=', so a value may itself hold '='; the first entry of a
repeated name wins. The process images below are synthetic."""

from __future__ import annotations

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_layers import running_envelope

ARGV = b"python3\0-m\0sglang.launch_server\0--tp-size\x004\0"


def test_a_value_holding_an_equals_sign_belongs_to_the_first_name() -> None:
    """SGLANG_DSV4_BF16_INDEX_K=0=1 reads as the value '0=1' (not '1'), and it wins over the later '=1' entry."""
    environ = b"SGLANG_DSV4_BF16_INDEX_K=0=1\0SGLANG_DSV4_BF16_INDEX_K=1\0"
    assert running_envelope("decode", ARGV, environ) == {"tp_size": 4, "bf16_index_k": False}


def test_the_same_names_without_the_extra_equals_sign() -> None:
    environ = b"SGLANG_DSV4_BF16_INDEX_K=1\0SGLANG_DSV4_BF16_INDEX_K=0\0"
    assert running_envelope("decode", ARGV, environ) == {"tp_size": 4, "bf16_index_k": True}
