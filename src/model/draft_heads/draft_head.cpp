#include "model/draft_heads/draft_head.h"

#include <algorithm>
#include <string>
#include <tuple>

namespace kvasir {

size_t head_kv_cache_bytes_per_block(Backend& backend, const KvCacheShape& s, int block_size) {
  const size_t row = *row_bytes(backend.kv_cache_dtype(), s.k_heads * s.k_dim) +
                     *row_bytes(backend.kv_cache_dtype(), s.v_heads * s.v_dim);
  return row * static_cast<size_t>(block_size);
}

StatusOr<KvCache> allocate_head_kv_cache(Backend& backend, const KvCacheShape& s, int num_blocks, int block_size) {
  if (num_blocks < 1 || block_size < 1) return invalid_argument("speculative head: the KV cache needs at least one block");
  KvCache c;
  c.num_blocks = num_blocks;
  c.block_size = block_size;
  for (auto [heads, dim, side] : {std::tuple{s.k_heads, s.k_dim, &c.k}, std::tuple{s.v_heads, s.v_dim, &c.v}}) {
    const size_t bytes = *row_bytes(backend.kv_cache_dtype(), heads * dim) * static_cast<size_t>(block_size) *
                         static_cast<size_t>(num_blocks);
    KVASIR_ASSIGN_OR_RETURN(auto buf, backend.allocate(bytes));
    side->push_back(Tensor::make(buf->data(), backend.kv_cache_dtype(), {num_blocks, block_size, heads, dim},
                                 backend.device()));
    side->back().cache_scale = initial_kv_cache_scale(backend, 1.0f);  // a head has no checkpoint scales
    c.buffers.push_back(std::move(buf));
  }
  return c;
}

Status allocate_head_tensor(Backend& backend, int64_t rows, int64_t cols, DType dtype,
                            std::vector<std::unique_ptr<Buffer>>& owned, Tensor& t) {
  KVASIR_ASSIGN_OR_RETURN(auto buf, backend.allocate(*row_bytes(dtype, cols) * static_cast<size_t>(rows)));
  t = Tensor::make(buf->data(), dtype, {rows, cols}, backend.device());
  owned.push_back(std::move(buf));
  return Status();
}

Status check_head_pass(const ForwardBatch& batch, int max_num_tokens, int64_t vocab, const char* who) {
  const int T = batch.num_tokens;
  if (T < 1 || T > max_num_tokens) {
    return invalid_argument(std::string(who) + ": a pass of " + std::to_string(T) + " tokens exceeds its workspace of " +
                            std::to_string(max_num_tokens));
  }
  for (int i = 0; i < T; ++i) {
    if (batch.input_ids[i] < 0 || batch.input_ids[i] >= vocab) return invalid_argument(std::string(who) + ": token id out of range");
  }
  return Status();
}

void side_by_side(Backend& backend, const Tensor& halves, int num_tokens, std::vector<int32_t>& rows, Tensor& out) {
  const int T = num_tokens;
  rows.clear();
  for (int i = 0; i < T; ++i) {
    rows.push_back(i);
    rows.push_back(T + i);
  }
  Tensor out_rows = out.reshape({2 * int64_t{T}, halves.cols()});
  backend.gather_rows(halves.slice_rows(0, 2 * T), rows.data(), 2 * T, out_rows);
}

Status greedy_columns(Backend& backend, const Tensor& logits, int num_rows, std::vector<DeviceSamplingRow>& greedy_rows,
                      std::vector<float>& host_logits, int32_t* out) {
  if (backend.capabilities().device_sampling) {
    // Greedy rows (temperature 0): only the ids come back, not [rows, cols] floats.
    if (greedy_rows.size() < static_cast<size_t>(num_rows)) greedy_rows.assign(static_cast<size_t>(num_rows), DeviceSamplingRow{});
    return backend.sample(logits, greedy_rows.data(), num_rows, out);
  }
  const size_t cols = static_cast<size_t>(logits.shape[1]);
  host_logits.resize(static_cast<size_t>(num_rows) * cols);
  backend.copy_to_host(logits, host_logits.data());
  for (int i = 0; i < num_rows; ++i) {
    const float* l = host_logits.data() + static_cast<size_t>(i) * cols;
    out[i] = static_cast<int32_t>(std::max_element(l, l + cols) - l);
  }
  return Status();
}

Status HeadLayerStep::allocate(Backend& backend, const ModelConfig& layer, int64_t max_tokens,
                               std::vector<std::unique_ptr<Buffer>>& owned) {
  const int64_t T = max_tokens, H = layer.hidden_size;
  const int64_t qd = layer.num_heads * layer.head_dim, kvd = layer.num_kv_heads * layer.head_dim;
  const DType act = backend.activation_dtype();
  for (auto [t, cols] : {std::pair<Tensor*, int64_t>{&h_, H}, {&o_, H}, {&q_, qd}, {&k_, kvd}, {&v_, kvd},
                         {&attn_out_, qd}, {&gate_, layer.intermediate_size}, {&up_, layer.intermediate_size}}) {
    KVASIR_RETURN_IF_ERROR(allocate_head_tensor(backend, T, cols, act, owned, *t));
  }
  return Status();
}

void HeadLayerStep::run(Backend& backend, AttentionBlock& attn, MlpBlock& mlp, const Tensor& post_norm, float eps,
                        const Tensor& attn_in, Tensor& residual, const ForwardBatch& batch, KvCache& cache) {
  const int T = batch.num_tokens;
  BlockScratch s{q_.slice_rows(0, T), k_.slice_rows(0, T), v_.slice_rows(0, T),
                 attn_out_.slice_rows(0, T), gate_.slice_rows(0, T), up_.slice_rows(0, T)};
  Tensor h = h_.slice_rows(0, T), o = o_.slice_rows(0, T);
  attn.forward(backend, attn_in, batch, cache.k[0], cache.v[0], s, o);
  backend.add_rms_norm(residual, o, post_norm, eps, h);
  mlp.forward(backend, h, s, o);
  backend.add(residual, o);
}

Status check_own_rows(const int32_t* hidden_rows, int num_tokens, int num_rows, const char* who) {
  for (int i = 0; i < num_tokens; ++i) {
    if (hidden_rows[i] < 0 || hidden_rows[i] >= num_rows) return invalid_argument(std::string(who) + ": own row out of range");
  }
  return Status();
}

}  // namespace kvasir
