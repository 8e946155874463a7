// Pattern: what HF `tokenizers` calls a pattern ({"String": ...} or {"Regex": ...}), used by the
// Split pre-tokenizer, the Replace normalizer and the Replace decoder. Regexes run on PCRE2
// (UTF + UCP, JIT-compiled), which accepts the Oniguruma syntax these files use (\p{L},
// lookahead, (?i:...)). Must only be given valid UTF-8: the tokenizer sanitizes input once.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/json.h"
#include "common/status.h"

namespace kvasir::tok {

class Regex;

class Pattern {
 public:
  using Span = std::pair<size_t, size_t>;  // [begin, end) in bytes

  static Pattern literal(std::string s);
  // `expr` in Oniguruma syntax, as tokenizer.json files write it.
  static StatusOr<Pattern> regex(std::string_view expr);
  // {"String": "..."} or {"Regex": "..."}.
  static StatusOr<Pattern> from_json(const Json& j);

  // Appends the non-overlapping, non-empty matches in `text`, left to right.
  void find_all(std::string_view text, std::vector<Span>* out) const;
  // Replaces every match by `content`.
  std::string replace_all(std::string_view text, std::string_view content) const;

 private:
  std::string literal_;
  std::shared_ptr<const Regex> regex_;
};

// Rewrites the shorthand classes whose meaning differs between Oniguruma and PCRE2 (\w \W \s
// \S) into explicit classes with Oniguruma's meaning. Exposed for tests.
std::string onig_to_pcre2(std::string_view expr);

}  // namespace kvasir::tok
