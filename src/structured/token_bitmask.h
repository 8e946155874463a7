// Token bitmasks: which tokens the grammar allows next, one row per sequence, in XGrammar's
// layout so a row can go to a device kernel as is: int32 words, bit (i % 32) of word (i / 32) set
// means token i is allowed. The host-side apply for the CPU sampler lives here too. Plain data;
// must not know about grammars (GrammarMatcher fills rows).
#pragma once

#include <cstdint>
#include <span>

namespace kvasir::structured {

// Words in one row for a vocabulary (logits width) of `vocab_size` tokens.
constexpr int32_t bitmask_words(int32_t vocab_size) {
  return (vocab_size + 31) / 32;
}

inline bool bitmask_allows(std::span<const int32_t> row, int32_t token_id) {
  return (static_cast<uint32_t>(row[token_id / 32]) >> (token_id % 32)) & 1u;
}

// Sets every logit whose token the row disallows to -inf. logits: [vocab_size]; the row must hold
// bitmask_words(logits.size()) words. Words that are all ones (everything allowed) are skipped.
void apply_token_bitmask(std::span<const int32_t> row, std::span<float> logits);

}  // namespace kvasir::structured
