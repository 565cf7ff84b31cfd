// Host launchers of the fused index-key kernel; the output format is a
// template parameter chosen at runtime from SGLANG_DSV4_BF16_INDEX_K.
#include <cuda_runtime.h>

#include <cctype>
#include <cstdlib>
#include <cstring>

#include "fused_index_k.cuh"

namespace dsv4_index_k {
namespace {

bool env_flag_enabled(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return false;
  char lowered[8] = {0};
  const size_t n = std::strlen(value);
  if (n >= sizeof(lowered)) return false;
  for (size_t i = 0; i < n; ++i) lowered[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(value[i])));
  return std::strcmp(lowered, "1") == 0 || std::strcmp(lowered, "true") == 0;
}

template <typename OutT>
cudaError_t launch(const Dsv4IndexKArgs& a, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(a.num_tokens) * a.num_heads;
  if (rows == 0) return cudaSuccess;
  const int64_t threads = rows * kWarpSize;
  const unsigned blocks = static_cast<unsigned>((threads + kThreadsPerBlock - 1) / kThreadsPerBlock);
  fused_index_k_kernel<OutT><<<blocks, kThreadsPerBlock, 0, stream>>>(a);
  return cudaGetLastError();
}

bool valid(const Dsv4IndexKArgs* a) {
  return a != nullptr && a->num_tokens >= 0 && a->num_heads > 0 && a->page_size > 0 &&
         a->k_token_stride >= static_cast<int64_t>(a->num_heads) * kHeadDim && a->k_token_stride % 4 == 0;
}

}  // namespace
}  // namespace dsv4_index_k

extern "C" {

int dsv4_index_k_bytes_per_token_head(int use_bf16) {
  using namespace dsv4_index_k;
  return use_bf16 ? IndexKFormat<__nv_bfloat16>::kBytesPerTokenHead
                  : IndexKFormat<__nv_fp8_e4m3>::kBytesPerTokenHead;
}

size_t dsv4_index_k_page_bytes(int page_size, int num_heads, int use_bf16) {
  using namespace dsv4_index_k;
  return use_bf16 ? page_bytes<__nv_bfloat16>(page_size, num_heads)
                  : page_bytes<__nv_fp8_e4m3>(page_size, num_heads);
}

int dsv4_index_k_bf16_enabled(void) {
  static const bool enabled = dsv4_index_k::env_flag_enabled("SGLANG_DSV4_BF16_INDEX_K");
  return enabled ? 1 : 0;
}

int dsv4_index_k_store(const Dsv4IndexKArgs* args, int use_bf16, void* stream) {
  using namespace dsv4_index_k;
  if (!valid(args)) return static_cast<int>(cudaErrorInvalidValue);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const cudaError_t err = use_bf16 ? launch<__nv_bfloat16>(*args, s) : launch<__nv_fp8_e4m3>(*args, s);
  return static_cast<int>(err);
}

int dsv4_index_k_store_auto(const Dsv4IndexKArgs* args, void* stream) {
  return dsv4_index_k_store(args, dsv4_index_k_bf16_enabled(), stream);
}

}  // extern "C"
