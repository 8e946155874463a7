// SuffixTree: how often every run of up to max_depth tokens occurs in the sequences it holds, kept
// as a trie of their suffixes, so "what followed this context, and how often" is a walk from the
// root. One token is appended in O(max_depth) through a Cursor (the open suffixes of one sequence),
// with a hash lookup only per new node (suffix links, as in Ukkonen's construction, find the rest);
// a whole sequence is removed again in O(length x max_depth). It knows nothing of requests or of
// which sequences to keep: suffix_decoding.h decides that. Single-threaded; one owner.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/ids.h"
#include "spec/suffix_child_index.h"

namespace kvasir {

// A proposed continuation and why: the tokens, the expected number of them a verifier accepts if
// the tree's counts were the model's probabilities (the sum of the cumulative count ratios), and
// how many context tokens the match that produced it covered.
struct SuffixDraft {
  std::vector<TokenId> token_ids;
  double score = 0.0;
  int match_len = 0;
};

// How far speculate() may go: a match of m tokens may propose at most
// min(max_tokens, floor(max_spec_factor * m + max_spec_offset)) tokens, and a token is proposed only
// while the product of the count ratios along the draft stays >= min_token_prob.
struct SuffixSpeculateParams {
  int max_tokens = 0;
  double max_spec_factor = 1.0;
  double max_spec_offset = 0.0;
  double min_token_prob = 0.1;
};

class SuffixTree {
 public:
  // max_depth >= 1: the longest run of tokens counted, so the longest context matched plus draft.
  explicit SuffixTree(int max_depth);

  // The suffixes of one sequence that are still shorter than max_depth, as node ids; append()
  // extends each by the new token. Valid until remove_sequence() runs on the same tree (a removal
  // may free the nodes it points at); append() checks that.
  class Cursor {
   private:
    friend class SuffixTree;
    std::vector<int32_t> open_;  // [max_depth]: open_[i] is the node of the last i+1 tokens
    int num_open_ = 0;
    uint64_t removal_epoch_ = 0;
  };
  Cursor new_cursor() const;
  void append(Cursor& cursor, TokenId token);
  void append(Cursor& cursor, std::span<const TokenId> tokens);
  // Counts a whole sequence in (appends it through a fresh cursor).
  void insert_sequence(std::span<const TokenId> tokens);
  // Takes back exactly what insert_sequence(tokens) added; nodes whose count drops to 0 are freed
  // for reuse. The sequence must have been inserted (checked: a missing path aborts).
  void remove_sequence(std::span<const TokenId> tokens);

  // Occurrences of pattern (1 <= size <= max_depth) in the held sequences; 0 when absent.
  int32_t count(std::span<const TokenId> pattern) const;
  // The longest suffix of context, at most max_depth tokens, that occurs; 0 when none does.
  int longest_match_len(std::span<const TokenId> context) const;

  // For each suffix of context that occurs (1..max_depth tokens), grows a draft greedily from it,
  // always following the most frequent next token (ties: the smaller token id); returns the draft
  // with the highest score, the longer match on equal scores. Empty when nothing matches.
  SuffixDraft speculate(std::span<const TokenId> context, const SuffixSpeculateParams& params) const;

  // speculate() in two halves, so a caller choosing between trees allocates nothing: the winning
  // match (where to draft from, how far, its score), then its tokens appended to a buffer the
  // caller reuses. A candidate is valid until the tree changes (append_draft checks its score).
  struct Candidate {
    int32_t node = -1;  // -1: nothing matched
    int match_len = 0;
    int max_tokens = 0;
    double score = 0.0;
  };
  Candidate best_candidate(std::span<const TokenId> context, const SuffixSpeculateParams& params) const;
  void append_draft(const Candidate& candidate, double min_token_prob, std::vector<TokenId>* out) const;

  int max_depth() const { return max_depth_; }
  // Live nodes besides the root: at most max_depth per token held.
  int64_t num_nodes() const { return num_live_; }
  // Tokens held (the sum of the held sequences' lengths).
  int64_t num_tokens() const { return num_tokens_; }
  // Host memory held: the node array (freed nodes are kept for reuse) and the child index.
  int64_t memory_bytes() const {
    return static_cast<int64_t>(nodes_.capacity() * sizeof(Node)) + children_.memory_bytes();
  }
  // Aborts (KVASIR_CHECK) when counts, best children, sibling lists or the child index disagree.
  void check_invariants() const;

 private:
  static constexpr int32_t kRoot = 0;
  static constexpr int32_t kNone = -1;

  struct Node {
    TokenId token = 0;  // the token on the edge from parent
    int32_t count = 0;  // occurrences of the root -> node run; root: unused (num_tokens_)
    int32_t parent = kNone;
    int32_t first_child = kNone;
    int32_t next_sibling = kNone;  // doubles as the free-list link of a freed node
    int32_t prev_sibling = kNone;
    int32_t best_child = kNone;   // the child with the highest count (ties: smaller token); root: unused
    int32_t suffix_link = kNone;  // the node of the same run without its first token; root: none
  };
  struct Match {
    int32_t node;
    int len;
  };

  int32_t find_child(int32_t parent, TokenId token) const;
  int32_t find_path(std::span<const TokenId> pattern) const;
  // The node of the longest suffix of context (at most max_depth tokens) that occurs.
  Match match_suffix(std::span<const TokenId> context) const;
  // A new child with count 0; the caller bumps it and sets its suffix link.
  int32_t new_child(int32_t parent, TokenId token);
  void bump(int32_t parent, int32_t child);
  void free_node(int32_t id);
  void rescan_best_child(int32_t parent);
  bool better(int32_t a, int32_t b) const;
  // The greedy walk from node: returns how many tokens it proposes and their score; appends them to
  // out unless it is null (scoring every candidate match allocates nothing).
  int grow(int32_t node, int max_tokens, double min_token_prob, std::vector<TokenId>* out,
           double* score) const;

  int max_depth_;
  std::vector<Node> nodes_;    // [0] is the root
  int32_t free_head_ = kNone;  // freed nodes, linked through next_sibling
  int64_t num_live_ = 0;
  int64_t num_tokens_ = 0;
  SuffixChildIndex children_;
  uint64_t removal_epoch_ = 0;  // bumped by every removal, so stale cursors are caught
};

}  // namespace kvasir
