// Test-only: the ways a streaming parser's tests cut one recorded output into pieces, so that
// whole and streamed results can be compared: no cut, every byte a piece, random piece sizes
// under fixed seeds (small and large pieces), and every single cut point (inside markers and
// UTF-8 characters too; for outputs up to 600 bytes, to keep the tests quick).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string_view>
#include <vector>

namespace kvasir {

// Each entry lists ascending cut offsets inside `text`.
inline std::vector<std::vector<size_t>> stream_splits(std::string_view text) {
  std::vector<std::vector<size_t>> all;
  all.push_back({});
  std::vector<size_t> bytes;
  for (size_t i = 1; i < text.size(); ++i) bytes.push_back(i);
  all.push_back(bytes);
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    std::mt19937 rng(seed);
    size_t max_chunk = seed <= 6 ? 6 : 40;
    std::vector<size_t> cuts;
    for (size_t at = 1 + rng() % max_chunk; at < text.size(); at += 1 + rng() % max_chunk) cuts.push_back(at);
    all.push_back(cuts);
  }
  if (text.size() <= 600) {
    for (size_t i = 1; i < text.size(); ++i) all.push_back({i});
  }
  return all;
}

}  // namespace kvasir
