// Regexes from requests, checked (and for JSON schemas rewritten) before XGrammar reads them, so
// that what it silently ignores cannot widen what is accepted: lookaround (ignored by its
// JSON-string automaton), '^'/'$' inside the pattern (ignored), escapes it does not know (matched
// literally) are refused. Both kinds are full-matched by XGrammar, which for a JSON-schema
// `pattern` (an ECMA-262 search) is a narrowing. Text only; must not call XGrammar.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace kvasir::structured {

// A JSON-schema `pattern` (or patternProperties key) in the form XGrammar's JSON-string automaton
// takes: '.' becomes [^\n\r\u2028\u2029] (ECMA-262's dot), other than printable ASCII becomes
// \uXXXX escapes. Unimplemented (naming the construct) for what would be ignored.
StatusOr<std::string> json_schema_pattern_to_xgrammar(std::string_view pattern);

// A regex-kind spec (the whole output full-matches it): the same refusals, no rewriting.
Status check_output_regex(std::string_view regex);

}  // namespace kvasir::structured
