// Converts raw fp32 values with the CUDA headers' own host implementations:
//   host_convert <in.f32> <out.bf16> <out.e4m3>
// out.bf16: __float2bfloat16_rn; out.e4m3: __nv_cvt_float_to_fp8(SATFINITE, E4M3).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s in.f32 out.bf16 out.e4m3\n", argv[0]);
    return 2;
  }
  std::FILE* in = std::fopen(argv[1], "rb");
  if (in == nullptr) return 1;
  std::vector<float> values;
  float v;
  while (std::fread(&v, sizeof v, 1, in) == 1) values.push_back(v);
  std::fclose(in);

  std::vector<uint16_t> bf16(values.size());
  std::vector<uint8_t> e4m3(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const __nv_bfloat16 b = __float2bfloat16_rn(values[i]);
    std::memcpy(&bf16[i], &b, sizeof(uint16_t));
    e4m3[i] = __nv_cvt_float_to_fp8(values[i], __NV_SATFINITE, __NV_E4M3);
  }
  std::FILE* out_bf16 = std::fopen(argv[2], "wb");
  std::FILE* out_e4m3 = std::fopen(argv[3], "wb");
  if (out_bf16 == nullptr || out_e4m3 == nullptr) return 1;
  std::fwrite(bf16.data(), sizeof(uint16_t), bf16.size(), out_bf16);
  std::fwrite(e4m3.data(), 1, e4m3.size(), out_e4m3);
  std::fclose(out_bf16);
  std::fclose(out_e4m3);
  return 0;
}
