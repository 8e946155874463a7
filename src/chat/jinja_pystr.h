// Python str semantics over UTF-8 bytes, for the Jinja engine: whitespace, strip/split/splitlines,
// case mapping, repr() of strings and floats, and %-formatting primitives. Chat templates are
// compared byte for byte with Python's output, so these follow CPython's rules, not C's.
// Must not allocate unboundedly on its own: callers bound the sizes of their inputs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvasir::jinja::py {

// Code point at s[i] (advancing *i); invalid bytes decode as U+FFFD one byte at a time.
uint32_t next_cp(std::string_view s, size_t* i);
std::vector<uint32_t> code_points(std::string_view s);
void append_cp(std::string& out, uint32_t cp);
bool is_ascii(std::string_view s);
size_t cp_length(std::string_view s);

bool is_space(uint32_t cp);      // str.isspace / re \s
bool is_linebreak(uint32_t cp);  // str.splitlines boundaries
bool is_alpha(uint32_t cp);
bool is_digit(uint32_t cp);      // str.isdigit (decimal digits)
bool is_alnum(uint32_t cp);
bool is_word(uint32_t cp);       // re \w
bool is_lower(uint32_t cp);
bool is_upper(uint32_t cp);
bool is_cased(uint32_t cp);
bool is_printable(uint32_t cp);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string str_title(std::string_view s);  // str.title()
std::string capitalize(std::string_view s);
std::string swapcase(std::string_view s);

// str.strip family; chars == nullopt strips whitespace.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// Substring search in time linear in |s| + |sub| (Python's is too): the first match at or after
// `from`, or the last one starting at or before `last_start`; npos when none. std::string_view's
// own find is |s| x |sub| in the worst case, which a hostile template turns into minutes.
size_t find_sub(std::string_view s, std::string_view sub, size_t from = 0);
size_t rfind_sub(std::string_view s, std::string_view sub, size_t last_start = std::string_view::npos);
// str.split / str.rsplit; sep == nullopt splits on runs of whitespace. maxsplit < 0: no limit.
// Both splits stop after max_parts + 1 parts, so that the caller's step budget, not the input's
// length, bounds the work: a result longer than max_parts means "over budget".
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit,
                               bool from_right, size_t max_parts);
std::vector<std::string> splitlines(std::string_view s, bool keepends, size_t max_parts);
std::string replace(std::string_view s, std::string_view old, std::string_view with, int64_t count);
int64_t count(std::string_view s, std::string_view sub);
// Byte offset -> code point offset (for find/index results).
int64_t cp_index_of_byte(std::string_view s, size_t byte_pos);

// Python repr() of a str, e.g. 'it\'s' -> "it's".
std::string repr(std::string_view s);
// Python repr()/str() of a float: shortest round-trip digits, 1e+16 / 1e-05 forms, 'inf', 'nan'.
std::string float_repr(double d);
// Python round(x, ndigits) for floats (round half to even on the exact binary value).
double round_half_even(double x, int64_t ndigits);

}  // namespace kvasir::jinja::py
