#include "tokenizer/unicode_util.h"

#include <utf8proc.h>

#include <array>

#include "common/utf8.h"

namespace kvasir::tok {
namespace {

struct ByteTables {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 512> to_byte{};  // every byte-level code point is < 324
  std::array<std::array<char, 3>, 256> utf8{};  // encoded form, [0] = length
};

const ByteTables& byte_tables() {
  static const ByteTables tables = [] {
    ByteTables t;
    t.to_byte.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      uint32_t cp = printable ? static_cast<uint32_t>(b) : next++;
      t.to_cp[b] = cp;
      t.to_byte[cp] = static_cast<int16_t>(b);
      std::string enc;
      utf8_append(enc, cp);
      t.utf8[b][0] = static_cast<char>(enc.size());
      t.utf8[b][1] = enc[0];
      t.utf8[b][2] = enc.size() > 1 ? enc[1] : 0;
    }
    return t;
  }();
  return tables;
}

int category(uint32_t cp) { return utf8proc_category(static_cast<utf8proc_int32_t>(cp)); }

}  // namespace

uint32_t byte_to_unicode(uint8_t b) { return byte_tables().to_cp[b]; }

int unicode_to_byte(uint32_t cp) { return cp < 512 ? byte_tables().to_byte[cp] : -1; }

void append_byte_level(std::string& out, std::string_view bytes) {
  const auto& t = byte_tables();
  for (char c : bytes) {
    const auto& e = t.utf8[static_cast<uint8_t>(c)];
    out.append(&e[1], static_cast<size_t>(e[0]));
  }
}

bool is_whitespace(uint32_t cp) {
  if (cp < 0x80) return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20;
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool is_punctuation(uint32_t cp) {
  if (cp < 0x80) {
    return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
           (cp >= 0x7B && cp <= 0x7E);
  }
  switch (category(cp)) {
    case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE: case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
      return true;
    default:
      return false;
  }
}

bool is_numeric(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  int c = category(cp);
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool is_word_char(uint32_t cp) {
  if (cp < 0x80) {
    return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') ||
           cp == '_';
  }
  if (cp == 0x200C || cp == 0x200D) return true;
  switch (category(cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

void append_lowercase(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
    return;
  }
  if (cp == 0x130) {  // the one code point whose full lowercase mapping is two characters
    out += 'i';
    utf8_append(out, 0x307);
    return;
  }
  utf8_append(out, static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
}

void append_utf8_lossy(std::string& out, std::string_view s) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";
  auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  size_t i = 0;
  while (i < s.size()) {
    uint8_t c = byte(i);
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      need = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      need = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      out += kReplacement;
      ++i;
      continue;
    }
    size_t k = 1;
    for (; k < need && i + k < s.size(); ++k) {
      uint8_t b = byte(i + k);
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
    }
    if (k == need) {
      out.append(s.substr(i, need));
    } else {
      out += kReplacement;  // the maximal subpart s[i, i+k) is one error
    }
    i += k;
  }
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  append_utf8_lossy(out, bytes);
  return out;
}

uint32_t first_code_point(std::string_view s, size_t* len) {
  uint32_t cp = 0;
  size_t n = utf8_decode(s, 0, &cp);
  if (n == 0) {  // callers pass valid UTF-8; treat a stray byte as itself to stay total
    n = 1;
    cp = static_cast<uint8_t>(s[0]);
  }
  *len = n;
  return cp;
}

uint32_t last_code_point(std::string_view s, size_t* len) {
  size_t start = s.size() - 1;
  while (start > 0 && s.size() - start < 4 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) {
    --start;
  }
  size_t n = 0;
  uint32_t cp = first_code_point(s.substr(start), &n);
  *len = s.size() - start;
  return cp;
}

}  // namespace kvasir::tok
