#include "spec/proposer.h"

#include "spec/ngram_proposer.h"
#include "spec/suffix_proposer.h"

namespace kvasir {

void Proposer::propose_batch(std::span<const ProposalContext> ctxs, std::span<const int> max_num_drafts,
                             std::span<std::vector<TokenId>* const> drafts) {
  for (size_t i = 0; i < ctxs.size(); ++i) propose(ctxs[i], max_num_drafts[i], drafts[i]);
}

StatusOr<std::unique_ptr<Proposer>> make_proposer(const SpeculativeConfig& config) {
  if (config.method == "ngram") {
    if (config.prompt_lookup_min < 1 || config.prompt_lookup_min > config.prompt_lookup_max) {
      return invalid_argument("ngram proposer needs 1 <= prompt_lookup_min <= prompt_lookup_max");
    }
    return std::unique_ptr<Proposer>(new NgramProposer(config.prompt_lookup_min, config.prompt_lookup_max));
  }
  if (config.method == "suffix") {
    KVASIR_RETURN_IF_ERROR(config.suffix.validate());
    return std::unique_ptr<Proposer>(new SuffixProposer(config.suffix));
  }
  if (config.method == "draft_model" || config.method == "eagle" || config.method == "eagle3") {
    return invalid_argument("the " + config.method + " proposer is built by the runner from the loaded " +
                            (config.method == "draft_model" ? "draft model" : "EAGLE head"));
  }
  return invalid_argument("no proposer for speculative method \"" + config.method + "\"");
}

}  // namespace kvasir
