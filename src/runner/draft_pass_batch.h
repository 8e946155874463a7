// DraftPassBatch: the host arrays of one forward pass of a proposer's own model (a draft model or
// an EAGLE head) over its own paged KV cache, built sequence by sequence. Shared by the
// DraftModelProposer and the EagleProposer so both lay their passes out the same way.
//
// On a backend that pads decode batches to buckets (one that replays CUDA graphs), a pass whose
// sequences each feed at most kMaxOneQueryRun tokens is laid out as the target's device verify
// step is (ModelRunner::build_batch): every token its own one-query attention sequence whose
// context ends at that token. The pass writes all its K/V before attention reads it, so this is
// each sequence's causal attention, but the pass has a decode step's shape: its token count is
// padded to a decode bucket, its block table width to a power of two and its sampled rows to a
// bucket, so its launch shapes depend on counts only and it replays a captured graph. Longer runs
// (a prompt's catch-up) keep the multi-token layout, whose prefill attention reads each key once
// per tile rather than once per query; those passes run eagerly.
//
// Padding tokens are id 0 at position 0 over the null block, written nowhere (slot -1); their tag
// (an EAGLE hidden row) is the first token's, and padding samples read row 0; their results are
// dropped. Real tokens and samples keep their indices in either layout.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/forward_batch.h"

namespace kvasir {

class DraftPassBatch {
 public:
  // The longest run of one sequence laid out as one-query rows: a proposer's steady state feeds
  // the accepted tokens plus the bonus (at most 1 + k), or one draft.
  static constexpr int kMaxOneQueryRun = 16;

  // max_tokens / max_sample_rows: the model's workspace (tokens of one pass, logits rows of one
  // call); padding never goes past them.
  DraftPassBatch(const BackendCapabilities& caps, int block_size, int max_tokens, int max_sample_rows);

  void clear();
  // Starts a sequence over `block_ids` (its cache blocks; read until build()).
  void begin_sequence(const std::vector<int32_t>& block_ids);
  // Appends the sequence's next token: `id` at `position`, cached at `index` of its blocks. tag:
  // a per-token value the caller's model reads beside the ids (an EAGLE head's hidden row).
  void add_token(int32_t id, int32_t position, int32_t index, int32_t tag = 0);
  // Ends the sequence; its context ends at its last token's index.
  void end_sequence();
  // Asks for the logits of the last token added; returns its sample index.
  int sample_last_token();

  int num_tokens() const { return num_real_tokens_; }  // real ones
  int num_samples() const { return num_real_samples_; }

  // Lays the pass out (padded, one-query rows, when it qualifies) and returns it; the arrays stay
  // valid until clear() or the next build(). After it: tags() and sample_rows() cover the padded
  // counts, and one_query_rows() says which layout was taken.
  const ForwardBatch& build();
  const int32_t* tags() const { return tags_.data(); }
  const int32_t* sample_rows() const { return sample_rows_.data(); }
  int num_padded_samples() const { return static_cast<int>(sample_rows_.size()); }
  bool one_query_rows() const { return one_query_rows_; }

 private:
  struct Sequence {
    const std::vector<int32_t>* block_ids;
    int first_token;
    int num_tokens;
  };

  BackendCapabilities caps_;
  int block_size_, max_tokens_, max_sample_rows_;
  std::vector<Sequence> seqs_;
  std::vector<int32_t> ids_, positions_, indices_, tags_, sample_rows_;
  std::vector<int64_t> slot_mapping_;
  int num_real_tokens_ = 0, num_real_samples_ = 0;
  bool one_query_rows_ = false;
  // build()'s attention arrays.
  std::vector<int32_t> query_start_loc_, seq_lens_, block_tables_;
  std::vector<const std::vector<int32_t>*> seq_blocks_;  // each attention sequence's blocks (null: padding)
  ForwardBatch batch_;
};

}  // namespace kvasir
