// GPT-OSS (HF GptOssForCausalLM, model_type "gpt_oss"; GGUF "gpt-oss"): the llama decoder with
// q/k/v/o biases, a learned attention-sink logit per head (AttentionParams::sinks), sliding-window
// and full layers alternating (layer_types; even layers slide by default), YaRN RoPE (transformers'
// "truncate": false), and a mixture-of-experts MLP: a router with a bias picks each token's top 4
// experts (of 32 or 128) and softmaxes their logits; each expert is a biased gate/up/down MLP with
// the clamped SwiGLU. bf16 / f32 checkpoints only: the released MXFP4 experts are refused at load,
// naming MXFP4, until the quantization work reads them.
// HF stores each layer's experts stacked and in-features first (gate_up_proj [E, H, 2I] with gate
// and up interleaved along 2I, down_proj [E, I, H]); the manifest marks them transposed, so the
// binder turns them into [E, out, in] once at load. llama.cpp's converter writes gate and up as
// separate stacked tensors already in [E, out, in].
#include <cmath>

#include "common/quoted_text.h"
#include "model/model_family.h"

namespace kvasir {

namespace {

// ModelConfig::family_params keys.
constexpr const char* kNumExperts = "num_experts";
constexpr const char* kNumExpertsPerTok = "num_experts_per_tok";
constexpr const char* kSwigluAlpha = "swiglu_alpha";
constexpr const char* kSwigluLimit = "swiglu_limit";

// GptOssConfig's defaults (transformers 5.x), for keys a config.json leaves out.
constexpr int64_t kDefaultExperts = 128;
constexpr int64_t kDefaultExpertsPerToken = 4;
constexpr int64_t kDefaultSlidingWindow = 128;
constexpr double kDefaultSwigluAlpha = 1.702;
constexpr double kDefaultSwigluLimit = 7.0;

RopeScaling default_yarn() {
  RopeScaling s;
  s.type = RopeScalingType::kYarn;
  s.factor = 32.0;
  s.beta_fast = 32.0;
  s.beta_slow = 1.0;
  s.truncate = false;
  s.original_max_position_embeddings = 4096;
  return s;
}

Status check_moe_params(const std::string& where, ModelConfig& c, int64_t experts, int64_t top_k,
                        double alpha, double limit) {
  if (top_k > experts) {
    return invalid_argument(where + ": " + std::to_string(top_k) + " experts per token, but only " +
                            std::to_string(experts) + " experts");
  }
  if (!(std::isfinite(alpha) && std::isfinite(limit) && limit > 0)) {
    return invalid_argument(where + ": swiglu_alpha must be finite and swiglu_limit positive and finite");
  }
  c.family_params[kNumExperts] = static_cast<double>(experts);
  c.family_params[kNumExpertsPerTok] = static_cast<double>(top_k);
  c.family_params[kSwigluAlpha] = alpha;
  c.family_params[kSwigluLimit] = limit;
  return Status();
}

// A number the config readers above set (0 for a config not read by them: its shapes and routing
// are then refused at load, never read past).
double param(const ModelConfig& c, const char* key) {
  auto it = c.family_params.find(key);
  return it == c.family_params.end() ? 0.0 : it->second;
}
int64_t num_experts(const ModelConfig& c) { return static_cast<int64_t>(param(c, kNumExperts)); }

// The generic decoder's manifest with gpt-oss's attention extras and its experts for the MLP.
// HF holds gate and up fused and interleaved (gate_up_proj), llama.cpp's converter writes them
// apart (ffn_gate_exps / ffn_up_exps): each form is a role of its own, bound where present, and
// the block takes whichever the checkpoint has.
WeightManifest gpt_oss_manifest(const ModelConfig& c) {
  WeightManifest m = dense_decoder_manifest(c);
  const int64_t h = c.hidden_size, ffn = c.intermediate_size, experts = num_experts(c);
  for (size_t i = 0; i < m.layers.size(); ++i) {
    std::vector<WeightSpec>& L = m.layers[i];
    const std::string g = "blk." + std::to_string(i) + ".";
    const std::string p = "model.layers." + std::to_string(i) + ".";
    std::erase_if(L, [](const WeightSpec& s) { return s.role.starts_with("ffn_") && s.role != "ffn_norm.weight"; });
    for (WeightSpec& s : L) {
      if (s.role == "ffn_norm.weight") s.gguf.name = g + "post_attention_norm.weight";  // llama.cpp's name
    }
    auto add = [&](const std::string& role, const std::string& hf, WeightKind kind, std::vector<int64_t> shape,
                   bool hf_transposed = false) -> WeightSpec& {
      WeightSpec s;
      s.role = role;
      s.gguf.name = g + role;
      s.hf.name = hf.empty() ? std::string() : p + hf;
      s.hf.transposed = hf_transposed;
      s.kind = kind;
      s.shape = std::move(shape);
      L.push_back(std::move(s));
      return L.back();
    };
    WeightSpec& bo = add("attn_output.bias", "self_attn.o_proj.bias", WeightKind::kVector, {h});
    bo.optional = true;
    bo.expected = c.attention_bias;
    add("attn_sinks.weight", "self_attn.sinks", WeightKind::kVector, {c.num_heads});
    add("ffn_gate_inp.weight", "mlp.router.weight", WeightKind::kMatrix, {experts, h});
    add("ffn_gate_inp.bias", "mlp.router.bias", WeightKind::kVector, {experts});
    // HF: gate_up_proj [E, H, 2I] -> [E, 2I, H], rows interleaved gate, up, gate, ...
    WeightSpec& gate_up = add("ffn_gate_up_exps.weight", "mlp.experts.gate_up_proj", WeightKind::kMatrix,
                              {experts, 2 * ffn, h}, true);
    gate_up.gguf.name.clear();
    gate_up.optional = true;
    WeightSpec& gate_up_bias = add("ffn_gate_up_exps.bias", "mlp.experts.gate_up_proj_bias", WeightKind::kVector,
                                   {experts, 2 * ffn});
    gate_up_bias.gguf.name.clear();
    gate_up_bias.optional = true;
    // GGUF: the two halves apart, de-interleaved by the converter.
    for (const char* role : {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_gate_exps.bias", "ffn_up_exps.bias"}) {
      const bool bias = std::string_view(role).ends_with(".bias");
      WeightSpec& s = add(role, "", bias ? WeightKind::kVector : WeightKind::kMatrix,
                          bias ? std::vector<int64_t>{experts, ffn} : std::vector<int64_t>{experts, ffn, h});
      s.optional = true;
      s.expected = false;  // dummy weights take the HF form
    }
    add("ffn_down_exps.weight", "mlp.experts.down_proj", WeightKind::kMatrix, {experts, h, ffn}, true);
    add("ffn_down_exps.bias", "mlp.experts.down_proj_bias", WeightKind::kVector, {experts, h});
  }
  return m;
}

// The MoE MLP: router (with its bias) -> top-k experts, softmax over their logits -> each expert's
// biased gate/up, clamped SwiGLU, biased down, weighted sum. Route and experts are backend ops;
// the per-expert views are made once here.
class GptOssMoe final : public MlpBlock {
 public:
  static StatusOr<std::unique_ptr<MlpBlock>> create(const BlockInit& init) {
    const std::string where = "layer " + std::to_string(init.layer) + ": ";
    if (!init.backend->supports_moe()) {
      return unimplemented(where + "gpt_oss needs mixture-of-experts ops, which the " + init.backend->name() +
                           " backend does not have");
    }
    std::unique_ptr<GptOssMoe> m(new GptOssMoe());
    const ModelConfig& c = init.config;
    // The router scores all E experts; the block runs those the shard holds (all, or its share
    // of whole experts under expert parallelism: the stacked tensors then hold only those).
    const int64_t E = num_experts(c), I = c.intermediate_size, H = c.hidden_size;
    const ExpertRange held = held_experts(c);
    const LayerWeights& w = init.weights;
    m->router_w_ = w.get("ffn_gate_inp.weight");
    m->router_b_ = w.get("ffn_gate_inp.bias");
    const Tensor gate_up = w.get("ffn_gate_up_exps.weight"), gate = w.get("ffn_gate_exps.weight");
    const Tensor up = w.get("ffn_up_exps.weight"), down = w.get("ffn_down_exps.weight");
    if (m->router_w_.data == nullptr || m->router_b_.data == nullptr || down.data == nullptr ||
        (gate_up.data == nullptr && (gate.data == nullptr || up.data == nullptr))) {
      return data_loss(where + "gpt_oss router or expert weights are not bound");
    }
    MoeExpertWeights& x = m->experts_;
    x.num_experts = held.count;
    x.first_expert = held.first;
    x.hidden_size = H;
    x.intermediate_size = I;
    if (gate_up.data != nullptr) {
      x.gate_up = m->matrix_views(m->gate_up_, gate_up, 2 * I);
      x.gate_up_layout = GateUpLayout::kInterleaved;
      x.gate_up_bias = m->vector_views(m->gate_up_bias_, w.get("ffn_gate_up_exps.bias"), held.count, 2 * I);
    } else {
      x.gate = m->matrix_views(m->gate_, gate, I);
      x.up = m->matrix_views(m->up_, up, I);
      x.gate_bias = m->vector_views(m->gate_bias_, w.get("ffn_gate_exps.bias"), held.count, I);
      x.up_bias = m->vector_views(m->up_bias_, w.get("ffn_up_exps.bias"), held.count, I);
    }
    x.down = m->matrix_views(m->down_, down, H);
    // Under tensor parallelism (experts sliced) only rank 0 holds the down biases: the
    // all-reduce of the partial outputs adds them once.
    x.down_bias = m->vector_views(m->down_bias_, w.get("ffn_down_exps.bias"), held.count, H);
    x.activation = GateActivation::kSwigluOai;
    x.swiglu_oai = SwigluOaiParams{static_cast<float>(param(c, kSwigluAlpha)), static_cast<float>(param(c, kSwigluLimit))};
    // Softmax over every expert, top-k, renormalized: the softmax of the chosen logits, as
    // transformers' GptOssTopKRouter computes it (top-k first).
    m->routing_.top_k = static_cast<int>(param(c, kNumExpertsPerTok));
    m->routing_.scoring = MoeScoring::kSoftmax;
    m->routing_.renormalize = true;
    KVASIR_RETURN_IF_ERROR(validate_moe_routing(m->routing_, E));
    KVASIR_RETURN_IF_ERROR(validate_moe_expert_weights(x));
    Backend& b = *init.backend;
    const int64_t T = init.max_num_tokens, k = m->routing_.top_k;
    KVASIR_ASSIGN_OR_RETURN(m->logits_, m->buffer(b, DType::kF32, T, E));
    KVASIR_ASSIGN_OR_RETURN(m->ids_, m->buffer(b, DType::kI32, T, k));
    KVASIR_ASSIGN_OR_RETURN(m->weights_, m->buffer(b, DType::kF32, T, k));
    return std::unique_ptr<MlpBlock>(std::move(m));
  }

  void forward(Backend& b, const Tensor& h, BlockScratch&, Tensor& out) override {
    const int64_t T = h.rows();
    Tensor logits = logits_.slice_rows(0, T), ids = ids_.slice_rows(0, T), weights = weights_.slice_rows(0, T);
    b.linear(h, router_w_, &router_b_, logits);
    b.moe_route(logits, routing_, ids, weights);
    b.moe_experts(h, ids, weights, experts_, out);
  }

 private:
  // Expert e's [rows, cols] view of a stacked [E, rows, cols] tensor, for every e.
  const Tensor* matrix_views(std::vector<Tensor>& views, const Tensor& stacked, int64_t rows) {
    const Tensor flat = stacked.reshape({stacked.dim(0) * rows, stacked.dim(2)});
    for (int64_t e = 0; e < stacked.dim(0); ++e) views.push_back(flat.slice_rows(e * rows, rows));
    return views.data();
  }
  // Expert e's [n] slice of a float32 [E * n] bias (the binder made it a flat vector), or none.
  const Tensor* vector_views(std::vector<Tensor>& views, const Tensor& flat, int64_t experts, int64_t n) {
    if (flat.data == nullptr) return nullptr;
    for (int64_t e = 0; e < experts; ++e) {
      views.push_back(Tensor::make(static_cast<float*>(flat.data) + e * n, DType::kF32, {n}, flat.device));
    }
    return views.data();
  }
  StatusOr<Tensor> buffer(Backend& b, DType dt, int64_t rows, int64_t cols) {
    KVASIR_ASSIGN_OR_RETURN(auto buf, b.allocate(*row_bytes(dt, cols) * static_cast<size_t>(rows)));
    Tensor t = Tensor::make(buf->data(), dt, {rows, cols}, b.device());
    buffers_.push_back(std::move(buf));
    return t;
  }

  Tensor router_w_, router_b_;  // [E, H], [E]
  std::vector<Tensor> gate_up_, gate_, up_, down_, gate_up_bias_, gate_bias_, up_bias_, down_bias_;
  MoeExpertWeights experts_;
  MoeRouting routing_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  Tensor logits_, ids_, weights_;  // [T, E] f32, [T, top_k] i32, [T, top_k] f32
};

class GptOssFamily final : public ModelFamily {
 public:
  GptOssFamily()
      : ModelFamily(
            ConfigTraits{
                .family = "gpt_oss",
                .attention_bias = true,
                .sliding = SlidingLayers::kPeriodic,  // without layer_types: even layers slide
                .sliding_period = 2,
                .rope_theta = 150000.0,
            },
            {"gpt-oss"}, {"gpt_oss"}, {"GptOssForCausalLM"}) {}

  Status read_hf_extras(const HfKeys& k, ModelConfig& c) const override {
    if (const Json* q = k.find("quantization_config"); q != nullptr && q->is_object()) {
      KVASIR_ASSIGN_OR_RETURN(std::string method, HfKeys(*q, k.where() + ": quantization_config")
                                                      .str_or("quant_method", ""));
      return unimplemented(k.where() + ": gpt_oss checkpoints quantized as '" + quoted_text(method) +
                           "' (quantization_config" + (method == "mxfp4" ? ": MXFP4 experts" : "") +
                           ") are not supported yet; use a bf16 or float32 checkpoint");
    }
    if (k.find("rope_parameters") == nullptr && k.find("rope_scaling") == nullptr) {
      c.rope_scaling = default_yarn();
    }
    if (k.json().find("sliding_window") == nullptr) c.sliding_window = kDefaultSlidingWindow;
    // "num_experts" is transformers' alias of num_local_experts.
    KVASIR_ASSIGN_OR_RETURN(int64_t experts, k.positive_int_or("num_experts", kDefaultExperts));
    KVASIR_ASSIGN_OR_RETURN(experts, k.positive_int_or("num_local_experts", experts));
    KVASIR_ASSIGN_OR_RETURN(int64_t top_k, k.positive_int_or("num_experts_per_tok", kDefaultExpertsPerToken));
    KVASIR_ASSIGN_OR_RETURN(double alpha, k.num_or("swiglu_alpha", kDefaultSwigluAlpha));
    KVASIR_ASSIGN_OR_RETURN(double limit, k.num_or("swiglu_limit", kDefaultSwigluLimit));
    return check_moe_params(k.where(), c, experts, top_k, alpha, limit);
  }

  Status read_gguf_extras(const GgufKeys& k, ModelConfig& c) const override {
    // The converter drops rope "truncate"; every gpt-oss config has it false (llama.cpp rounds
    // the range anyway; transformers, the reference here, does not).
    if (c.rope_scaling.type == RopeScalingType::kYarn) c.rope_scaling.truncate = false;
    KVASIR_ASSIGN_OR_RETURN(int64_t experts, k.integer("expert_count"));
    KVASIR_ASSIGN_OR_RETURN(int64_t top_k, k.integer("expert_used_count"));
    KVASIR_ASSIGN_OR_RETURN(int64_t ffn, k.integer_or("expert_feed_forward_length", c.intermediate_size));
    if (experts < 1 || top_k < 1 || ffn < 1) {
      return invalid_argument("GGUF: " + k.key("expert_count") + ", expert_used_count and " +
                              "expert_feed_forward_length must be positive");
    }
    c.intermediate_size = ffn;  // the experts' width is the model's MLP width
    // llama.cpp hard-codes the clamped SwiGLU's constants; so do the released configs.
    return check_moe_params("GGUF", c, experts, top_k, kDefaultSwigluAlpha, kDefaultSwigluLimit);
  }

  WeightManifest manifest(const ModelConfig& c) const override { return gpt_oss_manifest(c); }

  StatusOr<std::unique_ptr<MlpBlock>> make_mlp(const BlockInit& init) const override {
    return GptOssMoe::create(init);
  }

  // Tensor parallelism: each rank attends with its heads and their sinks; the router is
  // replicated; every expert's gate/up rows (and biases) and down columns are sliced as vLLM's
  // fused MoE does, the down biases (row-parallel) held by rank 0 only; with expert parallelism
  // each rank holds its share of whole experts instead, biases included. o_proj's bias is the
  // generic decoder's (rank 0 only).
  std::optional<TensorParallelSplit> tensor_parallel_split(const std::string& role, const ModelConfig&,
                                                           const ShardPosition& at) const override {
    using S = TensorParallelSplit;
    if (role == "attn_sinks.weight") return S::kRows;
    if (role == "ffn_gate_inp.weight" || role == "ffn_gate_inp.bias") return S::kReplicate;
    for (const char* r : {"ffn_gate_up_exps.weight", "ffn_gate_up_exps.bias", "ffn_gate_exps.weight",
                          "ffn_up_exps.weight", "ffn_gate_exps.bias", "ffn_up_exps.bias"}) {
      if (role == r) return at.expert_parallel ? S::kExperts : S::kRows;
    }
    if (role == "ffn_down_exps.weight") return at.expert_parallel ? S::kExperts : S::kColumns;
    if (role == "ffn_down_exps.bias") return at.expert_parallel ? S::kExperts : S::kFirstRank;
    return std::nullopt;
  }

  // The experts' width is intermediate_size: sliced with the MLP rows, or whole under expert
  // parallelism.
  Status shard_family_params(const ModelConfig& full, ModelConfig& shard, const ShardPosition& at) const override {
    if (at.expert_parallel) shard.intermediate_size = full.intermediate_size;
    return Status();
  }
};

}  // namespace

const ModelFamily& gpt_oss_family() {
  static const GptOssFamily kFamily;
  return kFamily;
}

}  // namespace kvasir
