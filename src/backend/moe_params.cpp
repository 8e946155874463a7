#include "backend/moe_params.h"

#include <cmath>
#include <string>

namespace kvasir {
namespace {

std::string num(int64_t v) { return std::to_string(v); }

std::string name_of(DType t) { return std::string(dtype_name(t)); }

std::string shape_of(const Tensor& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim; ++i) s += (i ? ", " : "") + num(t.shape[i]);
  return s + "]";
}

// Every view of `views` is a 2-D [rows, cols] tensor of one dtype.
Status check_views(const char* name, const Tensor* views, int num_experts, int64_t rows, int64_t cols) {
  for (int e = 0; e < num_experts; ++e) {
    const Tensor& t = views[e];
    if (t.data == nullptr) return invalid_argument(std::string("MoE ") + name + " of expert " + num(e) + " is missing");
    if (t.ndim != 2 || t.dim(0) != rows || t.dim(1) != cols) {
      return invalid_argument(std::string("MoE ") + name + " of expert " + num(e) + " has shape " + shape_of(t) +
                              ", expected [" + num(rows) + ", " + num(cols) + "]");
    }
    if (t.dtype != views[0].dtype) {
      return invalid_argument(std::string("MoE ") + name + " of expert " + num(e) + " is " + name_of(t.dtype) +
                              " while expert 0's is " + name_of(views[0].dtype));
    }
  }
  return Status();
}

Status check_biases(const char* name, const Tensor* views, int num_experts, int64_t len) {
  if (views == nullptr) return Status();
  for (int e = 0; e < num_experts; ++e) {
    const Tensor& t = views[e];
    if (t.data == nullptr || t.dtype != DType::kF32 || t.numel() != len) {
      return invalid_argument(std::string("MoE ") + name + " bias of expert " + num(e) + " must be f32 [" +
                              num(len) + "], got " + (t.data == nullptr ? std::string("none") : name_of(t.dtype) + shape_of(t)));
    }
  }
  return Status();
}

}  // namespace

Status validate_moe_routing(const MoeRouting& r, int64_t num_experts) {
  if (num_experts < 1) return invalid_argument("MoE routing needs at least one expert, got " + num(num_experts));
  if (r.num_groups < 1 || num_experts % r.num_groups != 0) {
    return invalid_argument("MoE routing: " + num(num_experts) + " experts do not split into " + num(r.num_groups) +
                            " equal groups");
  }
  if (r.num_groups > 1 && (r.topk_groups < 1 || r.topk_groups > r.num_groups)) {
    return invalid_argument("MoE routing: topk_groups " + num(r.topk_groups) + " must be in [1, " +
                            num(r.num_groups) + "]");
  }
  const int64_t group_size = num_experts / r.num_groups;
  if (r.num_groups > 1 && r.group_score == MoeGroupScore::kTop2Sum && group_size < 2) {
    return invalid_argument("MoE routing: a group scored by its top-2 sum needs 2 or more experts, got " +
                            num(group_size));
  }
  const int64_t eligible = r.num_groups > 1 ? group_size * r.topk_groups : num_experts;
  if (r.top_k < 1 || r.top_k > eligible) {
    return invalid_argument("MoE routing: top_k " + num(r.top_k) + " must be in [1, " + num(eligible) +
                            "] (the experts it can choose from)");
  }
  if (r.correction_bias != nullptr &&
      (r.correction_bias->dtype != DType::kF32 || r.correction_bias->numel() != num_experts)) {
    return invalid_argument("MoE routing: the correction bias must be f32 [" + num(num_experts) + "], got " +
                            name_of(r.correction_bias->dtype) + shape_of(*r.correction_bias));
  }
  if (!std::isfinite(r.routed_scaling_factor) || r.routed_scaling_factor <= 0.0f) {
    return invalid_argument("MoE routing: routed_scaling_factor must be finite and positive, got " +
                            std::to_string(r.routed_scaling_factor));
  }
  return Status();
}

Status validate_moe_expert_weights(const MoeExpertWeights& w) {
  const int n = w.num_experts;
  const int64_t h = w.hidden_size, i = w.intermediate_size;
  if (w.first_expert < 0) return invalid_argument("MoE experts: first_expert must not be negative");
  if (n < 1 || h < 1 || i < 1) {
    return invalid_argument("MoE experts: num_experts, hidden_size and intermediate_size must be positive, got " +
                            num(n) + ", " + num(h) + ", " + num(i));
  }
  const bool split = w.gate != nullptr || w.up != nullptr;
  if (split == (w.gate_up != nullptr) || (split && (w.gate == nullptr || w.up == nullptr))) {
    return invalid_argument("MoE experts need either gate and up weights or one fused gate_up weight");
  }
  if (w.down == nullptr) return invalid_argument("MoE experts need down weights");
  if (split) {
    KVASIR_RETURN_IF_ERROR(check_views("gate", w.gate, n, i, h));
    KVASIR_RETURN_IF_ERROR(check_views("up", w.up, n, i, h));
    if (w.gate_up_bias != nullptr) return invalid_argument("MoE experts: a gate_up bias needs a fused gate_up weight");
    KVASIR_RETURN_IF_ERROR(check_biases("gate", w.gate_bias, n, i));
    KVASIR_RETURN_IF_ERROR(check_biases("up", w.up_bias, n, i));
  } else {
    KVASIR_RETURN_IF_ERROR(check_views("gate_up", w.gate_up, n, 2 * i, h));
    if (w.gate_bias != nullptr || w.up_bias != nullptr) {
      return invalid_argument("MoE experts: a fused gate_up weight takes one gate_up bias, not gate and up biases");
    }
    KVASIR_RETURN_IF_ERROR(check_biases("gate_up", w.gate_up_bias, n, 2 * i));
  }
  KVASIR_RETURN_IF_ERROR(check_views("down", w.down, n, h, i));
  KVASIR_RETURN_IF_ERROR(check_biases("down", w.down_bias, n, h));
  if (w.activation == GateActivation::kSwigluOai &&
      !(std::isfinite(w.swiglu_oai.alpha) && std::isfinite(w.swiglu_oai.limit) && w.swiglu_oai.limit > 0.0f)) {
    return invalid_argument("MoE experts: SwiGLU-OAI needs a finite alpha and a finite positive limit");
  }
  return Status();
}

}  // namespace kvasir
