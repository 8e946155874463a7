#include "tokenizer/normalizers.h"

#include <utf8proc.h>

#include <cstdlib>

#include "common/quoted_text.h"
#include "common/utf8.h"
#include "tokenizer/unicode_util.h"

namespace kvasir::tok {
namespace {

std::string unicode_normalize(const std::string& s, int options) {
  if (s.empty()) return s;
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                    static_cast<utf8proc_ssize_t>(s.size()), &out,
                                    static_cast<utf8proc_option_t>(options | UTF8PROC_STABLE));
  if (n < 0) return s;  // only on invalid UTF-8, which the tokenizer never passes
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

bool all_ascii(const std::string& s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

// What HF's BertNormalizer drops as control: Cc, Cf, Co and Cs except \t \n \r. Unassigned
// code points (Cn) are kept, as HF keeps them (golden: U+3040, U+D7FF).
bool is_bert_control(uint32_t cp) {
  if (cp == '\t' || cp == '\n' || cp == '\r') return false;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
      return true;
    default:
      return false;
  }
}

// HF BertNormalizer's whitespace: \t \n \r and the space separators (Zs).
bool is_bert_whitespace(uint32_t cp) {
  return cp == '\t' || cp == '\n' || cp == '\r' || cp == ' ' ||
         utf8proc_category(static_cast<utf8proc_int32_t>(cp)) == UTF8PROC_CATEGORY_ZS;
}

// The CJK Unified Ideographs blocks BERT pads with spaces (not kana, not Hangul).
bool is_cjk_ideograph(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

// Rewrites s code point by code point; `f` appends the replacement of one code point.
template <typename F>
void map_code_points(std::string& s, F f) {
  std::string out;
  out.reserve(s.size() + 8);
  for (size_t i = 0; i < s.size();) {
    size_t n = 0;
    const uint32_t cp = first_code_point(std::string_view(s).substr(i), &n);
    f(out, cp, std::string_view(s).substr(i, n));
    i += n;
  }
  s = std::move(out);
}

}  // namespace

StatusOr<Normalizer> Normalizer::from_json(const Json& j) {
  Normalizer n;
  if (!j.is_null()) KVASIR_RETURN_IF_ERROR(n.add_from_json(j));
  return n;
}

void Normalizer::add_replace(Pattern pattern, std::string content) {
  steps_.push_back(Step{Kind::kReplace, std::move(pattern), std::move(content)});
}

void Normalizer::add_prepend(std::string prefix) {
  steps_.push_back(Step{Kind::kPrepend, Pattern::literal(""), std::move(prefix)});
}

void Normalizer::add_nfc() { steps_.push_back(Step{Kind::kNfc, Pattern::literal(""), ""}); }

void Normalizer::add_bert(bool clean_text, bool handle_chinese_chars, bool strip_accents, bool lowercase) {
  auto add = [&](Kind k) { steps_.push_back(Step{k, Pattern::literal(""), ""}); };
  if (clean_text) add(Kind::kBertCleanText);
  if (handle_chinese_chars) add(Kind::kBertChineseChars);
  if (strip_accents) {
    add(Kind::kNfd);
    add(Kind::kStripAccents);
  }
  if (lowercase) add(Kind::kLowercase);
}

Status Normalizer::add_from_json(const Json& j) {
  if (!j.is_object()) return invalid_argument("tokenizer normalizer must be an object");
  const std::string type = j.get_string("type");
  auto simple = [&](Kind k) {
    steps_.push_back(Step{k, Pattern::literal(""), ""});
    return Status();
  };
  if (type == "Sequence") {
    const Json* list = j.find("normalizers");
    if (list == nullptr || !list->is_array()) return invalid_argument("normalizer Sequence needs a list");
    for (const Json& item : list->as_array()) KVASIR_RETURN_IF_ERROR(add_from_json(item));
    return Status();
  }
  if (type == "NFC") return simple(Kind::kNfc);
  if (type == "NFD") return simple(Kind::kNfd);
  if (type == "NFKC") return simple(Kind::kNfkc);
  if (type == "NFKD") return simple(Kind::kNfkd);
  if (type == "Lowercase") return simple(Kind::kLowercase);
  if (type == "StripAccents") return simple(Kind::kStripAccents);
  if (type == "BertNormalizer") {
    const bool lowercase = j.get_bool("lowercase", true);
    const Json* strip = j.find("strip_accents");
    const bool strip_accents = strip != nullptr && strip->is_bool() ? strip->as_bool() : lowercase;  // null: as lowercase
    add_bert(j.get_bool("clean_text", true), j.get_bool("handle_chinese_chars", true), strip_accents, lowercase);
    return Status();
  }
  if (type == "Strip") {
    Step s{Kind::kStrip, Pattern::literal(""), ""};
    s.left = j.get_bool("strip_left", true);
    s.right = j.get_bool("strip_right", true);
    steps_.push_back(std::move(s));
    return Status();
  }
  if (type == "Replace") {
    const Json* pat = j.find("pattern");
    if (pat == nullptr) return invalid_argument("Replace normalizer needs a pattern");
    KVASIR_ASSIGN_OR_RETURN(Pattern p, Pattern::from_json(*pat));
    add_replace(std::move(p), j.get_string("content"));
    return Status();
  }
  if (type == "Prepend") {
    add_prepend(j.get_string("prepend"));
    return Status();
  }
  if (type == "Append") {
    steps_.push_back(Step{Kind::kAppend, Pattern::literal(""), j.get_string("append")});
    return Status();
  }
  return unimplemented("tokenizer normalizer '" + quoted_text(type) + "' is not supported");
}

void Normalizer::apply(const Step& step, std::string& s) {
  switch (step.kind) {
    case Kind::kNfc:
      if (!all_ascii(s)) s = unicode_normalize(s, UTF8PROC_COMPOSE);
      return;
    case Kind::kNfd:
      if (!all_ascii(s)) s = unicode_normalize(s, UTF8PROC_DECOMPOSE);
      return;
    case Kind::kNfkc:
      if (!all_ascii(s)) s = unicode_normalize(s, UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
      return;
    case Kind::kNfkd:
      if (!all_ascii(s)) s = unicode_normalize(s, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
      return;
    case Kind::kLowercase: {
      std::string out;
      out.reserve(s.size());
      for (size_t i = 0; i < s.size();) {
        size_t n = 0;
        uint32_t cp = first_code_point(std::string_view(s).substr(i), &n);
        append_lowercase(out, cp);
        i += n;
      }
      s = std::move(out);
      return;
    }
    case Kind::kStrip: {
      std::string_view v(s);
      size_t n = 0;
      while (step.left && !v.empty() && is_whitespace(first_code_point(v, &n))) v.remove_prefix(n);
      while (step.right && !v.empty() && is_whitespace(last_code_point(v, &n))) v.remove_suffix(n);
      s = std::string(v);
      return;
    }
    case Kind::kReplace:
      s = step.pattern.replace_all(s, step.content);
      return;
    case Kind::kPrepend:
      if (!s.empty()) {  // HF leaves an empty string empty
        std::string out;
        out.reserve(step.content.size() + s.size());
        out.append(step.content);
        out.append(s);
        s = std::move(out);
      }
      return;
    case Kind::kAppend:
      if (!s.empty()) s.append(step.content);
      return;
    case Kind::kStripAccents:  // drops nonspacing marks (Mn)
      if (all_ascii(s)) return;
      map_code_points(s, [](std::string& out, uint32_t cp, std::string_view bytes) {
        if (utf8proc_category(static_cast<utf8proc_int32_t>(cp)) != UTF8PROC_CATEGORY_MN) out.append(bytes);
      });
      return;
    case Kind::kBertCleanText:
      map_code_points(s, [](std::string& out, uint32_t cp, std::string_view bytes) {
        if (cp == 0 || cp == 0xFFFD || is_bert_control(cp)) return;
        if (is_bert_whitespace(cp)) {
          out += ' ';
        } else {
          out.append(bytes);
        }
      });
      return;
    case Kind::kBertChineseChars:
      if (all_ascii(s)) return;
      map_code_points(s, [](std::string& out, uint32_t cp, std::string_view bytes) {
        if (is_cjk_ideograph(cp)) out += ' ';
        out.append(bytes);
        if (is_cjk_ideograph(cp)) out += ' ';
      });
      return;
  }
}

std::string Normalizer::normalize(std::string_view text) const {
  std::string s(text);
  for (const Step& step : steps_) apply(step, s);
  return s;
}

}  // namespace kvasir::tok
