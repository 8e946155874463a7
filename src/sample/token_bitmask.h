// Grammar token masks on the host: a row of XGrammar-layout bits (bit t % 32 of word t / 32 set =
// token t allowed) applied to one float logits row before sampling. Disallowed tokens become
// -inf, so the sampler (and logprobs, as in vLLM) never sees them. Must not know grammars.
#pragma once

#include <cstdint>
#include <span>

namespace kvasir {

// Words needed for a row of vocab_size tokens.
inline int32_t token_bitmask_words(int32_t vocab_size) { return (vocab_size + 31) / 32; }

// Sets row[t] = -inf for every t < row.size() whose bit is clear; words past the row are
// ignored. Words of all ones (the common case far from a grammar's edge) cost one compare.
void apply_token_bitmask(std::span<float> row, std::span<const int32_t> words);

}  // namespace kvasir
