// Unicode helpers the tokenizer needs beyond common/utf8.h: the GPT-2 byte<->unicode table,
// character classes with the exact meaning HF `tokenizers` (Rust char methods) gives them, and
// lossy UTF-8 decoding with Rust/Python's one-U+FFFD-per-maximal-invalid-subpart rule.
// Must not allocate per character on hot paths (tables are built once, at first use).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvasir::tok {

// GPT-2 byte-level alphabet: every byte maps to one printable code point.
uint32_t byte_to_unicode(uint8_t b);
// The byte behind a byte-level code point, or -1 when cp is not in the alphabet.
int unicode_to_byte(uint32_t cp);
// Appends the byte-level form of `bytes` (each byte -> its code point, UTF-8 encoded).
void append_byte_level(std::string& out, std::string_view bytes);

// Rust char::is_whitespace (Unicode White_Space).
bool is_whitespace(uint32_t cp);
// HF Punctuation pre-tokenizer: ASCII punctuation or any Unicode P* category.
bool is_punctuation(uint32_t cp);
// Rust char::is_numeric: Nd, Nl, No.
bool is_numeric(uint32_t cp);
// Rust regex `\w`: alphabetic, marks, decimal digits, connector punctuation, join controls.
bool is_word_char(uint32_t cp);
// Appends the full lowercase mapping of cp (Rust char::to_lowercase).
void append_lowercase(std::string& out, uint32_t cp);

// Decodes bytes as UTF-8, replacing each maximal invalid subpart by U+FFFD (Rust
// String::from_utf8_lossy, Python errors="replace").
std::string utf8_lossy(std::string_view bytes);
void append_utf8_lossy(std::string& out, std::string_view bytes);

// First code point of s (s must be valid UTF-8 and non-empty) and its byte length.
uint32_t first_code_point(std::string_view s, size_t* len);
// Last code point of s and its byte length.
uint32_t last_code_point(std::string_view s, size_t* len);

}  // namespace kvasir::tok
