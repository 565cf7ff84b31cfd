/*
 * Fused index-key path of the DeepSeek-V4 sparse-attention indexer:
 *
 *   y = RMSNorm(k) * weight          over the 128 dims of one head, in fp32
 *   y[64:128] = RoPE(y[64:128], pos)  the last 64 dims are rotary, the first 64 are not
 *   cache[slot] = store(y)            fp8 e4m3 + one fp32 scale, or bf16
 *
 * One warp handles one (token, head); lane l owns dims 4l..4l+3, so lanes
 * 16..31 own the rotary part. Every fp32 operation is an explicit _rn
 * intrinsic so that nvcc cannot contract it into an FMA: the result is
 * bit-for-bit reproducible by kernels/index_k_ref.py.
 *
 * Cache layout, slot = page * page_size + offset:
 *   bf16: token-major, slot * num_heads * 256 + head * 256 bytes.
 *   fp8:  per page, all values first, then all scales:
 *         values at page * page_bytes + (offset * num_heads + head) * 128,
 *         scale  at page * page_bytes + page_size * num_heads * 128
 *                   + (offset * num_heads + head) * 4.
 */
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "fused_index_k.h"
#include "index_k_store.cuh"

namespace dsv4_index_k {

constexpr int kHeadDim = 128;
constexpr int kRopeDim = 64;
constexpr int kRopeOffset = kHeadDim - kRopeDim;  // rotary dims: [64, 128)
constexpr int kHalfRope = kRopeDim / 2;
constexpr int kWarpSize = 32;
constexpr int kValuesPerLane = kHeadDim / kWarpSize;  // 4
constexpr int kFirstRopeLane = kRopeOffset / kValuesPerLane;  // 16
constexpr int kThreadsPerBlock = 256;  // 8 (token, head) rows per block
constexpr unsigned kFullMask = 0xffffffffu;
constexpr float kFp8Max = 448.0f;   // largest finite e4m3 value
constexpr float kMinAmax = 1e-4f;   // floor of the per-row amax, avoids a zero scale

template <typename OutT>
struct IndexKFormat;

template <>
struct IndexKFormat<__nv_fp8_e4m3> {
  static constexpr int kBytesPerTokenHead = kHeadDim + 4;  // 132
};

template <>
struct IndexKFormat<__nv_bfloat16> {
  static constexpr int kBytesPerTokenHead = kHeadDim * 2;  // 256
};

template <typename OutT>
__host__ __device__ constexpr size_t page_bytes(int page_size, int num_heads) {
  return static_cast<size_t>(page_size) * num_heads * IndexKFormat<OutT>::kBytesPerTokenHead;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v = __fadd_rn(v, __shfl_xor_sync(kFullMask, v, offset));
  }
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  }
  return v;
}

// RoPE on this lane's four values. cos_sin points at the row of the token's position.
__device__ __forceinline__ void rotate(float (&y)[kValuesPerLane], int lane, const float* cos_sin,
                                       bool interleaved) {
  float partner[kValuesPerLane];
#pragma unroll
  for (int i = 0; i < kValuesPerLane; ++i) {
    // Every lane takes part in the shuffle; only rotary lanes use the result.
    partner[i] = __shfl_xor_sync(kFullMask, y[i], kHalfRope / kValuesPerLane);
  }
  if (lane < kFirstRopeLane) return;
  const int rope_dim = lane * kValuesPerLane - kRopeOffset;  // 0..60, step 4
  if (interleaved) {
#pragma unroll
    for (int i = 0; i < kValuesPerLane; i += 2) {
      const int freq = (rope_dim + i) / 2;
      const float c = cos_sin[freq];
      const float s = cos_sin[kHalfRope + freq];
      const float a = y[i];
      const float b = y[i + 1];
      y[i] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
      y[i + 1] = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
    }
    return;
  }
  const bool first_half = rope_dim < kHalfRope;
#pragma unroll
  for (int i = 0; i < kValuesPerLane; ++i) {
    const int freq = (rope_dim + i) % kHalfRope;
    const float c = cos_sin[freq];
    const float s = cos_sin[kHalfRope + freq];
    const float yc = __fmul_rn(y[i], c);
    const float ps = __fmul_rn(partner[i], s);
    y[i] = first_half ? __fsub_rn(yc, ps) : __fadd_rn(yc, ps);
  }
}

__device__ __forceinline__ void store_row(const float (&y)[kValuesPerLane], int lane, uint8_t* cache,
                                          int64_t slot, int head, const Dsv4IndexKArgs& a,
                                          __nv_bfloat16* /*tag*/) {
  const int64_t row = slot * a.num_heads + head;
  store_bf16_lane(y, lane, cache + row * IndexKFormat<__nv_bfloat16>::kBytesPerTokenHead);
}

__device__ __forceinline__ void store_row(const float (&y)[kValuesPerLane], int lane, uint8_t* cache,
                                          int64_t slot, int head, const Dsv4IndexKArgs& a,
                                          __nv_fp8_e4m3* /*tag*/) {
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kValuesPerLane; ++i) amax = fmaxf(amax, fabsf(y[i]));
  amax = warp_max(amax);
  const float scale = __fdiv_rn(fmaxf(amax, kMinAmax), kFp8Max);
  uint32_t packed = 0;
#pragma unroll
  for (int i = 0; i < kValuesPerLane; ++i) {
    const __nv_fp8_storage_t q = __nv_cvt_float_to_fp8(__fdiv_rn(y[i], scale), __NV_SATFINITE, __NV_E4M3);
    packed |= static_cast<uint32_t>(q) << (8 * i);
  }
  const int64_t page = slot / a.page_size;
  const int64_t row_in_page = (slot % a.page_size) * a.num_heads + head;
  uint8_t* page_base = cache + page * page_bytes<__nv_fp8_e4m3>(a.page_size, a.num_heads);
  reinterpret_cast<uint32_t*>(page_base + row_in_page * kHeadDim)[lane] = packed;
  if (lane == 0) {
    float* scales = reinterpret_cast<float*>(page_base + static_cast<int64_t>(a.page_size) * a.num_heads * kHeadDim);
    scales[row_in_page] = scale;
  }
}

template <typename OutT>
__global__ void __launch_bounds__(kThreadsPerBlock) fused_index_k_kernel(const Dsv4IndexKArgs a) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  // Both exits are uniform across the warp, so the shuffles below see all 32 lanes.
  if (row >= static_cast<int64_t>(a.num_tokens) * a.num_heads) return;
  const int64_t token = row / a.num_heads;
  const int head = static_cast<int>(row % a.num_heads);
  const int64_t slot = a.out_loc[token];
  if (slot < 0) return;

  const __nv_bfloat16* src =
      static_cast<const __nv_bfloat16*>(a.k) + token * a.k_token_stride + head * kHeadDim;
  const __nv_bfloat16* weight = static_cast<const __nv_bfloat16*>(a.norm_weight);
  const uint2 raw = reinterpret_cast<const uint2*>(src)[lane];
  const __nv_bfloat162 lo = *reinterpret_cast<const __nv_bfloat162*>(&raw.x);
  const __nv_bfloat162 hi = *reinterpret_cast<const __nv_bfloat162*>(&raw.y);
  float y[kValuesPerLane] = {__low2float(lo), __high2float(lo), __low2float(hi), __high2float(hi)};

  // Sum of squares: ((x0^2 + x1^2) + x2^2) + x3^2 per lane, then an xor butterfly.
  float sum_sq = __fmul_rn(y[0], y[0]);
#pragma unroll
  for (int i = 1; i < kValuesPerLane; ++i) sum_sq = __fadd_rn(sum_sq, __fmul_rn(y[i], y[i]));
  sum_sq = warp_sum(sum_sq);
  const float mean_sq = __fmul_rn(sum_sq, 1.0f / kHeadDim);
  const float inv_rms = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean_sq, a.eps)));
#pragma unroll
  for (int i = 0; i < kValuesPerLane; ++i) {
    const float w = __bfloat162float(weight[lane * kValuesPerLane + i]);
    y[i] = __fmul_rn(__fmul_rn(y[i], inv_rms), w);
  }

  rotate(y, lane, a.cos_sin + a.positions[token] * kRopeDim, a.interleaved != 0);
  store_row(y, lane, a.cache, slot, head, a, static_cast<OutT*>(nullptr));
}

}  // namespace dsv4_index_k
