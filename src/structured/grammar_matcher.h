// GrammarMatcher: one sequence's position in its grammar. Before each sampling step it says which
// tokens may come next (fill_bitmask, into a row of token_bitmask.h's layout); after it, it
// advances by the sampled token (accept_token) or, for speculative decoding, is rolled back by the
// tokens that were rejected. Once the grammar is complete only the stop tokens are allowed, and
// accepting one terminates the matcher. Owned by one thread (the engine's); not thread-safe.
// Nothing here throws or aborts on a bad token id: the answer is "not allowed". Must not sample,
// touch logits (token_bitmask.h applies a row) or know about requests.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "structured/grammar_compiler.h"
#include "structured/token_bitmask.h"

namespace kvasir::structured {

class GrammarMatcher {
 public:
  explicit GrammarMatcher(CompiledGrammarPtr grammar);
  ~GrammarMatcher();
  GrammarMatcher(GrammarMatcher&&) noexcept;
  GrammarMatcher& operator=(GrammarMatcher&&) noexcept;

  // Advances by one token when the grammar allows it (a stop token only once the grammar is
  // complete; then the matcher is terminated). false: not allowed, the state is unchanged.
  bool accept_token(int32_t token_id);
  // Advances by raw bytes as one step (forced text, tests); false: not allowed, unchanged.
  bool accept_string(std::string_view bytes);

  // Writes the allowed next tokens: row holds bitmask_words(model_vocab_size) words. Returns
  // whether any token is disallowed (false: the row is all ones, applying it changes nothing).
  // A terminated matcher allows only the stop tokens.
  bool fill_bitmask(std::span<int32_t> row);

  // Undoes the last `num_tokens` accepted steps (at most num_accepted_steps()).
  void rollback(int32_t num_tokens);
  void reset();

  // A stop token was accepted: the output is complete.
  bool is_terminated() const;
  // The grammar has matched a complete output (a stop token would now be accepted).
  bool is_completed() const;
  int32_t num_accepted_steps() const { return num_accepted_; }
  int32_t model_vocab_size() const;
  const CompiledGrammarPtr& grammar() const { return grammar_; }

 private:
  struct Impl;
  CompiledGrammarPtr grammar_;
  std::unique_ptr<Impl> impl_;
  int32_t num_accepted_ = 0;
};

}  // namespace kvasir::structured
