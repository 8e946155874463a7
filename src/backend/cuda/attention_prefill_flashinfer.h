// FlashInfer's Hopper (SM90: wgmma, TMA, warp-specialized producer/consumer) paged prefill attention
// behind a plain launcher, so that the backend's C++ never sees CUTLASS or FlashInfer headers.
// Reads our paged KV cache in place (see FlashInferPrefillArgs) and a work list planned on the host
// (attention_prefill_flashinfer_plan.h). Causal, bf16, head_dim 64/128/256, no sliding window, no
// soft-cap, no sinks: flashinfer_prefill_supports() decides, the backend falls back to
// attention_prefill.cu for the rest. Built only with -DKVASIR_FLASHINFER (cmake/flashinfer.cmake).
// Must not allocate, synchronize or plan.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kvasir::cuda {

// Pointers are device memory. The KV cache is [num_blocks, block_size, num_kv_heads, head_dim] (K and
// V apart): FlashInfer's NHD page layout with page = block, so block_tables serve as kv_indices
// (sequence s's pages at kv_indices[s * max_blocks_per_seq ...], the plan's kv_indptr).
struct FlashInferPrefillArgs {
  const void* q = nullptr;        // [num_tokens, num_heads, head_dim] bf16
  const void* k_cache = nullptr;  // [num_blocks, block_size, num_kv_heads, head_dim] bf16
  const void* v_cache = nullptr;
  void* out = nullptr;                    // [num_tokens, num_heads, head_dim] bf16
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
  // The plan's arrays (FlashInferPrefillPlan's fields), staged on the device.
  const int32_t* work_indptr = nullptr;  // [num_ctas + 1]
  const int32_t* qo_tile_indices = nullptr;  // [num_works], and so on
  const int32_t* qo_indptr = nullptr;
  const int32_t* kv_indptr = nullptr;
  const int32_t* qo_lens = nullptr;
  const int32_t* kv_lens = nullptr;
  const int32_t* head_indices = nullptr;
  const int32_t* batch_indices = nullptr;
  int64_t num_tokens = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 0;
  float scale = 1.0f;
  int num_ctas = 0;  // the plan's CTA count: the grid
};

// One launch of the persistent kernel: num_ctas CTAs, each walking its slice of the work list.
void launch_flashinfer_prefill(const FlashInferPrefillArgs& a, cudaStream_t s);
// Raises the kernels' shared-memory limits; once per device before any launch.
void init_flashinfer_prefill_kernels();

}  // namespace kvasir::cuda
