// Test- and bench-only (no gtest): what json_schema_suite_test and grammar_bench share to run
// JSON-Schema-Test-Suite's groups. Most of the suite's schemas have no "type" (their keywords then
// constrain one kind of value only, which XGrammar cannot express), so each such group also runs
// as a typed variant: the schema plus the "type" its keywords are about.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/json.h"

namespace kvasir::structured::testing {

// "string", "number", "array" or "object" when every assertion keyword of a schema without a
// type constrains that one kind of value; "" otherwise.
inline std::string implied_type(const Json& schema) {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> kVocab = {
      {"string", {"minLength", "maxLength", "pattern", "format"}},
      {"number", {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}},
      {"array",
       {"items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains", "minContains", "maxContains",
        "unevaluatedItems"}},
      {"object",
       {"properties", "required", "additionalProperties", "patternProperties", "propertyNames", "minProperties",
        "maxProperties", "dependentRequired", "dependentSchemas", "unevaluatedProperties"}},
  };
  if (!schema.is_object() || schema.contains("type")) return "";
  std::string found;
  for (const auto& [key, value] : schema.as_object()) {
    for (const auto& [type, keys] : kVocab) {
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) continue;
      if (!found.empty() && found != type) return "";
      found = type;
    }
    for (const char* other : {"$ref", "const", "enum", "anyOf", "oneOf", "allOf", "not", "if"}) {
      if (key == other) return "";
    }
  }
  return found;
}

}  // namespace kvasir::structured::testing
