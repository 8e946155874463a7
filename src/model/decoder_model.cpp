#include "model/decoder_model.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "model/weight_binding.h"

namespace kvasir {

struct DecoderModel::Layer {
  Tensor attn_norm, wq, wk, wv, wo, bq, bk, bv;
  Tensor q_norm, k_norm;        // QK-norm (Gemma 3, Qwen3); empty when absent
  Tensor post_attn_norm;        // Gemma: norm of the attention output before the residual add
  Tensor ffn_norm, w_gate, w_up, w_down;
  Tensor post_ffn_norm;         // Gemma: norm of the MLP output before the residual add
  bool sliding = false;
};

// Activation buffers sized once for opts.max_num_tokens rows (the hot path allocates nothing).
struct DecoderModel::Workspace {
  std::vector<std::unique_ptr<Buffer>> buffers;
  Tensor x;        // [T, hidden] residual stream
  Tensor h;        // [T, hidden] normed input of a block
  Tensor q;        // [T, heads * head_dim]
  Tensor k, v;     // [T, kv_heads * head_dim]
  Tensor attn;     // [T, heads * head_dim]
  Tensor o;        // [T, hidden] block output before the residual add
  Tensor gate, up; // [T, intermediate]
  Tensor last;     // [L, hidden] rows selected for logits
  Tensor logits;   // [L, vocab]
};

DecoderModel::DecoderModel(const ModelConfig& config, Backend& backend, const ModelOptions& opts)
    : config_(config), backend_(backend), opts_(opts), eps_(static_cast<float>(config.rms_norm_eps)) {}

DecoderModel::~DecoderModel() = default;

StatusOr<std::unique_ptr<DecoderModel>> DecoderModel::create(const ModelConfig& config, const WeightSource& weights,
                                                             Backend& backend, const ModelOptions& opts) {
  if (opts.max_num_tokens < 1 || opts.max_num_logits < 1) return invalid_argument("model options must be positive");
  std::unique_ptr<DecoderModel> m(new DecoderModel(config, backend, opts));
  KVASIR_RETURN_IF_ERROR(m->bind_weights(weights));
  KVASIR_RETURN_IF_ERROR(m->allocate_workspace());
  std::vector<float> freq_factors;
  if (config.rope_scaling.freq_factors_tensor) {
    KVASIR_ASSIGN_OR_RETURN(WeightTensor f, weights.tensor("rope_freqs.weight"));
    if (f.dtype != DType::kF32 || f.num_elements() != config.rotary_dim / 2) return data_loss("rope_freqs.weight must be f32 [rotary_dim / 2]");
    freq_factors.resize(static_cast<size_t>(f.num_elements()));
    std::memcpy(freq_factors.data(), f.data, f.nbytes);
  }
  const int rd = static_cast<int>(config.rotary_dim);
  m->rope_tables_.push_back(make_rope_table(config.rope_theta, rd, config.rope_scaling,
                                            freq_factors.empty() ? nullptr : &freq_factors));
  // Sliding layers: Gemma 3 gives them their own base frequency and no scaling.
  const bool own_local = config.architecture == "gemma3";
  m->rope_tables_.push_back(make_rope_table(config.rope_theta_local, rd, own_local ? RopeScaling{} : config.rope_scaling,
                                            freq_factors.empty() || own_local ? nullptr : &freq_factors));
  return m;
}

Status DecoderModel::bind_weights(const WeightSource& src) {
  WeightBinder b(src, backend_, config_, owned_);
  KVASIR_ASSIGN_OR_RETURN(embed_, b.matrix("token_embd.weight", "model.embed_tokens.weight"));
  KVASIR_ASSIGN_OR_RETURN(final_norm_, b.norm("output_norm.weight", "model.norm.weight"));
  if (config_.tie_word_embeddings || (!src.has_tensor("output.weight") && !src.has_tensor("lm_head.weight"))) {
    lm_head_ = embed_;
  } else {
    KVASIR_ASSIGN_OR_RETURN(lm_head_, b.matrix("output.weight", "lm_head.weight"));
  }
  layers_.resize(static_cast<size_t>(config_.num_layers));
  for (int i = 0; i < config_.num_layers; ++i) {
    Layer& L = layers_[static_cast<size_t>(i)];
    auto g = [i](const char* fmt) {
      char buf[128];
      std::snprintf(buf, sizeof(buf), fmt, i);
      return std::string(buf);
    };
    L.sliding = config_.layer_is_sliding[static_cast<size_t>(i)];
    KVASIR_ASSIGN_OR_RETURN(L.attn_norm, b.norm(g("blk.%d.attn_norm.weight"), g("model.layers.%d.input_layernorm.weight")));
    KVASIR_ASSIGN_OR_RETURN(L.wq, b.matrix(g("blk.%d.attn_q.weight"), g("model.layers.%d.self_attn.q_proj.weight")));
    KVASIR_ASSIGN_OR_RETURN(L.wk, b.matrix(g("blk.%d.attn_k.weight"), g("model.layers.%d.self_attn.k_proj.weight")));
    KVASIR_ASSIGN_OR_RETURN(L.wv, b.matrix(g("blk.%d.attn_v.weight"), g("model.layers.%d.self_attn.v_proj.weight")));
    KVASIR_ASSIGN_OR_RETURN(L.wo, b.matrix(g("blk.%d.attn_output.weight"), g("model.layers.%d.self_attn.o_proj.weight")));
    KVASIR_ASSIGN_OR_RETURN(L.bq, b.optional_vector(g("blk.%d.attn_q.bias"), g("model.layers.%d.self_attn.q_proj.bias")));
    KVASIR_ASSIGN_OR_RETURN(L.bk, b.optional_vector(g("blk.%d.attn_k.bias"), g("model.layers.%d.self_attn.k_proj.bias")));
    KVASIR_ASSIGN_OR_RETURN(L.bv, b.optional_vector(g("blk.%d.attn_v.bias"), g("model.layers.%d.self_attn.v_proj.bias")));
    if (config_.qk_norm) {
      KVASIR_ASSIGN_OR_RETURN(L.q_norm, b.norm(g("blk.%d.attn_q_norm.weight"), g("model.layers.%d.self_attn.q_norm.weight")));
      KVASIR_ASSIGN_OR_RETURN(L.k_norm, b.norm(g("blk.%d.attn_k_norm.weight"), g("model.layers.%d.self_attn.k_norm.weight")));
    }
    if (config_.post_block_norms) {
      KVASIR_ASSIGN_OR_RETURN(L.post_attn_norm, b.norm(g("blk.%d.post_attention_norm.weight"), g("model.layers.%d.post_attention_layernorm.weight")));
      KVASIR_ASSIGN_OR_RETURN(L.ffn_norm, b.norm(g("blk.%d.ffn_norm.weight"), g("model.layers.%d.pre_feedforward_layernorm.weight")));
      KVASIR_ASSIGN_OR_RETURN(L.post_ffn_norm, b.norm(g("blk.%d.post_ffw_norm.weight"), g("model.layers.%d.post_feedforward_layernorm.weight")));
    } else {
      KVASIR_ASSIGN_OR_RETURN(L.ffn_norm, b.norm(g("blk.%d.ffn_norm.weight"), g("model.layers.%d.post_attention_layernorm.weight")));
    }
    KVASIR_ASSIGN_OR_RETURN(L.w_gate, b.matrix(g("blk.%d.ffn_gate.weight"), g("model.layers.%d.mlp.gate_proj.weight")));
    KVASIR_ASSIGN_OR_RETURN(L.w_up, b.matrix(g("blk.%d.ffn_up.weight"), g("model.layers.%d.mlp.up_proj.weight")));
    KVASIR_ASSIGN_OR_RETURN(L.w_down, b.matrix(g("blk.%d.ffn_down.weight"), g("model.layers.%d.mlp.down_proj.weight")));
  }
  return b.check_shapes(embed_, lm_head_, layers_.size());
}

Status DecoderModel::allocate_workspace() {
  ws_ = std::make_unique<Workspace>();
  const int64_t T = opts_.max_num_tokens, L = opts_.max_num_logits;
  const int64_t hidden = config_.hidden_size, qd = int64_t{config_.num_heads} * config_.head_dim;
  const int64_t kvd = int64_t{config_.num_kv_heads} * config_.head_dim;
  const DType act = backend_.activation_dtype();
  auto make = [&](Tensor& t, int64_t rows, int64_t cols) -> Status {
    KVASIR_ASSIGN_OR_RETURN(auto buf, backend_.allocate(*row_bytes(act, cols) * static_cast<size_t>(rows)));
    t = Tensor::make(buf->data(), act, {rows, cols}, backend_.device());
    ws_->buffers.push_back(std::move(buf));
    return Status();
  };
  KVASIR_RETURN_IF_ERROR(make(ws_->x, T, hidden));
  KVASIR_RETURN_IF_ERROR(make(ws_->h, T, hidden));
  KVASIR_RETURN_IF_ERROR(make(ws_->q, T, qd));
  KVASIR_RETURN_IF_ERROR(make(ws_->k, T, kvd));
  KVASIR_RETURN_IF_ERROR(make(ws_->v, T, kvd));
  KVASIR_RETURN_IF_ERROR(make(ws_->attn, T, qd));
  KVASIR_RETURN_IF_ERROR(make(ws_->o, T, hidden));
  KVASIR_RETURN_IF_ERROR(make(ws_->gate, T, config_.intermediate_size));
  KVASIR_RETURN_IF_ERROR(make(ws_->up, T, config_.intermediate_size));
  KVASIR_RETURN_IF_ERROR(make(ws_->last, L, hidden));
  // Logits are float32 on every backend: the sampler and logprobs need the full precision.
  KVASIR_ASSIGN_OR_RETURN(auto logits_buf, backend_.allocate(static_cast<size_t>(L * config_.vocab_size) * sizeof(float)));
  ws_->logits = Tensor::make(logits_buf->data(), DType::kF32, {L, config_.vocab_size}, backend_.device());
  ws_->buffers.push_back(std::move(logits_buf));
  return Status();
}

size_t DecoderModel::kv_cache_bytes_per_block(int block_size) const {
  const size_t row = *row_bytes(backend_.kv_cache_dtype(), int64_t{config_.num_kv_heads} * config_.head_dim);
  return row * static_cast<size_t>(block_size) * 2 * static_cast<size_t>(config_.num_layers);
}

StatusOr<KvCache> DecoderModel::allocate_kv_cache(int num_blocks, int block_size) {
  if (num_blocks < 1 || block_size < 1) return invalid_argument("KV cache needs at least one block");
  KvCache c;
  c.num_blocks = num_blocks;
  c.block_size = block_size;
  const DType kv_dtype = backend_.kv_cache_dtype();
  const size_t bytes = kv_cache_bytes_per_block(block_size) / 2 / static_cast<size_t>(config_.num_layers) *
                       static_cast<size_t>(num_blocks);
  for (int l = 0; l < config_.num_layers; ++l) {
    for (auto* side : {&c.k, &c.v}) {
      KVASIR_ASSIGN_OR_RETURN(auto buf, backend_.allocate(bytes));
      // Not cleared: attention only reads slots written by write_kv, and untouched pages stay free.
      side->push_back(Tensor::make(buf->data(), kv_dtype,
                                   {num_blocks, block_size, config_.num_kv_heads, config_.head_dim}, backend_.device()));
      c.buffers.push_back(std::move(buf));
    }
  }
  return c;
}

Status DecoderModel::forward(const ForwardBatch& batch, KvCache& cache, float* logits) {
  KVASIR_RETURN_IF_ERROR(run_layers(batch, cache));
  if (batch.num_logits == 0) return Status();
  return compute_logits(batch.logits_indices, batch.num_logits, logits);
}

Status DecoderModel::run_layers(const ForwardBatch& batch, KvCache& cache) {
  last_num_tokens_ = 0;
  const int T = batch.num_tokens;
  if (T < 1 || T > opts_.max_num_tokens) return invalid_argument("batch of " + std::to_string(T) + " tokens exceeds the model's workspace");
  for (int i = 0; i < T; ++i) {
    if (batch.input_ids[i] < 0 || batch.input_ids[i] >= config_.vocab_size) return invalid_argument("token id out of range");
  }
  const int64_t heads = config_.num_heads, kvh = config_.num_kv_heads, hd = config_.head_dim;
  Workspace& w = *ws_;
  Tensor x = w.x.slice_rows(0, T), h = w.h.slice_rows(0, T), o = w.o.slice_rows(0, T);
  Tensor q = w.q.slice_rows(0, T), k = w.k.slice_rows(0, T), v = w.v.slice_rows(0, T);
  Tensor attn = w.attn.slice_rows(0, T), gate = w.gate.slice_rows(0, T), up = w.up.slice_rows(0, T);
  Tensor q3 = q.reshape({T, heads, hd}), k3 = k.reshape({T, kvh, hd}), v3 = v.reshape({T, kvh, hd});
  Tensor attn3 = attn.reshape({T, heads, hd});

  backend_.embedding(embed_, batch.input_ids, T, static_cast<float>(config_.embedding_scale), x);
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    backend_.rms_norm(x, L.attn_norm, eps_, h);
    backend_.linear(h, L.wq, L.bq.data ? &L.bq : nullptr, q);
    backend_.linear(h, L.wk, L.bk.data ? &L.bk : nullptr, k);
    backend_.linear(h, L.wv, L.bv.data ? &L.bv : nullptr, v);
    if (L.q_norm.data != nullptr) {
      Tensor qh = q.reshape({T * heads, hd}), kh = k.reshape({T * kvh, hd});
      backend_.rms_norm(qh, L.q_norm, eps_, qh);
      backend_.rms_norm(kh, L.k_norm, eps_, kh);
    }
    const RopeTable& rt = rope_tables_[L.sliding ? 1 : 0];
    RopeParams rp{static_cast<int>(config_.rotary_dim), config_.rope_style == RopeStyle::kNeox, rt.inv_freq.data(), rt.attention_factor};
    backend_.rope(q3, k3, batch.positions, rp);
    backend_.write_kv(k3, v3, cache.k[l], cache.v[l], batch.attn);
    AttentionParams ap{static_cast<float>(config_.attention_scale()), L.sliding ? static_cast<int>(config_.sliding_window) : 0,
                       static_cast<float>(config_.attn_logit_softcapping.value_or(0.0))};
    backend_.attention(q3, cache.k[l], cache.v[l], batch.attn, ap, attn3);
    backend_.linear(attn, L.wo, nullptr, o);
    if (L.post_attn_norm.data != nullptr) backend_.rms_norm(o, L.post_attn_norm, eps_, o);
    backend_.add_rms_norm(x, o, L.ffn_norm, eps_, h);
    backend_.linear(h, L.w_gate, nullptr, gate);
    backend_.linear(h, L.w_up, nullptr, up);
    backend_.gated_activation(gate, up, config_.activation == Activation::kSilu ? GateActivation::kSilu : GateActivation::kGeluTanh, gate);
    backend_.linear(gate, L.w_down, nullptr, o);
    if (L.post_ffn_norm.data != nullptr) backend_.rms_norm(o, L.post_ffn_norm, eps_, o);
    backend_.add(x, o);
  }
  last_num_tokens_ = T;
  return Status();
}

Status DecoderModel::compute_logits(const int32_t* rows, int num_rows, float* logits) {
  if (num_rows == 0) return Status();
  KVASIR_ASSIGN_OR_RETURN(Tensor out, compute_logits_on_device(rows, num_rows));
  backend_.copy_to_host(out, logits);
  return Status();
}

StatusOr<Tensor> DecoderModel::compute_logits_on_device(const int32_t* rows, int num_rows) {
  if (num_rows < 1 || num_rows > opts_.max_num_logits) return invalid_argument("logits rows must be in [1, max_num_logits]");
  for (int i = 0; i < num_rows; ++i) {
    if (rows[i] < 0 || rows[i] >= last_num_tokens_) return invalid_argument("logits row out of range");
  }
  Workspace& w = *ws_;
  Tensor x = w.x.slice_rows(0, last_num_tokens_);
  Tensor last = w.last.slice_rows(0, num_rows);
  Tensor out = w.logits.slice_rows(0, num_rows);
  backend_.gather_rows(x, rows, num_rows, last);
  backend_.rms_norm(last, final_norm_, eps_, last);
  backend_.linear(last, lm_head_, nullptr, out);
  if (config_.final_logit_softcapping) backend_.softcap(out, static_cast<float>(*config_.final_logit_softcapping));
  return out;
}

}  // namespace kvasir
