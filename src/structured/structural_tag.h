// Structural tags (tool calls and other tagged regions inside free text): XGrammar's format,
// {"type": "structural_tag", "format": {...}}, passes through; the older form that vLLM also
// accepts, {"structures": [{"begin", "schema", "end"}...], "triggers": [...]}, becomes a
// triggered_tags format, as XGrammar's Python binding converts it. Every JSON schema inside goes
// through the keyword policy (json_schema_policy.h) first, every regex format through the regex
// checks (request_regex.h). Must not call XGrammar.
#pragma once

#include <string>

#include "common/json.h"
#include "common/status.h"
#include "structured/json_schema_policy.h"

namespace kvasir::structured {

// The structural tag as XGrammar's JSON text, or why it is refused.
StatusOr<std::string> normalize_structural_tag(const Json& tag, const JsonSchemaPolicyOptions& policy);

}  // namespace kvasir::structured
