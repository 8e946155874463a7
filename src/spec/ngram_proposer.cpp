#include "spec/ngram_proposer.h"

#include <algorithm>

#include "common/check.h"

namespace kvasir {

NgramProposer::NgramProposer(int min_n, int max_n) : min_n_(min_n), max_n_(max_n) {
  KVASIR_CHECK_MSG(min_n >= 1 && min_n <= max_n, "ngram proposer needs 1 <= min_n <= max_n");
}

void NgramProposer::propose(const ProposalContext& ctx, int max_num_drafts, std::vector<TokenId>* drafts) {
  drafts->clear();
  const std::span<const TokenId> t = ctx.token_ids;
  const auto len = static_cast<int64_t>(t.size());
  if (max_num_drafts <= 0 || len < min_n_ + 1) return;
  // One backward pass over candidate match ends e (the token after the match is t[e]): the match
  // length is how far t[..e) and the whole history agree backwards, capped at max_n. The longest
  // match wins, and the scan order makes the most recent one win among equals. O(len * max_n).
  int best_n = 0;
  int64_t best_e = -1;
  const TokenId last = t[static_cast<size_t>(len - 1)];
  for (int64_t e = len - 1; e >= min_n_; --e) {
    if (t[static_cast<size_t>(e - 1)] != last) continue;
    int n = 1;
    while (n < max_n_ && e - 1 - n >= 0 && t[static_cast<size_t>(e - 1 - n)] == t[static_cast<size_t>(len - 1 - n)]) ++n;
    if (n > best_n) {
      best_n = n;
      best_e = e;
      if (n == max_n_) break;  // nothing longer can be found; later (earlier in text) ties lose
    }
  }
  if (best_n < min_n_) return;
  const int64_t count = std::min<int64_t>(max_num_drafts, len - best_e);
  drafts->assign(t.begin() + best_e, t.begin() + best_e + count);
}

}  // namespace kvasir
