// FlashInfer's split-KV paged decode ("partition-kv" BatchDecodeWithPagedKVCache, CUDA cores, a
// multi-stage cp.async pipeline of K/V rows per (chunk, kv head) CTA whose GQA group rows share one
// load) and its merge of the chunks' partial results, behind a plain launcher so that the
// backend's C++ never sees FlashInfer headers. For pure decode steps (one query per sequence),
// bf16 Q/out, a bf16 or e4m3 KV cache (FlashInfer widens the codes as it loads them; the caller folds
// k_scale into `scale` and sends only caches whose v_scale is 1: there is no output scale here),
// head_dim 64/128/256, GQA groups 1/2/3/4/6/8/16, no sliding window, soft-cap or sinks:
// flashinfer_decode_shape_ok() and the backend decide, the rest runs attention.cu's kernels.
// Reads our paged KV cache and block table in place through a host plan
// (attention_decode_flashinfer_plan.h) whose launch shape never depends on lengths: graph-capturable.
// Built only with FlashInfer (cmake/flashinfer.cmake), into the backend's sm_90a FlashInfer library.
// Must not allocate, synchronize or plan.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace kvasir::cuda {

// Pointers are device memory. The KV cache is [num_blocks, block_size, num_kv_heads, head_dim]
// (FlashInfer's NHD pages, page = block); the plan's arrays are FlashInferDecodePlan's fields.
struct FlashInferDecodeArgs {
  const void* q = nullptr;  // [num_seqs, num_heads, head_dim] bf16: row s is sequence s's query
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  KvCacheType kv_cache = KvCacheType::kBf16;  // kBf16 or kE4m3
  void* out = nullptr;                    // [num_seqs, num_heads, head_dim] bf16
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]: the page list
  const int32_t* page_indptr = nullptr;   // [num_seqs + 1]
  const int32_t* last_page_len = nullptr;
  const int32_t* o_indptr = nullptr;  // [num_seqs + 1]
  const int32_t* chunk_tokens = nullptr;  // [1]
  const int32_t* request_indices = nullptr;  // [num_works]
  const int32_t* kv_tile_indices = nullptr;
  const void* valid_mask = nullptr;  // [num_works] bool
  void* partial_o = nullptr;         // bf16 [num_works, num_heads, head_dim]
  float* partial_lse = nullptr;      // [num_works, num_heads]
  int num_seqs = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 0;
  int num_works = 0;  // the grid's x (the plan's rows); y is the kv head
  float scale = 1.0f;
  bool pdl = true;  // programmatic dependent launch, as our kernels (cuda_common.cuh)
};

bool flashinfer_decode_shape_ok(int num_heads, int num_kv_heads, int head_dim);
// Resident CTAs per SM of the decode kernel for this shape and cache (its occupancy, as FlashInfer's
// DecodePlan asks); 0 where the shape or the cache (e5m2) is not supported. Valid after
// init_flashinfer_decode_kernels().
int flashinfer_decode_ctas_per_sm(int num_heads, int num_kv_heads, int head_dim, KvCacheType kv_cache);
// Raises the kernels' shared-memory limits and measures their occupancy; once per device before any launch.
void init_flashinfer_decode_kernels();
// The decode kernel on (num_works, num_kv_heads) CTAs, then the merge into `out`.
void launch_flashinfer_decode(const FlashInferDecodeArgs& a, cudaStream_t s);

}  // namespace kvasir::cuda
