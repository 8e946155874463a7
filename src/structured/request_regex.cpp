#include "structured/request_regex.h"

#include <cctype>
#include <cstdio>
#include <vector>

#include "common/utf8.h"

namespace kvasir::structured {
namespace {

bool is_ascii_alnum(uint32_t c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

std::string unicode_escape(uint32_t cp) {
  char buf[16];
  if (cp <= 0xFFFF) {
    std::snprintf(buf, sizeof buf, "\\u%04X", cp);
  } else {
    std::snprintf(buf, sizeof buf, "\\u{%X}", cp);
  }
  return buf;
}

class Scanner {
 public:
  Scanner(std::string_view re, bool json) : re_(re), json_(json) {}

  Status run() {
    if (!utf8_valid(re_)) return invalid_argument("regex is not valid UTF-8");
    while (i_ < re_.size()) {
      uint32_t c = next();
      if (c == '\\') {
        KVASIR_RETURN_IF_ERROR(escape(/*in_class=*/false));
      } else if (c == '[') {
        KVASIR_RETURN_IF_ERROR(character_class());
      } else if (c == '(') {
        KVASIR_RETURN_IF_ERROR(group());
      } else if (c == ')') {
        if (depth_ > 0) --depth_;
        out_ += ')';
      } else if (c == '^') {
        if (!(out_.empty() || top_level_bar_at_end()))
          return refuse("'^' other than at the start of the pattern or of a top-level alternative");
        out_ += '^';
      } else if (c == '$') {
        bool ends = i_ == re_.size() || (depth_ == 0 && re_[i_] == '|');
        if (!ends) return refuse("'$' other than at the end of the pattern or of a top-level alternative");
        out_ += '$';
      } else if (c == '|') {
        if (depth_ == 0) top_level_bar_ = out_.size() + 1;
        out_ += '|';
      } else if (c == '.' && json_) {
        out_ += "[^\\n\\r\\u2028\\u2029]";
      } else {
        literal(c);
      }
    }
    return Status();
  }

  std::string take() { return std::move(out_); }

 private:
  uint32_t next() {
    uint32_t cp = 0;
    size_t n = utf8_decode(re_, i_, &cp);
    i_ += n == 0 ? 1 : n;
    return cp;
  }

  bool top_level_bar_at_end() const { return top_level_bar_ == out_.size(); }

  Status refuse(std::string_view what) const {
    return unimplemented(std::string(json_ ? "pattern" : "regex") + " '" + std::string(re_) +
                         "': " + std::string(what) + " is not supported by the grammar engine");
  }

  void literal(uint32_t c) {
    if (json_ && (c < 0x20 || c > 0x7E)) {
      out_ += unicode_escape(c);
    } else {
      utf8_append(out_, c);
    }
  }

  // After a backslash: escapes XGrammar and ECMA-262 agree on pass through (\b only as the
  // backspace of a class); XGrammar lacks word boundaries, \p classes and back-references, and
  // would read any other letter or digit as a literal.
  Status escape(bool in_class) {
    if (i_ >= re_.size()) return invalid_argument("regex ends with a backslash");
    uint32_t c = next();
    if (!is_ascii_alnum(c)) {
      if (json_ && (c < 0x20 || c > 0x7E)) {
        out_ += unicode_escape(c);
      } else {
        out_ += '\\';
        utf8_append(out_, c);
      }
      return Status();
    }
    static const std::string_view kKnown = "dDwWsSnrtfv0xuc";
    bool known = kKnown.find(static_cast<char>(c)) != std::string_view::npos || (in_class && c == 'b');
    if (!known) return refuse(std::string("the escape \\") + static_cast<char>(c));
    // XGrammar's regex parser reads a malformed \x, \u or \c as the letter itself.
    auto hex_run = [&](size_t at) {
      size_t n = 0;
      while (at + n < re_.size() && std::isxdigit(static_cast<unsigned char>(re_[at + n]))) ++n;
      return n;
    };
    bool well_formed = true;
    if (c == 'x') {
      well_formed = hex_run(i_) >= 2;
    } else if (c == 'u') {
      if (i_ < re_.size() && re_[i_] == '{') {
        size_t n = hex_run(i_ + 1);
        well_formed = n >= 1 && n <= 6 && i_ + 1 + n < re_.size() && re_[i_ + 1 + n] == '}';
      } else {
        well_formed = hex_run(i_) >= 4;
      }
    } else if (c == 'c') {
      well_formed = i_ < re_.size() && std::isalpha(static_cast<unsigned char>(re_[i_]));
    }
    if (!well_formed) {
      return invalid_argument(std::string(json_ ? "pattern" : "regex") + " '" + std::string(re_) +
                              "' has a malformed \\" + static_cast<char>(c) + " escape");
    }
    out_ += '\\';
    out_ += static_cast<char>(c);
    return Status();
  }

  Status character_class() {
    out_ += '[';
    if (i_ < re_.size() && re_[i_] == '^') {
      out_ += '^';
      ++i_;
    }
    if (i_ < re_.size() && re_[i_] == ']') return refuse("an empty character class");
    while (i_ < re_.size()) {
      uint32_t c = next();
      if (c == ']') {
        out_ += ']';
        return Status();
      }
      if (c == '\\') {
        KVASIR_RETURN_IF_ERROR(escape(/*in_class=*/true));
      } else if (c == '[') {
        out_ += "\\[";  // a literal in ECMA-262 classes; XGrammar might read a nested class
      } else {
        literal(c);
      }
    }
    return invalid_argument(std::string(json_ ? "pattern" : "regex") + " '" + std::string(re_) +
                            "' has an unclosed '['");
  }

  Status group() {
    ++depth_;
    out_ += '(';
    if (i_ >= re_.size() || re_[i_] != '?') return Status();
    std::string_view rest = re_.substr(i_);
    if (rest.substr(0, 2) == "?:") {
      out_ += "?:";
      i_ += 2;
      return Status();
    }
    if (rest.substr(0, 2) == "?=" || rest.substr(0, 2) == "?!" || rest.substr(0, 3) == "?<=" ||
        rest.substr(0, 3) == "?<!") {
      return refuse("lookaround");
    }
    if (rest.substr(0, 2) == "?<") {  // a named group: the name does not change the language
      size_t close = rest.find('>');
      if (close == std::string_view::npos) return invalid_argument("regex has an unfinished group name");
      out_ += rest.substr(0, close + 1);
      i_ += close + 1;
      return Status();
    }
    if (!json_) return Status();  // XGrammar reports the modifiers it does not know
    return refuse("the group modifier '(" + std::string(rest.substr(0, 2)) + "'");
  }

  std::string_view re_;
  bool json_;
  size_t i_ = 0;
  int depth_ = 0;
  size_t top_level_bar_ = std::string::npos;  // out_ size just after the last top-level '|'
  std::string out_;
};

}  // namespace

StatusOr<std::string> json_schema_pattern_to_xgrammar(std::string_view pattern) {
  Scanner s(pattern, /*json=*/true);
  KVASIR_RETURN_IF_ERROR(s.run());
  return s.take();
}

Status check_output_regex(std::string_view regex) {
  Scanner s(regex, /*json=*/false);
  return s.run();
}

}  // namespace kvasir::structured
