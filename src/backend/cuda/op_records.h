// The CUDA backend's recorded ops: one named plain-data record per op kind. A Backend call appends
// an OpRecord (kind + the record of that kind) to the step's StepQueue; cuda_ops.cpp and
// cuda_fused_ops.cpp fill them (fusions rewrite the step's last record), execute() turns them
// into launches at flush time, eagerly or under graph capture.
// Must hold only device pointers, counts, scalars and arena offsets: a step's records are compared
// bytewise to find its cached CUDA graph, so records are zero-filled by StepQueue::add() and then
// written field by field (never assign a whole sub-record from a temporary: its padding is not zero).
#pragma once

#include <cstdint>

#include "backend/cuda/fp8_kernels.h"
#include "backend/cuda/gguf_kernels.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/w4a16_kernels.h"

namespace kvasir::cuda {

enum class OpKind : int32_t {
  kEmbedding,
  kLinear,
  kMultiGemv,
  kGemvGated,
  kRmsNorm,
  kAddRmsNorm,
  kAdd,
  kRope,
  kWriteKv,
  kRopeWriteKv,
  kDecodeAttention,
  kPrefillAttention,
  kGatedAct,
  kSoftcap,
  kGather,
  kSample,
  kVerifyDrafts,
  kTokenBitmask,
  kMoeRoute,
  kMoeExperts,
  kWriteLatentKv,
  kMlaAttention,
  kAllReduce,
  kAllGatherColumns,
  kFp8Linear,
  kGgufLinear,
  kW4a16Linear,
  kL2Prefetch,
  kNumKinds,
};

// Byte offset of a staged host array in the step's arena (StepQueue::stage); the device copy of
// the arena is what the kernels read.
using ArenaOffset = int64_t;
constexpr ArenaOffset kNotStaged = -1;

struct EmbeddingOp {
  const void* table;      // [vocab, hidden] bf16, or GGUF blocks of type table_dtype
  void* out;              // [num_tokens, hidden] bf16
  ArenaOffset ids;        // int32 [num_tokens]
  // Overlapped steps: int32 [num_tokens], token i is fed[sources[i]] where >= 0 (the previous
  // step's samples, still on the device); kNotStaged and null otherwise.
  ArenaOffset sources;
  const int32_t* fed;
  int64_t num_tokens, hidden, vocab;
  float scale;
  int32_t table_dtype;    // DType of the table
};

// x · w^T (+ bias) through cuBLASLt, or the plain GEMV for decode-sized batches.
struct LinearOp {
  const void* x;          // [rows, in_features]
  const void* w;          // [out_features, in_features] bf16
  const float* bias;      // [out_features] or null
  void* out;              // [rows, out_features]
  int64_t rows, out_features, in_features;
};

// One projection of a MultiGemvOp: y = x · w^T (+ bias); residual (optional) += bf16(y).
struct GemvProjection {
  const void* w;          // [out_features, in_features] bf16
  const float* bias;      // [out_features] or null
  void* y;                // [rows, out_features]
  void* residual;         // [rows, out_features] or null (folded residual add)
  int64_t out_features;
};

// Up to kGemvMaxOutputs projections of one input (q/k/v, gate/up), optionally with the preceding
// rms_norm folded in (norm_weight set: `input` holds the un-normed rows, `normed_out` receives the
// normed ones the norm op would have written).
struct MultiGemvOp {
  const void* input;        // [rows, in_features] what the kernel reads
  const float* norm_weight; // [in_features] or null
  void* normed_out;         // [rows, in_features] or null
  const void* named_input;  // the input tensor the linear calls named (normed_out when folded)
  GemvProjection proj[kGemvMaxOutputs];
  int64_t rows, in_features, num_proj;
  float eps, unused;
};

// out = act(x · w_gate^T) * (x · w_up^T); up_out still receives x · w_up^T.
struct GemvGatedOp {
  const void* input;        // [rows, in_features]
  const float* norm_weight; // as in MultiGemvOp
  void* normed_out;
  const void* w_gate;       // [out_features, in_features]
  const void* w_up;
  void* out;                // [rows, out_features]
  void* up_out;             // [rows, out_features]
  int64_t rows, out_features, in_features, gelu_tanh;
  float eps, unused;
};

struct RmsNormOp {
  const void* x;          // [rows, cols] bf16
  const float* weight;    // [cols]
  void* out;              // [rows, cols] bf16
  int64_t rows, cols;
  float eps, unused;
};

// residual += x; out = rms_norm(residual).
struct AddRmsNormOp {
  void* residual;         // [rows, cols] bf16
  const void* x;          // [rows, cols] bf16
  const float* weight;    // [cols]
  void* out;              // [rows, cols] bf16
  int64_t rows, cols;
  float eps, unused;
};

// a += b.
struct AddOp {
  void* a;
  const void* b;
  int64_t numel;
};

// RoPE on q and k in place. As kRopeWriteKv (write_kv fused in) it also writes the rotated k and
// v to the caches through the slot mapping: the fields after `attention_factor`.
struct RopeOp {
  void* q;                      // [num_tokens, num_heads, head_dim]
  void* k;                      // [num_tokens, num_kv_heads, head_dim]
  ArenaOffset positions;        // int32 [num_tokens]
  ArenaOffset inv_freq;         // float [rotary_dim / 2]
  int64_t num_tokens, num_heads, num_kv_heads, head_dim, rotary_dim, neox;
  float attention_factor, norm_eps;
  // Qwen3's per-head RMSNorm of q and k (weights [head_dim]), folded in from the two rms_norm
  // calls before the RoPE; null when there is none.
  const float* q_norm;
  const float* k_norm;
  // kRopeWriteKv only:
  const void* v;                // [num_tokens, kv_row]
  void* k_cache;                // [num_slots, kv_row]
  void* v_cache;
  ArenaOffset slot_mapping;     // int64 [num_tokens]
  int64_t kv_row, num_slots;
};

struct WriteKvOp {
  const void* k;                // [num_tokens, row]
  const void* v;
  void* k_cache;                // [num_slots, row]
  void* v_cache;
  ArenaOffset slot_mapping;     // int64 [num_tokens]
  int64_t num_tokens, row, num_slots;
  int32_t kv_cache;             // KvCacheType: an FP8 cache stores k / k_scale, v / v_scale as codes
  float k_scale, v_scale;
};

// Paged attention, decode (kDecodeAttention: one query per sequence) or mixed (kPrefillAttention:
// the decode rows listed in decode_seqs plus prefill tiles listed in prefill_work).
struct AttentionOp {
  const void* q;                // [num_tokens, num_heads, head_dim]
  const void* k_cache;          // [num_blocks, block_size, num_kv_heads, head_dim] of kv_cache elements
  const void* v_cache;
  void* out;                    // [num_tokens, num_heads, head_dim]
  float* partial;               // split-KV scratch (decode_scratch_floats) or null
  const float* sinks;           // [num_heads] f32 attention-sink logits or null
  ArenaOffset query_start_loc;  // int32 [num_seqs + 1]
  ArenaOffset seq_lens;         // int32 [num_seqs]
  ArenaOffset block_tables;     // int32 [num_seqs, max_blocks_per_seq]
  ArenaOffset decode_seqs;      // int32 [num_decode] or kNotStaged (every sequence decodes)
  ArenaOffset prefill_work;     // PrefillWork [num_work], a FlashInferPrefillPlan (flashinfer_ctas > 0), or kNotStaged
  int64_t num_seqs, max_blocks_per_seq, block_size, num_heads, num_kv_heads, head_dim;
  int32_t sliding_window;
  float v_scale;                 // an FP8 cache's value scale (its key scale is folded into scale), else 1
  int64_t num_decode, num_work;  // num_work: tiles of our kernel, or the FlashInfer plan's work items
  int32_t flashinfer_ctas;       // > 0: the prefill rows go to FlashInfer's kernel on this many CTAs
  int32_t num_tokens;            // query rows of the step (FlashInfer's bound for its TMA loads of q)
  int32_t num_splits, partition_tokens;  // the DecodeSplit planned at record time
  int16_t all_heads;
  int16_t kv_cache;              // KvCacheType
  // > 0: the decode rows go to FlashInfer's decode kernel (attention_decode_flashinfer.h) on this
  // many CTA rows, with the FlashInferDecodePlan staged at decode_plan; num_splits etc. unused.
  int32_t flashinfer_decode_works;
  ArenaOffset decode_plan;
  float scale, softcap;  // scale: the softmax scale times an FP8 cache's key scale
};

struct GatedActOp {
  const void* gate;             // [numel] bf16
  const void* up;
  void* out;
  int64_t numel, gelu_tanh;
};

struct SoftcapOp {
  void* x;
  int64_t numel;
  float cap, unused;
};

struct GatherOp {
  const void* src;              // [src_rows, row_bytes]
  void* out;                    // [num_rows, row_bytes]
  ArenaOffset rows;             // int32 [num_rows]
  int64_t num_rows, row_bytes, src_rows;
};

struct SampleOp {
  const float* logits;          // [num_rows, vocab]
  int32_t* tokens;              // [num_rows] device
  ArenaOffset params;           // SamplingRowParams [num_rows]
  int64_t num_rows, vocab;
};

// After a SampleOp: each request's accepted drafts and its next token, packed (verify_drafts.cu).
struct VerifyDraftsOp {
  const int32_t* samples;       // [num_rows] the SampleOp's tokens
  int32_t* out;                 // [num_requests] counts, then the packed tokens
  ArenaOffset requests;         // DraftVerifyRowParams [num_requests]
  ArenaOffset drafts;           // int32 [num_draft_tokens], kNotStaged when there are none
  int64_t num_requests;
};

struct TokenBitmaskOp {
  float* logits;                // [*, vocab]
  ArenaOffset words;            // int32 [num_rows, words_per_row]
  ArenaOffset logits_rows;      // int32 [num_rows]
  int64_t num_rows, words_per_row, vocab;
};

// Router logits -> each token's top_k experts and weights (moe_kernels.h: MoeRouteArgs).
struct MoeRouteOp {
  const float* logits;          // [num_tokens, num_experts]
  const float* bias;            // [num_experts] or null
  int32_t* ids;                 // [num_tokens, top_k]
  float* weights;               // [num_tokens, top_k]
  int64_t num_tokens, num_experts, top_k, sigmoid, renormalize, num_groups, topk_groups, group_top2;
  float scale, unused;
};

// The chosen experts' gated MLPs, weighted and summed (moe_kernels.h: MoeProblem). block_m 0: the
// GEMV path (scratch: act only); 16 or 64: the grouped-GEMM path with that m-block.
struct MoeExpertsOp {
  const void* x;                // [num_tokens, hidden] bf16
  void* out;                    // [num_tokens, hidden] bf16
  const int32_t* ids;           // [num_tokens, top_k]
  const float* weights;         // [num_tokens, top_k]
  const void* experts;          // MoeExpertPtrs [num_experts], the layer's device table
  int32_t* sorted_slots;        // GEMM path scratch (MoeGemmScratch), else null
  int32_t* block_expert;
  int32_t* num_m_blocks;
  void* act;                    // [rows, inter] bf16
  float* y;                     // [num_tokens * top_k, hidden] or null
  int64_t num_tokens, hidden, inter, num_experts, top_k, gu_row_stride, max_m_blocks;
  int32_t gu_bias_stride, activation, block_m, vec;
  float alpha, limit;
  // The GEMV path with the moe_route op before it folded in (route_logits non-null): the gate/up
  // kernel routes for itself and still writes ids and weights (cuda_moe_ops.cpp).
  const float* route_logits;    // [num_tokens, num_experts]
  const float* route_bias;      // [num_experts] or null
  int32_t route_groups, route_topk_groups, route_flags;  // MoeRouteFlags
  float route_scale;
  // Expert parallelism: the routing's id of experts[0] (MoeExpertWeights::first_expert); ids
  // outside [first_expert, first_expert + num_experts) are other ranks' and add nothing here.
  int32_t first_expert, unused;
};
// MoeExpertsOp::route_flags bits.
enum MoeRouteFlags : int32_t { kRouteSigmoid = 1, kRouteRenormalize = 2, kRouteGroupTop2 = 4 };

// MLA (cuda_mla_ops.cpp): rotate k_pe and write [c_kv | k_pe] rows through the slot mapping.
struct WriteLatentKvOp {
  const void* c_kv;             // [num_tokens, kv_lora_rank] bf16
  const void* k_pe;             // [num_tokens, rope_dim] bf16
  void* cache;                  // [num_slots, kv_lora_rank + rope_dim] bf16
  ArenaOffset positions;        // int32 [num_tokens]
  ArenaOffset inv_freq;         // float [rope_dim / 2]
  ArenaOffset slot_mapping;     // int64 [num_tokens]
  int64_t num_tokens, num_slots;
  int32_t kv_lora_rank, rope_dim, neox;
  float attention_factor;
};

// MLA's absorbed attention: q_latent = [W_UK^T q_nope | rope(q_pe)], the latent attention over
// the tiles in `work` (split-KV when num_splits > 1), out = W_UV o_latent. Dimensions are int32
// so the record fits the OpRecord union.
struct MlaAttentionOp {
  const void* q;                // [num_tokens, heads, nope_dim + rope_dim] bf16
  const void* cache;            // [num_slots, kv_lora_rank + rope_dim] bf16
  const void* w_uk_t;           // [heads, kv_lora_rank, nope_dim] bf16
  const void* w_uv;             // [heads, v_head_dim, kv_lora_rank] bf16
  void* out;                    // [num_tokens, heads, v_head_dim] bf16
  void* scratch;                // q_latent f32, o_latent bf16, split partials (mla_scratch_layout)
  ArenaOffset positions;        // int32 [num_tokens]
  ArenaOffset inv_freq;         // float [rope_dim / 2]
  ArenaOffset query_start_loc;  // int32 [num_seqs + 1]
  ArenaOffset seq_lens;         // int32 [num_seqs]
  ArenaOffset block_tables;     // int32 [num_seqs, max_blocks_per_seq]
  ArenaOffset work;             // PrefillWork [num_work]: (sequence, first token of the tile)
  int32_t num_tokens, num_seqs, max_blocks_per_seq, block_size;
  int32_t num_heads, kv_lora_rank, rope_dim, nope_dim;
  int32_t v_head_dim, neox, num_work, tokens_per_tile;
  int32_t heads_per_group, num_splits, partition_tokens, head_gemv;  // head_gemv: the products on head_gemv, not cuBLASLt
  float scale, attention_factor;
};

// Tensor parallelism (dist::DeviceCommunicator on the backend's stream): data summed over the
// group's ranks in place.
struct AllReduceOp {
  void* data;             // [count] elem
  int64_t count;
};

// Every rank's local [rows, local_cols] f32 all-gathered into `gathered` [world, rows, local_cols],
// then laid side by side into out [rows, out_cols] (rank r's columns at r * local_cols, cut at
// out_cols).
struct AllGatherColumnsOp {
  const void* local;
  void* gathered;
  void* out;
  int64_t rows, local_cols, out_cols, world;
};

// Up to kFp8MaxProjections FP8 projections of one bf16 input (cuda_fp8_ops.cpp): the FP8 GEMV for
// decode-sized batches (gate/up may carry the gated activation), else x quantized once into
// x_fp8 / x_scales (scratch) for cuBLASLt's FP8 GEMM and its scaling epilogue.
struct Fp8LinearOp {
  const void* x;          // [rows, in_features] bf16
  void* x_fp8;            // [rows, in_features] e4m3 scratch (GEMM path) or null
  float* x_scales;        // [rows] scratch (GEMM path) or null
  Fp8Projection proj[kFp8MaxProjections];
  int64_t rows, in_features, num_proj;
  float static_scale;     // the input's static scale; 0: dynamic per token
  int32_t gated;          // GateAct: gate/up with the activation folded in (GEMV path only)
};

// x · w^T (+ bias) with w kept in GGUF blocks (cuda_gguf_ops.cpp): the GGUF GEMVs for decode-sized
// batches (w_bf16 null, kquant_gemm 0; further projections of the same x and block type join, as q/k/v
// and gate/up: one launch of the tensor-core GEMV), Q4_K / Q6_K batches past them on the K-quant
// GEMM (kquant_gemm; projections join the same way), else w dequantized into bf16 scratch (w_bf16)
// and cuBLASLt, one projection, in slices of chunk_rows output features when the whole matrix would not
// fit the scratch; a slice's product lands in out_tmp and is copied into its columns of out.
struct GgufLinearOp {
  const void* x;          // [rows, in_features] bf16
  GgufProjection proj[kGgufMaxProjections];  // w [out_features, in_features] blocks of type dtype
  void* w_bf16;           // [chunk_rows, in_features] bf16 scratch (dequantize + cuBLASLt) or null
  void* out_tmp;          // [rows, chunk_rows] scratch (that path, chunk_rows < out_features) or null
  float* partial;         // the K-quant GEMM's split-K workspace or null
  int64_t rows, in_features, chunk_rows, num_proj;
  int32_t dtype;          // DType of every w
  int16_t kquant_gemm;    // 1: the K-quant GEMM
  int16_t gated;          // GateAct: gate/up on the K-quant GEMV with the gated activation
};

// Up to kW4a16MaxProjections W4A16 projections of one bf16 input (cuda_w4a16_ops.cpp), all with
// the same group size and scale type: the W4A16 GEMV for up to kW4a16GemvMaxRows tokens (gate/up
// may carry the gated activation), else one W4A16 GEMM launch for all of them, or (`workspace` set:
// long prefills) per projection its weight dequantized into `workspace` and cuBLASLt. Act-order
// weights (perm) stand alone: their input is gathered into x_perm (scratch) first.
struct W4a16RecordProjection {
  const void* codes;
  const void* scales;
  const uint8_t* zeros;
  const float* bias;
  void* y;
  int64_t out_features;
};
struct W4a16LinearOp {
  const void* x;          // [rows, in_features] bf16
  void* x_perm;           // [rows, in_features] bf16 scratch, or null
  const int32_t* perm;    // [in_features] or null
  void* workspace;        // the dequantized weight slice (and product), or null: the W4A16 kernels
  W4a16RecordProjection proj[kW4a16MaxProjections];
  int64_t rows;
  int32_t in_features, group_size;
  int16_t num_proj, gated, scale_type, unused;
};

// Weights pulled into L2 ahead of the op that reads them (CudaBackend::prefetch_linear_weights).
using L2PrefetchOp = L2PrefetchRanges;

// What StepQueue stores: the kind, the element type where the op has one (Elem), and the record
// of that kind (the other union members stay zero).
struct OpRecord {
  OpKind kind;
  int32_t elem;
  union {
    EmbeddingOp embedding;
    LinearOp linear;
    MultiGemvOp gemv;
    GemvGatedOp gemv_gated;
    RmsNormOp rms_norm;
    AddRmsNormOp add_rms_norm;
    AddOp add;
    RopeOp rope;
    WriteKvOp write_kv;
    AttentionOp attention;
    GatedActOp gated_act;
    SoftcapOp softcap;
    GatherOp gather;
    SampleOp sample;
    VerifyDraftsOp verify_drafts;
    TokenBitmaskOp token_bitmask;
    MoeRouteOp moe_route;
    MoeExpertsOp moe_experts;
    WriteLatentKvOp write_latent_kv;
    MlaAttentionOp mla_attention;
    AllReduceOp all_reduce;
    AllGatherColumnsOp all_gather_columns;
    Fp8LinearOp fp8_linear;
    GgufLinearOp gguf_linear;
    W4a16LinearOp w4a16_linear;
    L2PrefetchOp l2_prefetch;
  };
};

// Padding would break the bytewise graph lookup only if written; these sizes keep every record
// free of it (pointers and int64 first, floats in pairs).
// Whether a quantized linear record (Fp8LinearOp, W4a16LinearOp, GgufLinearOp) is the gate/up pair
// that gated_activation(gate, up) in place may fold into: exactly two projections that wrote gate
// and up, one shape, no biases, bf16 out. Each fold adds its own path's conditions.
template <class Op>
bool is_gate_up_pair(const Op& r, int32_t elem, const void* gate, const void* up, int64_t gate_numel) {
  return r.num_proj == 2 && r.proj[0].y == gate && r.proj[1].y == up && r.proj[0].bias == nullptr &&
         r.proj[1].bias == nullptr && r.proj[0].out_features == r.proj[1].out_features &&
         elem == static_cast<int32_t>(Elem::kBf16) && gate_numel == r.rows * r.proj[0].out_features;
}

static_assert(sizeof(EmbeddingOp) == 72 && sizeof(LinearOp) == 56 && sizeof(GemvProjection) == 40);
static_assert(sizeof(MultiGemvOp) == 4 * 8 + kGemvMaxOutputs * 40 + 3 * 8 + 8);
static_assert(sizeof(GemvGatedOp) == 7 * 8 + 4 * 8 + 8 && sizeof(RopeOp) == 4 * 8 + 6 * 8 + 8 + 2 * 8 + 6 * 8);
static_assert(sizeof(AttentionOp) == 11 * 8 + 13 * 8 + 8 && sizeof(OpRecord) == 8 + sizeof(MoeExpertsOp));
static_assert(sizeof(MoeRouteOp) == 4 * 8 + 8 * 8 + 8 && sizeof(MoeExpertsOp) == 10 * 8 + 7 * 8 + 4 * 4 + 8 + 2 * 8 + 4 * 4 + 2 * 4);
static_assert(sizeof(Fp8Projection) == 40 && sizeof(Fp8LinearOp) == 3 * 8 + kFp8MaxProjections * 40 + 3 * 8 + 8);
static_assert(sizeof(GgufProjection) == 32 && sizeof(GgufLinearOp) == 8 + kGgufMaxProjections * 32 + 3 * 8 + 4 * 8 + 8);
static_assert(sizeof(W4a16RecordProjection) == 48 && sizeof(W4a16LinearOp) == 4 * 8 + kW4a16MaxProjections * 48 + 8 + 2 * 4 + 4 * 2 &&
              sizeof(W4a16LinearOp) <= sizeof(MoeExpertsOp));
static_assert(sizeof(AllReduceOp) == 2 * 8 && sizeof(AllGatherColumnsOp) == 7 * 8);
static_assert(sizeof(L2PrefetchOp) == 2 * kL2PrefetchRanges * 8 + 2 * 8 && sizeof(L2PrefetchOp) <= sizeof(MoeExpertsOp));
static_assert(sizeof(WriteLatentKvOp) == 8 * 8 + 4 * 4 && sizeof(MlaAttentionOp) == 12 * 8 + 16 * 4 + 8);

}  // namespace kvasir::cuda
