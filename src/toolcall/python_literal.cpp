#include "toolcall/python_literal.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>

#include "common/utf8.h"

namespace kvasir::toolcall {
namespace {

bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_ident(char c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class PyParser {
 public:
  explicit PyParser(std::string_view s) : s_(s) {}

  StatusOr<Json> parse_all() {
    Json v;
    if (!value(&v, 0)) return error();
    skip_space();
    if (i_ != s_.size()) return error("trailing text");
    return v;
  }

 private:
  Status error(const char* what = nullptr) const {
    return invalid_argument(std::string("not a Python literal at byte ") + std::to_string(i_) + ": " +
                            (what ? what : why_));
  }
  bool bad(const char* why) {
    why_ = why;
    return false;
  }
  void skip_space() {
    // Inside a call's parentheses newlines and backslash continuations are only whitespace.
    while (i_ < s_.size()) {
      char c = s_[i_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f') {
        ++i_;
      } else if (c == '\\' && i_ + 1 < s_.size() && (s_[i_ + 1] == '\n' || s_[i_ + 1] == '\r')) {
        i_ += 2;
      } else {
        break;
      }
    }
  }
  bool peek(char c) {
    skip_space();
    return i_ < s_.size() && s_[i_] == c;
  }

  bool value(Json* out, size_t depth) {
    if (depth > PyLiteralEnd::kMaxDepth) return bad("nested too deeply");
    skip_space();
    if (i_ >= s_.size()) return bad("missing value");
    char c = s_[i_];
    if (c == '[') return sequence(out, ']', depth);
    if (c == '(') return paren(out, depth);
    if (c == '{') return dict(out, depth);
    if (c == '\'' || c == '"') return strings(out);
    if (is_digit(c) || c == '.' || c == '-' || c == '+') return number(out);
    if (is_ident_start(c)) {
      size_t j = i_;
      while (j < s_.size() && is_ident(s_[j])) ++j;
      std::string_view word = s_.substr(i_, j - i_);
      if (j < s_.size() && (s_[j] == '\'' || s_[j] == '"')) return strings(out);  // a prefix: r'..'
      i_ = j;
      if (word == "True") *out = Json(true);
      else if (word == "False") *out = Json(false);
      else if (word == "None") *out = Json();
      else return bad("only literals can be arguments");
      return true;
    }
    return bad("unexpected character");
  }

  // Elements up to `close`, a trailing comma allowed.
  bool sequence(Json* out, char close, size_t depth) {
    ++i_;
    Json arr = Json::array();
    while (!peek(close)) {
      Json v;
      if (!value(&v, depth + 1)) return false;
      arr.push_back(std::move(v));
      if (peek(',')) {
        ++i_;
      } else if (!peek(close)) {
        return bad("expected ',' or a closing bracket");
      }
    }
    ++i_;
    *out = std::move(arr);
    return true;
  }

  // A tuple, or a parenthesized value.
  bool paren(Json* out, size_t depth) {
    size_t open = i_++;
    if (peek(')')) {
      ++i_;
      *out = Json::array();
      return true;
    }
    Json first;
    if (!value(&first, depth + 1)) return false;
    if (peek(')')) {
      ++i_;
      *out = std::move(first);
      return true;
    }
    if (!peek(',')) return bad("expected ',' or ')'");
    i_ = open;
    return sequence(out, ')', depth);
  }

  bool dict(Json* out, size_t depth) {
    ++i_;
    Json obj = Json::object();
    while (!peek('}')) {
      Json k;
      if (!value(&k, depth + 1)) return false;
      std::string key;
      switch (k.type()) {
        case Json::Type::kString: key = k.as_string(); break;
        case Json::Type::kInt:
        case Json::Type::kDouble: key = k.dump(); break;  // json.dumps: str(int), repr(float)
        case Json::Type::kBool: key = k.as_bool() ? "true" : "false"; break;
        case Json::Type::kNull: key = "null"; break;
        default: return bad("dict keys must be str, number, bool or None");
      }
      if (!peek(':')) return bad("expected ':' (sets are not JSON)");
      ++i_;
      Json v;
      if (!value(&v, depth + 1)) return false;
      obj.set(std::move(key), std::move(v));  // a repeated key keeps its place, takes the new value
      if (peek(',')) {
        ++i_;
      } else if (!peek('}')) {
        return bad("expected ',' or '}'");
      }
    }
    ++i_;
    *out = std::move(obj);
    return true;
  }

  // One or more adjacent string literals, concatenated as Python does.
  bool strings(Json* out) {
    std::string s;
    do {
      if (!string_literal(&s)) return false;
      skip_space();
    } while (i_ < s_.size() && (s_[i_] == '\'' || s_[i_] == '"' || is_ident_start(s_[i_])));
    if (!utf8_valid(s)) return bad("string is not valid UTF-8");
    *out = Json(std::move(s));
    return true;
  }

  bool string_literal(std::string* out) {
    bool raw = false;
    size_t j = i_;
    while (j < s_.size() && is_ident(s_[j])) {
      char p = s_[j];
      if (p == 'r' || p == 'R') raw = true;
      else if (p != 'u' && p != 'U') return bad("bytes and f-strings are not literals we take");
      ++j;
    }
    if (j - i_ > 2 || j >= s_.size() || (s_[j] != '\'' && s_[j] != '"')) return bad("unexpected name");
    i_ = j;
    char q = s_[i_];
    bool triple = s_.substr(i_, 3) == std::string(3, q);
    i_ += triple ? 3 : 1;
    while (true) {
      if (i_ >= s_.size()) return bad("unterminated string");
      char c = s_[i_];
      if (c == q && (!triple || s_.substr(i_, 3) == std::string(3, q))) {
        i_ += triple ? 3 : 1;
        return true;
      }
      if ((c == '\n' || c == '\r') && !triple) return bad("newline in a single-quoted string");
      if (c != '\\') {
        out->push_back(c);
        ++i_;
        continue;
      }
      if (i_ + 1 >= s_.size()) return bad("unterminated string");
      char e = s_[i_ + 1];
      if (raw) {  // a backslash stays, and only keeps the next character from ending the string
        out->push_back('\\');
        out->push_back(e);
        i_ += 2;
        continue;
      }
      i_ += 2;
      if (!escape(e, out)) return false;
    }
  }

  bool escape(char e, std::string* out) {
    switch (e) {
      case '\n': return true;  // line continuation
      case '\r':
        if (i_ < s_.size() && s_[i_] == '\n') ++i_;
        return true;
      case '\\': out->push_back('\\'); return true;
      case '\'': out->push_back('\''); return true;
      case '"': out->push_back('"'); return true;
      case 'a': out->push_back('\a'); return true;
      case 'b': out->push_back('\b'); return true;
      case 'f': out->push_back('\f'); return true;
      case 'n': out->push_back('\n'); return true;
      case 'r': out->push_back('\r'); return true;
      case 't': out->push_back('\t'); return true;
      case 'v': out->push_back('\v'); return true;
      case 'x': return code_point(2, out);
      case 'u': return code_point(4, out);
      case 'U': return code_point(8, out);
      case 'N': return bad("\\N{...} escapes are not supported");
      default:
        if (e >= '0' && e <= '7') {  // up to three octal digits
          uint32_t v = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '7'; ++k) v = v * 8 + (s_[i_++] - '0');
          utf8_append(*out, v);
          return true;
        }
        out->push_back('\\');  // unknown escapes keep their backslash
        out->push_back(e);
        return true;
    }
  }

  bool code_point(int digits, std::string* out) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      int h = i_ < s_.size() ? hex_value(s_[i_]) : -1;
      if (h < 0) return bad("truncated escape");
      v = v * 16 + static_cast<uint32_t>(h);
      ++i_;
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return bad("escape is not a Unicode scalar value");
    utf8_append(*out, v);
    return true;
  }

  bool number(Json* out) {
    bool negative = false;
    while (i_ < s_.size() && (s_[i_] == '-' || s_[i_] == '+')) {
      if (s_[i_] == '-') negative = !negative;
      ++i_;
      skip_space();
    }
    size_t start = i_;
    // The token: alphanumerics, '_' and '.', with a sign right after an exponent 'e'.
    while (i_ < s_.size()) {
      char c = s_[i_];
      bool exp_sign = (c == '+' || c == '-') && i_ > start && (s_[i_ - 1] == 'e' || s_[i_ - 1] == 'E') &&
                      !(s_.substr(start, 2) == "0x" || s_.substr(start, 2) == "0X");
      if (!is_ident(c) && c != '.' && !exp_sign) break;
      ++i_;
    }
    std::string_view tok = s_.substr(start, i_ - start);
    if (tok.empty()) return bad("missing number");
    // Underscores only between digits.
    std::string clean;
    for (size_t k = 0; k < tok.size(); ++k) {
      if (tok[k] != '_') {
        clean.push_back(tok[k]);
        continue;
      }
      if (k == 0 || k + 1 == tok.size() || hex_value(tok[k + 1]) < 0 || tok[k - 1] == '.' || tok[k + 1] == '.') {
        return bad("misplaced '_' in a number");
      }
    }
    int base = 10;
    std::string_view digits = clean;
    char radix = clean.size() > 1 && clean[0] == '0' ? static_cast<char>(clean[1] | 0x20) : 0;
    if (radix == 'x' || radix == 'o' || radix == 'b') {
      base = radix == 'x' ? 16 : radix == 'o' ? 8 : 2;
      digits.remove_prefix(2);
    }
    bool is_float = base == 10 && clean.find_first_of(".eE") != std::string::npos;
    if (!is_float) {
      if (digits.empty()) return bad("not a number");
      if (base == 10 && digits.size() > 1 && digits[0] == '0' && digits.find_first_not_of('0') != std::string_view::npos) {
        return bad("leading zeros in an integer");
      }
      uint64_t v = 0;
      for (char c : digits) {
        int d = hex_value(c);
        if (d < 0 || d >= base) return bad("not a number");
        if (v > (UINT64_MAX - static_cast<uint64_t>(d)) / static_cast<uint64_t>(base)) return bad("integer too large");
        v = v * static_cast<uint64_t>(base) + static_cast<uint64_t>(d);
      }
      if (v > static_cast<uint64_t>(INT64_MAX) + (negative ? 1 : 0)) return bad("integer too large");
      *out = Json(negative ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v));
      return true;
    }
    // Python float syntax: digits with an optional '.', then an optional exponent.
    size_t k = 0;
    size_t int_digits = 0, frac_digits = 0;
    while (k < clean.size() && is_digit(clean[k])) ++k, ++int_digits;
    if (k < clean.size() && clean[k] == '.') {
      ++k;
      while (k < clean.size() && is_digit(clean[k])) ++k, ++frac_digits;
    }
    if (int_digits + frac_digits == 0) return bad("not a number");
    if (k < clean.size() && (clean[k] == 'e' || clean[k] == 'E')) {
      ++k;
      if (k < clean.size() && (clean[k] == '+' || clean[k] == '-')) ++k;
      size_t exp_digits = 0;
      while (k < clean.size() && is_digit(clean[k])) ++k, ++exp_digits;
      if (exp_digits == 0) return bad("not a number");
    }
    if (k != clean.size()) return bad("not a number");  // e.g. a 'j' suffix: complex
    double d = std::strtod(clean.c_str(), nullptr);
    if (!std::isfinite(d)) return bad("number out of range");
    *out = Json(negative ? -d : d);
    return true;
  }

  std::string_view s_;
  size_t i_ = 0;
  const char* why_ = "invalid";
};

}  // namespace

StatusOr<Json> parse_python_literal(std::string_view text) { return PyParser(text).parse_all(); }

PyLiteralEnd::State PyLiteralEnd::scan(std::string_view in, bool eof, size_t* consumed) {
  size_t i = 0;
  while (i < in.size() && state_ == State::kMore) {
    char c = in[i];
    if (quote_ != 0) {
      if (escape_) {
        escape_ = false;
      } else if (c == '\\') {
        escape_ = true;
        closing_ = 0;
      } else if (c == quote_) {
        if (!triple_ || ++closing_ == 3) quote_ = 0;
      } else {
        closing_ = 0;
        if ((c == '\n' || c == '\r') && !triple_) state_ = State::kError;
      }
      if (state_ == State::kError) break;
      ++i;
      continue;
    }
    if (c == '\'' || c == '"') {
      // '''/""" open a triple-quoted string, '' and "" are empty strings: 2 bytes of lookahead.
      if (i + 2 >= in.size() && !eof) break;
      bool second = i + 1 < in.size() && in[i + 1] == c;
      bool third = i + 2 < in.size() && in[i + 2] == c;
      if (second && third) {
        quote_ = c;
        triple_ = true;
        closing_ = 0;
        i += 3;
      } else if (second) {
        i += 2;
      } else {
        quote_ = c;
        triple_ = false;
        ++i;
      }
      continue;
    }
    if (c == '(' || c == '[' || c == '{') {
      if (stack_.size() >= kMaxDepth) {
        state_ = State::kError;
        break;
      }
      stack_.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (stack_.empty()) {
        if (c == ')') state_ = State::kDone;
        else state_ = State::kError;
        break;
      }
      if (stack_.back() != c) {
        state_ = State::kError;
        break;
      }
      stack_.pop_back();
    } else if (c == ',' && stack_.empty()) {
      state_ = State::kDone;
      break;
    } else if (c == '#') {
      state_ = State::kError;  // comments are not literals
      break;
    }
    ++i;
  }
  *consumed = i;
  return state_;
}

}  // namespace kvasir::toolcall
