// Host-side launchers of the mixture-of-experts kernels (moe_route.cu, moe_gemv.cu, moe_gemm.cu),
// the CUDA twins of CpuBackend::moe_route / moe_experts (backend/moe_params.h has the semantics).
// Everything data-dependent (which experts, how many tokens each) is read on the device, so the
// launches depend on counts only and replay inside CUDA graphs. Plain C++ signatures over device
// pointers; must not allocate, synchronize or choose the path (cuda_moe_ops.cpp does).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kvasir::cuda {

// --- moe_route.cu: each token's top_k experts and weights, one warp per token -----------------
struct MoeRouteArgs {
  const float* logits = nullptr;  // [num_tokens, num_experts]
  const float* bias = nullptr;    // [num_experts] correction bias (choice only), or null
  int32_t* ids = nullptr;         // [num_tokens, top_k]
  float* weights = nullptr;       // [num_tokens, top_k]
  int num_tokens = 0, num_experts = 0, top_k = 1;
  bool sigmoid = false, renormalize = false;
  int num_groups = 1, topk_groups = 1;
  bool group_top2 = false;  // a group scores by the sum of its two best (else its best)
  float scale = 1.0f;
};
inline constexpr int kMoeRouteMaxExperts = 1024;  // a warp's scratch lives in shared memory
void launch_moe_route(const MoeRouteArgs& a, cudaStream_t s);

// --- one expert's weights as the expert kernels read them -------------------------------------
// Gate row i starts at w_gate + i * gu_row_stride, up row i at w_up + i * gu_row_stride (split
// weights: stride H; a fused [2I, H] gate_up in halves: w_up = w_gate + I * H, stride H;
// interleaved: w_up = w_gate + H, stride 2H). Biases likewise with gu_bias_stride (1 or 2).
struct MoeExpertPtrs {
  const void* w_gate;    // bf16
  const void* w_up;      // bf16
  const void* w_down;    // [H, I] bf16
  const float* b_gate;   // null: none
  const float* b_up;
  const float* b_down;   // [H] or null
};

enum class MoeActivation : int32_t { kSilu = 0, kGeluTanh = 1, kSwigluOai = 2 };

// The shapes and the activation of one moe_experts call.
struct MoeProblem {
  const void* x = nullptr;          // [T, H] bf16
  void* out = nullptr;              // [T, H] bf16
  const int32_t* ids = nullptr;     // [T, top_k] (ids outside [0, E) contribute nothing)
  const float* weights = nullptr;   // [T, top_k]
  const MoeExpertPtrs* experts = nullptr;  // [E] device table
  int64_t num_tokens = 0, hidden = 0, inter = 0;
  int64_t num_experts = 0, top_k = 1;
  // Expert parallelism: experts[i] is the routing's expert first_expert + i; ids are the routing's,
  // so every kernel reads ids[slot] - first_expert (outside [0, num_experts): another rank's).
  int64_t first_expert = 0;
  int64_t gu_row_stride = 0, gu_bias_stride = 1;
  MoeActivation act = MoeActivation::kSilu;
  float alpha = 1.702f, limit = 7.0f;  // kSwigluOai only
  // GEMV path only: route.logits non-null = the gate/up kernel routes each token itself (the
  // moe_route op folded in; route.ids / route.weights are `ids` / `weights` above, written by it).
  MoeRouteArgs route;
};
// Largest routing the GEMV path folds in: a CTA's routing scratch stays small.
inline constexpr int kMoeFusedRouteMaxExperts = 512;
// Resident gate/up GEMV CTAs per SM (their __launch_bounds__): plain, and routing for itself.
inline constexpr int kMoeGateUpCtasPerSm = 6;
inline constexpr int kMoeGateUpRoutedCtasPerSm = 4;
inline constexpr int kMoeGateUpRowsPerCta = 8;
// Whether folding the route into the gate/up GEMV keeps its wave count (tuning: -1 auto, 0, 1).
inline bool moe_fold_route(int tuning, int64_t slots, int64_t inter, int num_sms) {
  if (tuning >= 0) return tuning == 1;
  const int64_t ctas = slots * ((inter + kMoeGateUpRowsPerCta - 1) / kMoeGateUpRowsPerCta);
  const int64_t plain = (ctas + int64_t{kMoeGateUpCtasPerSm} * num_sms - 1) / (int64_t{kMoeGateUpCtasPerSm} * num_sms);
  const int64_t routed =
      (ctas + int64_t{kMoeGateUpRoutedCtasPerSm} * num_sms - 1) / (int64_t{kMoeGateUpRoutedCtasPerSm} * num_sms);
  return routed == plain;
}

// --- moe_gemv.cu: few tokens. Reads only the chosen experts' rows (ids read on the device) ------
// act: scratch [T * top_k, I] bf16. vec: 16-byte loads (H and I multiples of 8, every expert
// pointer and x 16-byte aligned); else scalar loads, any shape.
void launch_moe_gemv(const MoeProblem& p, void* act, bool vec, cudaStream_t s);

// --- moe_gemm.cu: many tokens. Align (slots sorted by expert, padded per expert to block_m),
// grouped gate/up GEMM with the activation, grouped down GEMM, weighted un-permute --------------
inline constexpr int kMoeGemmBlockN = 64;
// Upper bound on the m-blocks the align step can produce for num_slots slots.
inline int64_t moe_max_m_blocks(int64_t num_slots, int64_t num_experts, int block_m) {
  return num_slots / block_m + (num_slots < num_experts ? num_slots : num_experts);
}
struct MoeGemmScratch {
  int32_t* sorted_slots;  // [max_m_blocks * block_m] slot t * top_k + j, or num_slots (padding)
  int32_t* block_expert;  // [max_m_blocks]
  int32_t* num_m_blocks;  // [1]
  void* act;              // [max_m_blocks * block_m, I] bf16, rows in sorted order
  float* y;               // [T * top_k, H] each slot's expert output (down bias included)
};
// Needs H and I multiples of 8, 16-byte aligned x and expert pointers; block_m 16 or 64; E <= 1024.
bool moe_gemm_supported(int64_t hidden, int64_t inter, int64_t num_experts);
void launch_moe_gemm(const MoeProblem& p, const MoeGemmScratch& scratch, int block_m, int64_t max_m_blocks,
                     cudaStream_t s);
// Must be called once per device before any launch (raises shared-memory limits).
void init_moe_kernels();

}  // namespace kvasir::cuda
