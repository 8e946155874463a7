#include "sample/token_bitmask.h"

#include <algorithm>
#include <limits>

namespace kvasir {

void apply_token_bitmask(std::span<float> row, std::span<const int32_t> words) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const size_t n = row.size();
  const size_t num_words = std::min(words.size(), (n + 31) / 32);
  for (size_t w = 0; w < num_words; ++w) {
    const uint32_t bits = static_cast<uint32_t>(words[w]);
    if (bits == 0xffffffffu) continue;
    const size_t base = w * 32;
    const size_t end = std::min(base + 32, n);
    if (bits == 0) {
      std::fill(row.begin() + static_cast<std::ptrdiff_t>(base), row.begin() + static_cast<std::ptrdiff_t>(end), kNegInf);
      continue;
    }
    for (size_t t = base; t < end; ++t) {
      if (!((bits >> (t - base)) & 1u)) row[t] = kNegInf;
    }
  }
  // A row longer than the mask (model vocab past the grammar's): the rest is not allowed.
  if (num_words * 32 < n && num_words == words.size()) {
    std::fill(row.begin() + static_cast<std::ptrdiff_t>(num_words * 32), row.end(), kNegInf);
  }
}

}  // namespace kvasir
