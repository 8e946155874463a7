#include "chat/jinja_lexer.h"

#include <cstring>

#include "chat/jinja_pystr.h"
#include "common/utf8.h"

namespace kvasir::jinja {

const char* tok_describe(Tok t) {
  switch (t) {
    case Tok::kData: return "template data";
    case Tok::kBlockBegin: return "begin of statement block";
    case Tok::kBlockEnd: return "end of statement block";
    case Tok::kVarBegin: return "begin of print statement";
    case Tok::kVarEnd: return "end of print statement";
    case Tok::kName: return "name";
    case Tok::kString: return "string";
    case Tok::kInteger: return "integer";
    case Tok::kFloat: return "float";
    case Tok::kEof: return "end of template";
    default: return "operator";
  }
}

namespace {

struct OpSpelling {
  const char* text;
  Tok type;
};
// Longest first, as jinja sorts its operator regex.
constexpr OpSpelling kOps[] = {
    {"//", Tok::kFloorDiv}, {"**", Tok::kPow}, {"==", Tok::kEq}, {"!=", Tok::kNe},
    {">=", Tok::kGtEq}, {"<=", Tok::kLtEq}, {"+", Tok::kAdd}, {"-", Tok::kSub},
    {"/", Tok::kDiv}, {"*", Tok::kMul}, {"%", Tok::kMod}, {"~", Tok::kTilde},
    {"[", Tok::kLBracket}, {"]", Tok::kRBracket}, {"(", Tok::kLParen}, {")", Tok::kRParen},
    {"{", Tok::kLBrace}, {"}", Tok::kRBrace}, {"=", Tok::kAssign}, {".", Tok::kDot},
    {":", Tok::kColon}, {"|", Tok::kPipe}, {",", Tok::kComma}, {";", Tok::kSemicolon},
    {">", Tok::kGt}, {"<", Tok::kLt},
};

bool is_d(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  Lexer(std::string_view src, size_t max_tokens) : max_tokens_(max_tokens) {
    // jinja normalizes \r\n and \r to \n, then drops one trailing newline (keep_trailing_newline=False).
    src_.reserve(src.size());
    for (size_t i = 0; i < src.size(); ++i) {
      if (src[i] == '\r') {
        src_ += '\n';
        if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
      } else {
        src_ += src[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  StatusOr<std::vector<Token>> run();

 private:
  Status fail(const std::string& msg) const { return invalid_argument("line " + std::to_string(line_) + ": " + msg); }
  Status push(Tok type, std::string text = {}) {
    if (toks_.size() >= max_tokens_) return out_of_range("template has too many tokens");
    Token t;
    t.type = type;
    t.line = line_;
    t.text = std::move(text);
    toks_.push_back(std::move(t));
    return Status();
  }
  void count_lines(std::string_view s) {
    for (char c : s) line_ += (c == '\n');
  }
  // Skips Python whitespace (\s) from pos; returns new pos.
  size_t skip_space(size_t pos) const {
    while (pos < src_.size()) {
      size_t i = pos;
      if (!py::is_space(py::next_cp(src_, &i))) break;
      pos = i;
    }
    return pos;
  }
  bool all_space(std::string_view s) const {
    if (s.empty()) return false;
    for (size_t i = 0; i < s.size();) {
      if (!py::is_space(py::next_cp(s, &i))) return false;
    }
    return true;
  }
  bool at(size_t pos, const char* lit) const {
    size_t n = std::strlen(lit);
    return pos + n <= src_.size() && src_.compare(pos, n, lit) == 0;
  }
  // Text before a tag, with `-` (strip all) or lstrip_blocks (strip the indentation of the tag's line).
  Status emit_text(std::string_view text, char sign, bool lstrip_ok) {
    std::string_view kept = text;
    if (sign == '-') {
      std::string s = py::strip(text, std::nullopt, false, true);
      kept = text.substr(0, s.size());
    } else if (sign != '+' && lstrip_ok) {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && all_space(text.substr(l_pos))) kept = text.substr(0, l_pos);
    }
    if (!kept.empty()) KVASIR_RETURN_IF_ERROR(push(Tok::kData, std::string(kept)));
    count_lines(text);
    return Status();
  }
  // After `-%}`-style ends: all whitespace; after a plain end with trim: one newline.
  size_t block_end_len(size_t pos, const char* close, bool trim, bool* found) const;
  size_t match_raw_begin(size_t pos) const;
  size_t match_endraw(size_t pos, char* sign, size_t* end) const;
  Status lex_tag(bool is_block);
  Status lex_string(size_t* pos);
  Status lex_number(size_t* pos);

  std::string src_;
  size_t max_tokens_;
  std::vector<Token> toks_;
  int line_ = 1;
  bool line_starting_ = true;
  size_t pos_ = 0;
};

size_t digits_us(const std::string& s, size_t p) {  // (\d+_)*\d+ ; returns end or npos
  if (p >= s.size() || !is_d(s[p])) return std::string::npos;
  while (p < s.size() && is_d(s[p])) ++p;
  while (p + 1 < s.size() && s[p] == '_' && is_d(s[p + 1])) {
    ++p;
    while (p < s.size() && is_d(s[p])) ++p;
  }
  return p;
}

size_t Lexer::match_raw_begin(size_t pos) const {
  // {%(-|+|)\s*raw\s*(?:-%}\s*|%})
  size_t p = pos + 2;
  if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
  p = skip_space(p);
  if (!at(p, "raw")) return 0;
  p = skip_space(p + 3);
  if (at(p, "-%}")) return skip_space(p + 3) - pos;
  if (at(p, "%}")) return p + 2 - pos;
  return 0;
}

size_t Lexer::match_endraw(size_t pos, char* sign, size_t* end) const {
  // {%(-|+|)\s*endraw\s*(?:+%}|-%}\s*|%}\n?)
  if (!at(pos, "{%")) return 0;
  size_t p = pos + 2;
  *sign = 0;
  if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) *sign = src_[p++];
  p = skip_space(p);
  if (!at(p, "endraw")) return 0;
  p = skip_space(p + 6);
  if (at(p, "+%}")) {
    *end = p + 3;
  } else if (at(p, "-%}")) {
    *end = skip_space(p + 3);
  } else if (at(p, "%}")) {
    *end = p + 2 + (at(p + 2, "\n") ? 1 : 0);
  } else {
    return 0;
  }
  return 1;
}

StatusOr<std::vector<Token>> Lexer::run() {
  while (pos_ < src_.size()) {
    // Find the next tag opener; the raw-block opener is tried first at each position.
    size_t p = pos_;
    size_t raw_len = 0;
    char kind = 0;
    for (;; ++p) {
      p = src_.find('{', p);
      if (p == std::string::npos || p + 1 >= src_.size()) {
        p = std::string::npos;
        break;
      }
      char c = src_[p + 1];
      if (c == '%' && (raw_len = match_raw_begin(p)) > 0) {
        kind = 'r';
        break;
      }
      if (c == '{' || c == '%' || c == '#') {
        kind = c;
        break;
      }
    }
    if (p == std::string::npos) {
      std::string_view rest = std::string_view(src_).substr(pos_);
      KVASIR_RETURN_IF_ERROR(push(Tok::kData, std::string(rest)));
      count_lines(rest);
      break;
    }
    char sign = (p + 2 < src_.size() && (src_[p + 2] == '-' || src_[p + 2] == '+')) ? src_[p + 2] : 0;
    std::string_view text = std::string_view(src_).substr(pos_, p - pos_);
    KVASIR_RETURN_IF_ERROR(emit_text(text, sign, kind != '{'));
    if (kind == 'r') {
      std::string_view opener = std::string_view(src_).substr(p, raw_len);
      count_lines(opener);
      line_starting_ = opener.back() == '\n';
      size_t q = p + raw_len;
      char esign = 0;
      size_t end = 0;
      while (q < src_.size() && !match_endraw(q, &esign, &end)) ++q;
      if (q >= src_.size()) return fail("Missing end of raw directive");
      KVASIR_RETURN_IF_ERROR(emit_text(std::string_view(src_).substr(p + raw_len, q - p - raw_len), esign, true));
      count_lines(std::string_view(src_).substr(q, end - q));
      line_starting_ = src_[end - 1] == '\n';
      pos_ = end;
      continue;
    }
    pos_ = p + 2 + (sign ? 1 : 0);
    line_starting_ = false;
    if (kind == '#') {
      size_t q = pos_;
      size_t end = 0;
      for (; q < src_.size(); ++q) {
        if (at(q, "+#}")) {
          end = q + 3;
        } else if (at(q, "-#}")) {
          end = skip_space(q + 3);
        } else if (at(q, "#}")) {
          end = q + 2 + (at(q + 2, "\n") ? 1 : 0);
        } else {
          continue;
        }
        break;
      }
      if (q >= src_.size()) return fail("Missing end of comment tag");
      count_lines(std::string_view(src_).substr(pos_, end - pos_));
      line_starting_ = src_[end - 1] == '\n';
      pos_ = end;
      continue;
    }
    KVASIR_RETURN_IF_ERROR(lex_tag(kind == '%'));
  }
  KVASIR_RETURN_IF_ERROR(push(Tok::kEof));
  return std::move(toks_);
}

Status Lexer::lex_tag(bool is_block) {
  KVASIR_RETURN_IF_ERROR(push(is_block ? Tok::kBlockBegin : Tok::kVarBegin));
  std::vector<char> balance;
  while (true) {
    if (pos_ >= src_.size()) return fail("unexpected end of template inside a tag");
    if (balance.empty()) {
      size_t end = 0;
      if (is_block) {
        if (at(pos_, "+%}")) {
          end = pos_ + 3;
        } else if (at(pos_, "-%}")) {
          end = skip_space(pos_ + 3);
        } else if (at(pos_, "%}")) {
          end = pos_ + 2 + (at(pos_ + 2, "\n") ? 1 : 0);  // trim_blocks
        }
      } else if (at(pos_, "-}}")) {
        end = skip_space(pos_ + 3);
      } else if (at(pos_, "}}")) {
        end = pos_ + 2;
      }
      if (end) {
        KVASIR_RETURN_IF_ERROR(push(is_block ? Tok::kBlockEnd : Tok::kVarEnd));
        count_lines(std::string_view(src_).substr(pos_, end - pos_));
        line_starting_ = src_[end - 1] == '\n';
        pos_ = end;
        return Status();
      }
    }
    size_t i = pos_;
    uint32_t cp = py::next_cp(src_, &i);
    if (py::is_space(cp)) {
      line_ += (cp == '\n');
      pos_ = i;
      continue;
    }
    char c = src_[pos_];
    if (is_d(c)) {
      KVASIR_RETURN_IF_ERROR(lex_number(&pos_));
      continue;
    }
    if (c == '_' || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')) {
      size_t e = pos_;
      while (e < src_.size() && (src_[e] == '_' || is_d(src_[e]) || ((src_[e] | 0x20) >= 'a' && (src_[e] | 0x20) <= 'z'))) ++e;
      KVASIR_RETURN_IF_ERROR(push(Tok::kName, src_.substr(pos_, e - pos_)));
      pos_ = e;
      continue;
    }
    if (c == '\'' || c == '"') {
      KVASIR_RETURN_IF_ERROR(lex_string(&pos_));
      continue;
    }
    const OpSpelling* op = nullptr;
    for (const auto& o : kOps) {
      if (at(pos_, o.text)) {
        op = &o;
        break;
      }
    }
    if (!op) return fail(std::string("unexpected char ") + py::repr(src_.substr(pos_, i - pos_)));
    if (op->type == Tok::kLBrace) balance.push_back('}');
    if (op->type == Tok::kLParen) balance.push_back(')');
    if (op->type == Tok::kLBracket) balance.push_back(']');
    if (op->type == Tok::kRBrace || op->type == Tok::kRParen || op->type == Tok::kRBracket) {
      if (balance.empty()) return fail(std::string("unexpected '") + op->text + "'");
      if (balance.back() != op->text[0]) {
        return fail(std::string("unexpected '") + op->text + "', expected '" + balance.back() + "'");
      }
      balance.pop_back();
    }
    KVASIR_RETURN_IF_ERROR(push(op->type, op->text));
    pos_ += std::strlen(op->text);
  }
}

Status Lexer::lex_number(size_t* pos) {
  size_t p = *pos;
  bool after_dot = p > 0 && src_[p - 1] == '.';
  size_t m = digits_us(src_, p);
  if (!after_dot) {
    size_t frac = std::string::npos;
    if (m < src_.size() && src_[m] == '.') frac = digits_us(src_, m + 1);
    auto exp_at = [&](size_t q) -> size_t {
      if (q >= src_.size() || (src_[q] | 0x20) != 'e') return std::string::npos;
      ++q;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      return digits_us(src_, q);
    };
    size_t end = std::string::npos;
    if (frac != std::string::npos && exp_at(frac) != std::string::npos) {
      end = exp_at(frac);
    } else if (frac == std::string::npos && exp_at(m) != std::string::npos) {
      end = exp_at(m);
    } else if (frac != std::string::npos) {
      end = frac;
    }
    if (end != std::string::npos) {
      std::string clean;
      for (size_t k = p; k < end; ++k) {
        if (src_[k] != '_') clean += src_[k];
      }
      KVASIR_RETURN_IF_ERROR(push(Tok::kFloat, src_.substr(p, end - p)));
      toks_.back().float_value = std::strtod(clean.c_str(), nullptr);
      *pos = end;
      return Status();
    }
  }
  int base = 10;
  size_t start = p, end = p;
  if (src_[p] == '0' && p + 1 < src_.size()) {
    char b = static_cast<char>(src_[p + 1] | 0x20);
    base = b == 'b' ? 2 : b == 'o' ? 8 : b == 'x' ? 16 : 10;
    if (base != 10) {
      auto ok = [&](char ch) {
        int v = is_d(ch) ? ch - '0' : ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f') ? (ch | 0x20) - 'a' + 10 : 99;
        return v < base;
      };
      size_t q = p + 2;
      while (true) {
        size_t r = q;
        if (r < src_.size() && src_[r] == '_') ++r;
        if (r < src_.size() && ok(src_[r])) {
          q = r + 1;
        } else {
          break;
        }
      }
      if (q > p + 2) {
        start = p + 2;
        end = q;
      } else {
        base = 10;
      }
    }
  }
  if (base == 10) {
    end = p + 1;
    char want = src_[p] == '0' ? '0' : 0;
    while (true) {
      size_t r = end;
      if (r < src_.size() && src_[r] == '_') ++r;
      if (r < src_.size() && (want ? src_[r] == want : is_d(src_[r]))) {
        end = r + 1;
      } else {
        break;
      }
    }
  }
  int64_t v = 0;
  for (size_t k = start; k < end; ++k) {
    char ch = src_[k];
    if (ch == '_') continue;
    int d = is_d(ch) ? ch - '0' : (ch | 0x20) - 'a' + 10;
    if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v)) {
      return fail("integer literal too large");
    }
  }
  KVASIR_RETURN_IF_ERROR(push(Tok::kInteger, src_.substr(p, end - p)));
  toks_.back().int_value = v;
  *pos = end;
  return Status();
}

Status Lexer::lex_string(size_t* pos) {
  char q = src_[*pos];
  size_t p = *pos + 1;
  while (p < src_.size() && src_[p] != q) p += (src_[p] == '\\') ? 2 : 1;
  if (p >= src_.size()) return fail(std::string("unexpected char '") + q + "'");
  std::string_view body = std::string_view(src_).substr(*pos + 1, p - *pos - 1);
  int start_line = line_;
  count_lines(body);
  *pos = p + 1;
  // Python's unicode-escape decoding of the literal body (after backslashreplace of non-ASCII).
  std::string out;
  auto hex = [&](size_t at_i, int n, uint32_t* v) {
    if (at_i + n > body.size()) return false;
    *v = 0;
    for (int k = 0; k < n; ++k) {
      char ch = body[at_i + k];
      int d = is_d(ch) ? ch - '0' : ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f') ? (ch | 0x20) - 'a' + 10 : -1;
      if (d < 0) return false;
      *v = *v * 16 + d;
    }
    return true;
  };
  for (size_t i = 0; i < body.size();) {
    if (body[i] != '\\') {
      size_t b = i;
      py::next_cp(body, &i);
      out.append(body.substr(b, i - b));
      continue;
    }
    ++i;  // body never ends in a lone backslash (the scan above pairs them)
    char e = body[i];
    uint32_t v = 0;
    int n = 0;
    switch (e) {
      case '\n': ++i; continue;
      case '\\': out += '\\'; ++i; continue;
      case '\'': out += '\''; ++i; continue;
      case '"': out += '"'; ++i; continue;
      case 'a': out += '\a'; ++i; continue;
      case 'b': out += '\b'; ++i; continue;
      case 'f': out += '\f'; ++i; continue;
      case 'n': out += '\n'; ++i; continue;
      case 'r': out += '\r'; ++i; continue;
      case 't': out += '\t'; ++i; continue;
      case 'v': out += '\v'; ++i; continue;
      case 'x': n = 2; break;
      case 'u': n = 4; break;
      case 'U': n = 8; break;
      case 'N': line_ = start_line; return unimplemented("line " + std::to_string(start_line) + ": \\N{...} escapes are not supported");
      default: break;
    }
    if (n) {
      if (!hex(i + 1, n, &v)) {
        line_ = start_line;
        return fail(std::string("truncated \\") + e + " escape");
      }
      i += 1 + n;
    } else if (e >= '0' && e <= '7') {
      int k = 0;
      while (k < 3 && i < body.size() && body[i] >= '0' && body[i] <= '7') {
        v = v * 8 + static_cast<uint32_t>(body[i++] - '0');
        ++k;
      }
    } else if (static_cast<unsigned char>(e) >= 0x80) {
      // `\` before a non-ASCII char: backslashreplace turned the char into \xNN/\uNNNN first.
      uint32_t cp = py::next_cp(body, &i);
      char buf[16];
      std::snprintf(buf, sizeof(buf), cp <= 0xff ? "\\x%02x" : cp <= 0xffff ? "\\u%04x" : "\\U%08x", cp);
      out += buf;
      continue;
    } else {
      out += '\\';
      continue;
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
      line_ = start_line;
      return fail("illegal Unicode character in string literal");
    }
    py::append_cp(out, v);
  }
  int saved = line_;
  line_ = start_line;
  Status s = push(Tok::kString, std::move(out));
  line_ = saved;
  return s;
}

}  // namespace

StatusOr<std::vector<Token>> tokenize(std::string_view source, size_t max_tokens) {
  Lexer lx(source, max_tokens);
  return lx.run();
}

}  // namespace kvasir::jinja
