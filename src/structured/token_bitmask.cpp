#include "structured/token_bitmask.h"

#include <limits>

#include "common/check.h"

namespace kvasir::structured {

void apply_token_bitmask(std::span<const int32_t> row, std::span<float> logits) {
  const auto vocab_size = static_cast<int32_t>(logits.size());
  const int32_t num_words = bitmask_words(vocab_size);
  KVASIR_CHECK(static_cast<int32_t>(row.size()) >= num_words);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int32_t w = 0; w < num_words; ++w) {
    auto word = static_cast<uint32_t>(row[w]);
    if (word == ~0u) continue;
    const int32_t base = w * 32;
    const int32_t end = vocab_size - base < 32 ? vocab_size - base : 32;
    // Only the disallowed (zero) bits: walk the set bits of the complement.
    uint32_t banned = ~word;
    if (end < 32) banned &= (1u << end) - 1;
    while (banned != 0) {
      int bit = __builtin_ctz(banned);
      logits[base + bit] = kNegInf;
      banned &= banned - 1;
    }
  }
}

}  // namespace kvasir::structured
