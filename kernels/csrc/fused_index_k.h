/*
 * C interface of the fused DeepSeek-V4 indexer key kernel.
 *
 * One call normalises, rotates and stores the compressed index keys of
 * `num_tokens` tokens into a paged index-key cache. All pointers are device
 * pointers. Launchers return a cudaError_t value (0 on success).
 */
#ifndef DSV4_INDEX_K_FUSED_INDEX_K_H_
#define DSV4_INDEX_K_FUSED_INDEX_K_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct Dsv4IndexKArgs {
  const void* k;            /* bf16 [num_tokens, num_heads, 128], row stride k_token_stride */
  const void* norm_weight;  /* bf16 [128] RMSNorm weight */
  const float* cos_sin;     /* fp32 [max_position, 64]: cos[0:32] then sin[0:32] */
  const int64_t* positions; /* [num_tokens] position of each token (row of cos_sin) */
  const int64_t* out_loc;   /* [num_tokens] cache slot of each token; < 0 skips the token */
  uint8_t* cache;           /* [num_pages, page_bytes], see dsv4_index_k_page_bytes */
  int64_t k_token_stride;   /* elements between consecutive tokens of k, multiple of 4 */
  int32_t num_tokens;
  int32_t num_heads;
  int32_t page_size;
  int32_t interleaved;      /* 0: rotate halves (NeoX); 1: rotate adjacent pairs (GPT-J) */
  float eps;
} Dsv4IndexKArgs;

/* Bytes one (token, head) occupies: 132 for fp8 (128 values + fp32 scale), 256 for bf16. */
int dsv4_index_k_bytes_per_token_head(int use_bf16);

/* Bytes of one cache page holding page_size tokens of num_heads heads. */
size_t dsv4_index_k_page_bytes(int page_size, int num_heads, int use_bf16);

/* 1 when SGLANG_DSV4_BF16_INDEX_K is "1" or "true" (any case), read once per process. */
int dsv4_index_k_bf16_enabled(void);

/* Store in the given format. stream is a cudaStream_t (NULL: default stream). */
int dsv4_index_k_store(const Dsv4IndexKArgs* args, int use_bf16, void* stream);

/* Store in the format chosen by SGLANG_DSV4_BF16_INDEX_K, like the engine. */
int dsv4_index_k_store_auto(const Dsv4IndexKArgs* args, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* DSV4_INDEX_K_FUSED_INDEX_K_H_ */
