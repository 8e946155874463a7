#include "model/moe_block.h"

#include <algorithm>

namespace kvasir {
namespace {

std::string layer_name(int layer) { return "layer " + std::to_string(layer); }

WeightSpec matrix(std::string role, std::string gguf, std::string hf, std::vector<int64_t> shape,
                  bool optional = false, bool expected = true) {
  WeightSpec s;
  s.role = std::move(role);
  s.gguf = WeightName{std::move(gguf)};
  s.hf = WeightName{std::move(hf)};
  s.kind = WeightKind::kMatrix;
  s.shape = std::move(shape);
  s.optional = optional;
  s.expected = expected;
  return s;
}

// The three expert projections: manifest role stem, HF name part, [rows, cols] of one expert.
struct Projection {
  const char* stem;  // "ffn_gate" -> stacked "ffn_gate_exps.weight", per expert "ffn_gate.<e>.weight"
  const std::string MoeHfNames::*hf;
  bool down;  // [H, I] rather than [I, H]
};
constexpr Projection kProjections[] = {
    {"ffn_gate", &MoeHfNames::gate, false},
    {"ffn_up", &MoeHfNames::up, false},
    {"ffn_down", &MoeHfNames::down, true},
};

std::string per_expert_role(const char* stem, int e) { return std::string(stem) + "." + std::to_string(e) + ".weight"; }
std::string stacked_role(const char* stem) { return std::string(stem) + "_exps.weight"; }

// e of a per_expert_role(stem, e), or -1 when `role` is not one.
int per_expert_index(const std::string& role, const char* stem) {
  const std::string head = std::string(stem) + ".", tail = ".weight";
  if (role.size() <= head.size() + tail.size() || role.rfind(head, 0) != 0 ||
      role.compare(role.size() - tail.size(), tail.size(), tail) != 0)
    return -1;
  const std::string digits = role.substr(head.size(), role.size() - head.size() - tail.size());
  if (digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoi(digits);
}

// Expert e of a stacked [E, rows, cols] tensor as a 2-D view (no copy).
Tensor expert_view(const Tensor& stacked, int e) {
  Tensor v = stacked;
  const int64_t rows = stacked.dim(1), cols = stacked.dim(2);
  v.ndim = 2;
  v.shape = {rows, cols, 0, 0};
  v.data = static_cast<uint8_t*>(stacked.data) + static_cast<size_t>(e) * static_cast<size_t>(rows) * v.row_bytes();
  return v;
}

StatusOr<Tensor> required(const BlockInit& init, const std::string& role) {
  Tensor t = init.weights.get(role);
  if (t.data == nullptr) return data_loss(layer_name(init.layer) + ": weight " + role + " is not bound");
  return t;
}

class MoeMlp final : public MlpBlock {
 public:
  static StatusOr<std::unique_ptr<MlpBlock>> create(const BlockInit& init, const MoeLayerConfig& moe) {
    Backend& b = *init.backend;
    if (!b.supports_moe()) {
      return unimplemented(layer_name(init.layer) + ": the " + b.name() +
                           " backend has no mixture-of-experts ops (moe_route, moe_experts)");
    }
    KVASIR_RETURN_IF_ERROR(validate_moe_layer_config(moe, layer_name(init.layer)));
    std::unique_ptr<MoeMlp> m(new MoeMlp());
    m->routing_ = moe.routing;
    KVASIR_ASSIGN_OR_RETURN(m->router_, required(init, "ffn_gate_inp.weight"));
    m->router_bias_ = init.weights.get("ffn_gate_inp.bias");
    if (moe.correction_bias) {
      KVASIR_ASSIGN_OR_RETURN(m->correction_bias_, required(init, "exp_probs_b.bias"));
      m->routing_.correction_bias = &m->correction_bias_;
      const Status s = validate_moe_routing(m->routing_, moe.num_experts);
      if (!s.ok()) return Status(s.code(), layer_name(init.layer) + ": " + s.message());
    }
    KVASIR_RETURN_IF_ERROR(m->bind_experts(init, moe));
    if (moe.shared_intermediate_size > 0) KVASIR_RETURN_IF_ERROR(m->bind_shared(init, moe));
    KVASIR_RETURN_IF_ERROR(m->allocate(b, init, moe));
    return std::unique_ptr<MlpBlock>(std::move(m));
  }

  void forward(Backend& b, const Tensor& h, BlockScratch& s, Tensor& out) override {
    const int64_t t = h.rows();
    Tensor logits = logits_.slice_rows(0, t), ids = ids_.slice_rows(0, t), weights = weights_.slice_rows(0, t);
    b.linear(h, router_, router_bias_.data != nullptr ? &router_bias_ : nullptr, logits);
    b.moe_route(logits, routing_, ids, weights);
    b.moe_experts(h, ids, weights, experts_, out);
    if (shared_views_.empty()) return;
    Tensor shared_out = shared_out_.slice_rows(0, t);
    if (shared_gate_.data != nullptr) {
      // sigmoid(gate · x) * shared(x) is a one-expert MoE whose router scores by sigmoid: the two
      // MoE ops compute it exactly, with no op of its own.
      Tensor g = shared_logits_.slice_rows(0, t), gi = shared_ids_.slice_rows(0, t);
      Tensor gw = shared_weights_.slice_rows(0, t);
      b.linear(h, shared_gate_, nullptr, g);
      b.moe_route(g, shared_routing_, gi, gw);
      b.moe_experts(h, gi, gw, shared_, shared_out);
    } else {
      Tensor gate = shared_gate_act_.slice_rows(0, t), up = shared_up_act_.slice_rows(0, t);
      b.linear(h, shared_views_[0], nullptr, gate);
      b.linear(h, shared_views_[1], nullptr, up);
      b.gated_activation(gate, up, shared_.activation, gate);
      b.linear(gate, shared_views_[2], nullptr, shared_out);
    }
    b.add(out, shared_out);
  }

 private:
  Status bind_experts(const BlockInit& init, const MoeLayerConfig& moe) {
    // The shard's experts: all of them, or under expert parallelism its range of whole experts
    // (a stacked tensor then holds only those).
    const ExpertRange held = held_experts(init.config);
    const int n = held.count;
    if (held.first < 0 || n < 1 || held.first + n > moe.num_experts) {
      return internal_error(layer_name(init.layer) + ": the shard's experts lie outside the layer's " +
                            std::to_string(moe.num_experts));
    }
    const bool stacked = std::any_of(std::begin(kProjections), std::end(kProjections), [&](const Projection& p) {
      return init.weights.get(stacked_role(p.stem)).data != nullptr;
    });
    for (int p = 0; p < 3; ++p) {
      const char* stem = kProjections[p].stem;
      views_[p].resize(static_cast<size_t>(n));
      if (stacked) {
        const Tensor st = init.weights.get(stacked_role(stem));
        if (st.data == nullptr) {
          return data_loss(layer_name(init.layer) + ": the checkpoint stacks some experts' weights but has no " +
                           stacked_role(stem));
        }
        for (int e = 0; e < n; ++e) views_[p][static_cast<size_t>(e)] = expert_view(st, e);
      } else {
        for (int e = 0; e < n; ++e) {
          const int expert = held.first + e;
          const Tensor t = init.weights.get(per_expert_role(stem, expert));
          if (t.data == nullptr) {
            return data_loss(layer_name(init.layer) + ": expert " + std::to_string(expert) + " of " +
                             std::to_string(moe.num_experts) + " has no " + (stem + 4) + " weight (" +
                             per_expert_role(stem, expert) + ", or the stacked " + stacked_role(stem) + ")");
          }
          views_[p][static_cast<size_t>(e)] = t;
        }
      }
    }
    experts_.num_experts = n;
    experts_.first_expert = held.first;
    experts_.hidden_size = init.config.hidden_size;
    experts_.intermediate_size = moe.expert_intermediate_size;
    experts_.gate = views_[0].data();
    experts_.up = views_[1].data();
    experts_.down = views_[2].data();
    experts_.activation = moe.activation;
    const Status s = validate_moe_expert_weights(experts_);
    if (!s.ok()) return Status(s.code(), layer_name(init.layer) + ": " + s.message());
    return Status();
  }

  Status bind_shared(const BlockInit& init, const MoeLayerConfig& moe) {
    shared_views_.resize(3);
    KVASIR_ASSIGN_OR_RETURN(shared_views_[0], required(init, "ffn_gate_shexp.weight"));
    KVASIR_ASSIGN_OR_RETURN(shared_views_[1], required(init, "ffn_up_shexp.weight"));
    KVASIR_ASSIGN_OR_RETURN(shared_views_[2], required(init, "ffn_down_shexp.weight"));
    shared_.num_experts = 1;
    shared_.hidden_size = init.config.hidden_size;
    shared_.intermediate_size = moe.shared_intermediate_size;
    shared_.gate = &shared_views_[0];
    shared_.up = &shared_views_[1];
    shared_.down = &shared_views_[2];
    shared_.activation = moe.activation;
    const Status s = validate_moe_expert_weights(shared_);
    if (!s.ok()) return Status(s.code(), layer_name(init.layer) + ": shared expert: " + s.message());
    if (moe.shared_expert_gate) {
      KVASIR_ASSIGN_OR_RETURN(shared_gate_, required(init, "ffn_gate_inp_shexp.weight"));
      shared_routing_.top_k = 1;
      shared_routing_.scoring = MoeScoring::kSigmoid;
    }
    return Status();
  }

  Status allocate(Backend& b, const BlockInit& init, const MoeLayerConfig& moe) {
    const int64_t rows = init.max_num_tokens, k = moe.routing.top_k;
    const DType act = b.activation_dtype();
    auto make = [&](Tensor& t, DType dtype, int64_t cols) -> Status {
      KVASIR_ASSIGN_OR_RETURN(auto buf, b.allocate(*row_bytes(dtype, cols) * static_cast<size_t>(rows)));
      t = Tensor::make(buf->data(), dtype, {rows, cols}, b.device());
      buffers_.push_back(std::move(buf));
      return Status();
    };
    KVASIR_RETURN_IF_ERROR(make(logits_, DType::kF32, moe.num_experts));
    KVASIR_RETURN_IF_ERROR(make(ids_, DType::kI32, k));
    KVASIR_RETURN_IF_ERROR(make(weights_, DType::kF32, k));
    if (shared_views_.empty()) return Status();
    KVASIR_RETURN_IF_ERROR(make(shared_out_, act, init.config.hidden_size));
    if (shared_gate_.data != nullptr) {
      KVASIR_RETURN_IF_ERROR(make(shared_logits_, DType::kF32, 1));
      KVASIR_RETURN_IF_ERROR(make(shared_ids_, DType::kI32, 1));
      KVASIR_RETURN_IF_ERROR(make(shared_weights_, DType::kF32, 1));
    } else {
      KVASIR_RETURN_IF_ERROR(make(shared_gate_act_, act, moe.shared_intermediate_size));
      KVASIR_RETURN_IF_ERROR(make(shared_up_act_, act, moe.shared_intermediate_size));
    }
    return Status();
  }

  MoeRouting routing_;
  Tensor router_, router_bias_;
  Tensor correction_bias_;  // [E] f32, or none (routing_.correction_bias points here)
  std::vector<Tensor> views_[3];  // per expert: gate, up, down
  MoeExpertWeights experts_;
  std::vector<Tensor> shared_views_;  // gate, up, down of the shared expert (empty: none)
  MoeExpertWeights shared_;
  Tensor shared_gate_;  // [1, H] or none
  MoeRouting shared_routing_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  Tensor logits_, ids_, weights_;                          // [max_T, E], [max_T, k] x2
  Tensor shared_out_;                                      // [max_T, H]
  Tensor shared_logits_, shared_ids_, shared_weights_;     // [max_T, 1] (gated shared expert)
  Tensor shared_gate_act_, shared_up_act_;                 // [max_T, Is] (ungated shared expert)
};

}  // namespace

void replace_mlp_with_moe(std::vector<WeightSpec>& layer, int i, int64_t hidden, const MoeLayerConfig& moe,
                          const MoeHfNames& hf) {
  layer.erase(std::remove_if(layer.begin(), layer.end(),
                             [](const WeightSpec& s) {
                               return s.role == "ffn_gate.weight" || s.role == "ffn_up.weight" ||
                                      s.role == "ffn_down.weight";
                             }),
              layer.end());
  const std::string g = "blk." + std::to_string(i) + ".", p = "model.layers." + std::to_string(i) + ".";
  const int64_t e_n = moe.num_experts, inter = moe.expert_intermediate_size;
  layer.push_back(matrix("ffn_gate_inp.weight", g + "ffn_gate_inp.weight", p + hf.router, {e_n, hidden}));
  if (moe.router_bias) {
    WeightSpec bias = matrix("ffn_gate_inp.bias", g + "ffn_gate_inp.bias", "", {e_n}, true);
    if (hf.router.size() > 7 && hf.router.compare(hf.router.size() - 7, 7, ".weight") == 0) {
      bias.hf.name = p + hf.router.substr(0, hf.router.size() - 7) + ".bias";
    }
    bias.kind = WeightKind::kVector;
    layer.push_back(bias);
  }
  if (moe.correction_bias) {
    WeightSpec bias = matrix("exp_probs_b.bias", g + "exp_probs_b.bias", p + hf.correction_bias, {e_n});
    bias.kind = WeightKind::kVector;
    layer.push_back(bias);
  }
  for (const Projection& pr : kProjections) {
    const std::vector<int64_t> one = pr.down ? std::vector<int64_t>{hidden, inter} : std::vector<int64_t>{inter, hidden};
    // Stacked: GGUF only, and never made by --load-format dummy (which writes HF names).
    layer.push_back(matrix(stacked_role(pr.stem), g + stacked_role(pr.stem), "", {e_n, one[0], one[1]},
                           /*optional=*/true, /*expected=*/false));
    layer.back().linear_only = false;  // read by moe_experts
    for (int e = 0; e < moe.num_experts; ++e) {
      layer.push_back(matrix(per_expert_role(pr.stem, e), g + per_expert_role(pr.stem, e),
                             p + hf.expert_prefix + std::to_string(e) + "." + hf.*pr.hf + ".weight", one,
                             /*optional=*/true));
      layer.back().linear_only = false;
    }
  }
  if (moe.shared_intermediate_size > 0) {
    const int64_t is = moe.shared_intermediate_size;
    layer.push_back(matrix("ffn_gate_shexp.weight", g + "ffn_gate_shexp.weight", p + hf.shared_prefix + "gate_proj.weight",
                           {is, hidden}));
    layer.push_back(matrix("ffn_up_shexp.weight", g + "ffn_up_shexp.weight", p + hf.shared_prefix + "up_proj.weight",
                           {is, hidden}));
    layer.push_back(matrix("ffn_down_shexp.weight", g + "ffn_down_shexp.weight", p + hf.shared_prefix + "down_proj.weight",
                           {hidden, is}));
    if (moe.shared_expert_gate) {
      layer.push_back(matrix("ffn_gate_inp_shexp.weight", g + "ffn_gate_inp_shexp.weight", p + hf.shared_gate,
                             {1, hidden}));
    }
  }
}

std::optional<TensorParallelSplit> moe_tensor_parallel_split(const std::string& role, int num_experts,
                                                             const ShardPosition& at) {
  if (role == "ffn_gate_inp.weight" || role == "ffn_gate_inp.bias" || role == "exp_probs_b.bias" ||
      role == "ffn_gate_inp_shexp.weight")
    return TensorParallelSplit::kReplicate;
  const ExpertRange held = expert_range(num_experts, at.rank, at.size);
  for (const Projection& pr : kProjections) {
    const std::string stem = pr.stem;
    const TensorParallelSplit sliced = pr.down ? TensorParallelSplit::kColumns : TensorParallelSplit::kRows;
    if (role == stem + "_shexp.weight") return sliced;
    if (role == stacked_role(pr.stem)) return at.expert_parallel ? TensorParallelSplit::kExperts : sliced;
    const int e = per_expert_index(role, pr.stem);
    if (e < 0 || e >= num_experts) continue;
    if (!at.expert_parallel) return sliced;
    return held.holds(e) ? TensorParallelSplit::kReplicate : TensorParallelSplit::kAbsent;
  }
  return std::nullopt;
}

Status shard_moe_sizes(ModelConfig& c, const ShardPosition& at) {
  KVASIR_RETURN_IF_ERROR(divide_family_param(c, "shared_expert_intermediate_size", at.size));
  if (at.expert_parallel) return Status();
  return divide_family_param(c, "moe_intermediate_size", at.size);
}

Status validate_moe_layer_config(const MoeLayerConfig& moe, const std::string& where) {
  // Far above any released model (DeepSeek-V3: 256, Qwen3-235B: 128), low enough that a corrupt
  // count cannot make the manifest enormous.
  constexpr int kMaxExperts = 4096;
  if (moe.num_experts < 1 || moe.num_experts > kMaxExperts) {
    return invalid_argument(where + ": the number of experts is " + std::to_string(moe.num_experts) +
                            ", must be in [1, " + std::to_string(kMaxExperts) + "]");
  }
  if (moe.expert_intermediate_size < 1) {
    return invalid_argument(where + ": the experts' intermediate size must be positive, got " +
                            std::to_string(moe.expert_intermediate_size));
  }
  if (moe.shared_intermediate_size < 0) {
    return invalid_argument(where + ": the shared expert's intermediate size must not be negative");
  }
  const Status s = validate_moe_routing(moe.routing, moe.num_experts);
  if (!s.ok()) return Status(s.code(), where + ": " + s.message());
  return Status();
}

StatusOr<std::unique_ptr<MlpBlock>> make_moe_mlp(const BlockInit& init, const MoeLayerConfig& moe) {
  return MoeMlp::create(init, moe);
}

}  // namespace kvasir
