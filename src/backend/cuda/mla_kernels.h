// Host-side launchers of the CUDA MLA kernels (mla_attention.cu): the latent-cache write, the
// rotated rope part of the latent queries, a per-head GEMV for decode-sized batches, and the
// latent attention with its split-KV combine. Plain C++ signatures over device pointers, like
// kernels.h; the backend (cuda_mla_ops.cpp) plans the work and owns the scratch.
// Must not allocate, synchronize or decide policy.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace kvasir::cuda {

// (token, head) rows one latent-attention CTA holds, keys it scores per pass, and the accumulator
// budget per thread (kMlaMaxItems groups of 8 latent columns): rows * ceil(L / 8) <= 256 * 4.
inline constexpr int kMlaRows = 16;
inline constexpr int kMlaKeys = 32;
inline constexpr int kMlaThreads = 256;
inline constexpr int kMlaMaxItems = 4;
// Tokens one head_gemv launch covers per grid.z slice (the decode-sized path of the per-head
// products; larger batches go to cuBLASLt, head_gemm.h).
inline constexpr int kMlaGemvTokens = 8;

// Rotates each token's k_pe at its position (pairs as RopeParams::neox says) and writes the row
// [c_kv | rope(k_pe)] to cache slot slot_mapping[t] (negative: skipped).
//   c_kv [n, L], k_pe [n, R], cache [num_slots, L + R], all bf16.
void launch_write_latent_kv(const void* c_kv, const void* k_pe, void* cache, const int32_t* positions,
                            const float* inv_freq, const int64_t* slot_mapping, int n, int L, int R, bool neox,
                            float attention_factor, int64_t num_slots, cudaStream_t s);

// q_latent[t, h, L:L+R] = rope(q[t, h, nope:nope+R]) in float32.   q [n, H, nope + R] bf16,
// q_latent [n, H, L + R] f32.
void launch_mla_q_rope(const void* q, float* q_latent, const int32_t* positions, const float* inv_freq, int n,
                       int H, int nope, int R, int L, bool neox, float attention_factor, cudaStream_t s);

// out(t, h, m) = sum_k x(t, h, k) * w[h, m, k] for t < n, h < H, m < M, k < K: x at
// x + t * x_ts + h * x_hs (elements; bf16, or f32 when x_f32), w [H, M, K] bf16, out at
// out + t * o_ts + h * o_hs (f32 when out_f32, else bf16). A warp per (h, m), reading the weight
// row once for up to kMlaGemvTokens tokens.
void launch_head_gemv(const void* x, bool x_f32, int64_t x_ts, int64_t x_hs, const void* w, void* out, bool out_f32,
                      int64_t o_ts, int64_t o_hs, int n, int H, int M, int K, cudaStream_t s);

// The latent attention over one step's tiles: work[i] = (sequence, first query token of the
// tile); a CTA per (tile, head group, key split) holds tokens_per_tile x heads_per_group rows.
struct MlaAttentionArgs {
  const float* q_latent = nullptr;         // [num_tokens, H, L + R]
  const void* cache = nullptr;             // [num_slots, L + R] bf16
  const int32_t* query_start_loc = nullptr;  // [num_seqs + 1]
  const int32_t* seq_lens = nullptr;         // [num_seqs]
  const int32_t* block_tables = nullptr;     // [num_seqs, max_blocks_per_seq]
  const PrefillWork* work = nullptr;         // [num_work]
  void* o_latent = nullptr;                // [num_tokens, H, L] bf16 (normalized)
  float* partial = nullptr;                // [num_work, H, num_splits, L + 2] when num_splits > 1
  int num_work = 0;
  int max_blocks_per_seq = 0;
  int block_size = 16;
  int H = 0, L = 0, R = 0;
  int tokens_per_tile = 1;
  int heads_per_group = 1;
  int num_splits = 1;
  int partition_tokens = 0;  // keys per split (num_splits > 1), a multiple of kMlaKeys
  float scale = 1.0f;
};
// Dynamic shared memory of one CTA for latent rows of L + R values (0: too wide for a CTA).
size_t mla_attention_smem_bytes(int L, int R);
// Must be called once per device before the first launch (raises the shared-memory limit).
void init_mla_kernels();
// The attention, then (num_splits > 1) the combine of the splits into o_latent.
void launch_mla_attention(const MlaAttentionArgs& a, cudaStream_t s);

}  // namespace kvasir::cuda
