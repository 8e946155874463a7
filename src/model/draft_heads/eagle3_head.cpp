#include "model/draft_heads/eagle3_head.h"

#include <algorithm>
#include <cstring>

#include "model/weight_binding.h"

namespace kvasir {

Eagle3Head::Eagle3Head(const Eagle3HeadConfig& config, DecoderModel& target, int max_num_tokens, int max_num_rows)
    : config_(config),
      target_(target),
      backend_(target.backend()),
      max_num_tokens_(max_num_tokens),
      max_num_rows_(max_num_rows),
      eps_(static_cast<float>(config.layer.rms_norm_eps)),
      rope_(std::make_unique<RopeTables>()) {}

Eagle3Head::~Eagle3Head() = default;

StatusOr<std::unique_ptr<Eagle3Head>> Eagle3Head::create(const Eagle3HeadConfig& config, const WeightSource& weights,
                                                         DecoderModel& target, int max_num_tokens, int max_num_rows) {
  if (max_num_tokens < 1 || max_num_rows < 1) return invalid_argument("EAGLE-3 head: workspace sizes must be positive");
  if (max_num_tokens > target.max_num_tokens()) {
    return invalid_argument("EAGLE-3 head: a pass of " + std::to_string(max_num_tokens) +
                            " tokens exceeds the target's workspace of " + std::to_string(target.max_num_tokens()));
  }
  if (config.layer.hidden_size != target.config().hidden_size) {
    return invalid_argument("EAGLE-3 head: hidden_size " + std::to_string(config.layer.hidden_size) +
                            " differs from the target's " + std::to_string(target.config().hidden_size));
  }
  std::unique_ptr<Eagle3Head> h(new Eagle3Head(config, target, max_num_tokens, max_num_rows));
  KVASIR_RETURN_IF_ERROR(h->bind(weights));
  KVASIR_RETURN_IF_ERROR(h->read_vocab_maps(weights));
  KVASIR_RETURN_IF_ERROR(h->allocate_workspace());
  KVASIR_RETURN_IF_ERROR(target.capture_aux_hidden_states(config.aux_layer_ids));
  return h;
}

Status Eagle3Head::bind(const WeightSource& weights) {
  const WeightManifest manifest = eagle3_head_manifest(config_);
  WeightBinder b(weights, backend_, config_.layer, owned_);
  KVASIR_ASSIGN_OR_RETURN(LayerWeights top, b.bind(manifest.model));
  KVASIR_ASSIGN_OR_RETURN(weights_, b.bind(manifest.layers[0]));
  embed_ = top.get("token_embd.weight");
  if (embed_.data == nullptr) {
    // vLLM's rule: a head without embed_tokens embeds with the target's table.
    embed_ = target_.token_embedding();
    if (embed_.data == nullptr) return invalid_argument("EAGLE-3 head: the target's token embedding is not bound here");
  }
  fc_ = top.get("fc.weight");
  norm_ = top.get("output_norm.weight");
  lm_head_ = top.get("output.weight");
  attn_norm_ = weights_.get("attn_norm.weight");
  hidden_norm_ = weights_.get("hidden_norm.weight");
  post_norm_ = weights_.get("ffn_norm.weight");
  const ModelConfig& c = config_.layer;
  rope_->global = make_rope_table(c.rope_theta, static_cast<int>(c.rotary_dim), c.rope_scaling);
  rope_->sliding = rope_->global;
  const BlockInit init{c, weights_, 0, false, rope_.get(), &backend_, max_num_tokens_};
  KVASIR_ASSIGN_OR_RETURN(attn_, make_decoder_attention(init));
  KVASIR_ASSIGN_OR_RETURN(mlp_, make_gated_mlp(init));
  return Status();
}

// d2t[d]: target id of draft id d minus d (int64, [draft_vocab]); absent means the identity
// (vLLM's zero-initialised parameter). t2d (the [vocab] bool mask of the other direction) is not
// read: greedy drafting only maps draft ids to target ids.
Status Eagle3Head::read_vocab_maps(const WeightSource& weights) {
  const int64_t dv = config_.draft_vocab_size, vocab = config_.layer.vocab_size;
  d2t_.assign(static_cast<size_t>(dv), 0);
  if (weights.has_tensor("d2t")) {
    KVASIR_ASSIGN_OR_RETURN(WeightTensor t, weights.tensor("d2t"));
    if (t.dtype != DType::kI64 || t.shape.size() != 1 || t.shape[0] != dv) {
      return data_loss("EAGLE-3 head: d2t must be int64 [draft_vocab_size = " + std::to_string(dv) + "]");
    }
    for (int64_t d = 0; d < dv; ++d) {
      int64_t off = 0;
      std::memcpy(&off, t.data + static_cast<size_t>(d) * sizeof(int64_t), sizeof(off));
      if (d + off < 0 || d + off >= vocab) {
        return data_loss("EAGLE-3 head: d2t maps draft id " + std::to_string(d) + " to " + std::to_string(d + off) +
                         ", outside the target's vocabulary of " + std::to_string(vocab));
      }
      d2t_[static_cast<size_t>(d)] = static_cast<int32_t>(off);
    }
  } else if (weights.format() == WeightFormat::kDummy) {
    // --load-format dummy: random matrices, and draft id d is target id d (d < vocab).
  } else if (dv != vocab) {
    return data_loss("EAGLE-3 head: draft_vocab_size " + std::to_string(dv) + " < vocab_size " +
                     std::to_string(vocab) + " needs the d2t tensor (draft id -> target id offset)");
  }
  return Status();
}

Status Eagle3Head::allocate_workspace() {
  const ModelConfig& c = config_.layer;
  const int64_t T = max_num_tokens_, R = max_num_rows_, H = c.hidden_size;
  const DType act = backend_.activation_dtype();
  auto make = [&](Tensor& t, int64_t rows, int64_t cols, DType dt) {
    return allocate_head_tensor(backend_, rows, cols, dt, buffers_, t);
  };
  KVASIR_RETURN_IF_ERROR(make(hidden_[0], T, H, act));
  KVASIR_RETURN_IF_ERROR(make(hidden_[1], T, H, act));
  KVASIR_RETURN_IF_ERROR(make(fused_, T, 3 * H, act));
  KVASIR_RETURN_IF_ERROR(make(halves_, 2 * T, H, act));
  KVASIR_RETURN_IF_ERROR(make(cat_, T, 2 * H, act));
  KVASIR_RETURN_IF_ERROR(make(last_, R, H, act));
  KVASIR_RETURN_IF_ERROR(layer_.allocate(backend_, c, T, buffers_));
  KVASIR_RETURN_IF_ERROR(make(logits_, R, config_.draft_vocab_size, DType::kF32));
  gather_rows_.reserve(static_cast<size_t>(3 * T));
  interleave_rows_.reserve(static_cast<size_t>(2 * T));
  greedy_rows_.assign(static_cast<size_t>(R), DeviceSamplingRow{});  // temperature 0: argmax
  return Status();
}

size_t Eagle3Head::kv_cache_bytes_per_block(int block_size) const {
  return head_kv_cache_bytes_per_block(backend_, attn_->cache_shape(), block_size);
}

StatusOr<KvCache> Eagle3Head::allocate_kv_cache(int num_blocks, int block_size) {
  return allocate_head_kv_cache(backend_, attn_->cache_shape(), num_blocks, block_size);
}

Status Eagle3Head::forward(const ForwardBatch& batch, HiddenFrom from, const int32_t* hidden_rows, KvCache& cache) {
  KVASIR_RETURN_IF_ERROR(check_head_pass(batch, max_num_tokens_, config_.layer.vocab_size, "EAGLE-3 head"));
  const int T = batch.num_tokens;
  const int64_t H = config_.layer.hidden_size;
  const int next = from == HiddenFrom::kHead ? 1 - cur_ : cur_;
  Tensor hidden = hidden_[next].slice_rows(0, T);
  gather_rows_.clear();
  if (from == HiddenFrom::kTarget) {
    // fc's input [T, 3H] is [3T, H] with token i's layer-j state at row 3i + j.
    const Tensor& aux = target_.aux_hidden_states();
    const int64_t per_layer = target_.max_num_tokens();
    for (int i = 0; i < T; ++i) {
      if (hidden_rows[i] < 0 || hidden_rows[i] >= per_layer) return invalid_argument("EAGLE-3 head: target row out of range");
      for (int64_t j = 0; j < 3; ++j) gather_rows_.push_back(static_cast<int32_t>(j * per_layer + hidden_rows[i]));
    }
    Tensor fused = fused_.slice_rows(0, T);
    Tensor fused_rows = fused.reshape({3 * int64_t{T}, H});
    backend_.gather_rows(aux, gather_rows_.data(), 3 * T, fused_rows);
    backend_.linear(fused, fc_, nullptr, hidden);
  } else {
    KVASIR_RETURN_IF_ERROR(check_own_rows(hidden_rows, T, last_num_tokens_, "EAGLE-3 head"));
    backend_.gather_rows(hidden_[cur_].slice_rows(0, last_num_tokens_), hidden_rows, T, hidden);
  }
  cur_ = next;
  last_num_tokens_ = 0;
  // [normed embedding | normed hidden]: both halves into [2T, H], then interleaved into [T, 2H].
  Tensor emb = halves_.slice_rows(0, T), hid = halves_.slice_rows(T, T);
  // Unscaled, whoever's table it is: vLLM shares the target's embedding module, and a family's
  // embedding scale (Gemma's) lives in the family's forward, not in that module.
  backend_.embedding(embed_, batch.input_ids, T, 1.0f, emb);
  backend_.rms_norm(emb, attn_norm_, eps_, emb);
  backend_.rms_norm(hidden, hidden_norm_, eps_, hid);
  if (config_.norm_before_residual) backend_.rms_norm(hidden, hidden_norm_, eps_, hidden);  // the residual too
  Tensor cat = cat_.slice_rows(0, T);
  side_by_side(backend_, halves_, T, interleave_rows_, cat);
  layer_.run(backend_, *attn_, *mlp_, post_norm_, eps_, cat, hidden, batch, cache);
  last_num_tokens_ = T;
  return Status();
}

StatusOr<Tensor> Eagle3Head::logits_on_device(const int32_t* rows, int num_rows) {
  if (num_rows < 1 || num_rows > max_num_rows_) return invalid_argument("EAGLE-3 head: logits rows must be in [1, max]");
  for (int i = 0; i < num_rows; ++i) {
    if (rows[i] < 0 || rows[i] >= last_num_tokens_) return invalid_argument("EAGLE-3 head: logits row out of range");
  }
  Tensor last = last_.slice_rows(0, num_rows), out = logits_.slice_rows(0, num_rows);
  backend_.gather_rows(hidden_[cur_].slice_rows(0, last_num_tokens_), rows, num_rows, last);
  backend_.rms_norm(last, norm_, eps_, last);
  backend_.linear(last, lm_head_, nullptr, out);
  return out;
}

Status Eagle3Head::draft_logits(const int32_t* rows, int num_rows, float* out) {
  KVASIR_ASSIGN_OR_RETURN(Tensor logits, logits_on_device(rows, num_rows));
  backend_.copy_to_host(logits, out);
  return Status();
}

Status Eagle3Head::greedy_target_tokens(const int32_t* rows, int num_rows, int32_t* out) {
  KVASIR_ASSIGN_OR_RETURN(Tensor logits, logits_on_device(rows, num_rows));
  KVASIR_RETURN_IF_ERROR(greedy_columns(backend_, logits, num_rows, greedy_rows_, host_logits_, out));
  for (int i = 0; i < num_rows; ++i) {
    if (out[i] < 0 || out[i] >= config_.draft_vocab_size) return internal_error("EAGLE-3 head: draft id out of range");
    out[i] = target_id(out[i]);
  }
  return Status();
}

}  // namespace kvasir
