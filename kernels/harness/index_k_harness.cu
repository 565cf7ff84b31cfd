// Runs the fused index-key kernel on inputs written by kernels/gpu_check.py.
//
//   index_k_harness <dir>
//
// Reads <dir>/params.txt and the raw little-endian arrays k.bin (bf16 bits),
// weight.bin (bf16 bits), cos_sin.bin (fp32), positions.bin and out_loc.bin
// (int64). Writes cache_fp8.bin and cache_bf16.bin (explicit format) and
// cache_auto.bin plus auto_format.txt (format from SGLANG_DSV4_BF16_INDEX_K).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fused_index_k.h"

namespace {

struct Params {
  int num_tokens, num_heads, page_size, num_pages, interleaved;
  long long k_token_stride, max_position;
  float eps;
};

#define CHECK_CUDA(expr)                                                              \
  do {                                                                                \
    const cudaError_t err_ = (expr);                                                  \
    if (err_ != cudaSuccess) {                                                        \
      std::fprintf(stderr, "%s failed: %s\n", #expr, cudaGetErrorString(err_));      \
      std::exit(3);                                                                   \
    }                                                                                 \
  } while (0)

template <typename T>
std::vector<T> read_array(const std::string& path, size_t count) {
  std::vector<T> data(count);
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr || std::fread(data.data(), sizeof(T), count, f) != count) {
    std::fprintf(stderr, "cannot read %zu items from %s\n", count, path.c_str());
    std::exit(2);
  }
  std::fclose(f);
  return data;
}

void write_file(const std::string& path, const void* data, size_t bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(data, 1, bytes, f) != bytes) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(2);
  }
  std::fclose(f);
}

template <typename T>
T* to_device(const std::vector<T>& host) {
  T* dev = nullptr;
  CHECK_CUDA(cudaMalloc(&dev, host.size() * sizeof(T)));
  CHECK_CUDA(cudaMemcpy(dev, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return dev;
}

// Zeroed cache, one kernel launch, cache copied back.
std::vector<uint8_t> run(Dsv4IndexKArgs args, const Params& p, int use_bf16, bool automatic) {
  const size_t bytes = dsv4_index_k_page_bytes(p.page_size, p.num_heads, use_bf16) * p.num_pages;
  CHECK_CUDA(cudaMalloc(&args.cache, bytes));
  CHECK_CUDA(cudaMemset(args.cache, 0, bytes));
  const int rc = automatic ? dsv4_index_k_store_auto(&args, nullptr) : dsv4_index_k_store(&args, use_bf16, nullptr);
  CHECK_CUDA(static_cast<cudaError_t>(rc));
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<uint8_t> host(bytes);
  CHECK_CUDA(cudaMemcpy(host.data(), args.cache, bytes, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaFree(args.cache));
  return host;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <dir>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  Params p{};
  std::FILE* f = std::fopen((dir + "/params.txt").c_str(), "r");
  if (f == nullptr || std::fscanf(f, "%d %d %d %d %d %lld %lld %f", &p.num_tokens, &p.num_heads, &p.page_size,
                                  &p.num_pages, &p.interleaved, &p.k_token_stride, &p.max_position, &p.eps) != 8) {
    std::fprintf(stderr, "cannot parse %s/params.txt\n", dir.c_str());
    return 2;
  }
  std::fclose(f);

  int devices = 0;
  const cudaError_t probe = cudaGetDeviceCount(&devices);
  if (probe != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "no CUDA device: %s\n", cudaGetErrorString(probe));
    return 4;
  }

  const auto k = read_array<uint16_t>(dir + "/k.bin", static_cast<size_t>(p.num_tokens) * p.k_token_stride);
  const auto weight = read_array<uint16_t>(dir + "/weight.bin", 128);
  const auto cos_sin = read_array<float>(dir + "/cos_sin.bin", static_cast<size_t>(p.max_position) * 64);
  const auto positions = read_array<int64_t>(dir + "/positions.bin", p.num_tokens);
  const auto out_loc = read_array<int64_t>(dir + "/out_loc.bin", p.num_tokens);

  Dsv4IndexKArgs args{};
  args.k = to_device(k);
  args.norm_weight = to_device(weight);
  args.cos_sin = to_device(cos_sin);
  args.positions = to_device(positions);
  args.out_loc = to_device(out_loc);
  args.k_token_stride = p.k_token_stride;
  args.num_tokens = p.num_tokens;
  args.num_heads = p.num_heads;
  args.page_size = p.page_size;
  args.interleaved = p.interleaved;
  args.eps = p.eps;

  const auto fp8 = run(args, p, 0, false);
  const auto bf16 = run(args, p, 1, false);
  const int auto_bf16 = dsv4_index_k_bf16_enabled();
  const auto automatic = run(args, p, auto_bf16, true);
  write_file(dir + "/cache_fp8.bin", fp8.data(), fp8.size());
  write_file(dir + "/cache_bf16.bin", bf16.data(), bf16.size());
  write_file(dir + "/cache_auto.bin", automatic.data(), automatic.size());
  const std::string format = auto_bf16 ? "bf16\n" : "fp8\n";
  write_file(dir + "/auto_format.txt", format.data(), format.size());
  std::printf("ran %d tokens x %d heads, auto format %s", p.num_tokens, p.num_heads, format.c_str());
  return 0;
}
