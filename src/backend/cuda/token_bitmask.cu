// Grammar token masks on device logits: one thread per (mask row, token), so the writes of -inf
// are coalesced; the mask words are read once per 32 threads (a broadcast within the warp).
#include <cfloat>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/kernels.h"

namespace kvasir::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void token_bitmask_kernel(float* logits, int64_t vocab, const int32_t* words, int words_per_row,
                                     const int32_t* logits_rows) {
  pdl_begin();
  const int mask_row = blockIdx.y;
  const int row = logits_rows[mask_row];
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (row < 0 || t >= vocab) return;
  const int64_t w = t >> 5;
  // Tokens past the mask (model vocabulary wider than the grammar's) are never allowed.
  const bool allowed =
      w < words_per_row && ((static_cast<uint32_t>(words[static_cast<int64_t>(mask_row) * words_per_row + w]) >> (t & 31)) & 1u);
  if (!allowed) logits[static_cast<int64_t>(row) * vocab + t] = -INFINITY;
}

}  // namespace

void launch_token_bitmask(float* logits, int64_t vocab, const int32_t* words, int words_per_row,
                          const int32_t* logits_rows, int num_rows, cudaStream_t s) {
  if (num_rows <= 0 || vocab <= 0) return;
  const dim3 grid(static_cast<unsigned>((vocab + kThreads - 1) / kThreads), static_cast<unsigned>(num_rows));
  launch(token_bitmask_kernel, grid, kThreads, 0, s, logits, vocab, words, words_per_row, logits_rows);
  KVASIR_CUDA_LAUNCH_CHECK();
}

}  // namespace kvasir::cuda
