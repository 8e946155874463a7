// NgramProposer: prompt lookup decoding. Finds the most recent earlier place where the history's
// last n tokens occurred (n from prompt_lookup_max down to prompt_lookup_min, longer matches first)
// and proposes the tokens that followed it. Strong on input-grounded output (quotes, code edits,
// summaries that copy), free of any model. Stateless: each call reads only the history it is given.
#pragma once

#include "spec/proposer.h"

namespace kvasir {

class NgramProposer final : public Proposer {
 public:
  // 1 <= min_n <= max_n.
  NgramProposer(int min_n, int max_n);
  void propose(const ProposalContext& ctx, int max_num_drafts, std::vector<TokenId>* drafts) override;

 private:
  int min_n_, max_n_;
};

}  // namespace kvasir
