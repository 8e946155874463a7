#include "model/mla_attention.h"

#include <cmath>
#include <cstring>

#include "backend/host_buffer.h"

namespace kvasir {

namespace {

constexpr const char* kQLora = "mla.q_lora_rank";
constexpr const char* kKvLora = "mla.kv_lora_rank";
constexpr const char* kNope = "mla.qk_nope_head_dim";
constexpr const char* kRope = "mla.qk_rope_head_dim";
constexpr const char* kV = "mla.v_head_dim";
constexpr const char* kMscale = "mla.softmax_mscale";

// transformers' DeepseekV2/V3 build q_a_layernorm and kv_a_layernorm with RMSNorm's default eps,
// not config.rms_norm_eps (llama.cpp uses the model's eps; the released checkpoints say 1e-6 too).
constexpr float kLatentNormEps = 1e-6f;

StatusOr<Tensor> required(const BlockInit& init, const char* role) {
  Tensor t = init.weights.get(role);
  if (t.data == nullptr) {
    return data_loss("layer " + std::to_string(init.layer) + ": weight " + role + " is not bound");
  }
  return t;
}

class MlaAttention final : public AttentionBlock {
 public:
  static StatusOr<std::unique_ptr<AttentionBlock>> create(const BlockInit& init) {
    Backend& b = *init.backend;
    if (!b.supports_mla()) {
      return unimplemented("backend " + b.name() + " has no multi-head latent attention (MLA) ops: " +
                           "DeepSeek models run on the CPU and CUDA backends");
    }
    // The latent row [c_kv | k_pe] has no FP8 form yet (vLLM keeps it with one scale per layer).
    if (const DType kv = b.kv_cache_dtype(); is_fp8(kv)) {
      return unimplemented("--kv-cache-dtype " + std::string(dtype_name(kv)) +
                           ": an FP8 KV cache is not supported for MLA models (DeepSeek's latent cache); use auto");
    }
    if (init.config.rope_scaling.type == RopeScalingType::kLongrope) {
      return unimplemented("MLA with longrope scaling is not supported");
    }
    std::unique_ptr<MlaAttention> a(new MlaAttention(init));
    if (a->m_.q_lora_rank > 0) {
      KVASIR_ASSIGN_OR_RETURN(a->wq_a_, required(init, "attn_q_a.weight"));
      KVASIR_ASSIGN_OR_RETURN(a->q_a_norm_, required(init, "attn_q_a_norm.weight"));
      KVASIR_ASSIGN_OR_RETURN(a->wq_b_, required(init, "attn_q_b.weight"));
    } else {
      KVASIR_ASSIGN_OR_RETURN(a->wq_, required(init, "attn_q.weight"));
    }
    KVASIR_ASSIGN_OR_RETURN(a->wkv_a_, required(init, "attn_kv_a.weight"));
    KVASIR_ASSIGN_OR_RETURN(a->wk_pe_, required(init, "attn_k_pe.weight"));
    KVASIR_ASSIGN_OR_RETURN(a->kv_a_norm_, required(init, "attn_kv_a_norm.weight"));
    KVASIR_ASSIGN_OR_RETURN(a->wo_, required(init, "attn_output.weight"));
    KVASIR_RETURN_IF_ERROR(a->absorb_weights(init));
    KVASIR_RETURN_IF_ERROR(a->allocate(b, init.max_num_tokens));
    return std::unique_ptr<AttentionBlock>(std::move(a));
  }

  KvCacheShape cache_shape() const override { return {1, m_.kv_lora_rank + m_.qk_rope_dim, 0, 0}; }

  void forward(Backend& b, const Tensor& h, const ForwardBatch& batch, Tensor& k_cache,
               Tensor& /*v_cache: none, the latent row holds the values*/, BlockScratch& /*scratch*/,
               Tensor& out) override {
    const int64_t T = h.rows();
    // The model fills its RoPE tables after creating the blocks: read them here.
    params_.rope.inv_freq = rope_->inv_freq.data();
    params_.rope.attention_factor = rope_->attention_factor;
    Tensor q = q_.slice_rows(0, T), c_kv = c_kv_.slice_rows(0, T), k_pe = k_pe_.slice_rows(0, T);
    Tensor attn = attn_.slice_rows(0, T);
    if (m_.q_lora_rank > 0) {
      Tensor q_a = q_a_.slice_rows(0, T);
      b.linear(h, wq_a_, nullptr, q_a);
      b.rms_norm(q_a, q_a_norm_, kLatentNormEps, q_a);
      b.linear(q_a, wq_b_, nullptr, q);
    } else {
      b.linear(h, wq_, nullptr, q);
    }
    b.linear(h, wkv_a_, nullptr, c_kv);
    b.linear(h, wk_pe_, nullptr, k_pe);
    b.rms_norm(c_kv, kv_a_norm_, kLatentNormEps, c_kv);
    b.write_latent_kv(c_kv, k_pe, batch.positions, params_.rope, k_cache, batch.attn);
    // vLLM runs prefill differently: it decompresses the context's latents into per-head K/V
    // (kv_b_proj) and runs ordinary attention, since a prefill is compute-bound and the absorbed
    // form does more arithmetic per score (kv_lora_rank + rope dims instead of nope + rope, and
    // values of kv_lora_rank). Decode is bound by reading the cache, where the absorbed form reads
    // one small latent row per token for all heads. Here both use the absorbed op: the result is
    // the same math, and on the CPU one path keeps a token's output independent of its step.
    Tensor q3 = q.reshape({T, heads_, m_.qk_nope_dim + m_.qk_rope_dim});
    Tensor attn3 = attn.reshape({T, heads_, m_.v_head_dim});
    b.mla_attention(q3, batch.positions, k_cache, batch.attn, params_, attn3);
    b.linear(attn, wo_, nullptr, out);
  }

 private:
  explicit MlaAttention(const BlockInit& init)
      : m_(mla_config(init.config)), heads_(init.config.num_heads), rope_(&init.rope->global) {
    params_.rope.rotary_dim = static_cast<int>(m_.qk_rope_dim);
    params_.rope.neox = init.config.rope_style == RopeStyle::kNeox;
    params_.scale = static_cast<float>(init.config.attention_scale() * m_.softmax_mscale);
  }

  // W_UK^T [heads, L, nope] and W_UV [heads, v, L] as dense float32, from kv_b_proj (HF, and
  // older GGUF files) or from llama.cpp's split attn_k_b / attn_v_b, which hold exactly these.
  Status absorb_weights(const BlockInit& init) {
    const int64_t H = heads_, L = m_.kv_lora_rank, N = m_.qk_nope_dim, V = m_.v_head_dim;
    const size_t uk_n = static_cast<size_t>(H * L * N), uv_n = static_cast<size_t>(H * V * L);
    KVASIR_ASSIGN_OR_RETURN(auto uk_buf, allocate_host_buffer(uk_n * sizeof(float)));
    KVASIR_ASSIGN_OR_RETURN(auto uv_buf, allocate_host_buffer(uv_n * sizeof(float)));
    float* uk = static_cast<float*>(uk_buf->data());
    float* uv = static_cast<float*>(uv_buf->data());
    const Tensor k_b = init.weights.get("attn_k_b.weight"), v_b = init.weights.get("attn_v_b.weight");
    const Tensor kv_b = init.weights.get("attn_kv_b.weight");
    if (k_b.data != nullptr && v_b.data != nullptr) {
      std::memcpy(uk, k_b.data, uk_n * sizeof(float));
      std::memcpy(uv, v_b.data, uv_n * sizeof(float));
    } else if (kv_b.data != nullptr) {
      // kv_b_proj [H * (N + V), L]: per head N rows of W_UK, then V rows of W_UV.
      const float* w = kv_b.ptr<float>();
      for (int64_t h = 0; h < H; ++h) {
        const float* head = w + h * (N + V) * L;
        for (int64_t n = 0; n < N; ++n) {
          for (int64_t l = 0; l < L; ++l) uk[(h * L + l) * N + n] = head[n * L + l];
        }
        std::memcpy(uv + h * V * L, head + N * L, static_cast<size_t>(V * L) * sizeof(float));
      }
    } else {
      return data_loss("layer " + std::to_string(init.layer) +
                       ": MLA needs kv_b_proj (attn_kv_b.weight) or attn_k_b.weight and attn_v_b.weight");
    }
    // upload_weight makes them the backend's matrices (bf16 on a GPU, which copies them: the
    // host buffers go then; the CPU reads them in place, so it keeps them).
    KVASIR_ASSIGN_OR_RETURN(params_.w_uk_t, upload(*init.backend, Tensor::make(uk, DType::kF32, {H, L, N})));
    KVASIR_ASSIGN_OR_RETURN(params_.w_uv, upload(*init.backend, Tensor::make(uv, DType::kF32, {H, V, L})));
    if (params_.w_uk_t.data == uk) owned_.push_back(std::move(uk_buf));
    if (params_.w_uv.data == uv) owned_.push_back(std::move(uv_buf));
    return Status();
  }

  StatusOr<Tensor> upload(Backend& b, const Tensor& host) {
    std::unique_ptr<Buffer> owner;
    KVASIR_ASSIGN_OR_RETURN(Tensor t, b.upload_weight(host, &owner));
    if (owner) owned_.push_back(std::move(owner));
    return t;
  }

  Status allocate(Backend& b, int64_t T) {
    const DType act = b.activation_dtype();
    auto make = [&](Tensor& t, int64_t cols) -> Status {
      KVASIR_ASSIGN_OR_RETURN(auto buf, b.allocate(*row_bytes(act, cols) * static_cast<size_t>(T)));
      t = Tensor::make(buf->data(), act, {T, cols}, b.device());
      owned_.push_back(std::move(buf));
      return Status();
    };
    KVASIR_RETURN_IF_ERROR(make(q_, heads_ * (m_.qk_nope_dim + m_.qk_rope_dim)));
    if (m_.q_lora_rank > 0) KVASIR_RETURN_IF_ERROR(make(q_a_, m_.q_lora_rank));
    KVASIR_RETURN_IF_ERROR(make(c_kv_, m_.kv_lora_rank));
    KVASIR_RETURN_IF_ERROR(make(k_pe_, m_.qk_rope_dim));
    return make(attn_, heads_ * m_.v_head_dim);
  }

  MlaConfig m_;
  int64_t heads_;
  const RopeTable* rope_;
  MlaParams params_;
  Tensor wq_, wq_a_, q_a_norm_, wq_b_, wkv_a_, wk_pe_, kv_a_norm_, wo_;
  Tensor q_, q_a_, c_kv_, k_pe_, attn_;  // [max_num_tokens, ...] activations of this block
  std::vector<std::unique_ptr<Buffer>> owned_;
};

Status check_size(const char* name, int64_t v) {
  if (v < 1 || v > 65536) {
    return invalid_argument(std::string("model config: ") + name + " = " + std::to_string(v) + " must be in [1, 65536]");
  }
  return Status();
}

}  // namespace

Status set_mla_config(const MlaConfig& m, ModelConfig& c) {
  if (m.q_lora_rank != 0) KVASIR_RETURN_IF_ERROR(check_size("q_lora_rank", m.q_lora_rank));
  KVASIR_RETURN_IF_ERROR(check_size("kv_lora_rank", m.kv_lora_rank));
  KVASIR_RETURN_IF_ERROR(check_size("qk_nope_head_dim", m.qk_nope_dim));
  KVASIR_RETURN_IF_ERROR(check_size("qk_rope_head_dim", m.qk_rope_dim));
  KVASIR_RETURN_IF_ERROR(check_size("v_head_dim", m.v_head_dim));
  if (m.qk_rope_dim % 2 != 0) return invalid_argument("model config: qk_rope_head_dim must be even");
  if (!(m.softmax_mscale > 0) || !std::isfinite(m.softmax_mscale)) {
    return invalid_argument("model config: the YaRN softmax scale correction must be positive");
  }
  c.family_params[kQLora] = static_cast<double>(m.q_lora_rank);
  c.family_params[kKvLora] = static_cast<double>(m.kv_lora_rank);
  c.family_params[kNope] = static_cast<double>(m.qk_nope_dim);
  c.family_params[kRope] = static_cast<double>(m.qk_rope_dim);
  c.family_params[kV] = static_cast<double>(m.v_head_dim);
  c.family_params[kMscale] = m.softmax_mscale;
  c.head_dim = m.qk_nope_dim + m.qk_rope_dim;
  c.rotary_dim = m.qk_rope_dim;
  c.query_pre_attn_scalar = static_cast<double>(c.head_dim);
  c.num_kv_heads = 1;
  return Status();
}

MlaConfig mla_config(const ModelConfig& c) {
  auto get = [&](const char* key) {
    auto it = c.family_params.find(key);
    KVASIR_CHECK_MSG(it != c.family_params.end(), "MLA config not set (set_mla_config)");
    return it->second;
  };
  MlaConfig m;
  m.q_lora_rank = static_cast<int64_t>(get(kQLora));
  m.kv_lora_rank = static_cast<int64_t>(get(kKvLora));
  m.qk_nope_dim = static_cast<int64_t>(get(kNope));
  m.qk_rope_dim = static_cast<int64_t>(get(kRope));
  m.v_head_dim = static_cast<int64_t>(get(kV));
  m.softmax_mscale = get(kMscale);
  return m;
}

void add_mla_weights(const ModelConfig& c, int64_t i, std::vector<WeightSpec>& layer) {
  const MlaConfig m = mla_config(c);
  const int64_t hidden = c.hidden_size, H = c.num_heads, L = m.kv_lora_rank, R = m.qk_rope_dim;
  const int64_t qd = H * (m.qk_nope_dim + R);
  const std::string g = "blk." + std::to_string(i) + ".", p = "model.layers." + std::to_string(i) + ".self_attn.";
  auto add = [&](const std::string& role, const std::string& hf, WeightKind kind, std::vector<int64_t> shape) -> WeightSpec& {
    WeightSpec s;
    s.role = role;
    s.gguf.name = g + role;
    s.hf.name = hf.empty() ? "" : p + hf;
    s.kind = kind;
    s.shape = std::move(shape);
    layer.push_back(std::move(s));
    return layer.back();
  };
  if (m.q_lora_rank > 0) {
    add("attn_q_a.weight", "q_a_proj.weight", WeightKind::kMatrix, {m.q_lora_rank, hidden});
    add("attn_q_a_norm.weight", "q_a_layernorm.weight", WeightKind::kNorm, {m.q_lora_rank});
    add("attn_q_b.weight", "q_b_proj.weight", WeightKind::kMatrix, {qd, m.q_lora_rank});
  } else {
    add("attn_q.weight", "q_proj.weight", WeightKind::kMatrix, {qd, hidden});
  }
  // kv_a_proj_with_mqa [L + R, hidden] is bound as two row ranges, so c_kv and k_pe come out of
  // two linears as contiguous rows (the norm runs over c_kv alone).
  WeightSpec& kv_a = add("attn_kv_a.weight", "", WeightKind::kMatrix, {L, hidden});
  kv_a.gguf = WeightName{g + "attn_kv_a_mqa.weight", 0, L + R};
  kv_a.hf = WeightName{p + "kv_a_proj_with_mqa.weight", 0, L + R};
  WeightSpec& k_pe = add("attn_k_pe.weight", "", WeightKind::kMatrix, {R, hidden});
  k_pe.gguf = WeightName{g + "attn_kv_a_mqa.weight", L, L + R};
  k_pe.hf = WeightName{p + "kv_a_proj_with_mqa.weight", L, L + R};
  add("attn_kv_a_norm.weight", "kv_a_layernorm.weight", WeightKind::kNorm, {L});
  // kv_b_proj in HF files (and GGUF files converted before llama.cpp split it); newer GGUF files
  // hold its two halves already shaped for the absorbed form.
  add("attn_kv_b.weight", "kv_b_proj.weight", WeightKind::kHostMatrix, {H * (m.qk_nope_dim + m.v_head_dim), L})
      .optional = true;
  for (const auto& [role, shape] : {std::pair<const char*, std::vector<int64_t>>{"attn_k_b.weight", {H, L, m.qk_nope_dim}},
                                    std::pair<const char*, std::vector<int64_t>>{"attn_v_b.weight", {H, m.v_head_dim, L}}}) {
    WeightSpec& s = add(role, "", WeightKind::kHostMatrix, shape);
    s.optional = true;
    s.expected = false;  // --load-format dummy makes kv_b_proj
  }
  add("attn_output.weight", "o_proj.weight", WeightKind::kMatrix, {hidden, H * m.v_head_dim});
}

std::optional<TensorParallelSplit> mla_tensor_parallel_split(const std::string& role) {
  using S = TensorParallelSplit;
  if (role == "attn_q_a.weight" || role == "attn_q_a_norm.weight" || role == "attn_kv_a.weight" ||
      role == "attn_k_pe.weight" || role == "attn_kv_a_norm.weight")
    return S::kReplicate;
  // Rows [H * (nope + rope)] and kv_b_proj's [H * (nope + v), L] run head by head.
  if (role == "attn_q.weight" || role == "attn_q_b.weight") return S::kRows;
  if (role == "attn_kv_b.weight" || role == "attn_k_b.weight" || role == "attn_v_b.weight") return S::kLeading;
  if (role == "attn_output.weight") return S::kColumns;  // [hidden, H * v]
  return std::nullopt;
}

StatusOr<std::unique_ptr<AttentionBlock>> make_mla_attention(const BlockInit& init) {
  return MlaAttention::create(init);
}

}  // namespace kvasir
