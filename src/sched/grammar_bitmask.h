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
// A request verifying speculative drafts samples 1 + d tokens in one step and has a row per
// position it constrains: position j masks the token after its j-th draft (0: after its last
// known token), computed by a matcher advanced through drafts 0..j-1.
struct GrammarBitmask {
  std::vector<std::string> req_ids;
  int32_t words_per_row = 0;
  std::vector<int32_t> words;
  // Empty (every row at position 0) or one entry per row.
  std::vector<int32_t> positions;

  int32_t position(size_t row) const { return positions.empty() ? 0 : positions[row]; }
};

// An invalid (default) future: no row of the step has a grammar.
using GrammarBitmaskFuture = std::shared_future<std::shared_ptr<const GrammarBitmask>>;

}  // namespace kvasir
