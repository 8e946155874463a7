// PreTokenizer: splits normalized text into the words the model encodes one at a time, with the
// semantics of HF `tokenizers`: Sequence, Split (pattern, behavior, invert), ByteLevel (prefix
// space, GPT-2 regex, byte -> unicode alphabet), Metaspace, Digits, Punctuation, Whitespace,
// WhitespaceSplit, BertPreTokenizer. Must not look words up in a vocabulary (that is the model's job).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/status.h"
#include "tokenizer/pattern.h"

namespace kvasir::tok {

// One word on its way to the model. `at_origin`: it starts at offset 0 of the original input
// (Metaspace's prepend_scheme "first" depends on it).
struct PreToken {
  std::string text;
  bool at_origin = false;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
enum class PrependScheme { kAlways, kFirst, kNever };

class PreTokenizer {
 public:
  // `j` is the tokenizer.json "pre_tokenizer" value; null gives no splitting.
  static StatusOr<PreTokenizer> from_json(const Json& j);

  void add_split(Pattern pattern, SplitBehavior behavior, bool invert);
  void add_byte_level(bool add_prefix_space, bool use_regex);
  void add_digits(bool individual);
  void add_metaspace(std::string replacement, PrependScheme scheme, bool split);

  bool empty() const { return steps_.empty(); }
  // Rewrites `words` in place: every step splits (or rewrites) each word in turn.
  void pre_tokenize(std::vector<PreToken>* words) const;

 private:
  enum class Kind { kSplit, kByteLevel, kDigits, kPunctuation, kMetaspace, kWhitespaceSplit };
  struct Step {
    Kind kind;
    Pattern pattern;
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
    bool flag = false;         // ByteLevel add_prefix_space, Digits individual, Metaspace split
    bool use_regex = false;    // ByteLevel
    PrependScheme scheme = PrependScheme::kAlways;
    std::string replacement;   // Metaspace
  };
  Status add_from_json(const Json& j);
  void apply(const Step& step, const PreToken& in, std::vector<PreToken>* out) const;

  std::vector<Step> steps_;
};

// Splits `text` at the given matches with HF's SplitDelimiterBehavior semantics; appends the
// non-empty pieces to `out` (the first one inherits `at_origin`).
void split_by_spans(const PreToken& in, const std::vector<Pattern::Span>& matches,
                    SplitBehavior behavior, bool invert, std::vector<PreToken>* out);

}  // namespace kvasir::tok
