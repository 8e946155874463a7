// Small text helpers the streaming output parsers (tool calls, reasoning) share: JSON whitespace,
// marker prefixes and marker search that says how much of a buffer is surely not the start of a
// marker (the rest is held back until more text comes).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string_view>

namespace kvasir {

inline bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
// Number of whitespace bytes `s` starts with.
size_t count_spaces(std::string_view s);
// Byte length of `s` once trailing whitespace is dropped.
size_t trim_end(std::string_view s);

enum class Prefix { kNo, kPartial, kFull };
// Whether `s` starts with `marker`. kPartial: `s` is a proper prefix of it, so more text may
// complete it; at eof that is kNo.
Prefix match_prefix(std::string_view s, std::string_view marker, bool eof);

struct MarkerFind {
  size_t content_end = 0;  // bytes before this are surely not part of a marker
  int which = -1;          // >= 0: markers[which] starts at content_end; -1: none (the bytes from
                           // content_end on may begin one: hold them until more text comes)
};
// The earliest full occurrence of any marker; else, unless eof, where a partial marker at the end
// of `s` begins.
MarkerFind find_marker(std::string_view s, std::initializer_list<std::string_view> markers, bool eof);

}  // namespace kvasir
