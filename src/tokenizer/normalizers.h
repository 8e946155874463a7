// Normalizer: the text rewriting HF `tokenizers` applies to each piece of input between added
// tokens, before pre-tokenization: Sequence, NFC/NFD/NFKC/NFKD, Lowercase, Strip, Replace,
// Prepend, StripAccents, BertNormalizer. Offsets are not tracked (we never report character
// spans), which keeps this a plain string -> string function. Must not know about vocabularies
// or models.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/status.h"
#include "tokenizer/pattern.h"

namespace kvasir::tok {

class Normalizer {
 public:
  // `j` is the tokenizer.json "normalizer" value; null gives the identity.
  static StatusOr<Normalizer> from_json(const Json& j);

  void add_replace(Pattern pattern, std::string content);
  void add_prepend(std::string prefix);
  void add_nfc();
  // HF BertNormalizer: drop control characters and turn whitespace into ' ' (clean_text), put
  // spaces around CJK ideographs, NFD and drop nonspacing marks (strip_accents), lowercase.
  void add_bert(bool clean_text, bool handle_chinese_chars, bool strip_accents, bool lowercase);

  bool empty() const { return steps_.empty(); }
  std::string normalize(std::string_view text) const;

 private:
  enum class Kind {
    kNfc, kNfd, kNfkc, kNfkd, kLowercase, kStrip, kReplace, kPrepend, kAppend,
    kStripAccents, kBertCleanText, kBertChineseChars
  };
  struct Step {
    Kind kind;
    Pattern pattern;      // kReplace
    std::string content;  // kReplace replacement, kPrepend/kAppend text
    bool left = false;    // kStrip
    bool right = false;
  };
  Status add_from_json(const Json& j);
  static void apply(const Step& step, std::string& s);

  std::vector<Step> steps_;
};

}  // namespace kvasir::tok
