// EBNF text for XGrammar: llama.cpp's GBNF normalized to XGrammar's EBNF dialect, and the grammar
// of a list of choices. The two dialects agree on rules (`name ::= ...`, root rule `root`),
// literals, character classes, grouping, `* + ? {m,n}` and `#` comments; XGrammar lacks GBNF's
// empty alternative (`ws ::= | " "`) and `.` (any character), and reads `\x` with any number of
// digits where GBNF takes two: those are rewritten here. Text only: nothing here parses the
// grammar or reports its errors (XGrammar does).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvasir::structured {

// GBNF (or XGrammar EBNF, which passes through unchanged) -> XGrammar EBNF.
std::string gbnf_to_ebnf(std::string_view gbnf);

// `bytes` as an EBNF string literal, quotes included (valid UTF-8 expected).
std::string ebnf_string_literal(std::string_view bytes);

// root ::= "c1" | "c2" | ...
std::string choice_ebnf(const std::vector<std::string>& choices);

}  // namespace kvasir::structured
