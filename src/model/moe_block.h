// The mixture-of-experts MLP block: router linear (+bias), Backend::moe_route, Backend::moe_experts,
// and an optional shared expert (a dense gated MLP added to the experts' sum, scaled by
// sigmoid(shared_expert_gate · x) when the family has that gate, as Qwen2-MoE does; DeepSeek adds
// its shared experts unscaled). Also the manifest entries of its weights, so a MoE family states
// only its numbers and its HF names. Must not read config files: families fill MoeLayerConfig.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/moe_params.h"
#include "model/blocks.h"
#include "model/tensor_parallel.h"
#include "model/weight_manifest.h"

namespace kvasir {

// One MoE layer as its family reads it from the config.
struct MoeLayerConfig {
  int num_experts = 0;
  int64_t expert_intermediate_size = 0;
  MoeRouting routing;  // correction_bias stays null here (a weight, bound by the block)
  GateActivation activation = GateActivation::kSilu;
  bool router_bias = false;               // the router has a bias (optional weight)
  // The router has DeepSeek-V3's e_score_correction_bias [E] (a required weight): routing's
  // correction_bias, which chooses experts but does not weigh them.
  bool correction_bias = false;
  int64_t shared_intermediate_size = 0;   // 0: no shared expert
  bool shared_expert_gate = false;        // the shared expert is scaled by sigmoid(gate · x)
};

// Where a family's HF checkpoints keep one layer's MoE weights, relative to "model.layers.<i>.":
// expert e's gate is expert_prefix + e + "." + gate + ".weight", and so on.
struct MoeHfNames {
  std::string router;         // "mlp.gate.weight"
  std::string expert_prefix;  // "mlp.experts."
  std::string gate, up, down;  // "gate_proj", "up_proj", "down_proj" (Mixtral: w1, w3, w2)
  std::string shared_prefix;  // "mlp.shared_expert." (its gate_proj / up_proj / down_proj)
  std::string shared_gate;    // "mlp.shared_expert_gate.weight"
  std::string correction_bias;  // "mlp.gate.e_score_correction_bias" (read when the layer has one)
};

// Replaces layer `layer`'s dense MLP specs (ffn_gate/up/down.weight) by the MoE ones. GGUF names
// are llama.cpp's: router ffn_gate_inp, experts stacked [E, rows, cols] as ffn_{gate,up,down}_exps
// or (older files) one tensor per expert, ffn_{gate,up,down}.<e>; shared expert ffn_*_shexp and
// its gate ffn_gate_inp_shexp; the routing's correction bias exp_probs_b.bias. A checkpoint holds
// the stacked or the per-expert form (HF names are per expert): both are optional in the manifest
// and the block requires one complete set.
void replace_mlp_with_moe(std::vector<WeightSpec>& layer, int layer_index, int64_t hidden_size,
                          const MoeLayerConfig& moe, const MoeHfNames& hf);

// Tensor parallelism of the roles replace_mlp_with_moe declares, as vLLM's fused MoE: router,
// its biases and the shared expert's gate replicated (every rank routes alike); the shared
// expert's gate/up split by rows and down by columns; the routed experts likewise (each rank
// holds every expert's slice of the intermediate dimension), or with at.expert_parallel whole,
// rank at.rank holding its expert_range of the layer's num_experts (the others' per-expert
// weights absent, a stack's its entries). Either way the block's output is a partial sum that the
// model all-reduces once. nullopt for any other role. Biased experts (GPT-OSS) are not these roles.
std::optional<TensorParallelSplit> moe_tensor_parallel_split(const std::string& role, int num_experts,
                                                             const ShardPosition& at);

// A shard's MoE widths in family_params, under the keys every MoE family uses (HF's names):
// shared_expert_intermediate_size divided by the group size, moe_intermediate_size too unless
// the experts are whole (expert parallelism). InvalidArgument when one does not divide.
Status shard_moe_sizes(ModelConfig& shard, const ShardPosition& at);

// Checks the numbers of `moe` (counts, sizes, routing), naming `where` in the error.
Status validate_moe_layer_config(const MoeLayerConfig& moe, const std::string& where);

// The block for a layer whose weights replace_mlp_with_moe declared; it runs the experts the
// shard holds (held_experts: all of them, or its share under expert parallelism, where the other
// ranks' experts add nothing here). Fails at load when the backend has no MoE ops (or, for
// expert parallelism, is not the CPU's) or an expert's weights are missing or inconsistent.
StatusOr<std::unique_ptr<MlpBlock>> make_moe_mlp(const BlockInit& init, const MoeLayerConfig& moe);

}  // namespace kvasir
