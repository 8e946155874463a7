#include "tokenizer/pre_tokenizers.h"

#include <algorithm>

#include "common/quoted_text.h"
#include "tokenizer/unicode_util.h"

namespace kvasir::tok {
namespace {

// The regex HF's ByteLevel pre-tokenizer applies when use_regex is true (GPT-2's).
constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// HF Whitespace pre-tokenizer, `\w+|[^\w\s]+`, with `\w` spelled out as Rust's regex crate means
// it (PCRE2's \w also takes every \p{N}, e.g. '½', which Rust's does not).
constexpr std::string_view kWhitespaceRegex =
    R"([\p{L}\p{M}\p{Nd}\p{Nl}\p{Pc}\x{200C}\x{200D}]+|[^\p{L}\p{M}\p{Nd}\p{Nl}\p{Pc}\x{200C}\x{200D}\s]+)";

const Pattern& gpt2_pattern() {
  static const Pattern p = *Pattern::regex(kGpt2Regex);
  return p;
}

const Pattern& whitespace_pattern() {
  static const Pattern p = *Pattern::regex(kWhitespaceRegex);
  return p;
}

// One match per code point satisfying `pred` (HF's char-predicate patterns).
template <typename Pred>
void char_matches(std::string_view s, Pred pred, std::vector<Pattern::Span>* out) {
  for (size_t i = 0; i < s.size();) {
    size_t n = 0;
    uint32_t cp = first_code_point(s.substr(i), &n);
    if (pred(cp)) out->emplace_back(i, i + n);
    i += n;
  }
}

// prefix + s (spelled out: GCC 12 warns falsely about std::string::insert(0, ...)).
std::string prefixed(std::string_view prefix, const std::string& s) {
  std::string out;
  out.reserve(prefix.size() + s.size());
  out.append(prefix);
  out.append(s);
  return out;
}

StatusOr<SplitBehavior> parse_behavior(const std::string& s) {
  if (s == "Removed") return SplitBehavior::kRemoved;
  if (s == "Isolated") return SplitBehavior::kIsolated;
  if (s == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (s == "Contiguous") return SplitBehavior::kContiguous;
  return invalid_argument("unknown split behavior '" + quoted_text(s) + "'");
}

}  // namespace

void split_by_spans(const PreToken& in, const std::vector<Pattern::Span>& matches,
                    SplitBehavior behavior, bool invert, std::vector<PreToken>* out) {
  const std::string& s = in.text;
  if (s.empty()) return;
  struct Piece {
    size_t begin, end;
    bool is_match;
  };
  std::vector<Piece> pieces;
  pieces.reserve(matches.size() * 2 + 1);
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (prev != b) pieces.push_back({prev, b, invert});
    pieces.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != s.size()) pieces.push_back({prev, s.size(), invert});

  // Reduce to the kept [begin, end) ranges, exactly as NormalizedString::split does.
  std::vector<std::pair<size_t, size_t>> kept;
  kept.reserve(pieces.size());
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Piece& p : pieces) kept.emplace_back(p.begin, p.end);
      break;
    case SplitBehavior::kRemoved:
      for (const Piece& p : pieces) {
        if (!p.is_match) kept.emplace_back(p.begin, p.end);
      }
      break;
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const Piece& p : pieces) {
        if (p.is_match == previous_match && !kept.empty()) {
          kept.back().second = p.end;
        } else {
          kept.emplace_back(p.begin, p.end);
        }
        previous_match = p.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Piece& p : pieces) {
        if (p.is_match && !previous_match && !kept.empty()) {
          kept.back().second = p.end;
        } else {
          kept.emplace_back(p.begin, p.end);
        }
        previous_match = p.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (size_t k = pieces.size(); k-- > 0;) {
        const Piece& p = pieces[k];
        if (p.is_match && !previous_match && !kept.empty()) {
          kept.back().first = p.begin;
        } else {
          kept.emplace_back(p.begin, p.end);
        }
        previous_match = p.is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    }
  }
  for (const auto& [b, e] : kept) {
    if (e > b) out->push_back(PreToken{s.substr(b, e - b), in.at_origin && b == 0});
  }
}

StatusOr<PreTokenizer> PreTokenizer::from_json(const Json& j) {
  PreTokenizer p;
  if (!j.is_null()) KVASIR_RETURN_IF_ERROR(p.add_from_json(j));
  return p;
}

void PreTokenizer::add_split(Pattern pattern, SplitBehavior behavior, bool invert) {
  Step s{Kind::kSplit, std::move(pattern)};
  s.behavior = behavior;
  s.invert = invert;
  steps_.push_back(std::move(s));
}

void PreTokenizer::add_byte_level(bool add_prefix_space, bool use_regex) {
  Step s{Kind::kByteLevel, Pattern{}};
  s.flag = add_prefix_space;
  s.use_regex = use_regex;
  steps_.push_back(std::move(s));
}

void PreTokenizer::add_digits(bool individual) {
  Step s{Kind::kDigits, Pattern{}};
  s.flag = individual;
  steps_.push_back(std::move(s));
}

void PreTokenizer::add_metaspace(std::string replacement, PrependScheme scheme, bool split) {
  Step s{Kind::kMetaspace, Pattern{}};
  s.replacement = std::move(replacement);
  s.scheme = scheme;
  s.flag = split;
  steps_.push_back(std::move(s));
}

Status PreTokenizer::add_from_json(const Json& j) {
  if (!j.is_object()) return invalid_argument("tokenizer pre_tokenizer must be an object");
  const std::string type = j.get_string("type");
  if (type == "Sequence") {
    const Json* list = j.find("pretokenizers");
    if (list == nullptr || !list->is_array()) return invalid_argument("pre_tokenizer Sequence needs a list");
    for (const Json& item : list->as_array()) KVASIR_RETURN_IF_ERROR(add_from_json(item));
    return Status();
  }
  if (type == "Split") {
    const Json* pat = j.find("pattern");
    if (pat == nullptr) return invalid_argument("Split pre_tokenizer needs a pattern");
    KVASIR_ASSIGN_OR_RETURN(Pattern p, Pattern::from_json(*pat));
    KVASIR_ASSIGN_OR_RETURN(SplitBehavior b, parse_behavior(j.get_string("behavior", "Isolated")));
    add_split(std::move(p), b, j.get_bool("invert", false));
    return Status();
  }
  if (type == "ByteLevel") {
    add_byte_level(j.get_bool("add_prefix_space", true), j.get_bool("use_regex", true));
    return Status();
  }
  if (type == "Digits") {
    add_digits(j.get_bool("individual_digits", false));
    return Status();
  }
  if (type == "Punctuation") {
    KVASIR_ASSIGN_OR_RETURN(SplitBehavior b, parse_behavior(j.get_string("behavior", "Isolated")));
    Step s{Kind::kPunctuation, Pattern{}};
    s.behavior = b;
    steps_.push_back(std::move(s));
    return Status();
  }
  if (type == "Whitespace") {
    add_split(whitespace_pattern(), SplitBehavior::kRemoved, /*invert=*/true);
    return Status();
  }
  if (type == "BertPreTokenizer") {  // split at whitespace (dropped), then isolate punctuation
    steps_.push_back(Step{Kind::kWhitespaceSplit, Pattern{}});
    Step s{Kind::kPunctuation, Pattern{}};
    s.behavior = SplitBehavior::kIsolated;
    steps_.push_back(std::move(s));
    return Status();
  }
  if (type == "WhitespaceSplit") {
    steps_.push_back(Step{Kind::kWhitespaceSplit, Pattern{}});
    return Status();
  }
  if (type == "Metaspace") {
    std::string rep = j.get_string("replacement", "\xE2\x96\x81");
    PrependScheme scheme = PrependScheme::kAlways;
    if (const Json* ps = j.find("prepend_scheme"); ps != nullptr && ps->is_string()) {
      const std::string& v = ps->as_string();
      if (v == "first") {
        scheme = PrependScheme::kFirst;
      } else if (v == "never") {
        scheme = PrependScheme::kNever;
      } else if (v != "always") {
        return invalid_argument("unknown Metaspace prepend_scheme '" + quoted_text(v) + "'");
      }
    } else if (!j.get_bool("add_prefix_space", true)) {  // files written before prepend_scheme
      scheme = PrependScheme::kNever;
    }
    add_metaspace(std::move(rep), scheme, j.get_bool("split", true));
    return Status();
  }
  return unimplemented("tokenizer pre_tokenizer '" + quoted_text(type) + "' is not supported");
}

void PreTokenizer::apply(const Step& step, const PreToken& in, std::vector<PreToken>* out) const {
  std::vector<Pattern::Span> spans;
  switch (step.kind) {
    case Kind::kSplit:
      step.pattern.find_all(in.text, &spans);
      split_by_spans(in, spans, step.behavior, step.invert, out);
      return;
    case Kind::kDigits:
      char_matches(in.text, is_numeric, &spans);
      split_by_spans(in, spans, step.flag ? SplitBehavior::kIsolated : SplitBehavior::kContiguous,
                     false, out);
      return;
    case Kind::kPunctuation:
      char_matches(in.text, is_punctuation, &spans);
      split_by_spans(in, spans, step.behavior, false, out);
      return;
    case Kind::kWhitespaceSplit:
      char_matches(in.text, is_whitespace, &spans);
      split_by_spans(in, spans, SplitBehavior::kRemoved, false, out);
      return;
    case Kind::kByteLevel: {
      PreToken word = in;
      if (step.flag && !word.text.empty() && word.text[0] != ' ') word.text = prefixed(" ", word.text);
      size_t first = out->size();
      if (step.use_regex) {
        gpt2_pattern().find_all(word.text, &spans);
        split_by_spans(word, spans, SplitBehavior::kIsolated, false, out);
      } else if (!word.text.empty()) {
        out->push_back(std::move(word));
      }
      for (size_t k = first; k < out->size(); ++k) {
        std::string mapped;
        mapped.reserve((*out)[k].text.size() * 2);
        append_byte_level(mapped, (*out)[k].text);
        (*out)[k].text = std::move(mapped);
      }
      return;
    }
    case Kind::kMetaspace: {
      PreToken word = in;
      word.text = Pattern::literal(" ").replace_all(word.text, step.replacement);
      bool starts = word.text.compare(0, step.replacement.size(), step.replacement) == 0;
      bool prepend = !starts && !word.text.empty() &&
                     (step.scheme == PrependScheme::kAlways ||
                      (step.scheme == PrependScheme::kFirst && word.at_origin));
      if (prepend) word.text = prefixed(step.replacement, word.text);
      if (step.flag) {
        Pattern::literal(step.replacement).find_all(word.text, &spans);
        split_by_spans(word, spans, SplitBehavior::kMergedWithNext, false, out);
      } else if (!word.text.empty()) {
        out->push_back(std::move(word));
      }
      return;
    }
  }
}

void PreTokenizer::pre_tokenize(std::vector<PreToken>* words) const {
  std::vector<PreToken> next;
  for (const Step& step : steps_) {
    next.clear();
    next.reserve(words->size() * 2);
    for (const PreToken& w : *words) apply(step, w, &next);
    words->swap(next);
  }
}

}  // namespace kvasir::tok
