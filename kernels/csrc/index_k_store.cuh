/*
 * bf16 store of one DeepSeek-V4 index key (128 dims) by one warp.
 *
 * The single store routine of the bf16 index-key path. It is used by
 * kernels/csrc/fused_index_k.cuh (the standalone kernel and its GPU harness)
 * and, through patches/sglang-0.5.23 (which adds this file as
 * sgl_kernel/deepseek_v4/index_k_store.cuh), by SGLang's fused
 * norm + RoPE + store indexer kernel when SGLANG_DSV4_BF16_INDEX_K=1.
 *
 * Lane l of the warp holds dims 4l..4l+3 in fp32 and writes them as bf16
 * (round to nearest even) to row + 8l: a row is 128 bf16 = 256 bytes, no scale.
 */
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

namespace dsv4_index_k {

constexpr int kIndexKDims = 128;
constexpr int kBf16RowBytes = kIndexKDims * 2;  // 256 bytes per key
constexpr int kFp8RowBytes = kIndexKDims + 4;    // 132 bytes per key: fp8 values + one fp32 scale

// Vec4: anything with operator[] giving the lane's four fp32 values.
template <typename Vec4>
__device__ __forceinline__ void store_bf16_lane(const Vec4& y, int lane, uint8_t* row) {
  __nv_bfloat162 lo = __floats2bfloat162_rn(y[0], y[1]);
  __nv_bfloat162 hi = __floats2bfloat162_rn(y[2], y[3]);
  uint2 packed;
  packed.x = *reinterpret_cast<uint32_t*>(&lo);
  packed.y = *reinterpret_cast<uint32_t*>(&hi);
  reinterpret_cast<uint2*>(row)[lane] = packed;
}

}  // namespace dsv4_index_k
