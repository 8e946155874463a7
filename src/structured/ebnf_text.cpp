#include "structured/ebnf_text.h"

#include <cstdio>

namespace kvasir::structured {
namespace {

enum class Tok { kTrivia, kString, kClass, kIdent, kDefine, kBar, kLParen, kRParen, kDot, kOther };

struct Token {
  Tok kind;
  std::string_view text;
};

bool is_ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

// Ends a quoted span (string or class) at the unescaped `close`, or at the end of the text.
size_t quoted_end(std::string_view s, size_t i, char close) {
  for (++i; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;
    } else if (s[i] == close) {
      return i + 1;
    }
  }
  return s.size();
}

std::vector<Token> lex(std::string_view s) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t start = i;
    char c = s[i];
    Tok kind = Tok::kOther;
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
      kind = Tok::kTrivia;
    } else if (c == '#') {
      while (i < s.size() && s[i] != '\n') ++i;
      kind = Tok::kTrivia;
    } else if (c == '"') {
      i = quoted_end(s, i, '"');
      kind = Tok::kString;
    } else if (c == '[') {
      i = quoted_end(s, i, ']');
      kind = Tok::kClass;
    } else if (is_ident_char(c)) {
      while (i < s.size() && is_ident_char(s[i])) ++i;
      kind = Tok::kIdent;
    } else if (s.substr(i, 3) == "::=") {
      i += 3;
      kind = Tok::kDefine;
    } else {
      ++i;
      kind = c == '|'   ? Tok::kBar
             : c == '(' ? Tok::kLParen
             : c == ')' ? Tok::kRParen
             : c == '.' ? Tok::kDot
                        : Tok::kOther;
    }
    out.push_back({kind, s.substr(start, i - start)});
  }
  return out;
}

// Index of the next non-trivia token at or after i, or tokens.size().
size_t next_solid(const std::vector<Token>& t, size_t i) {
  while (i < t.size() && t[i].kind == Tok::kTrivia) ++i;
  return i;
}

bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// GBNF's \xHH has exactly two digits; XGrammar's \x takes every hex digit that follows ("\x41BC"
// would be U+41BC, not "ABC"), so each becomes the unambiguous \u00HH.
std::string two_digit_hex_escapes(std::string_view lit) {
  std::string out;
  out.reserve(lit.size());
  for (size_t i = 0; i < lit.size(); ++i) {
    if (lit[i] != '\\' || i + 1 >= lit.size()) {
      out += lit[i];
      continue;
    }
    if (lit[i + 1] == 'x' && i + 3 < lit.size() && is_hex(lit[i + 2]) && is_hex(lit[i + 3])) {
      out += "\\u00";
      out += lit[i + 2];
      out += lit[i + 3];
      i += 3;
    } else {
      out += lit[i];
      out += lit[i + 1];
      ++i;
    }
  }
  return out;
}

}  // namespace

std::string gbnf_to_ebnf(std::string_view gbnf) {
  std::vector<Token> t = lex(gbnf);
  std::string out;
  out.reserve(gbnf.size() + 16);
  for (size_t i = 0; i < t.size(); ++i) {
    const Token& tok = t[i];
    if (tok.kind == Tok::kDot) {
      out += "[\\u0000-\\U0010FFFF]";
      continue;
    }
    if (tok.kind == Tok::kString || tok.kind == Tok::kClass) {
      out += two_digit_hex_escapes(tok.text);
      continue;
    }
    out += tok.text;
    if (tok.kind != Tok::kDefine && tok.kind != Tok::kBar && tok.kind != Tok::kLParen) continue;
    // An alternative starts here: it is empty when the next thing ends it (|, ), the end, or the
    // head of the next rule), and XGrammar wants that written "".
    size_t j = next_solid(t, i + 1);
    bool empty = j == t.size() || t[j].kind == Tok::kBar || t[j].kind == Tok::kRParen;
    if (!empty && t[j].kind == Tok::kIdent) {
      size_t k = next_solid(t, j + 1);
      empty = k < t.size() && t[k].kind == Tok::kDefine;
    }
    if (empty) out += " \"\"";
  }
  return out;
}

std::string ebnf_string_literal(std::string_view bytes) {
  std::string out = "\"";
  for (char ch : bytes) {
    auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7F) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02X", c);
          out += buf;
        } else {
          out += ch;  // UTF-8 passes through
        }
    }
  }
  out += '"';
  return out;
}

std::string choice_ebnf(const std::vector<std::string>& choices) {
  std::string out = "root ::= ";
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) out += " | ";
    out += ebnf_string_literal(choices[i]);
  }
  out += '\n';
  return out;
}

}  // namespace kvasir::structured
