#include "spec/proposer.h"

#include "spec/ngram_proposer.h"
#include "spec/suffix_proposer.h"

namespace kvasir {

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
  return invalid_argument("no proposer for speculative method \"" + config.method + "\"");
}

}  // namespace kvasir
