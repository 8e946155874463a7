#include "model/moe_family.h"

#include <algorithm>
#include <climits>

namespace kvasir {
namespace {

// family_params keys (ModelConfig): HF's names where HF has one.
constexpr const char* kNumExperts = "num_experts";
constexpr const char* kTopK = "num_experts_per_tok";
constexpr const char* kExpertIntermediate = "moe_intermediate_size";
constexpr const char* kRenormalize = "norm_topk_prob";
constexpr const char* kSharedIntermediate = "shared_expert_intermediate_size";
std::string dense_layer_key(int64_t layer) { return "mlp_only_layer." + std::to_string(layer); }

double param(const ModelConfig& c, const char* key) {
  auto it = c.family_params.find(key);
  return it == c.family_params.end() ? 0.0 : it->second;
}

}  // namespace

Status MoeFamily::set_moe_params(const MoeParams& p, ModelConfig& c, const std::string& where) {
  MoeLayerConfig m;
  m.num_experts = static_cast<int>(std::min<int64_t>(p.num_experts, INT32_MAX));
  m.expert_intermediate_size = p.expert_intermediate_size;
  m.routing.top_k = static_cast<int>(std::min<int64_t>(p.top_k, INT32_MAX));
  m.shared_intermediate_size = p.shared_intermediate_size;
  if (p.num_experts != m.num_experts || p.top_k != m.routing.top_k) {
    return invalid_argument(where + ": the expert counts are out of range");
  }
  KVASIR_RETURN_IF_ERROR(validate_moe_layer_config(m, where));
  for (int64_t l : p.dense_layers) {
    if (l < 0 || l >= c.num_layers) {
      return invalid_argument(where + ": mlp_only_layers names layer " + std::to_string(l) + ", but the model has " +
                              std::to_string(c.num_layers) + " layers");
    }
    c.family_params[dense_layer_key(l)] = 1;
  }
  c.family_params[kNumExperts] = static_cast<double>(p.num_experts);
  c.family_params[kTopK] = static_cast<double>(p.top_k);
  c.family_params[kExpertIntermediate] = static_cast<double>(p.expert_intermediate_size);
  c.family_params[kRenormalize] = p.renormalize ? 1 : 0;
  c.family_params[kSharedIntermediate] = static_cast<double>(p.shared_intermediate_size);
  return Status();
}

Status MoeFamily::read_hf_dense_layers(const HfKeys& k, const ModelConfig& c, MoeParams& p) {
  KVASIR_ASSIGN_OR_RETURN(int64_t step, k.positive_int_or("decoder_sparse_step", 1));
  KVASIR_ASSIGN_OR_RETURN(std::vector<int64_t> only, k.ids("mlp_only_layers"));
  for (int64_t l : only) {
    if (l < 0) return invalid_argument(k.where() + ": mlp_only_layers holds " + std::to_string(l) + ", not a layer");
  }
  // transformers: a layer is sparse unless listed (entries past the last layer name nothing),
  // and only every decoder_sparse_step-th one.
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const bool listed = std::find(only.begin(), only.end(), l) != only.end();
    if (listed || (l + 1) % step != 0) p.dense_layers.push_back(l);
  }
  return Status();
}

bool MoeFamily::is_moe_layer(const ModelConfig& c, int layer) {
  return c.family_params.count(dense_layer_key(layer)) == 0;
}

MoeLayerConfig MoeFamily::layer_config(const ModelConfig& c) const {
  MoeLayerConfig m;
  m.num_experts = static_cast<int>(param(c, kNumExperts));
  m.expert_intermediate_size = static_cast<int64_t>(param(c, kExpertIntermediate));
  m.routing.top_k = static_cast<int>(param(c, kTopK));
  m.routing.scoring = MoeScoring::kSoftmax;
  m.routing.renormalize = param(c, kRenormalize) != 0;
  m.activation = c.activation == Activation::kSilu ? GateActivation::kSilu : GateActivation::kGeluTanh;
  m.shared_intermediate_size = static_cast<int64_t>(param(c, kSharedIntermediate));
  m.shared_expert_gate = m.shared_intermediate_size > 0 && shared_expert_gate_;
  return m;
}

WeightManifest MoeFamily::manifest(const ModelConfig& c) const {
  WeightManifest m = dense_decoder_manifest(c);
  const MoeLayerConfig moe = layer_config(c);
  for (size_t i = 0; i < m.layers.size(); ++i) {
    if (is_moe_layer(c, static_cast<int>(i))) {
      replace_mlp_with_moe(m.layers[i], static_cast<int>(i), c.hidden_size, moe, hf_names_);
    }
  }
  return m;
}

StatusOr<std::unique_ptr<MlpBlock>> MoeFamily::make_mlp(const BlockInit& init) const {
  if (!is_moe_layer(init.config, init.layer)) return make_gated_mlp(init);
  return make_moe_mlp(init, layer_config(init.config));
}

std::optional<TensorParallelSplit> MoeFamily::tensor_parallel_split(const std::string& role, const ModelConfig& c,
                                                                    const ShardPosition& at) const {
  return moe_tensor_parallel_split(role, static_cast<int>(param(c, kNumExperts)), at);
}

Status MoeFamily::shard_family_params(const ModelConfig&, ModelConfig& c, const ShardPosition& at) const {
  return shard_moe_sizes(c, at);
}

}  // namespace kvasir
