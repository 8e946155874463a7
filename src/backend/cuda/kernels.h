// Host-side launchers of the CUDA backend's own kernels (the .cu files in this folder). Plain
// C++ signatures over raw device pointers, so the backend's C++ code needs no CUDA compiler.
// Activations are bf16 ("kBf16") unless a launcher says otherwise; every pointer is device memory.
// Must not allocate, synchronize or decide policy: the backend chooses kernels and sizes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kvasir::cuda {

enum class Elem { kBf16, kF32 };
// The KV cache's elements (--kv-cache-dtype): bf16, or FP8 codes of x / scale (kv_cache_codes.cuh).
enum class KvCacheType : int32_t { kBf16, kE4m3, kE5m2 };
// The activation a quantized gate/up GEMV folds into its epilogue (FP8, W4A16, GGUF K-quant):
// none, SiLU or GELU's tanh approximation (gate_activation.cuh computes it).
enum GateAct : int32_t { kGateNone = 0, kGateSilu = 1, kGateGeluTanh = 2 };

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// --- l2_prefetch.cu --------------------------------------------------------------------------
// Up to kL2PrefetchRanges byte ranges (16-byte aligned) pulled into L2 after the previous kernel
// ends; the next kernel starts at once and finds them there (or on their way).
constexpr int kL2PrefetchRanges = 8;
struct L2PrefetchRanges {
  const void* ptr[kL2PrefetchRanges];
  int64_t bytes[kL2PrefetchRanges];
  int64_t num_ranges, unused;
};
void launch_l2_prefetch(const L2PrefetchRanges& r, cudaStream_t s);

// --- elementwise.cu ---------------------------------------------------------------------------
// Token i's id is fed[sources[i]] where sources (may be null) has sources[i] >= 0, else ids[i]:
// overlapped steps read the previous step's samples (fed) on the device.
void launch_embedding(const void* table, const int32_t* ids, const int32_t* sources, const int32_t* fed, int n,
                      int64_t d, int64_t vocab, float scale, void* out, cudaStream_t s);
void launch_rms_norm(const void* x, const float* w, float eps, int64_t rows, int64_t d, void* out, cudaStream_t s);
void launch_add_rms_norm(void* residual, const void* x, const float* w, float eps, int64_t rows, int64_t d,
                         void* out, cudaStream_t s);
void launch_add(void* a, const void* b, int64_t n, Elem e, cudaStream_t s);
// q [n, heads, hd], k [n, kv_heads, hd] in place; inv_freq [rotary_dim / 2].
// Per-head RMSNorm of q and k before the rotation (Qwen3's q_norm / k_norm): each head's row
// x = bf16(x * inv_rms(x) * w), then rotated. q_w null: no norm.
struct RopeNorm {
  const float* q_w = nullptr;
  const float* k_w = nullptr;
  float eps = 0.0f;
};
void launch_rope(void* q, void* k, const int32_t* positions, const float* inv_freq, int n, int heads, int kv_heads,
                 int hd, int rotary_dim, bool neox, float attention_factor, const RopeNorm& norm, cudaStream_t s);
// k, v [n, row] -> caches [num_slots, row] at slot_mapping[t] (negative: skipped); an FP8 cache
// stores k / k_scale and v / v_scale as codes.
void launch_write_kv(const void* k, const void* v, void* k_cache, void* v_cache, const int64_t* slot_mapping,
                     int n, int64_t row, int64_t num_slots, KvCacheType cache, float k_scale, float v_scale,
                     cudaStream_t s);
// rope then write_kv of the rotated k and v, one kernel (row = kv_heads * hd, a multiple of 8).
void launch_rope_write_kv(void* q, void* k, const void* v, void* k_cache, void* v_cache, const int32_t* positions,
                          const float* inv_freq, const int64_t* slot_mapping, int n, int heads, int kv_heads, int hd,
                          int rotary_dim, bool neox, float attention_factor, int64_t num_slots, const RopeNorm& norm,
                          cudaStream_t s);
void launch_gated_activation(const void* gate, const void* up, bool gelu_tanh, int64_t n, void* out, cudaStream_t s);
void launch_softcap(void* x, float cap, int64_t n, Elem e, cudaStream_t s);
void launch_gather_rows(const void* src, const int32_t* rows, int k, int64_t row_bytes, int64_t src_rows,
                        void* out, cudaStream_t s);
// out[r, c] += bias[c]                                            out [rows, cols]
void launch_add_bias(void* out, const float* bias, int64_t rows, int64_t cols, Elem e, cudaStream_t s);
void launch_f32_to_bf16(const float* src, void* dst, int64_t n, cudaStream_t s);
void launch_f16_to_bf16(const void* src, void* dst, int64_t n, cudaStream_t s);
// Deterministic uniform values in [-scale, scale] from (seed, index).
void launch_fill_random(void* dst, int64_t n, Elem e, uint64_t seed, float scale, cudaStream_t s);

// --- gemv.cu: y[t, r] = sum_i x[t, i] * w[r, i] (+ bias[r]) for t < n <= kGemvMaxRows --------
// x [n, k], w [m, k], y [n, m]; k a multiple of 8, x and w 16-byte aligned.
inline constexpr int kGemvMaxRows = 8;
inline constexpr int kGemvMaxOutputs = 3;
// The shared input: x [n, k] bf16, optionally RMS-normalised on the fly (x * norm_w / rms(x));
// h_out, when set, receives the normalised rows [n, k] (what a separate rms_norm would write).
struct GemvInput {
  const void* x;
  const float* norm_w;  // null: x as is
  float eps;
  void* h_out;
};
// One projection: y = x · w^T (+ bias). With residual set: residual += bf16(y) (bf16 [n, m]) and
// y, if not null, still receives bf16(y).
struct GemvOut {
  const void* w;
  const float* bias;  // null: none
  void* y;
  int64_t m;
  void* residual;
};
bool gemv_supported(int64_t n, int64_t k);
// A folded norm stages the normed rows in shared memory: n * k * 2 bytes at most this.
inline constexpr int64_t kGemvNormSmemMax = 96 * 1024;
// Must be called once per device before any launch (raises shared-memory limits).
void init_gemv_kernels();
void launch_gemv(const void* x, const void* w, const float* bias, int n, int64_t m, int64_t k, void* y, Elem out,
                 cudaStream_t s);
// Several projections of the same input in one launch (at most kGemvMaxOutputs).
void launch_gemv_multi(const GemvInput& in, const GemvOut* outs, int num, int n, int64_t k, Elem out, cudaStream_t s);
// y = act(x · w_gate^T) * (x · w_up^T), bf16 out; up_out (optional) receives x · w_up^T.   y [n, m]
void launch_gemv_gated(const GemvInput& in, const void* w_gate, const void* w_up, int n, int64_t m, int64_t k,
                       bool gelu_tanh, void* y, void* up_out, cudaStream_t s);
// gemv_tensor_core.cu: the same on tensor cores for n >= KVASIR_GEMV_TC_MIN_ROWS tokens when every
// projection's row count is a multiple of 16; launch_gemv_multi / launch_gemv_gated pick it.
bool gemv_tc_applies(int64_t n, const GemvOut* outs, int num);
void init_gemv_tc_kernels();
void launch_gemv_tc_multi(const GemvInput& in, const GemvOut* outs, int num, int n, int64_t k, Elem out,
                          cudaStream_t s);
void launch_gemv_tc_gated(const GemvInput& in, const void* w_gate, const void* w_up, int n, int64_t m, int64_t k,
                          bool gelu_tanh, void* y, void* up_out, cudaStream_t s);

// --- attention.cu -----------------------------------------------------------------------------
struct AttentionArgs {
  const void* q = nullptr;        // [num_tokens, num_heads, head_dim]
  const void* k_cache = nullptr;  // [num_blocks, block_size, num_kv_heads, head_dim] of kv_cache elements
  const void* v_cache = nullptr;
  KvCacheType kv_cache = KvCacheType::kBf16;
  // An FP8 cache's value scale, applied to each output (linear in V); its key scale is folded into
  // `scale` by the caller (the score is scale x k_scale x q . code).
  float v_scale = 1.0f;
  void* out = nullptr;            // [num_tokens, num_heads, head_dim]
  const int32_t* query_start_loc = nullptr;  // [num_seqs + 1]
  const int32_t* seq_lens = nullptr;         // [num_seqs]
  const int32_t* block_tables = nullptr;     // [num_seqs, max_blocks_per_seq]
  int num_seqs = 0;
  int max_blocks_per_seq = 0;
  int block_size = 16;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  float scale = 1.0f;
  int sliding_window = 0;
  float softcap = 0.0f;
  const float* sinks = nullptr;  // [num_heads] f32 attention-sink logits, or null: none
  // Decode: split each sequence's own context evenly over the launch's splits (true), or cut it at
  // multiples of the planned partition (false: KVASIR_CUDA_SPLITS_BY_CONTEXT=0, the old plan).
  bool splits_by_context = true;
};

bool attention_head_dim_supported(int head_dim);

// Split-KV decode: one query token per listed sequence (decode_seqs == null: every sequence,
// num_decode_seqs == num_seqs). Launch shape depends only on counts and max_blocks_per_seq, so a
// captured graph stays valid while sequence lengths grow. partial: scratch from decode_scratch_floats.
// With attention sinks the plan always has a combine (num_splits >= 2; splits past a context are
// empty), since the combine is where a sink joins each head's softmax.
struct DecodeSplit {
  int num_splits = 1;
  int partition_tokens = 0;  // keys per split (a multiple of block_size, or of 32 for all_heads)
  bool all_heads = false;    // the all-heads plan (decode_all_heads_kernel or decode_mma_bulk_kernel)
};
DecodeSplit plan_decode_split(int num_decode_seqs, int num_heads, int num_kv_heads, int head_dim,
                              int max_blocks_per_seq, int block_size, int num_sms, bool sinks = false);
int64_t decode_scratch_floats(int num_decode_seqs, int num_heads, int head_dim, const DecodeSplit& split);
void launch_decode_attention(const AttentionArgs& a, const int32_t* decode_seqs, int num_decode_seqs,
                             const DecodeSplit& split, float* partial, cudaStream_t s);

// Prefill / mixed: work items (seq, first query token of a tile) from build_prefill_work (host).
struct PrefillWork {
  int32_t seq;
  int32_t q_begin;  // token row of the tile's first query
};
// Query tokens per tile for this head grouping (rows of a CTA = tokens * heads-per-CTA).
int prefill_tokens_per_tile(int num_heads, int num_kv_heads, int head_dim);
void launch_prefill_attention(const AttentionArgs& a, const PrefillWork* work, int num_work, cudaStream_t s);
// Must be called once per device before any launch (raises shared-memory limits).
void init_attention_kernels();
void init_decode_attention_kernels();  // called by init_attention_kernels

// --- sampling.cu ------------------------------------------------------------------------------
struct SamplingRowParams {  // mirrors DeviceSamplingRow (backend.h)
  float temperature;
  float top_p;
  float min_p;
  int32_t top_k;
  uint64_t rng_key;
  uint64_t position;
};
void launch_sample(const float* logits, int num_rows, int64_t vocab, const SamplingRowParams* params,
                   int32_t* out_tokens, cudaStream_t s);
// --- verify_drafts.cu -------------------------------------------------------------------------
struct DraftVerifyRowParams {  // mirrors DraftVerifyRow (backend/draft_verify.h)
  int32_t first_row;
  int32_t num_drafts;
  int32_t draft_offset;
  int32_t unused;
};
// After launch_sample: out_num_emitted [num_requests], out_tokens [sum of the counts] packed in
// request order (backend/draft_verify.h). `drafts` and `requests` validated by the caller.
void launch_verify_drafts(const int32_t* samples, const DraftVerifyRowParams* requests, int num_requests,
                          const int32_t* drafts, int32_t* out_num_emitted, int32_t* out_tokens, cudaStream_t s);
// logits[logits_rows[i], t] = -inf where bit t of mask row i is clear; rows < 0 are skipped.
void launch_token_bitmask(float* logits, int64_t vocab, const int32_t* words, int words_per_row,
                          const int32_t* logits_rows, int num_rows, cudaStream_t s);

}  // namespace kvasir::cuda
