#include "chat/jinja_pystr.h"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/utf8.h"

namespace kvasir::jinja::py {
namespace {
#include "chat/jinja_pystr_case.inc"

const FullCase* full_case(uint32_t cp) {
  if (cp < 0xdf) return nullptr;
  const FullCase* b = std::begin(kFullCase);
  const FullCase* e = std::end(kFullCase);
  const FullCase* it = std::lower_bound(b, e, cp, [](const FullCase& f, uint32_t c) { return f.cp < c; });
  return (it != e && it->cp == cp) ? it : nullptr;
}
}  // namespace

uint32_t next_cp(std::string_view s, size_t* i) {
  unsigned char c = static_cast<unsigned char>(s[*i]);
  if (c < 0x80) {
    ++*i;
    return c;
  }
  uint32_t cp = 0;
  size_t n = utf8_decode(s, *i, &cp);
  if (n == 0) {
    ++*i;
    return 0xFFFD;
  }
  *i += n;
  return cp;
}

std::vector<uint32_t> code_points(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(next_cp(s, &i));
  return out;
}

void append_cp(std::string& out, uint32_t cp) { utf8_append(out, cp); }

bool is_ascii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

size_t cp_length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size();) {
    next_cp(s, &i);
    ++n;
  }
  return n;
}

static utf8proc_category_t cat(uint32_t cp) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}

bool is_space(uint32_t cp) {
  if (cp < 0x80) return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20);
  switch (cp) {
    case 0x85: case 0xa0: case 0x1680: case 0x2028: case 0x2029: case 0x202f: case 0x205f:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200a;
  }
}

bool is_linebreak(uint32_t cp) {
  return cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || cp == 0x1c || cp == 0x1d ||
         cp == 0x1e || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

bool is_alpha(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  auto c = cat(cp);
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT ||
         c == UTF8PROC_CATEGORY_LM || c == UTF8PROC_CATEGORY_LO;
}

bool is_digit(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return cat(cp) == UTF8PROC_CATEGORY_ND;
}

bool is_alnum(uint32_t cp) {
  if (is_alpha(cp)) return true;
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  auto c = cat(cp);
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool is_word(uint32_t cp) { return cp == '_' || is_alnum(cp); }

bool is_lower(uint32_t cp) {
  if (cp < 0x80) return cp >= 'a' && cp <= 'z';
  return cat(cp) == UTF8PROC_CATEGORY_LL;
}

bool is_upper(uint32_t cp) {
  if (cp < 0x80) return cp >= 'A' && cp <= 'Z';
  return cat(cp) == UTF8PROC_CATEGORY_LU;
}

bool is_cased(uint32_t cp) {
  return is_lower(cp) || is_upper(cp) || (cp >= 0x80 && cat(cp) == UTF8PROC_CATEGORY_LT);
}

bool is_printable(uint32_t cp) {
  if (cp < 0x80) return cp >= 0x20 && cp < 0x7f;
  switch (cat(cp)) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

static uint32_t to_upper(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
  return static_cast<uint32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cp)));
}
static uint32_t to_lower(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  return static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
}
static uint32_t to_title(uint32_t cp) {
  if (cp < 0x80) return to_upper(cp);
  return static_cast<uint32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(cp)));
}

static void append_upper(std::string& out, uint32_t c) {
  if (const FullCase* f = full_case(c)) {
    out += f->upper;
  } else {
    append_cp(out, to_upper(c));
  }
}

static void append_title(std::string& out, uint32_t c) {
  if (const FullCase* f = full_case(c)) {
    out += f->title;
  } else {
    append_cp(out, to_title(c));
  }
}

// Python's lower(): U+0130 has a two-code-point lowercase, and a capital sigma that ends a word
// becomes the final form (Final_Sigma: preceded by a cased letter, not followed by one).
static void append_lower(std::string& out, const std::vector<uint32_t>& cps, size_t i) {
  uint32_t c = cps[i];
  if (c == 0x130) {
    out += "i\xcc\x87";
  } else if (c == 0x3a3) {
    bool before = i > 0 && is_cased(cps[i - 1]);
    bool after = i + 1 < cps.size() && is_cased(cps[i + 1]);
    append_cp(out, before && !after ? 0x3c2 : 0x3c3);
  } else {
    append_cp(out, to_lower(c));
  }
}

// ASCII text (most of any prompt) maps byte for byte: no code point decoding, no context rules.
static std::string ascii_case(std::string_view s, char from_lo, char from_hi) {
  std::string out(s);
  for (char& c : out) {
    if (c >= from_lo && c <= from_hi) c = static_cast<char>(c ^ 0x20);
  }
  return out;
}

std::string upper(std::string_view s) {
  if (is_ascii(s)) return ascii_case(s, 'a', 'z');
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append_upper(out, next_cp(s, &i));
  return out;
}

std::string lower(std::string_view s) {
  if (is_ascii(s)) return ascii_case(s, 'A', 'Z');
  std::vector<uint32_t> cps = code_points(s);
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < cps.size(); ++i) append_lower(out, cps, i);
  return out;
}

std::string swapcase(std::string_view s) {
  std::vector<uint32_t> cps = code_points(s);
  std::string out;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (is_upper(cps[i])) {
      append_lower(out, cps, i);
    } else if (is_lower(cps[i])) {
      append_upper(out, cps[i]);
    } else {
      append_cp(out, cps[i]);
    }
  }
  return out;
}

std::string str_title(std::string_view s) {
  std::vector<uint32_t> cps = code_points(s);
  std::string out;
  bool prev_cased = false;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (prev_cased) {
      append_lower(out, cps, i);
    } else {
      append_title(out, cps[i]);
    }
    prev_cased = is_cased(cps[i]);
  }
  return out;
}

std::string capitalize(std::string_view s) {
  std::vector<uint32_t> cps = code_points(s);
  std::string out;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (i == 0) {
      append_title(out, cps[i]);
    } else {
      append_lower(out, cps, i);
    }
  }
  return out;
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::vector<uint32_t> set;
  if (chars) set = code_points(*chars);
  auto strip_it = [&](uint32_t c) {
    return chars ? std::find(set.begin(), set.end(), c) != set.end() : is_space(c);
  };
  // Walk inwards from both ends one code point at a time; no full decode of long strings.
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      size_t i = b;
      if (!strip_it(next_cp(s, &i))) break;
      b = i;
    }
  }
  if (right) {
    while (e > b) {
      size_t start = e - 1;
      while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80 && e - start < 4) --start;
      size_t i = start;
      uint32_t c = next_cp(s, &i);
      if (i != e) {  // invalid sequence: treat the last byte alone (decodes as U+FFFD)
        start = e - 1;
        c = 0xFFFD;
      }
      if (!strip_it(c)) break;
      e = start;
    }
  }
  return std::string(s.substr(b, e - b));
}

namespace {

// Knuth-Morris-Pratt over positions read through at(i) / pat(j), so that one routine serves both
// directions (rfind reads both strings back to front). Returns the first match position >= from.
template <typename Hay, typename Pat>
size_t kmp_search(size_t n, Hay at, size_t m, Pat pat, size_t from) {
  std::vector<size_t> fail(m, 0);  // fail[j]: longest proper border of pat[0..j]
  for (size_t j = 1, k = 0; j < m; ++j) {
    while (k && pat(j) != pat(k)) k = fail[k - 1];
    if (pat(j) == pat(k)) ++k;
    fail[j] = k;
  }
  for (size_t i = from, k = 0; i < n; ++i) {
    while (k && at(i) != pat(k)) k = fail[k - 1];
    if (at(i) == pat(k)) ++k;
    if (k == m) return i + 1 - m;
  }
  return std::string_view::npos;
}

// Needles this short make the library's memchr-driven scan at most kShortNeedle x |s|.
constexpr size_t kShortNeedle = 8;

}  // namespace

size_t find_sub(std::string_view s, std::string_view sub, size_t from) {
  if (sub.size() <= kShortNeedle || s.size() < sub.size() || from > s.size() - sub.size()) return s.find(sub, from);
  return kmp_search(s.size(), [&](size_t i) { return s[i]; }, sub.size(), [&](size_t j) { return sub[j]; }, from);
}

size_t rfind_sub(std::string_view s, std::string_view sub, size_t last_start) {
  if (sub.size() <= kShortNeedle || s.size() < sub.size()) return s.rfind(sub, last_start);
  size_t n = s.size(), m = sub.size();
  size_t last = std::min(last_start, n - m);
  // A match at p in s is a match at n - m - p in the reversed strings.
  size_t q = kmp_search(n, [&](size_t i) { return s[n - 1 - i]; }, m, [&](size_t j) { return sub[m - 1 - j]; },
                        n - m - last);
  return q == std::string_view::npos ? q : n - m - q;
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit,
                               bool from_right, size_t max_parts) {
  std::vector<std::string> out;
  int64_t cap = static_cast<int64_t>(std::min<size_t>(max_parts, INT64_MAX));
  if (maxsplit < 0 || maxsplit > cap) maxsplit = cap;
  if (sep) {
    if (!from_right) {
      size_t pos = 0;
      while (static_cast<int64_t>(out.size()) < maxsplit) {
        size_t f = find_sub(s, *sep, pos);
        if (f == std::string_view::npos) break;
        out.emplace_back(s.substr(pos, f - pos));
        pos = f + sep->size();
      }
      out.emplace_back(s.substr(pos));
      return out;
    }
    size_t end = s.size();
    while (static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t f = rfind_sub(s, *sep, end - sep->size());
      if (f == std::string_view::npos) break;
      out.emplace_back(s.substr(f + sep->size(), end - f - sep->size()));
      end = f;
    }
    out.emplace_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
  }
  std::vector<size_t> offs;
  std::vector<uint32_t> cps;
  for (size_t i = 0; i < s.size();) {
    offs.push_back(i);
    cps.push_back(next_cp(s, &i));
  }
  offs.push_back(s.size());
  size_t n = cps.size();
  if (!from_right) {
    size_t i = 0;
    while (true) {
      while (i < n && is_space(cps[i])) ++i;
      if (i == n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
        out.emplace_back(s.substr(offs[i]));
        break;
      }
      size_t j = i;
      while (j < n && !is_space(cps[j])) ++j;
      out.emplace_back(s.substr(offs[i], offs[j] - offs[i]));
      i = j;
    }
    return out;
  }
  size_t j = n;
  while (true) {
    while (j > 0 && is_space(cps[j - 1])) --j;
    if (j == 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      out.emplace_back(s.substr(0, offs[j]));
      break;
    }
    size_t i = j;
    while (i > 0 && !is_space(cps[i - 1])) --i;
    out.emplace_back(s.substr(offs[i], offs[j] - offs[i]));
    j = i;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> splitlines(std::string_view s, bool keepends, size_t max_parts) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < s.size() && out.size() < max_parts;) {
    size_t at = i;
    uint32_t c = next_cp(s, &i);
    if (!is_linebreak(c)) continue;
    if (c == '\r' && i < s.size() && s[i] == '\n') ++i;
    out.emplace_back(s.substr(start, (keepends ? i : at) - start));
    start = i;
  }
  if (start < s.size()) out.emplace_back(s.substr(start));
  return out;
}

std::string replace(std::string_view s, std::string_view old, std::string_view with, int64_t count) {
  std::string out;
  if (old.empty()) {
    int64_t done = 0;
    size_t i = 0;
    while (i < s.size()) {
      if (count < 0 || done < count) {
        out += with;
        ++done;
      }
      size_t b = i;
      next_cp(s, &i);
      out += s.substr(b, i - b);
    }
    if (count < 0 || done < count) out += with;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t f = find_sub(s, old, pos);
    if (f == std::string_view::npos) break;
    out += s.substr(pos, f - pos);
    out += with;
    pos = f + old.size();
    ++done;
  }
  out += s.substr(pos);
  return out;
}

int64_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(cp_length(s)) + 1;
  int64_t n = 0;
  for (size_t pos = find_sub(s, sub); pos != std::string_view::npos; pos = find_sub(s, sub, pos + sub.size())) ++n;
  return n;
}

int64_t cp_index_of_byte(std::string_view s, size_t byte_pos) {
  return static_cast<int64_t>(cp_length(s.substr(0, byte_pos)));
}

std::string repr(std::string_view s) {
  char quote = '\'';
  if (s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos) quote = '"';
  std::string out(1, quote);
  char buf[16];
  for (size_t i = 0; i < s.size();) {
    uint32_t c = next_cp(s, &i);
    if (c == static_cast<uint32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (is_printable(c)) {
      append_cp(out, c);
    } else {
      if (c <= 0xff) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      } else if (c <= 0xffff) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      } else {
        std::snprintf(buf, sizeof(buf), "\\U%08x", c);
      }
      out += buf;
    }
  }
  out += quote;
  return out;
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  std::string out;
  if (sci[0] == '-') {
    out += '-';
    sci.remove_prefix(1);
  }
  size_t epos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, epos)) {
    if (c != '.') digits += c;
  }
  int exp = std::atoi(std::string(sci.substr(epos + 1)).c_str());
  int nd = static_cast<int>(digits.size());
  int decpt = exp + 1;
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (nd > 1) {
      out += '.';
      out += digits.substr(1);
    }
    std::snprintf(buf, sizeof(buf), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += buf;
  } else if (decpt <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-decpt), '0');
    out += digits;
  } else if (decpt >= nd) {
    out += digits;
    out.append(static_cast<size_t>(decpt - nd), '0');
    out += ".0";
  } else {
    out += digits.substr(0, static_cast<size_t>(decpt));
    out += '.';
    out += digits.substr(static_cast<size_t>(decpt));
  }
  return out;
}

double round_half_even(double x, int64_t ndigits) {
  if (!std::isfinite(x)) return x;
  if (ndigits > 22) return x;
  if (ndigits < 0) {
    if (ndigits < -308) return 0.0 * x;
    double p = std::pow(10.0, static_cast<double>(-ndigits));
    double r = std::nearbyint(x / p) * p;
    return std::isfinite(r) ? r : x;
  }
  // glibc printf rounds the exact binary value half-to-even, as CPython's round() does.
  std::vector<char> buf(400);
  std::snprintf(buf.data(), buf.size(), "%.*f", static_cast<int>(ndigits), x);
  return std::strtod(buf.data(), nullptr);
}

}  // namespace kvasir::jinja::py
