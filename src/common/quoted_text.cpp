#include "common/quoted_text.h"

#include <cstdint>
#include <cstdio>

#include "common/utf8.h"

namespace kvasir {

namespace {

void append_hex(std::string& out, const char* prefix, uint32_t v, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%s%0*X", prefix, digits, static_cast<unsigned>(v));
  out += buf;
}

// Code points that move or reorder text on a terminal: line and paragraph separators and the
// bidirectional overrides and isolates (a name could otherwise display as another).
bool is_layout_control(uint32_t cp) {
  return cp == 0x2028 || cp == 0x2029 || (cp >= 0x202A && cp <= 0x202E) ||
         (cp >= 0x2066 && cp <= 0x2069);
}

}  // namespace

std::string quoted_text(std::string_view s, size_t max_bytes) {
  std::string out;
  size_t i = 0;
  while (i < s.size() && i < max_bytes) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    uint32_t cp = 0;
    const size_t n = utf8_decode(s, i, &cp);
    if (n == 0) {  // invalid or truncated UTF-8: the byte itself
      append_hex(out, "\\x", c, 2);
      ++i;
      continue;
    }
    if (i + n > max_bytes) break;  // never split a character at the cut
    if (cp == '\\') {
      out += "\\\\";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || cp == 0x7F) {
      append_hex(out, "\\x", cp, 2);
    } else if ((cp >= 0x80 && cp <= 0x9F) || is_layout_control(cp)) {
      append_hex(out, "\\u", cp, 4);
    } else {
      out.append(s.substr(i, n));
    }
    i += n;
  }
  if (i < s.size()) out += "...(" + std::to_string(s.size()) + " bytes)";
  return out;
}

}  // namespace kvasir
