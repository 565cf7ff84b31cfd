"""NumPy reference of the fused index-key kernel (csrc/fused_index_k.cuh).

Every fp32 step is done in the same order as the kernel, so the bf16 output
matches the GPU bit for bit and the fp8 output matches up to the rounding of
the hardware conversion. Bit patterns travel as uint16 (bf16) and uint8 (fp8).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

HEAD_DIM = 128
ROPE_DIM = 64
ROPE_OFFSET = HEAD_DIM - ROPE_DIM  # rotary dims are [64, 128)
HALF_ROPE = ROPE_DIM // 2
WARP_SIZE = 32
FP8_MAX = 448.0
MIN_AMAX = 1e-4
FP8_BYTES_PER_TOKEN_HEAD = HEAD_DIM + 4  # 128 e4m3 values + one fp32 scale
BF16_BYTES_PER_TOKEN_HEAD = HEAD_DIM * 2
ENV_SWITCH = "SGLANG_DSV4_BF16_INDEX_K"

F32 = np.float32
Floats = npt.NDArray[np.float32]


def bf16_index_k_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """The engine's switch, read like SGLang's get_bool_env_var: "1" or "true", any case."""
    value = (os.environ if environ is None else environ).get(ENV_SWITCH, "")
    return value.lower() in ("1", "true")


def bytes_per_token_head(use_bf16: bool) -> int:
    return BF16_BYTES_PER_TOKEN_HEAD if use_bf16 else FP8_BYTES_PER_TOKEN_HEAD


def page_bytes(page_size: int, num_heads: int, use_bf16: bool) -> int:
    return page_size * num_heads * bytes_per_token_head(use_bf16)


def float_to_bf16_bits(x: npt.ArrayLike) -> npt.NDArray[np.uint16]:
    """fp32 -> bf16 with round-to-nearest-even; NaN becomes 0x7fff like cuda_bf16.h."""
    bits = np.ascontiguousarray(x, dtype=F32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    is_nan = (bits & 0x7FFFFFFF) > 0x7F800000
    return np.where(is_nan, 0x7FFF, rounded).astype(np.uint16)


def bf16_bits_to_float(bits: npt.ArrayLike) -> Floats:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(F32)


def round_to_bf16(x: npt.ArrayLike) -> Floats:
    return bf16_bits_to_float(float_to_bf16_bits(x))


def float_to_e4m3_bits(x: npt.ArrayLike) -> npt.NDArray[np.uint8]:
    """fp32 -> fp8 e4m3 (bias 7, no infinities), round-to-nearest-even, saturating to +-448.

    NaN becomes 0x7f whatever its sign; infinities and finite values beyond 448
    saturate to 0x7e (0xfe when negative), as __nv_cvt_float_to_fp8 does.
    """
    x32 = np.asarray(x, dtype=F32)
    is_nan = np.isnan(x32)
    sign = (np.signbit(x32) & ~is_nan).astype(np.uint8) << 7
    a = np.where(np.isfinite(x32), np.abs(x32), F32(FP8_MAX))
    _, exp = np.frexp(a)  # a = m * 2**exp with 0.5 <= m < 1
    binade = np.where(a < F32(2.0**-6), -6, exp - 1)  # below 2**-6 the grid is the subnormal one
    steps = np.rint(np.ldexp(a, 3 - binade))  # a in units of the grid spacing: 8..16, or 0..8
    # Code = 8 * (binade + 6) + steps; steps == 16 carries into the next binade by itself.
    code = np.minimum(8 * (binade.astype(np.int64) + 6) + steps.astype(np.int64), 0x7E)
    code = np.where(is_nan, 0x7F, code).astype(np.uint8)
    return code | sign


def _e4m3_table() -> Floats:
    code = np.arange(256)
    exp_field, mant = (code >> 3) & 0xF, (code & 0x7).astype(np.float64)
    magnitude = np.where(exp_field == 0, mant * 2.0**-9, np.ldexp(1.0 + mant / 8.0, exp_field - 7))
    magnitude = np.where((code & 0x7F) == 0x7F, np.nan, magnitude)
    return np.where(code & 0x80, -magnitude, magnitude).astype(F32)


_E4M3_VALUES = _e4m3_table()


def e4m3_bits_to_float(bits: npt.ArrayLike) -> Floats:
    return _E4M3_VALUES[np.asarray(bits, dtype=np.uint8)]


def rope_cos_sin(max_position: int, theta: float = 40000.0) -> Floats:
    """Rows [cos(32) | sin(32)] per position; DeepSeek-V4 compressed layers use theta 40000."""
    inv_freq = 1.0 / theta ** (np.arange(0, ROPE_DIM, 2, dtype=np.float64) / ROPE_DIM)
    angles = np.outer(np.arange(max_position, dtype=np.float64), inv_freq)
    return np.concatenate([np.cos(angles), np.sin(angles)], axis=1).astype(F32)


def rms_norm(x: Floats, weight: Floats, eps: float) -> Floats:
    """RMSNorm over the last axis with the kernel's summation order."""
    sq = x * x
    lane = ((sq[..., 0::4] + sq[..., 1::4]) + sq[..., 2::4]) + sq[..., 3::4]
    partner = np.arange(WARP_SIZE)
    for offset in (16, 8, 4, 2, 1):
        lane = lane + lane[..., partner ^ offset]
    mean_sq = lane[..., :1] * F32(1.0 / HEAD_DIM)
    inv_rms = F32(1.0) / np.sqrt(mean_sq + F32(eps))
    return (x * inv_rms) * weight


def rotate(y: Floats, cos_sin_rows: Floats, interleaved: bool) -> Floats:
    """RoPE on dims [64, 128); cos_sin_rows broadcasts against y[..., :64]."""
    out = y.copy()
    rope = y[..., ROPE_OFFSET:]
    cos, sin = cos_sin_rows[..., :HALF_ROPE], cos_sin_rows[..., HALF_ROPE:]
    if interleaved:
        a, b = rope[..., 0::2], rope[..., 1::2]
        out[..., ROPE_OFFSET + 0 :: 2] = a * cos - b * sin
        out[..., ROPE_OFFSET + 1 :: 2] = b * cos + a * sin
    else:
        x1, x2 = rope[..., :HALF_ROPE], rope[..., HALF_ROPE:]
        out[..., ROPE_OFFSET : ROPE_OFFSET + HALF_ROPE] = x1 * cos - x2 * sin
        out[..., ROPE_OFFSET + HALF_ROPE :] = x2 * cos + x1 * sin
    return out


def norm_rope(
    k_bits: npt.NDArray[np.uint16],
    weight_bits: npt.NDArray[np.uint16],
    cos_sin: Floats,
    positions: npt.NDArray[np.int64],
    eps: float = 1e-6,
    interleaved: bool = False,
) -> Floats:
    """k_bits: bf16 [tokens, heads, 128] -> normalised and rotated fp32 keys, same shape."""
    y = rms_norm(bf16_bits_to_float(k_bits), bf16_bits_to_float(weight_bits), eps)
    return rotate(y, cos_sin[positions][:, None, :], interleaved)


def quantize_fp8(y: Floats) -> tuple[npt.NDArray[np.uint8], Floats]:
    """Per (token, head) row: scale = max(amax, 1e-4) / 448 and values y / scale in e4m3."""
    amax = np.max(np.abs(y), axis=-1, keepdims=True)
    scale = np.maximum(amax, F32(MIN_AMAX)) / F32(FP8_MAX)
    return float_to_e4m3_bits(y / scale), scale[..., 0]


def new_cache(num_pages: int, page_size: int, num_heads: int, use_bf16: bool) -> npt.NDArray[np.uint8]:
    return np.zeros((num_pages, page_bytes(page_size, num_heads, use_bf16)), dtype=np.uint8)


def store(
    cache: npt.NDArray[np.uint8], y: Floats, out_loc: npt.NDArray[np.int64], page_size: int, use_bf16: bool
) -> None:
    """Write rows y [tokens, heads, 128] to their slots; slots < 0 are skipped."""
    keep = out_loc >= 0
    y, slots = y[keep], out_loc[keep]
    num_heads = y.shape[1]
    if use_bf16:
        rows = cache.reshape(-1, num_heads, BF16_BYTES_PER_TOKEN_HEAD)
        rows[slots] = float_to_bf16_bits(y).view(np.uint8).reshape(len(slots), num_heads, -1)
        return
    values, scales = quantize_fp8(y)
    split = page_size * num_heads * HEAD_DIM
    pages, offsets = slots // page_size, slots % page_size
    value_rows = cache[:, :split].reshape(-1, page_size, num_heads, HEAD_DIM)
    scale_rows = cache[:, split:].view(np.float32).reshape(-1, page_size, num_heads)
    value_rows[pages, offsets] = values
    scale_rows[pages, offsets] = scales


def load(
    cache: npt.NDArray[np.uint8], slots: npt.NDArray[np.int64], page_size: int, num_heads: int, use_bf16: bool
) -> Floats:
    """Dequantised keys [len(slots), heads, 128] as the attention side reads them."""
    if use_bf16:
        rows = cache.reshape(-1, num_heads, BF16_BYTES_PER_TOKEN_HEAD)[slots]
        return bf16_bits_to_float(rows.view(np.uint16))
    split = page_size * num_heads * HEAD_DIM
    pages, offsets = slots // page_size, slots % page_size
    values = cache[:, :split].reshape(-1, page_size, num_heads, HEAD_DIM)[pages, offsets]
    scales = cache[:, split:].view(np.float32).reshape(-1, page_size, num_heads)[pages, offsets]
    return e4m3_bits_to_float(values) * scales[..., None]


def fused_index_k(
    cache: npt.NDArray[np.uint8],
    k_bits: npt.NDArray[np.uint16],
    weight_bits: npt.NDArray[np.uint16],
    cos_sin: Floats,
    positions: npt.NDArray[np.int64],
    out_loc: npt.NDArray[np.int64],
    page_size: int,
    use_bf16: bool | None = None,
    eps: float = 1e-6,
    interleaved: bool = False,
) -> None:
    """The whole kernel: norm, rope, store. use_bf16=None follows SGLANG_DSV4_BF16_INDEX_K."""
    if use_bf16 is None:
        use_bf16 = bf16_index_k_enabled()
    y = norm_rope(k_bits, weight_bits, cos_sin, positions, eps, interleaved)
    store(cache, y, out_loc, page_size, use_bf16)
