#include "model/families/deepseek_moe.h"

#include <climits>

namespace kvasir {
namespace {

// family_params keys (ModelConfig): HF's names where HF has one, so that checks written for
// every MoE family (num_experts_per_tok, norm_topk_prob) reach DeepSeek's too.
constexpr const char* kFirstDense = "deepseek.first_k_dense_replace";
constexpr const char* kLayerFreq = "deepseek.moe_layer_freq";
constexpr const char* kNumExperts = "num_experts";  // absent: no MoE layer
constexpr const char* kTopK = "num_experts_per_tok";
constexpr const char* kExpertIntermediate = "moe_intermediate_size";
constexpr const char* kSharedIntermediate = "shared_expert_intermediate_size";
constexpr const char* kRenormalize = "norm_topk_prob";
constexpr const char* kSigmoid = "deepseek.sigmoid_scoring";
constexpr const char* kCorrectionBias = "deepseek.correction_bias";
constexpr const char* kNumGroups = "n_group";
constexpr const char* kTopkGroups = "topk_group";
constexpr const char* kGroupTop2 = "deepseek.group_top2_sum";
constexpr const char* kScale = "routed_scaling_factor";

// What either config format says, before it becomes family_params.
struct DeepseekMoe {
  int64_t first_dense = 0;
  int64_t layer_freq = 1;
  int64_t num_experts = 0;  // 0: no MoE layer
  int64_t top_k = 0;
  int64_t expert_intermediate = 0;
  int64_t num_shared = 0;  // shared experts, each of expert_intermediate: one MLP of their total width
  bool sigmoid = false;
  bool correction_bias = false;
  bool renormalize = false;
  int64_t num_groups = 1;
  int64_t topk_groups = 1;
  bool group_top2 = false;
  double scale = 1.0;
};

bool moe_layer(int64_t layer, int64_t first_dense, int64_t freq) { return layer >= first_dense && layer % freq == 0; }

// The first MoE layer, or -1 when there is none.
int64_t first_moe_layer(const DeepseekMoe& d, int64_t num_layers) {
  if (d.num_experts == 0) return -1;
  for (int64_t l = 0; l < num_layers; ++l) {
    if (moe_layer(l, d.first_dense, d.layer_freq)) return l;
  }
  return -1;
}

double param(const ModelConfig& c, const char* key) {
  auto it = c.family_params.find(key);
  KVASIR_CHECK_MSG(it != c.family_params.end(), "DeepSeek MoE config not set (read_deepseek_moe_*)");
  return it->second;
}

MoeLayerConfig layer_config(const DeepseekMoe& d, Activation activation) {
  MoeLayerConfig m;
  m.num_experts = static_cast<int>(d.num_experts);
  m.expert_intermediate_size = d.expert_intermediate;
  m.routing.top_k = static_cast<int>(d.top_k);
  m.routing.scoring = d.sigmoid ? MoeScoring::kSigmoid : MoeScoring::kSoftmax;
  m.routing.renormalize = d.renormalize;
  m.routing.num_groups = static_cast<int>(d.num_groups);
  m.routing.topk_groups = static_cast<int>(d.topk_groups);
  m.routing.group_score = d.group_top2 ? MoeGroupScore::kTop2Sum : MoeGroupScore::kMax;
  m.routing.routed_scaling_factor = static_cast<float>(d.scale);
  m.correction_bias = d.correction_bias;
  m.activation = activation == Activation::kSilu ? GateActivation::kSilu : GateActivation::kGeluTanh;
  m.shared_intermediate_size = d.expert_intermediate * d.num_shared;
  return m;
}

// Checks `d` (naming `where`) and stores it in config.family_params; the MoE keys only when some
// layer is a MoE layer.
Status store(const DeepseekMoe& d, ModelConfig& c, const std::string& where) {
  if (d.first_dense < 0) return invalid_argument(where + ": first_k_dense_replace must be >= 0");
  if (d.layer_freq < 1) return invalid_argument(where + ": moe_layer_freq must be >= 1");
  c.family_params[kFirstDense] = static_cast<double>(d.first_dense);
  c.family_params[kLayerFreq] = static_cast<double>(d.layer_freq);
  if (first_moe_layer(d, c.num_layers) < 0) return Status();
  // Bounds before the int conversions; validate_moe_layer_config holds the real limits.
  constexpr int64_t kMaxCount = 1 << 20;
  for (int64_t v : {d.num_experts, d.top_k, d.num_groups, d.topk_groups, d.num_shared}) {
    if (v < 0 || v > kMaxCount) {
      return invalid_argument(where + ": an expert count (" + std::to_string(v) + ") is out of range");
    }
  }
  if (d.expert_intermediate > (int64_t{1} << 32)) {
    return invalid_argument(where + ": moe_intermediate_size " + std::to_string(d.expert_intermediate) + " is too large");
  }
  KVASIR_RETURN_IF_ERROR(validate_moe_layer_config(layer_config(d, c.activation), where));
  c.family_params[kNumExperts] = static_cast<double>(d.num_experts);
  c.family_params[kTopK] = static_cast<double>(d.top_k);
  c.family_params[kExpertIntermediate] = static_cast<double>(d.expert_intermediate);
  c.family_params[kSharedIntermediate] = static_cast<double>(d.expert_intermediate * d.num_shared);
  c.family_params[kRenormalize] = d.renormalize ? 1 : 0;
  c.family_params[kSigmoid] = d.sigmoid ? 1 : 0;
  c.family_params[kCorrectionBias] = d.correction_bias ? 1 : 0;
  c.family_params[kNumGroups] = static_cast<double>(d.num_groups);
  c.family_params[kTopkGroups] = static_cast<double>(d.topk_groups);
  c.family_params[kGroupTop2] = d.group_top2 ? 1 : 0;
  c.family_params[kScale] = d.scale;
  return Status();
}

// DeepSeek's own code reads an explicit null as "none" where transformers would fail.
bool is_null(const HfKeys& k, const char* key) {
  const Json* v = k.json().find(key);
  return v != nullptr && v->is_null();
}

Status read_v2_router(const HfKeys& k, DeepseekMoe& d) {
  KVASIR_ASSIGN_OR_RETURN(std::string scoring, k.str_or("scoring_func", "softmax"));
  if (scoring != "softmax") {
    return unimplemented(k.where() + ": scoring_func '" + scoring +
                         "' is not supported for deepseek_v2, whose router scores by softmax");
  }
  KVASIR_ASSIGN_OR_RETURN(std::string method, k.str_or("topk_method", "greedy"));
  if (method == "group_limited_greedy") {
    KVASIR_ASSIGN_OR_RETURN(d.num_groups, k.req_positive_int("n_group"));
    KVASIR_ASSIGN_OR_RETURN(d.topk_groups, k.req_positive_int("topk_group"));
  } else if (method != "greedy") {
    return unimplemented(k.where() + ": topk_method '" + method +
                         "' is not supported for deepseek_v2 (greedy or group_limited_greedy)");
  }
  // transformers' DeepseekV2TopkRouter never renormalizes (DeepSeek-V2's releases all say
  // norm_topk_prob false) and always applies routed_scaling_factor.
  d.renormalize = false;
  KVASIR_ASSIGN_OR_RETURN(d.scale, k.num_or("routed_scaling_factor", 1.0));
  return Status();
}

Status read_v3_router(const HfKeys& k, DeepseekMoe& d) {
  KVASIR_ASSIGN_OR_RETURN(std::string scoring, k.str_or("scoring_func", "sigmoid"));
  if (scoring != "sigmoid") {
    return unimplemented(k.where() + ": scoring_func '" + scoring +
                         "' is not supported for deepseek_v3, whose router scores by sigmoid");
  }
  KVASIR_ASSIGN_OR_RETURN(std::string method, k.str_or("topk_method", "noaux_tc"));
  if (method != "noaux_tc") {
    return unimplemented(k.where() + ": topk_method '" + method + "' is not supported for deepseek_v3 (noaux_tc)");
  }
  d.sigmoid = true;
  d.correction_bias = true;
  d.group_top2 = true;
  KVASIR_ASSIGN_OR_RETURN(d.num_groups, k.positive_int_or("n_group", 8));
  KVASIR_ASSIGN_OR_RETURN(d.topk_groups, k.positive_int_or("topk_group", 4));
  KVASIR_ASSIGN_OR_RETURN(d.renormalize, k.bool_or("norm_topk_prob", true));
  KVASIR_ASSIGN_OR_RETURN(d.scale, k.num_or("routed_scaling_factor", 2.5));
  return Status();
}

}  // namespace

Status read_deepseek_moe_hf(const HfKeys& k, DeepseekRouter router, ModelConfig& c) {
  const bool v3 = router == DeepseekRouter::kV3;
  DeepseekMoe d;
  KVASIR_ASSIGN_OR_RETURN(d.first_dense, k.int_or("first_k_dense_replace", v3 ? 3 : 0));
  if (d.first_dense < 0) return k.out_of_range("first_k_dense_replace", std::to_string(d.first_dense), ">= 0");
  KVASIR_ASSIGN_OR_RETURN(d.layer_freq, k.positive_int_or("moe_layer_freq", 1));
  if (!is_null(k, "n_routed_experts")) {
    KVASIR_ASSIGN_OR_RETURN(d.num_experts, k.positive_int_or("n_routed_experts", v3 ? 256 : 64));
  }
  if (first_moe_layer(d, c.num_layers) < 0) return store(d, c, k.where());
  // DeepseekV2Config has no default top-k (transformers fails without one); V3's is 8.
  if (v3) {
    KVASIR_ASSIGN_OR_RETURN(d.top_k, k.positive_int_or("num_experts_per_tok", 8));
  } else {
    KVASIR_ASSIGN_OR_RETURN(d.top_k, k.req_positive_int("num_experts_per_tok"));
  }
  KVASIR_ASSIGN_OR_RETURN(d.expert_intermediate, k.positive_int_or("moe_intermediate_size", v3 ? 2048 : 1407));
  if (!is_null(k, "n_shared_experts")) {
    KVASIR_ASSIGN_OR_RETURN(d.num_shared, k.int_or("n_shared_experts", v3 ? 1 : 2));
    if (d.num_shared < 0) return k.out_of_range("n_shared_experts", std::to_string(d.num_shared), ">= 0");
  }
  KVASIR_RETURN_IF_ERROR(v3 ? read_v3_router(k, d) : read_v2_router(k, d));
  return store(d, c, k.where());
}

Status read_deepseek_moe_gguf(const GgufKeys& k, ModelConfig& c) {
  DeepseekMoe d;
  KVASIR_ASSIGN_OR_RETURN(d.first_dense, k.integer_or("leading_dense_block_count", 0));
  if (d.first_dense < 0) return invalid_argument("GGUF: " + k.key("leading_dense_block_count") + " is negative");
  // llama.cpp's converter writes no expert_count for a model without routed experts.
  KVASIR_ASSIGN_OR_RETURN(d.num_experts, k.integer_or("expert_count", 0));
  if (d.num_experts < 0) return invalid_argument("GGUF: " + k.key("expert_count") + " is negative");
  const int64_t first_moe = first_moe_layer(d, c.num_layers);
  if (first_moe < 0) return store(d, c, "GGUF");
  KVASIR_ASSIGN_OR_RETURN(d.top_k, k.integer("expert_used_count"));
  KVASIR_ASSIGN_OR_RETURN(d.expert_intermediate, k.integer("expert_feed_forward_length"));
  KVASIR_ASSIGN_OR_RETURN(d.num_shared, k.integer("expert_shared_count"));
  // llama.cpp: a scale of 0 (or none) leaves the weights unscaled.
  KVASIR_ASSIGN_OR_RETURN(d.scale, k.number_or("expert_weights_scale", 0.0));
  if (d.scale == 0.0) d.scale = 1.0;
  if (k.has("expert_weights_norm")) {
    KVASIR_ASSIGN_OR_RETURN(d.renormalize, k.file().get_bool(k.key("expert_weights_norm")));
  }
  // llama_expert_gating_func_type: 0 none (DeepSeek-V2 files, softmax), 1 softmax, 2 sigmoid.
  KVASIR_ASSIGN_OR_RETURN(int64_t gating, k.integer_or("expert_gating_func", 0));
  if (gating < 0 || gating > 2) {
    return unimplemented("GGUF: " + k.key("expert_gating_func") + " " + std::to_string(gating) +
                         " is not supported for deepseek2 (1 softmax or 2 sigmoid)");
  }
  d.sigmoid = gating == 2;
  KVASIR_ASSIGN_OR_RETURN(int64_t groups, k.integer_or("expert_group_count", 0));
  if (groups > 1) {
    d.num_groups = groups;
    KVASIR_ASSIGN_OR_RETURN(d.topk_groups, k.integer("expert_group_used_count"));
  }
  d.correction_bias = k.file().find_tensor("blk." + std::to_string(first_moe) + ".exp_probs_b.bias") != nullptr;
  d.group_top2 = d.correction_bias;
  return store(d, c, "GGUF");
}

bool is_deepseek_moe_layer(const ModelConfig& c, int layer) {
  if (c.family_params.count(kNumExperts) == 0) return false;
  return moe_layer(layer, static_cast<int64_t>(param(c, kFirstDense)), static_cast<int64_t>(param(c, kLayerFreq)));
}

MoeLayerConfig deepseek_moe_layer_config(const ModelConfig& c) {
  DeepseekMoe d;
  d.num_experts = static_cast<int64_t>(param(c, kNumExperts));
  d.top_k = static_cast<int64_t>(param(c, kTopK));
  d.expert_intermediate = static_cast<int64_t>(param(c, kExpertIntermediate));
  d.sigmoid = param(c, kSigmoid) != 0;
  d.correction_bias = param(c, kCorrectionBias) != 0;
  d.renormalize = param(c, kRenormalize) != 0;
  d.num_groups = static_cast<int64_t>(param(c, kNumGroups));
  d.topk_groups = static_cast<int64_t>(param(c, kTopkGroups));
  d.group_top2 = param(c, kGroupTop2) != 0;
  d.scale = param(c, kScale);
  MoeLayerConfig m = layer_config(d, c.activation);
  m.shared_intermediate_size = static_cast<int64_t>(param(c, kSharedIntermediate));  // their total width
  return m;
}

const MoeHfNames& deepseek_moe_hf_names() {
  static const MoeHfNames kNames{.router = "mlp.gate.weight",
                                 .expert_prefix = "mlp.experts.",
                                 .gate = "gate_proj",
                                 .up = "up_proj",
                                 .down = "down_proj",
                                 .shared_prefix = "mlp.shared_experts.",
                                 .shared_gate = "",
                                 .correction_bias = "mlp.gate.e_score_correction_bias"};
  return kNames;
}

}  // namespace kvasir
