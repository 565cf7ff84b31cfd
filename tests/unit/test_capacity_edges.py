"""Edges of the capacity model's small helpers: the refusal of an unknown KV dtype, the MLA latent's size with
unscaled fp8, and the ladder of context lengths above 512K tokens. Model configs and lengths here are synthetic."""

from __future__ import annotations

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_capacity import (
    CapacityError,
    default_context_lens,
    kv_dtype_bytes,
    mla_latent_bytes,
)

# A synthetic DeepSeek-V3-shaped MLA config: a 512-wide latent and a 64-wide rope part.
MLA = {"kv_lora_rank": 512, "qk_rope_head_dim": 64}


def test_an_unknown_kv_dtype_names_the_known_ones() -> None:
    with pytest.raises(CapacityError) as error:
        kv_dtype_bytes("int4")
    assert str(error.value) == "kv_cache_dtype='int4' is unknown; fix: one of fp8_e4m3, fp8_e5m2, bf16, bfloat16, auto"


@pytest.mark.parametrize(
    ("dtype", "scaled", "size"),
    [
        ("fp8_e4m3", False, 512 + 64),  # plain fp8: one byte per latent and rope element
        ("fp8_e5m2", False, 512 + 64),
        ("fp8_e4m3", True, 512 + 512 // 128 * 4 + 64 * 2),  # FlashMLA: fp8 nope, fp32 scales, bf16 rope
        ("bf16", False, (512 + 64) * 2),
        ("bf16", True, (512 + 64) * 2),
    ],
)
def test_mla_latent_bytes_per_dtype_and_scaling(dtype: str, scaled: bool, size: int) -> None:
    assert mla_latent_bytes(MLA, dtype, scaled) == size


@pytest.mark.parametrize(
    ("declared", "ladder"),
    [
        (600_000, [4096, 8192, 32768, 65536, 131072, 262144, 524288, 600_000]),
        (
            2_000_000,
            [4096, 8192, 32768, 65536, 131072, 262144, 524288, 1048576, 2_000_000],
        ),
        (1048576, [4096, 8192, 32768, 65536, 131072, 262144, 524288, 1048576]),
    ],
)
def test_context_ladder_above_half_a_million_tokens(declared: int, ladder: list[int]) -> None:
    assert default_context_lens(declared) == ladder
