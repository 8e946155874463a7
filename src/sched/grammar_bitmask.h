// GrammarBitmask: the grammar masks of one step, engine -> runner. Apart from SchedulerOutput
// because it arrives later (through a future, while the step's forward pass runs): the engine
// can fill it only after folding back the step before, whose tokens the grammars must accept.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

namespace kvasir {

// Which tokens each grammar-constrained row may sample this step (XGrammar's layout): row r is
// words [r * words_per_row, (r + 1) * words_per_row); bit t % 32 of word t / 32 set = token t
// allowed. Rows are named by request, so the runner finds each row's logits itself. Requests of
// the step without a row sample unconstrained (no grammar, or still reasoning).
struct GrammarBitmask {
  std::vector<std::string> req_ids;
  int32_t words_per_row = 0;
  std::vector<int32_t> words;
};

// An invalid (default) future: no row of the step has a grammar.
using GrammarBitmaskFuture = std::shared_future<std::shared_ptr<const GrammarBitmask>>;

}  // namespace kvasir
