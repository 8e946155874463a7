#include "model/draft_heads/eagle_head.h"

#include "model/weight_binding.h"

namespace kvasir {

EagleHead::EagleHead(const EagleHeadConfig& config, DecoderModel& target, int max_num_tokens, int max_num_rows)
    : config_(config),
      target_(target),
      backend_(target.backend()),
      max_num_tokens_(max_num_tokens),
      max_num_rows_(max_num_rows),
      eps_(static_cast<float>(config.layer.rms_norm_eps)),
      rope_(std::make_unique<RopeTables>()) {}

EagleHead::~EagleHead() = default;

StatusOr<std::unique_ptr<EagleHead>> EagleHead::create(const EagleHeadConfig& config, const WeightSource& weights,
                                                       DecoderModel& target, int max_num_tokens, int max_num_rows) {
  if (max_num_tokens < 1 || max_num_rows < 1) return invalid_argument("EAGLE head: workspace sizes must be positive");
  if (max_num_tokens > target.max_num_tokens()) {
    return invalid_argument("EAGLE head: a pass of " + std::to_string(max_num_tokens) +
                            " tokens exceeds the target's workspace of " + std::to_string(target.max_num_tokens()));
  }
  if (config.layer.hidden_size != target.config().hidden_size) {
    return invalid_argument("EAGLE head: hidden_size " + std::to_string(config.layer.hidden_size) +
                            " differs from the target's " + std::to_string(target.config().hidden_size));
  }
  if (config.layer.vocab_size != target.config().vocab_size) {
    return invalid_argument("EAGLE head: vocab_size " + std::to_string(config.layer.vocab_size) +
                            " differs from the target's " + std::to_string(target.config().vocab_size));
  }
  std::unique_ptr<EagleHead> h(new EagleHead(config, target, max_num_tokens, max_num_rows));
  KVASIR_RETURN_IF_ERROR(h->bind(weights));
  KVASIR_RETURN_IF_ERROR(h->allocate_workspace());
  KVASIR_RETURN_IF_ERROR(target.capture_final_hidden_states());
  return h;
}

Status EagleHead::bind(const WeightSource& weights) {
  const WeightManifest manifest = eagle_head_manifest(config_);
  WeightBinder b(weights, backend_, config_.layer, owned_);
  KVASIR_ASSIGN_OR_RETURN(LayerWeights top, b.bind(manifest.model));
  KVASIR_ASSIGN_OR_RETURN(weights_, b.bind(manifest.layers[0]));
  embed_ = target_.token_embedding();
  lm_head_ = target_.lm_head();
  if (embed_.data == nullptr || lm_head_.data == nullptr) {
    return invalid_argument("EAGLE head: the target's token embedding and lm_head are not bound here");
  }
  fc_ = top.get("fc.weight");
  fc_bias_ = top.get("fc.bias");
  if (config_.fc_bias.has_value() && *config_.fc_bias != has_fc_bias()) {
    return data_loss(std::string("EAGLE head: config.json says 'bias': ") + (*config_.fc_bias ? "true" : "false") +
                     " but the checkpoint " + (has_fc_bias() ? "holds" : "lacks") + " fc.bias");
  }
  post_norm_ = weights_.get("ffn_norm.weight");
  const ModelConfig& c = config_.layer;
  rope_->global = make_rope_table(c.rope_theta, static_cast<int>(c.rotary_dim), c.rope_scaling);
  rope_->sliding = rope_->global;
  const BlockInit init{c, weights_, 0, false, rope_.get(), &backend_, max_num_tokens_};
  KVASIR_ASSIGN_OR_RETURN(attn_, make_decoder_attention(init));
  KVASIR_ASSIGN_OR_RETURN(mlp_, make_gated_mlp(init));
  return Status();
}

Status EagleHead::allocate_workspace() {
  const ModelConfig& c = config_.layer;
  const int64_t T = max_num_tokens_, R = max_num_rows_, H = c.hidden_size;
  const DType act = backend_.activation_dtype();
  auto make = [&](Tensor& t, int64_t rows, int64_t cols, DType dt) {
    return allocate_head_tensor(backend_, rows, cols, dt, buffers_, t);
  };
  KVASIR_RETURN_IF_ERROR(make(hidden_[0], T, H, act));
  KVASIR_RETURN_IF_ERROR(make(hidden_[1], T, H, act));
  KVASIR_RETURN_IF_ERROR(make(halves_, 2 * T, H, act));
  KVASIR_RETURN_IF_ERROR(make(cat_, T, 2 * H, act));
  KVASIR_RETURN_IF_ERROR(make(last_, R, H, act));
  KVASIR_RETURN_IF_ERROR(layer_.allocate(backend_, c, T, buffers_));
  KVASIR_RETURN_IF_ERROR(make(logits_, R, c.vocab_size, DType::kF32));
  interleave_rows_.reserve(static_cast<size_t>(2 * T));
  greedy_rows_.assign(static_cast<size_t>(R), DeviceSamplingRow{});  // temperature 0: argmax
  return Status();
}

size_t EagleHead::kv_cache_bytes_per_block(int block_size) const {
  return head_kv_cache_bytes_per_block(backend_, attn_->cache_shape(), block_size);
}

StatusOr<KvCache> EagleHead::allocate_kv_cache(int num_blocks, int block_size) {
  return allocate_head_kv_cache(backend_, attn_->cache_shape(), num_blocks, block_size);
}

Status EagleHead::forward(const ForwardBatch& batch, HiddenFrom from, const int32_t* hidden_rows, KvCache& cache) {
  KVASIR_RETURN_IF_ERROR(check_head_pass(batch, max_num_tokens_, config_.layer.vocab_size, "EAGLE head"));
  const int T = batch.num_tokens;
  // [embedding | hidden state]: both halves into [2T, H], then interleaved into fc's [T, 2H].
  Tensor emb = halves_.slice_rows(0, T), hid = halves_.slice_rows(T, T);
  if (from == HiddenFrom::kTarget) {
    const Tensor& states = target_.final_hidden_states();
    for (int i = 0; i < T; ++i) {
      if (hidden_rows[i] < 0 || hidden_rows[i] >= target_.max_num_tokens()) {
        return invalid_argument("EAGLE head: target row out of range");
      }
    }
    backend_.gather_rows(states, hidden_rows, T, hid);
  } else {
    KVASIR_RETURN_IF_ERROR(check_own_rows(hidden_rows, T, last_num_tokens_, "EAGLE head"));
    backend_.gather_rows(hidden_[cur_].slice_rows(0, last_num_tokens_), hidden_rows, T, hid);
  }
  cur_ = 1 - cur_;
  last_num_tokens_ = 0;
  // Unscaled, as vLLM's shared embedding module (a family's scale lives in its forward).
  backend_.embedding(embed_, batch.input_ids, T, 1.0f, emb);
  Tensor cat = cat_.slice_rows(0, T);
  side_by_side(backend_, halves_, T, interleave_rows_, cat);
  Tensor x = hidden_[cur_].slice_rows(0, T);
  backend_.linear(cat, fc_, has_fc_bias() ? &fc_bias_ : nullptr, x);
  layer_.run(backend_, *attn_, *mlp_, post_norm_, eps_, x, x, batch, cache);  // layer 0: no input_layernorm
  last_num_tokens_ = T;
  return Status();
}

StatusOr<Tensor> EagleHead::logits_on_device(const int32_t* rows, int num_rows) {
  if (num_rows < 1 || num_rows > max_num_rows_) return invalid_argument("EAGLE head: logits rows must be in [1, max]");
  for (int i = 0; i < num_rows; ++i) {
    if (rows[i] < 0 || rows[i] >= last_num_tokens_) return invalid_argument("EAGLE head: logits row out of range");
  }
  Tensor last = last_.slice_rows(0, num_rows), out = logits_.slice_rows(0, num_rows);
  backend_.gather_rows(hidden_[cur_].slice_rows(0, last_num_tokens_), rows, num_rows, last);
  backend_.linear(last, lm_head_, nullptr, out);  // no norm: vLLM's compute_logits is lm_head alone
  return out;
}

Status EagleHead::draft_logits(const int32_t* rows, int num_rows, float* out) {
  KVASIR_ASSIGN_OR_RETURN(Tensor logits, logits_on_device(rows, num_rows));
  backend_.copy_to_host(logits, out);
  return Status();
}

Status EagleHead::greedy_target_tokens(const int32_t* rows, int num_rows, int32_t* out) {
  KVASIR_ASSIGN_OR_RETURN(Tensor logits, logits_on_device(rows, num_rows));
  KVASIR_RETURN_IF_ERROR(greedy_columns(backend_, logits, num_rows, greedy_rows_, host_logits_, out));
  for (int i = 0; i < num_rows; ++i) {
    if (out[i] < 0 || out[i] >= config_.layer.vocab_size) return internal_error("EAGLE head: draft id out of range");
  }
  return Status();
}

}  // namespace kvasir
