// DraftHead: what the runner's EagleProposer (runner/eagle_proposer.h) needs of a speculative
// head that drafts from the target's hidden states: an EAGLE-3 head (model/draft_heads/eagle3_head.h) or an
// EAGLE-1/2 head (model/draft_heads/eagle_head.h). One layer over its own paged KV cache, run with backend
// ops only; it must not know about requests (the proposer keeps positions, blocks, rollbacks).
// Also the pieces both heads share: their KV cache, workspace, input checks, the side-by-side
// gather, and greedy drafting from device logits.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/blocks.h"
#include "model/forward_batch.h"
#include "model/kv_cache.h"

namespace kvasir {

class DraftHead {
 public:
  virtual ~DraftHead() = default;

  virtual size_t kv_cache_bytes_per_block(int block_size) const = 0;
  virtual StatusOr<KvCache> allocate_kv_cache(int num_blocks, int block_size) = 0;

  enum class HiddenFrom { kTarget, kHead };
  // batch.input_ids: the token AFTER each position (target ids); batch.positions: the positions;
  // batch.attn: over the head's cache. hidden_rows[i] [batch.num_tokens]: the row of token i's
  // hidden state: a token row of the target's last run_layers (kTarget), or a row of this head's
  // previous forward (kHead).
  virtual Status forward(const ForwardBatch& batch, HiddenFrom from, const int32_t* hidden_rows, KvCache& cache) = 0;
  // Greedy drafts: for each of `rows` of the last forward, the argmax token as a target id.
  // out: [num_rows] host.
  virtual Status greedy_target_tokens(const int32_t* rows, int num_rows, int32_t* out) = 0;

  // What a proposer lays its passes out for: the backend's capabilities (graph replay wants
  // padded decode shapes) and the workspace's bounds (tokens of one pass, rows of one
  // greedy_target_tokens call).
  virtual BackendCapabilities backend_capabilities() const = 0;
  virtual int max_num_tokens() const = 0;
  virtual int max_num_rows() const = 0;
};

// The one-layer KV cache of a head whose attention caches `shape`, in the backend's KV dtype.
size_t head_kv_cache_bytes_per_block(Backend& backend, const KvCacheShape& shape, int block_size);
StatusOr<KvCache> allocate_head_kv_cache(Backend& backend, const KvCacheShape& shape, int num_blocks, int block_size);

// A workspace tensor [rows, cols] of `dtype` on the backend, its buffer kept in `owned`.
Status allocate_head_tensor(Backend& backend, int64_t rows, int64_t cols, DType dtype,
                            std::vector<std::unique_ptr<Buffer>>& owned, Tensor& t);

// Both heads' llama layer after its input: residual += attention(attn_in) over layer 0 of the
// head's cache, then residual += mlp(post_norm(residual)), in workspace for up to max_tokens
// tokens. attn_in is already normed where the head norms it (EAGLE-3) or not (EAGLE-1/2 layer 0).
class HeadLayerStep {
 public:
  Status allocate(Backend& backend, const ModelConfig& layer, int64_t max_tokens,
                  std::vector<std::unique_ptr<Buffer>>& owned);
  void run(Backend& backend, AttentionBlock& attn, MlpBlock& mlp, const Tensor& post_norm, float eps,
           const Tensor& attn_in, Tensor& residual, const ForwardBatch& batch, KvCache& cache);

 private:
  Tensor h_, o_;  // [T, H]
  Tensor q_, k_, v_, attn_out_, gate_, up_;
};

// A pass's inputs: 1..max_num_tokens tokens, each a target id below `vocab`; `who` names the head
// in the message.
Status check_head_pass(const ForwardBatch& batch, int max_num_tokens, int64_t vocab, const char* who);

// hidden_rows [num_tokens] all rows of the head's previous forward (num_rows of them).
Status check_own_rows(const int32_t* hidden_rows, int num_tokens, int num_rows, const char* who);

// out [T, 2H] = each token's row of halves' first T rows beside its row of the next T ([2T, H]):
// a row gather, so no backend needs a concatenation op. `rows` is the caller's own host array
// (no other op of the step may read it refilled: backend.h).
void side_by_side(Backend& backend, const Tensor& halves, int num_tokens, std::vector<int32_t>& rows, Tensor& out);

// The argmax column of each of logits' [num_rows, cols] float32 rows into out (host): sampled on
// the device when the backend can (only the ids come back), else over a host copy. The vectors
// are the caller's reused scratch.
Status greedy_columns(Backend& backend, const Tensor& logits, int num_rows, std::vector<DeviceSamplingRow>& greedy_rows,
                      std::vector<float>& host_logits, int32_t* out);

}  // namespace kvasir
