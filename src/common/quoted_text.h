// quoted_text: file content made safe to quote inside an error or log line. Model files are
// untrusted: a key, name or type string read from one may hold a CR, an escape sequence or
// invalid UTF-8, and echoing it raw would break the one-line error contract (`kvasir serve:
// <reason>`) or rewrite the operator's terminal. Every message that quotes bytes from a file goes
// through this one helper. Must not be used on text that is not from a file (it would escape
// what the program itself wrote).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvasir {

// `s` with every byte that is not printable escaped: \n \r \t, other ASCII controls, DEL, C1
// controls (U+0080-U+009F, as \u00NN), line separators and bidi overrides (\uNNNN), bytes of
// invalid UTF-8 as \xNN, and the backslash itself as \\ so the escaping is unambiguous.
// Printable UTF-8 (accents, CJK) stays as it is. Longer than max_bytes of input: cut at a
// character boundary and ended with "...(N bytes)", so a 1 GB string in a file gives a short
// message.
std::string quoted_text(std::string_view s, size_t max_bytes = 200);

}  // namespace kvasir
