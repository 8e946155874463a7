// UTF-8 helpers shared by the JSON parser, tokenizers and the server: validation, decoding one
// code point at a time, encoding. Strict: overlong forms, surrogates and > U+10FFFF are invalid.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvasir {

// Length in bytes of the valid UTF-8 sequence starting at s[i], or 0 when it is invalid or
// truncated. Writes the code point to *cp when valid.
size_t utf8_decode(std::string_view s, size_t i, uint32_t* cp);
void utf8_append(std::string& out, uint32_t cp);
bool utf8_valid(std::string_view s);
// Byte length of the longest prefix of s that ends on a complete character (for streaming).
size_t utf8_complete_prefix(std::string_view s);
// Replaces each invalid byte sequence by U+FFFD, as Python's bytes.decode(errors="replace").
std::string utf8_sanitize(std::string_view s);

}  // namespace kvasir
