// SuffixDecoding: the `suffix` speculative proposer (vLLM's suffix decoding, after Arctic
// Inference). Keeps one SuffixTree per running request over its prompt and output so far, and one
// global SuffixTree over the outputs of the most recently finished requests (FIFO, at most
// max_cached_requests and max_cached_tokens); a proposal matches the request's last tokens in both
// and keeps the draft with the higher expected acceptance. Host-only, no model, no tensors; one
// owner thread. It never verifies anything: what it proposes is only a guess the engine checks.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "core/ids.h"
#include "spec/suffix_tree.h"

namespace kvasir {

// vLLM's suffix_decoding_* keys of --speculative-config (plus Arctic's max_spec_offset).
struct SuffixDecodingConfig {
  int num_speculative_tokens = 5;   // the most tokens one proposal may hold
  int max_tree_depth = 24;          // longest context matched plus draft, in tokens
  int max_cached_requests = 10000;  // finished requests whose outputs the global tree keeps; 0: none
  // Kvasir's own bound (vLLM has none): the tokens those outputs may hold together. The tree costs
  // up to max_tree_depth nodes (~60 bytes each) per token, so 10000 long outputs could take tens of
  // GB; 2^20 tokens bounds it near 1.5 GB at depth 24, far less on repetitive outputs.
  int64_t max_cached_tokens = int64_t{1} << 20;
  double max_spec_factor = 1.0;  // a match of m tokens proposes at most max_spec_factor * m + offset
  double max_spec_offset = 0.0;
  double min_token_prob = 0.1;  // stop drafting once the estimated probability falls below this

  // invalid_argument naming the first bad field.
  Status validate() const;
};

// Bounds validate() enforces: past them a tree costs memory for nothing a verifier would accept.
constexpr int kMaxSuffixTreeDepth = 256;
constexpr int kMaxSuffixSpeculativeTokens = 64;

class SuffixDecoding {
 public:
  // config must be valid (validate() is how user input is checked; here it is an invariant).
  explicit SuffixDecoding(const SuffixDecodingConfig& config);

  // At admission: builds the request's tree over its prompt (O(prompt x max_tree_depth)).
  // invalid_argument for an id already started or a negative token id.
  Status start_request(RequestIdx request, std::span<const TokenId> prompt_token_ids);
  // After each step, with the tokens the step accepted: O(max_tree_depth) per token.
  // not_found for an unknown request, invalid_argument for a negative token id (nothing is added).
  Status add_output(RequestIdx request, std::span<const TokenId> token_ids);
  // At finish or abort: drops the request's tree and moves its output into the global tree,
  // evicting the oldest cached outputs past max_cached_requests or max_cached_tokens (an output
  // longer than max_cached_tokens alone is not cached). O((output + evicted) x max_tree_depth) in
  // this one call, about what add_output cost for the same tokens. not_found for an unknown request.
  Status stop_request(RequestIdx request);

  // Up to min(max_tokens, num_speculative_tokens) tokens to follow the request's prompt and output
  // so far; empty when nothing matches well enough. not_found for an unknown request,
  // invalid_argument for a negative max_tokens (out is then left as it was).
  // The step loop's form: out's token_ids are replaced, their capacity reused, so nothing is
  // allocated once out has held num_speculative_tokens.
  Status propose(RequestIdx request, int max_tokens, SuffixDraft* out) const;
  StatusOr<SuffixDraft> propose(RequestIdx request, int max_tokens) const;

  const SuffixDecodingConfig& config() const { return config_; }
  int num_active_requests() const { return static_cast<int>(requests_.size()); }
  int num_cached_requests() const { return static_cast<int>(cached_outputs_.size()); }
  int64_t num_cached_tokens() const { return num_cached_tokens_; }
  int64_t num_global_tree_nodes() const { return global_tree_.num_nodes(); }
  // Nodes of one running request's tree; -1 for an unknown request.
  int64_t num_request_tree_nodes(RequestIdx request) const;
  // Host memory held by all trees (for logs and the memory test; not a budget it enforces).
  int64_t memory_bytes() const;
  // Aborts (KVASIR_CHECK) when a tree or the cache bookkeeping is inconsistent. For tests.
  void check_invariants() const;

 private:
  struct RequestState {
    explicit RequestState(int max_tree_depth) : tree(max_tree_depth), cursor(tree.new_cursor()) {}
    SuffixTree tree;  // prompt + output
    SuffixTree::Cursor cursor;
    std::vector<TokenId> output;  // what stop_request hands to the global tree
    std::vector<TokenId> tail;    // the last tokens (max_tree_depth to twice that): the context
  };

  void append_tokens(RequestState& state, std::span<const TokenId> token_ids) const;

  SuffixDecodingConfig config_;
  std::unordered_map<RequestIdx, RequestState> requests_;
  SuffixTree global_tree_;
  std::deque<std::vector<TokenId>> cached_outputs_;  // oldest first, each held by global_tree_
  int64_t num_cached_tokens_ = 0;
};

}  // namespace kvasir
