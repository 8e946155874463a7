#include "model/decoder_model.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "backend/host_buffer.h"
#include "dist/communicator.h"
#include "dist/parallel_layout.h"
#include "model/registry.h"
#include "model/weight_binding.h"
#include "quant/quantized_weight_source.h"

namespace kvasir {

struct DecoderModel::Layer {
  Tensor attn_norm;
  Tensor post_attn_norm;        // Gemma: norm of the attention output before the residual add
  Tensor ffn_norm;
  Tensor post_ffn_norm;         // Gemma: norm of the MLP output before the residual add
  std::unique_ptr<AttentionBlock> attn;
  std::unique_ptr<MlpBlock> mlp;
  // The checkpoint's per-tensor K / V cache scales (1 without them): an FP8 cache stores x / scale.
  quant::KvCacheScales kv_scales;
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
  // Tensor parallelism only:
  std::vector<int32_t> local_ids;   // [T] ids within this rank's vocabulary shard
  Tensor local_logits;              // [L, padded vocab shard]
  std::vector<float> gathered;      // [tp size, L, padded vocab shard]
  // Pipeline parallelism only: a micro-batch's rebased query_start_loc.
  std::vector<int32_t> micro_qsl;
};

DecoderModel::DecoderModel(const ModelConfig& config, Backend& backend, const ModelOptions& opts)
    : config_(config), full_config_(config), backend_(backend), opts_(opts), rope_(std::make_unique<RopeTables>()),
      eps_(static_cast<float>(config.rms_norm_eps)) {}

DecoderModel::~DecoderModel() = default;

StatusOr<std::unique_ptr<DecoderModel>> DecoderModel::create(const ModelConfig& config, const WeightSource& weights,
                                                             Backend& backend, const ModelOptions& opts) {
  if (opts.max_num_tokens < 1 || opts.max_num_logits < 1) return invalid_argument("model options must be positive");
  KVASIR_ASSIGN_OR_RETURN(const ModelFamily* family, family_of(config));
  std::unique_ptr<DecoderModel> m(new DecoderModel(config, backend, opts));
  m->vocab_ = vocab_shard(config.vocab_size, 0, 1);
  // One rank holds every expert, so nothing changes; a model without experts is still refused.
  if (opts.tp.size == 1 && opts.tp.expert_parallel) KVASIR_RETURN_IF_ERROR(shard_config(config, 0, 1, true).status());
  const int device_group = backend.device_group_size();
  m->device_collectives_ = device_group > 0;
  if (device_group > 0 && device_group != opts.tp.size)
    return invalid_argument("the backend's device communicator has " + std::to_string(device_group) +
                            " ranks but the model is one of " + std::to_string(opts.tp.size));
  if (opts.tp.size > 1) {
    if (opts.tp.comm == nullptr || opts.tp.comm->world_size() != opts.tp.size || opts.tp.comm->rank() != opts.tp.rank)
      return invalid_argument("tensor parallelism needs a communicator of the group's size and rank");
    // The CPU communicator's all-reduces and logits gather work on host memory; a device backend
    // must bring its own device communicator (the CUDA backend made for the group's rank).
    if (backend.device() != Device::kCpu && device_group == 0)
      return unimplemented("tensor parallelism on the " + backend.name() +
                           " backend needs its device communicator (a backend made for the group's rank)");
    KVASIR_ASSIGN_OR_RETURN(m->config_, shard_config(config, opts.tp.rank, opts.tp.size, opts.tp.expert_parallel));
    m->vocab_ = vocab_shard(config.vocab_size, opts.tp.rank, opts.tp.size);
  }
  m->stage_ = LayerRange{0, static_cast<int>(config.num_layers)};
  if (opts.pp.size > 1) {
    const dist::ParallelLayout layout{opts.tp.size, opts.pp.size};
    if (opts.pp.comm == nullptr || opts.pp.comm->world_size() != layout.world_size() ||
        opts.pp.comm->rank() != layout.rank(opts.pp.rank, opts.tp.rank))
      return invalid_argument("pipeline parallelism needs a communicator of the whole group (tp x pp ranks)");
    // The hidden states and logits move through host memory.
    if (backend.device() != Device::kCpu)
      return unimplemented("pipeline parallelism runs on the CPU backend only for now");
    KVASIR_ASSIGN_OR_RETURN(m->stage_, pipeline_stage_layers(static_cast<int>(config.num_layers), opts.pp.rank,
                                                             opts.pp.size, opts.layer_partition));
  }
  KVASIR_RETURN_IF_ERROR(m->bind_weights(weights, *family));
  KVASIR_RETURN_IF_ERROR(m->allocate_workspace());
  std::vector<float> freq_factors;
  if (config.rope_scaling.freq_factors_tensor) {
    KVASIR_ASSIGN_OR_RETURN(WeightTensor f, weights.tensor("rope_freqs.weight"));
    if (f.dtype != DType::kF32 || f.num_elements() != config.rotary_dim / 2) return data_loss("rope_freqs.weight must be f32 [rotary_dim / 2]");
    freq_factors.resize(static_cast<size_t>(f.num_elements()));
    std::memcpy(freq_factors.data(), f.data, f.nbytes);
  }
  const int rd = static_cast<int>(config.rotary_dim);
  m->rope_->global = make_rope_table(config.rope_theta, rd, config.rope_scaling,
                                     freq_factors.empty() ? nullptr : &freq_factors);
  // Sliding layers: a family with their own base frequency (Gemma 3) does not scale them.
  const bool own_local = family->config_traits().rope_theta_local.has_value();
  m->rope_->sliding = make_rope_table(config.rope_theta_local, rd, own_local ? RopeScaling{} : config.rope_scaling,
                                      freq_factors.empty() || own_local ? nullptr : &freq_factors);
  return m;
}

// The K / V cache scales a quantized checkpoint stores for a layer's attention module (the
// module that holds its k_proj or fused qkv_proj: compressed-tensors' `<module>.k_scale`), else 1.
static quant::KvCacheScales layer_kv_cache_scales(const WeightSource& src, const std::vector<WeightSpec>& layer) {
  const std::map<std::string, quant::KvCacheScales>* scales = quant::kv_cache_scales(src);
  if (scales == nullptr) return {};
  for (const WeightSpec& spec : layer) {
    if (spec.role != "attn_k.weight") continue;
    const std::string& n = spec.hf.name;
    for (const std::string proj : {".k_proj.weight", ".qkv_proj.weight"}) {
      if (n.size() > proj.size() && n.compare(n.size() - proj.size(), proj.size(), proj) == 0) {
        auto it = scales->find(n.substr(0, n.size() - proj.size()));
        if (it != scales->end()) return it->second;
      }
    }
  }
  return {};
}

Status DecoderModel::bind_weights(const WeightSource& src, const ModelFamily& family) {
  WeightManifest manifest = family.manifest(full_config_);
  auto present = [&src](const WeightSpec& spec) {
    return src.has_tensor(spec.gguf.name) || src.has_tensor(spec.hf.name);
  };
  KVASIR_RETURN_IF_ERROR(
      shard_manifest(manifest, full_config_, opts_.tp.rank, opts_.tp.size, present, opts_.tp.expert_parallel));
  if (manifest.layers.size() != static_cast<size_t>(config_.num_layers)) return data_loss("layer count mismatch");
  if (opts_.pp.size > 1) {
    // A stage binds (and so reads) only its own weights: the embedding on the first stage, and on
    // the last one too when lm_head is tied to it; the final norm and lm_head on the last stage.
    const WeightSpec* head = manifest.find(manifest.model, "output.weight");
    const bool tied = head == nullptr || !present(*head);
    std::vector<WeightSpec> mine;
    for (WeightSpec& spec : manifest.model) {
      const bool embedding = spec.role == "token_embd.weight";
      const bool head_side = spec.role == "output.weight" || spec.role == "output_norm.weight";
      if (embedding && !first_stage() && !(last_stage() && tied)) continue;
      if (head_side && !last_stage()) continue;
      mine.push_back(std::move(spec));
    }
    manifest.model = std::move(mine);
  }
  WeightBinder b(src, backend_, config_, owned_);
  KVASIR_ASSIGN_OR_RETURN(LayerWeights top, b.bind(manifest.model));
  embed_ = top.get("token_embd.weight");
  final_norm_ = top.get("output_norm.weight");
  lm_head_ = top.get("output.weight");
  const bool needs_embedding = first_stage() || (last_stage() && lm_head_.data == nullptr);
  if ((needs_embedding && embed_.data == nullptr) || (last_stage() && final_norm_.data == nullptr))
    return data_loss("embedding or final norm not bound");
  if (sharded()) {
    const bool tied = lm_head_.data == nullptr;
    if (embed_.data != nullptr) {
      KVASIR_ASSIGN_OR_RETURN(embed_, padded_vocab_rows(embed_, vocab_.padded_rows + 1));
    }
    if (last_stage() && tied) {
      lm_head_ = embed_.slice_rows(0, vocab_.padded_rows);
    } else if (last_stage()) {
      KVASIR_ASSIGN_OR_RETURN(lm_head_, padded_vocab_rows(lm_head_, vocab_.padded_rows));
    }
  }
  if (lm_head_.data == nullptr && last_stage()) lm_head_ = embed_;  // tied, or a checkpoint that ties without saying so
  layers_.resize(static_cast<size_t>(stage_.count()));
  for (int i = stage_.begin; i < stage_.end; ++i) {
    Layer& L = layers_[static_cast<size_t>(i - stage_.begin)];
    KVASIR_ASSIGN_OR_RETURN(LayerWeights w, b.bind(manifest.layers[static_cast<size_t>(i)]));
    L.attn_norm = w.get("attn_norm.weight");
    L.ffn_norm = w.get("ffn_norm.weight");
    L.post_attn_norm = w.get("post_attention_norm.weight");
    L.post_ffn_norm = w.get("post_ffw_norm.weight");
    if (L.attn_norm.data == nullptr || L.ffn_norm.data == nullptr) {
      return data_loss("layer " + std::to_string(i) + ": attention or MLP norm not bound");
    }
    BlockInit init{config_, w, i, config_.layer_is_sliding[static_cast<size_t>(i)], rope_.get(), &backend_,
                   opts_.max_num_tokens};
    KVASIR_ASSIGN_OR_RETURN(L.attn, family.make_attention(init));
    L.kv_scales = layer_kv_cache_scales(src, manifest.layers[static_cast<size_t>(i)]);
    KVASIR_ASSIGN_OR_RETURN(L.mlp, family.make_mlp(init));
  }
  const int64_t head_rows = sharded() ? vocab_.padded_rows : config_.vocab_size;
  if (last_stage() && (lm_head_.dim(0) != head_rows || lm_head_.dim(1) != config_.hidden_size)) {
    return data_loss("output projection shape does not match vocab_size x hidden_size");
  }
  // Fewer layers in the config than in the checkpoint would run a truncated model without a
  // word: the layer after the last must be absent (asked of the family's own manifest).
  ModelConfig one_more = full_config_;
  one_more.num_layers += 1;
  one_more.layer_is_sliding.push_back(false);
  WeightManifest more = family.manifest(one_more);
  KVASIR_RETURN_IF_ERROR(
      shard_manifest(more, one_more, opts_.tp.rank, opts_.tp.size, present, opts_.tp.expert_parallel));
  if (more.layers.size() == static_cast<size_t>(config_.num_layers) + 1) {
    KVASIR_RETURN_IF_ERROR(b.expect_absent(
        more.layers.back(), "the config says the model has " + std::to_string(config_.num_layers) +
                                " layers (num_hidden_layers / block_count)"));
  }
  return Status();
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
  if (sharded()) {
    ws_->local_ids.resize(static_cast<size_t>(T));
    KVASIR_ASSIGN_OR_RETURN(auto local, backend_.allocate(static_cast<size_t>(L * vocab_.padded_rows) * sizeof(float)));
    ws_->local_logits = Tensor::make(local->data(), DType::kF32, {L, vocab_.padded_rows}, backend_.device());
    ws_->buffers.push_back(std::move(local));
    if (!device_collectives_) ws_->gathered.resize(static_cast<size_t>(opts_.tp.size * L * vocab_.padded_rows));
  }
  if (opts_.pp.size > 1) ws_->micro_qsl.resize(static_cast<size_t>(T) + 1);
  return Status();
}

StatusOr<Tensor> DecoderModel::padded_vocab_rows(const Tensor& rows, int64_t padded_rows) {
  const size_t rb = rows.row_bytes();
  KVASIR_ASSIGN_OR_RETURN(auto buf, allocate_host_buffer(rb * static_cast<size_t>(padded_rows)));
  // Zero bytes are a zero row in every weight format (a zero scale in the block formats).
  std::memset(buf->data(), 0, buf->size());
  const bool on_device = rows.device != Device::kCpu;
  if (on_device) {
    // A device backend bound the shard's rows on the device (in its own format): read them back
    // once, pad, upload again, and free the unpadded copy below.
    backend_.copy_to_host(rows, buf->data());
  } else {
    std::memcpy(buf->data(), rows.data, rb * static_cast<size_t>(rows.rows()));
  }
  Tensor host = Tensor::make(buf->data(), rows.dtype, {padded_rows, rows.dim(1)});
  std::unique_ptr<Buffer> owner;
  KVASIR_ASSIGN_OR_RETURN(Tensor t, backend_.upload_vocab_table(host, &owner));
  if (owner) owned_.push_back(std::move(owner));
  if (on_device) {
    for (auto it = owned_.begin(); it != owned_.end(); ++it) {
      if ((*it)->data() == rows.data) {
        owned_.erase(it);
        break;
      }
    }
  } else {
    owned_.push_back(std::move(buf));  // the CPU backend reads the host table in place
  }
  return t;
}

Status DecoderModel::all_reduce(Tensor& t) {
  if (device_collectives_) {
    backend_.all_reduce_sum(t);
    return Status();
  }
  if (opts_.tp.size == 1) return Status();
  return opts_.tp.comm->all_reduce_sum(t.data, static_cast<size_t>(t.numel()), t.dtype);
}

// local: [num_rows, padded shard] on every rank -> out: [num_rows, vocab], shard r's real columns
// at [begin_r, begin_r + rows_r).
Status DecoderModel::gather_logits(const Tensor& local, int num_rows, Tensor& out) {
  if (device_collectives_) {
    // vocab_shard's layout: rank r's columns start at r * padded, so the shards side by side, cut
    // at vocab_size, are the full logits.
    backend_.all_gather_columns(local, out);
    return Status();
  }
  const int64_t padded = vocab_.padded_rows;
  const size_t per_rank = static_cast<size_t>(num_rows * padded);
  KVASIR_RETURN_IF_ERROR(opts_.tp.comm->all_gather(local.data, ws_->gathered.data(), per_rank * sizeof(float)));
  auto* dst = static_cast<float*>(out.data);
  for (int r = 0; r < opts_.tp.size; ++r) {
    const VocabShard v = vocab_shard(config_.vocab_size, r, opts_.tp.size);
    const float* src = ws_->gathered.data() + per_rank * static_cast<size_t>(r);
    for (int i = 0; i < num_rows; ++i)
      std::memcpy(dst + i * config_.vocab_size + v.begin, src + i * padded, static_cast<size_t>(v.rows) * sizeof(float));
  }
  return Status();
}

// Bytes of one token's K or V row of `heads` x `dim` elements in the backend's KV element type.
static size_t kv_row_bytes(const Backend& backend, int64_t heads, int64_t dim) {
  return heads == 0 ? 0 : *row_bytes(backend.kv_cache_dtype(), heads * dim);
}

size_t DecoderModel::kv_cache_bytes_per_block(int block_size) const {
  size_t per_token = 0;
  for (const Layer& L : layers_) {
    const KvCacheShape s = L.attn->cache_shape();
    per_token += kv_row_bytes(backend_, s.k_heads, s.k_dim) + kv_row_bytes(backend_, s.v_heads, s.v_dim);
  }
  return per_token * static_cast<size_t>(block_size);
}

StatusOr<KvCache> DecoderModel::allocate_kv_cache(int num_blocks, int block_size) {
  if (num_blocks < 1 || block_size < 1) return invalid_argument("KV cache needs at least one block");
  KvCache c;
  c.num_blocks = num_blocks;
  c.block_size = block_size;
  const DType kv_dtype = backend_.kv_cache_dtype();
  auto make = [&](int64_t heads, int64_t dim, float scale, std::vector<Tensor>& side) -> Status {
    if (heads == 0) {
      side.push_back(Tensor{});
      return Status();
    }
    const size_t bytes = kv_row_bytes(backend_, heads, dim) * static_cast<size_t>(block_size) *
                         static_cast<size_t>(num_blocks);
    KVASIR_ASSIGN_OR_RETURN(auto buf, backend_.allocate(bytes));
    // Not cleared: attention only reads slots written by write_kv, and untouched pages stay free.
    side.push_back(Tensor::make(buf->data(), kv_dtype, {num_blocks, block_size, heads, dim}, backend_.device()));
    side.back().cache_scale = initial_kv_cache_scale(backend_, scale);
    c.buffers.push_back(std::move(buf));
    return Status();
  };
  for (const Layer& L : layers_) {
    const KvCacheShape s = L.attn->cache_shape();
    KVASIR_RETURN_IF_ERROR(make(s.k_heads, s.k_dim, L.kv_scales.k_scale, c.k));
    KVASIR_RETURN_IF_ERROR(make(s.v_heads, s.v_dim, L.kv_scales.v_scale, c.v));
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
  if (opts_.pp.size > 1) {
    KVASIR_RETURN_IF_ERROR(run_pipeline_stage(batch, cache));
  } else {
    KVASIR_RETURN_IF_ERROR(embed(batch, 0));
    KVASIR_RETURN_IF_ERROR(run_stage_layers(batch, 0, cache));
  }
  if (final_hidden_.data != nullptr) {
    Tensor out = final_hidden_.slice_rows(0, T);
    backend_.rms_norm(ws_->x.slice_rows(0, T), final_norm_, eps_, out);
  }
  last_num_tokens_ = T;
  return Status();
}

bool DecoderModel::feeds_sampled_tokens() const {
  // A vocabulary-sharded embedding maps ids on the host; a later pipeline stage has no embedding.
  return backend_.capabilities().sampled_token_feedback && !sharded() && opts_.pp.size <= 1;
}

Status DecoderModel::embed(const ForwardBatch& batch, int row) {
  Workspace& w = *ws_;
  const int T = batch.num_tokens;
  Tensor x = w.x.slice_rows(row, T);
  if (batch.input_id_sources != nullptr && !feeds_sampled_tokens()) {
    return internal_error("a step with device-fed token ids on a model that cannot feed them");
  }
  if (sharded()) {
    // Ids outside this rank's vocabulary rows embed as its zero row; the all-reduce adds the one
    // rank's real row to zeros, which is exact.
    for (int i = 0; i < T; ++i) {
      const int64_t local = batch.input_ids[i] - vocab_.begin;
      w.local_ids[static_cast<size_t>(i)] =
          static_cast<int32_t>(local >= 0 && local < vocab_.rows ? local : vocab_.padded_rows);
    }
    backend_.embedding(embed_, w.local_ids.data(), T, static_cast<float>(config_.embedding_scale), x);
    return all_reduce(x);
  }
  if (batch.input_id_sources != nullptr) {
    backend_.embedding_fed(embed_, batch.input_ids, batch.input_id_sources, T,
                           static_cast<float>(config_.embedding_scale), x);
    return Status();
  }
  backend_.embedding(embed_, batch.input_ids, T, static_cast<float>(config_.embedding_scale), x);
  return Status();
}

Status DecoderModel::run_stage_layers(const ForwardBatch& batch, int row, KvCache& cache) {
  Workspace& w = *ws_;
  const int T = batch.num_tokens;
  Tensor x = w.x.slice_rows(row, T), h = w.h.slice_rows(row, T), o = w.o.slice_rows(row, T);
  BlockScratch scratch{w.q.slice_rows(0, T),    w.k.slice_rows(0, T),    w.v.slice_rows(0, T),
                       w.attn.slice_rows(0, T), w.gate.slice_rows(0, T), w.up.slice_rows(0, T)};
  size_t next_aux = 0;
  for (size_t l = 0; l < layers_.size(); ++l) {
    Layer& L = layers_[l];
    if (next_aux < aux_layers_.size() && aux_layers_[next_aux] == stage_.begin + static_cast<int>(l)) {
      Tensor dst = aux_.slice_rows(static_cast<int64_t>(next_aux) * opts_.max_num_tokens, T);
      backend_.gather_rows(x, aux_identity_rows_.data(), T, dst);
      ++next_aux;
    }
    backend_.rms_norm(x, L.attn_norm, eps_, h);
    L.attn->forward(backend_, h, batch, cache.k[l], cache.v[l], scratch, o);
    KVASIR_RETURN_IF_ERROR(all_reduce(o));  // row-parallel o_proj: each rank holds a partial sum
    if (L.post_attn_norm.data != nullptr) backend_.rms_norm(o, L.post_attn_norm, eps_, o);
    backend_.add_rms_norm(x, o, L.ffn_norm, eps_, h);
    L.mlp->forward(backend_, h, scratch, o);
    KVASIR_RETURN_IF_ERROR(all_reduce(o));  // row-parallel down projection
    if (L.post_ffn_norm.data != nullptr) backend_.rms_norm(o, L.post_ffn_norm, eps_, o);
    backend_.add(x, o);
  }
  return Status();
}

Status DecoderModel::capture_aux_hidden_states(const std::vector<int>& layers) {
  if (sharded() || opts_.pp.size > 1) {
    return unimplemented("hidden states for a speculative head under tensor or pipeline parallelism");
  }
  if (layers.empty()) return invalid_argument("no layers to capture hidden states from");
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i] < 0 || layers[i] >= config_.num_layers) {
      return invalid_argument("hidden-state layer " + std::to_string(layers[i]) + " is outside the model's " +
                              std::to_string(config_.num_layers) + " layers");
    }
    if (i > 0 && layers[i] <= layers[i - 1]) return invalid_argument("hidden-state layers must be sorted and distinct");
  }
  const int64_t rows = static_cast<int64_t>(layers.size()) * opts_.max_num_tokens;
  const DType act = backend_.activation_dtype();
  KVASIR_ASSIGN_OR_RETURN(auto buf, backend_.allocate(*row_bytes(act, config_.hidden_size) * static_cast<size_t>(rows)));
  aux_ = Tensor::make(buf->data(), act, {rows, config_.hidden_size}, backend_.device());
  ws_->buffers.push_back(std::move(buf));
  aux_layers_ = layers;
  aux_identity_rows_.resize(static_cast<size_t>(opts_.max_num_tokens));
  for (int i = 0; i < opts_.max_num_tokens; ++i) aux_identity_rows_[static_cast<size_t>(i)] = i;
  return Status();
}

Status DecoderModel::capture_final_hidden_states() {
  if (sharded() || opts_.pp.size > 1) {
    return unimplemented("hidden states for a speculative head under tensor or pipeline parallelism");
  }
  if (final_hidden_.data != nullptr) return Status();
  const DType act = backend_.activation_dtype();
  KVASIR_ASSIGN_OR_RETURN(auto buf, backend_.allocate(*row_bytes(act, config_.hidden_size) *
                                                      static_cast<size_t>(opts_.max_num_tokens)));
  final_hidden_ = Tensor::make(buf->data(), act, {opts_.max_num_tokens, config_.hidden_size}, backend_.device());
  ws_->buffers.push_back(std::move(buf));
  return Status();
}

int DecoderModel::world_rank(int pp_rank) const {
  return dist::ParallelLayout{opts_.tp.size, opts_.pp.size}.rank(pp_rank, opts_.tp.rank);
}

// The residual stream x is the only state that crosses a stage boundary (every layer starts from
// it), so a micro-batch's rows of x are what each stage receives and sends. A stage sends
// micro-batch i as soon as its layers are done, then starts on micro-batch i + 1 while the next
// stage runs micro-batch i.
Status DecoderModel::run_pipeline_stage(const ForwardBatch& batch, KvCache& cache) {
  Workspace& w = *ws_;
  const std::vector<int> bounds = micro_batch_bounds(batch.attn, opts_.pp.size);
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    const ForwardBatch mb = micro_batch(batch, bounds[i], bounds[i + 1], w.micro_qsl.data());
    const int row = batch.attn.query_start_loc[bounds[i]];
    Tensor x = w.x.slice_rows(row, mb.num_tokens);
    const size_t bytes = x.row_bytes() * static_cast<size_t>(mb.num_tokens);
    if (first_stage()) {
      KVASIR_RETURN_IF_ERROR(embed(mb, row));
    } else {
      KVASIR_RETURN_IF_ERROR(opts_.pp.comm->recv(x.data, bytes, world_rank(opts_.pp.rank - 1)));
    }
    KVASIR_RETURN_IF_ERROR(run_stage_layers(mb, row, cache));
    if (!last_stage()) KVASIR_RETURN_IF_ERROR(opts_.pp.comm->send(x.data, bytes, world_rank(opts_.pp.rank + 1)));
  }
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
  Tensor out = w.logits.slice_rows(0, num_rows);
  if (opts_.pp.size > 1) {
    // Only the last stage has the final norm and lm_head; every rank gets its logits, so every
    // rank's runner samples the same tokens (as under tensor parallelism).
    if (last_stage()) KVASIR_RETURN_IF_ERROR(project_logits(rows, num_rows, out));
    const int last_stage_root = dist::ParallelLayout{opts_.tp.size, opts_.pp.size}.rank(opts_.pp.size - 1, 0);
    KVASIR_RETURN_IF_ERROR(
        opts_.pp.comm->broadcast(out.data, static_cast<size_t>(out.numel()) * sizeof(float), last_stage_root));
    return out;
  }
  KVASIR_RETURN_IF_ERROR(project_logits(rows, num_rows, out));
  return out;
}

Status DecoderModel::project_logits(const int32_t* rows, int num_rows, Tensor& out) {
  Workspace& w = *ws_;
  Tensor x = w.x.slice_rows(0, last_num_tokens_);
  Tensor last = w.last.slice_rows(0, num_rows);
  backend_.gather_rows(x, rows, num_rows, last);
  backend_.rms_norm(last, final_norm_, eps_, last);
  if (sharded()) {
    Tensor local = w.local_logits.slice_rows(0, num_rows);
    backend_.linear(last, lm_head_, nullptr, local);
    if (config_.final_logit_softcapping) backend_.softcap(local, static_cast<float>(*config_.final_logit_softcapping));
    return gather_logits(local, num_rows, out);
  }
  backend_.linear(last, lm_head_, nullptr, out);
  if (config_.final_logit_softcapping) backend_.softcap(out, static_cast<float>(*config_.final_logit_softcapping));
  return Status();
}

}  // namespace kvasir
