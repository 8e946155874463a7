#include "common/text_match.h"

#include <algorithm>

namespace kvasir {

size_t count_spaces(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}

size_t trim_end(std::string_view s) {
  size_t n = s.size();
  while (n > 0 && is_space(s[n - 1])) --n;
  return n;
}

Prefix match_prefix(std::string_view s, std::string_view marker, bool eof) {
  if (s.size() >= marker.size()) return s.substr(0, marker.size()) == marker ? Prefix::kFull : Prefix::kNo;
  if (eof || marker.substr(0, s.size()) != s) return Prefix::kNo;
  return Prefix::kPartial;
}

MarkerFind find_marker(std::string_view s, std::initializer_list<std::string_view> markers, bool eof) {
  MarkerFind best{s.size(), -1};
  int i = 0;
  for (std::string_view m : markers) {
    size_t p = s.find(m);
    if (p != std::string_view::npos && (best.which < 0 || p < best.content_end)) best = {p, i};
    ++i;
  }
  if (best.which >= 0 || eof) return best;
  // No full marker: hold the longest tail of `s` that some marker starts with.
  for (std::string_view m : markers) {
    for (size_t k = std::min(m.size() - 1, s.size()); k > 0; --k) {
      if (s.size() - k < best.content_end && s.substr(s.size() - k) == m.substr(0, k)) {
        best.content_end = s.size() - k;
        break;
      }
    }
  }
  return best;
}

}  // namespace kvasir
