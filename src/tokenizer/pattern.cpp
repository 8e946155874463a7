#include "tokenizer/pattern.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "common/quoted_text.h"
#include "tokenizer/unicode_util.h"

namespace kvasir::tok {

// Owns one compiled PCRE2 pattern. Compiled code is immutable and shared between threads; each
// search makes its own match data, so concurrent encodes need no locking.
class Regex {
 public:
  explicit Regex(pcre2_code* code) : code_(code) {}
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  void find_all(std::string_view text, std::vector<Pattern::Span>* out) const;

 private:
  pcre2_code* code_;
};

void Regex::find_all(std::string_view text, std::vector<Pattern::Span>* out) const {
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    int rc = pcre2_match(code_, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_MATCHLIMIT ||
        rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT) {
      // Pathological input for this pattern: retry without JIT (heap-backed backtracking).
      rc = pcre2_match(code_, subject, text.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
                       nullptr);
    }
    if (rc < 0) break;  // no further match (or an unrecoverable limit: the rest is a gap)
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t b = ov[0], e = ov[1];
    if (e > b) {
      out->emplace_back(b, e);
      pos = e;
    } else {
      // Empty match: HF drops the empty piece; step over one character to make progress.
      size_t len = 1;
      if (b < text.size()) first_code_point(text.substr(b), &len);
      pos = b + len;
    }
  }
  pcre2_match_data_free(md);
}

Pattern Pattern::literal(std::string s) {
  Pattern p;
  p.literal_ = std::move(s);
  return p;
}

namespace {

// Oniguruma (what HF `tokenizers` runs) and PCRE2 disagree on a few shorthand classes: Onig's \w
// is letters, marks, decimal and letter numbers and connectors (plus, outside brackets only, the
// Latin-1 digits-like No characters ²³¹¼½¾), PCRE2's is \p{L}\p{N}_; Onig's \s is exactly
// White_Space, PCRE2's adds U+180E. Spelling them out keeps splits identical to HF's.
constexpr std::string_view kWordInClass = "\\p{L}\\p{M}\\p{Nd}\\p{Nl}\\p{Pc}";
constexpr std::string_view kWordExtraOutside = "\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}";
constexpr std::string_view kSpaceInClass =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

}  // namespace

std::string onig_to_pcre2(std::string_view expr) {
  std::string out;
  out.reserve(expr.size() + 64);
  int depth = 0;  // nesting of [...] classes (Onig allows nested classes)
  for (size_t i = 0; i < expr.size(); ++i) {
    char c = expr[i];
    if (c == '\\' && i + 1 < expr.size()) {
      char n = expr[++i];
      const bool in_class = depth > 0;
      if (n == 'w' || (n == 'W' && !in_class)) {
        if (in_class) {
          out.append(kWordInClass);
        } else {
          out.append(n == 'w' ? "[" : "[^").append(kWordInClass).append(kWordExtraOutside).append("]");
        }
      } else if (n == 's' || (n == 'S' && !in_class)) {
        if (in_class) {
          out.append(kSpaceInClass);
        } else {
          out.append(n == 's' ? "[" : "[^").append(kSpaceInClass).append("]");
        }
      } else {
        out += c;
        out += n;
      }
      continue;
    }
    if (c == '[') {
      if (depth > 0 && i + 1 < expr.size() && expr[i + 1] == ':') {  // POSIX [:alpha:]
        size_t end = expr.find(":]", i + 2);
        if (end != std::string_view::npos) {
          out.append(expr.substr(i, end + 2 - i));
          i = end + 1;
          continue;
        }
      }
      ++depth;
      out += c;
      // A ']' right after '[' or '[^' is a literal, not the end of the class.
      if (i + 1 < expr.size() && expr[i + 1] == '^') out += expr[++i];
      if (i + 1 < expr.size() && expr[i + 1] == ']') out += expr[++i];
      continue;
    }
    if (c == ']' && depth > 0) --depth;
    out += c;
  }
  return out;
}

StatusOr<Pattern> Pattern::regex(std::string_view onig_expr) {
  const std::string expr = onig_to_pcre2(onig_expr);
  int err = 0;
  PCRE2_SIZE err_off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(expr.data()), expr.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    return invalid_argument("tokenizer regex '" + quoted_text(onig_expr) + "' does not compile at offset " +
                            std::to_string(err_off) + ": " + reinterpret_cast<const char*>(msg));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // best effort: the interpreter is the fallback
  Pattern p;
  p.regex_ = std::make_shared<const Regex>(code);
  return p;
}

StatusOr<Pattern> Pattern::from_json(const Json& j) {
  if (const Json* s = j.find("String"); s != nullptr && s->is_string()) return literal(s->as_string());
  if (const Json* r = j.find("Regex"); r != nullptr && r->is_string()) return regex(r->as_string());
  return invalid_argument("tokenizer pattern must be {\"String\": ...} or {\"Regex\": ...}");
}

void Pattern::find_all(std::string_view text, std::vector<Span>* out) const {
  if (regex_) {
    regex_->find_all(text, out);
    return;
  }
  if (literal_.empty()) return;
  size_t pos = 0;
  while ((pos = text.find(literal_, pos)) != std::string_view::npos) {
    out->emplace_back(pos, pos + literal_.size());
    pos += literal_.size();
  }
}

std::string Pattern::replace_all(std::string_view text, std::string_view content) const {
  std::vector<Span> spans;
  find_all(text, &spans);
  if (spans.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  size_t prev = 0;
  for (const auto& [b, e] : spans) {
    out.append(text.substr(prev, b - prev));
    out.append(content);
    prev = e;
  }
  out.append(text.substr(prev));
  return out;
}

}  // namespace kvasir::tok
