// Test-only: suffix decoding computed the slow, obvious way, by scanning every held sequence for
// every pattern. The suffix tree and the suffix decoding cache must give exactly these answers.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <span>
#include <vector>

#include "spec/suffix_tree.h"

namespace kvasir::testing {

using Sequences = std::vector<std::vector<TokenId>>;

// Positions where pattern ends in some sequence.
inline int naive_count(const Sequences& seqs, std::span<const TokenId> pattern) {
  int n = 0;
  for (const auto& s : seqs) {
    if (pattern.empty() || pattern.size() > s.size()) continue;
    for (size_t end = pattern.size(); end <= s.size(); ++end) {
      n += std::equal(pattern.begin(), pattern.end(),
                      s.begin() + static_cast<std::ptrdiff_t>(end - pattern.size()));
    }
  }
  return n;
}

// How often each token follows pattern (only runs of at most max_depth tokens are counted).
inline std::map<TokenId, int> naive_next_counts(const Sequences& seqs, std::span<const TokenId> pattern,
                                                int max_depth) {
  std::map<TokenId, int> next;
  if (pattern.size() + 1 > static_cast<size_t>(max_depth)) return next;
  for (const auto& s : seqs) {
    for (size_t end = pattern.size(); end < s.size(); ++end) {
      if (std::equal(pattern.begin(), pattern.end(),
                     s.begin() + static_cast<std::ptrdiff_t>(end - pattern.size()))) {
        next[s[end]]++;
      }
    }
  }
  return next;
}

inline int naive_longest_match(const Sequences& seqs, std::span<const TokenId> context, int max_depth) {
  int best = 0;
  for (int m = 1; m <= std::min(static_cast<int>(context.size()), max_depth); ++m) {
    if (naive_count(seqs, context.last(static_cast<size_t>(m))) > 0) best = m;
  }
  return best;
}

// SuffixTree::speculate's contract, spelled out with scans.
inline SuffixDraft naive_speculate(const Sequences& seqs, std::span<const TokenId> context, int max_depth,
                                   const SuffixSpeculateParams& params) {
  SuffixDraft best;
  const int limit = std::min(static_cast<int>(context.size()), max_depth);
  for (int m = 1; m <= limit; ++m) {
    std::vector<TokenId> run(context.end() - m, context.end());
    if (naive_count(seqs, run) == 0) break;
    double allowed = std::floor(params.max_spec_factor * m + params.max_spec_offset + 1e-6);
    int max_tokens = static_cast<int>(std::clamp(allowed, 0.0, static_cast<double>(params.max_tokens)));
    SuffixDraft draft;
    draft.match_len = m;
    double prob = 1.0;
    while (static_cast<int>(draft.token_ids.size()) < max_tokens) {
      auto next = naive_next_counts(seqs, run, max_depth);
      if (next.empty()) break;
      // Most frequent; std::map iterates tokens in increasing order, so '>' keeps the smaller on ties.
      auto top = next.begin();
      for (auto it = next.begin(); it != next.end(); ++it) {
        if (it->second > top->second) top = it;
      }
      prob *= static_cast<double>(top->second) / naive_count(seqs, run);
      if (prob < params.min_token_prob) break;
      draft.token_ids.push_back(top->first);
      draft.score += prob;
      run.push_back(top->first);
    }
    if (draft.score >= best.score) best = draft;
  }
  return best;
}

}  // namespace kvasir::testing
