// The plain data the two mixture-of-experts ops of Backend take (backend.h: moe_route picks each
// token's experts and their weights, moe_experts runs the chosen experts' gated MLPs), and the
// checks a model runs on them at load, so that the ops only KVASIR_CHECK what load already refused.
// Must not hold policy of any family: the families translate their config into these fields.
#pragma once

#include <cstdint>

#include "backend/tensor.h"
#include "common/status.h"

namespace kvasir {

// gate/up -> the gated product. kSwigluOai is GPT-OSS's clamped SwiGLU (its alpha and limit are
// SwigluOaiParams; moe_experts only).
enum class GateActivation { kSilu, kGeluTanh, kSwigluOai };

// GPT-OSS: gate = min(gate, limit); up = clamp(up, -limit, limit);
// out = (up + 1) * gate * sigmoid(alpha * gate).
struct SwigluOaiParams {
  float alpha = 1.702f;
  float limit = 7.0f;
};

enum class MoeScoring { kSoftmax, kSigmoid };

// How grouped top-k ranks a group of experts: by its best expert (DeepSeek-V2
// group_limited_greedy) or by the sum of its two best (DeepSeek-V3 noaux_tc).
enum class MoeGroupScore { kMax, kTop2Sum };

// How moe_route turns router logits [T, E] into top_k (expert id, weight) pairs per token:
//   scores = softmax(logits) or sigmoid(logits), in float32;
//   choice = scores + correction_bias (when given; the bias only chooses, never weighs);
//   with num_groups > 1: the E experts form num_groups equal groups, each ranked by group_score
//     over `choice`, and only the topk_groups best groups stay eligible;
//   the top_k eligible experts by `choice` are picked, in descending order of `choice`; ties go to
//     the lower expert index (groups likewise to the lower group index);
//   weights = their unbiased scores, divided by their sum when renormalize, times
//     routed_scaling_factor.
// Softmax, top-k, renormalize equals top-k then softmax over the chosen logits (GPT-OSS).
struct MoeRouting {
  int top_k = 1;
  MoeScoring scoring = MoeScoring::kSoftmax;
  bool renormalize = false;
  const Tensor* correction_bias = nullptr;  // [E] f32 (DeepSeek-V3 e_score_correction_bias), or none
  int num_groups = 1;                       // 1: no grouping
  int topk_groups = 1;                      // groups kept when num_groups > 1
  MoeGroupScore group_score = MoeGroupScore::kMax;
  float routed_scaling_factor = 1.0f;
};

// How a fused gate_up weight [2I, H] holds its two halves.
enum class GateUpLayout {
  kHalves,       // rows [0, I) gate, rows [I, 2I) up (llama.cpp, Phi-3, Qwen's fused exports)
  kInterleaved,  // even rows gate, odd rows up (GPT-OSS)
};

// Every expert of one MoE layer, as per-expert 2-D views (arrays of num_experts Tensors), so a
// GGUF stacked [E, I, H] tensor is sliced into E views and HF per-expert tensors bind as they are.
// Either gate and up are set, or gate_up is. All views of one array share a dtype.
//   out[t] = sum_j w[t, j] * (down_e(act(gate_e(x_t) + gate_bias_e, up_e(x_t) + up_bias_e)) + down_bias_e),
//   e = ids[t, j].
struct MoeExpertWeights {
  int num_experts = 0;
  // The routing's id of views[0]: ids in [first_expert, first_expert + num_experts) index these
  // views; any other id is an expert another rank holds (expert parallelism: the caller sums the
  // ranks' outputs), and its slots add nothing here.
  int first_expert = 0;
  int64_t hidden_size = 0;        // H
  int64_t intermediate_size = 0;  // I (per expert)
  const Tensor* gate = nullptr;     // [num_experts] views [I, H]
  const Tensor* up = nullptr;       // [num_experts] views [I, H]
  const Tensor* gate_up = nullptr;  // [num_experts] views [2I, H], laid out as gate_up_layout
  GateUpLayout gate_up_layout = GateUpLayout::kHalves;
  const Tensor* down = nullptr;  // [num_experts] views [H, I]
  // Optional f32 biases, per expert: gate/up [I] each, or gate_up [2I] (same layout as gate_up);
  // down [H].
  const Tensor* gate_bias = nullptr;
  const Tensor* up_bias = nullptr;
  const Tensor* gate_up_bias = nullptr;
  const Tensor* down_bias = nullptr;
  GateActivation activation = GateActivation::kSilu;
  SwigluOaiParams swiglu_oai;  // read only for kSwigluOai
};

// Ok when `r` is a routing moe_route can run over num_experts experts: 1 <= top_k <= the experts
// of the kept groups, groups dividing the experts evenly (two or more per group for kTop2Sum),
// an f32 [num_experts] correction bias, a finite positive scale.
Status validate_moe_routing(const MoeRouting& r, int64_t num_experts);

// Ok when `w` is complete and consistent: every view present with its 2-D shape, one dtype per
// array, biases f32 of their lengths, exactly one of (gate and up) or gate_up.
Status validate_moe_expert_weights(const MoeExpertWeights& w);

}  // namespace kvasir
