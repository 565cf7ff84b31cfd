"""The NumPy reference: rounding rules, norm, rope, quantisation and cache layout."""

from __future__ import annotations

import index_k_ref as ref
import numpy as np
import pytest

RNG = np.random.default_rng(7)


def bits(values: list[float]) -> list[int]:
    return [int(v) for v in ref.float_to_e4m3_bits(np.array(values, np.float32))]


def test_bf16_rounds_to_nearest_even() -> None:
    raw = np.array([0x3F800000, 0x3F808000, 0x3F818000, 0x3F80FFFF, 0x7F800000, 0x7FC00001], np.uint32)
    got = ref.float_to_bf16_bits(raw.view(np.float32))
    assert [hex(v) for v in got] == ["0x3f80", "0x3f80", "0x3f82", "0x3f81", "0x7f80", "0x7fff"]


@pytest.mark.parametrize(
    ("value", "code"),
    [
        (1.0, 0x38),
        (1.0625, 0x38),  # halfway between 1.0 and 1.125: the even code
        (1.1875, 0x3A),  # halfway between 1.125 and 1.25: the even code
        (448.0, 0x7E),
        (460.0, 0x7E),
        (1e9, 0x7E),  # saturates instead of becoming NaN
        (float("inf"), 0x7E),
        (float("-inf"), 0xFE),
        (float("nan"), 0x7F),
        (2.0**-9, 0x01),  # smallest subnormal
        (2.0**-10, 0x00),  # halfway to zero: even
        (3 * 2.0**-10, 0x02),
        (-0.0, 0x80),
        (2.0**-6, 0x08),  # smallest normal
    ],
)
def test_e4m3_encoding(value: float, code: int) -> None:
    assert bits([value]) == [code]


def test_e4m3_codes_round_trip() -> None:
    codes = np.arange(256, dtype=np.uint8)
    values = ref.e4m3_bits_to_float(codes)
    finite = ~np.isnan(values)
    assert int(finite.sum()) == 254
    assert np.array_equal(ref.float_to_e4m3_bits(values[finite]), codes[finite])
    assert np.all(np.diff(values[:127]) > 0)


def test_rms_norm_matches_float64_formula() -> None:
    x = RNG.standard_normal((50, ref.HEAD_DIM)).astype(np.float32) * 3
    w = (1 + 0.1 * RNG.standard_normal(ref.HEAD_DIM)).astype(np.float32)
    want = x / np.sqrt(np.mean(x.astype(np.float64) ** 2, axis=-1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(ref.rms_norm(x, w, 1e-6), want, rtol=1e-5)


@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_rotates_only_the_last_64_dims(interleaved: bool) -> None:
    cos_sin = ref.rope_cos_sin(4096)
    y = RNG.standard_normal((1, ref.HEAD_DIM)).astype(np.float32)
    out = ref.rotate(y, cos_sin[1234][None, :], interleaved)
    assert np.array_equal(out[:, : ref.ROPE_OFFSET], y[:, : ref.ROPE_OFFSET])
    assert not np.allclose(out[:, ref.ROPE_OFFSET :], y[:, ref.ROPE_OFFSET :])
    np.testing.assert_allclose(np.linalg.norm(out), np.linalg.norm(y), rtol=1e-5)
    assert np.array_equal(ref.rotate(y, cos_sin[0][None, :], interleaved), y)


@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_scores_depend_on_distance_only(interleaved: bool) -> None:
    cos_sin = ref.rope_cos_sin(4096)
    q, k = RNG.standard_normal((2, ref.HEAD_DIM)).astype(np.float32)

    def score(q_pos: int, k_pos: int) -> float:
        rq = ref.rotate(q[None, :], cos_sin[q_pos][None, :], interleaved)
        rk = ref.rotate(k[None, :], cos_sin[k_pos][None, :], interleaved)
        return float((rq.astype(np.float64) @ rk.T.astype(np.float64))[0, 0])

    assert score(900, 100) == pytest.approx(score(3000, 2200), rel=1e-4)
    assert score(900, 100) != pytest.approx(score(900, 800), rel=1e-3)


def test_fp8_quantisation_error_and_scale() -> None:
    y = RNG.standard_normal((64, ref.HEAD_DIM)).astype(np.float32)
    codes, scales = ref.quantize_fp8(y)
    amax = np.abs(y).max(axis=-1)
    np.testing.assert_array_equal(scales, amax / np.float32(448))
    assert np.all(np.abs(codes[np.arange(64), np.abs(y).argmax(axis=-1)] & 0x7F) == 0x7E)
    back = ref.e4m3_bits_to_float(codes) * scales[:, None]
    # Three mantissa bits: relative error at most 2**-4 above the subnormal range.
    tolerance = np.maximum(np.abs(y) * 2.0**-4, scales[:, None] * 2.0**-10)
    assert np.all(np.abs(back - y) <= tolerance)


def test_zero_row_uses_the_amax_floor() -> None:
    codes, scales = ref.quantize_fp8(np.zeros((1, ref.HEAD_DIM), np.float32))
    assert scales[0] == np.float32(1e-4) / np.float32(448)
    assert not codes.any()


def test_sizes_per_token_and_page() -> None:
    assert ref.bytes_per_token_head(False) == 132
    assert ref.bytes_per_token_head(True) == 256
    assert ref.page_bytes(64, 1, False) == 8448
    assert ref.page_bytes(256, 2, True) == 131072


def make_inputs(tokens: int, heads: int) -> tuple[np.ndarray, ...]:
    k = ref.float_to_bf16_bits(RNG.standard_normal((tokens, heads, ref.HEAD_DIM)).astype(np.float32))
    w = ref.float_to_bf16_bits(np.ones(ref.HEAD_DIM, np.float32))
    positions = RNG.integers(0, 256, tokens).astype(np.int64)
    return k, w, ref.rope_cos_sin(256), positions


def test_bf16_layout_is_token_major() -> None:
    page_size, heads = 4, 2
    k, w, cos_sin, positions = make_inputs(3, heads)
    slots = np.array([5, -1, 2], np.int64)
    cache = ref.new_cache(2, page_size, heads, use_bf16=True)
    ref.fused_index_k(cache, k, w, cos_sin, positions, slots, page_size, use_bf16=True)
    y = ref.norm_rope(k, w, cos_sin, positions)
    flat = cache.reshape(-1).copy()
    for token, slot in ((0, 5), (2, 2)):
        for head in range(heads):
            start = (slot * heads + head) * 256
            want = ref.float_to_bf16_bits(y[token, head]).view(np.uint8)
            assert np.array_equal(flat[start : start + 256], want)
            flat[start : start + 256] = 0
    assert not flat.any()  # the skipped token left nothing behind


def test_fp8_layout_puts_values_then_scales_per_page() -> None:
    page_size, heads = 4, 2
    k, w, cos_sin, positions = make_inputs(2, heads)
    slots = np.array([6, 1], np.int64)  # page 1 offset 2, page 0 offset 1
    cache = ref.new_cache(2, page_size, heads, use_bf16=False)
    ref.fused_index_k(cache, k, w, cos_sin, positions, slots, page_size, use_bf16=False)
    codes, scales = ref.quantize_fp8(ref.norm_rope(k, w, cos_sin, positions))
    page_bytes = ref.page_bytes(page_size, heads, False)
    flat = cache.reshape(-1)
    for token, (page, offset) in enumerate(((1, 2), (0, 1))):
        for head in range(heads):
            row = offset * heads + head
            values_at = page * page_bytes + row * 128
            scale_at = page * page_bytes + page_size * heads * 128 + row * 4
            assert np.array_equal(flat[values_at : values_at + 128], codes[token, head])
            assert flat[scale_at : scale_at + 4].view(np.float32)[0] == scales[token, head]
    back = ref.load(cache, slots, page_size, heads, use_bf16=False)
    np.testing.assert_array_equal(back, ref.e4m3_bits_to_float(codes) * scales[..., None])


@pytest.mark.parametrize(
    ("value", "enabled"),
    [
        ("1", True),
        ("true", True),
        ("TRUE", True),
        ("0", False),
        ("", False),
        ("yes", False),
        (" 1", False),
        (None, False),
    ],
)
def test_env_switch(value: str | None, enabled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if value is None:
        monkeypatch.delenv(ref.ENV_SWITCH, raising=False)
    else:
        monkeypatch.setenv(ref.ENV_SWITCH, value)
    assert ref.bf16_index_k_enabled() is enabled
    k, w, cos_sin, positions = make_inputs(1, 1)
    cache = ref.new_cache(1, 4, 1, use_bf16=enabled)
    ref.fused_index_k(cache, k, w, cos_sin, positions, np.array([0], np.int64), 4)  # format from the env
    y = ref.norm_rope(k, w, cos_sin, positions)
    codes, scales = ref.quantize_fp8(y)
    want = ref.round_to_bf16(y) if enabled else ref.e4m3_bits_to_float(codes) * scales[..., None]
    np.testing.assert_array_equal(ref.load(cache, np.array([0]), 4, 1, use_bf16=enabled), want)
