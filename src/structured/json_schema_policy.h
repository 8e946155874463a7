// The JSON-schema keyword policy: walks a schema the way XGrammar's converter reads it and refuses
// every keyword (or combination) that XGrammar would not enforce, so a compiled grammar never
// accepts output that the schema rejects. Narrowing is allowed (XGrammar fixes the property order
// and full-matches `pattern`); widening never is. A few keywords are rewritten into ones XGrammar
// enforces exactly (format date/time/date-time become patterns, patterns become XGrammar's regex
// dialect), and integers and numbers get the bounds ±(2^53-1) where the schema leaves a side open
// (so their digits are bounded): the edits come back for dump_with_edits. The table of what is enforced, and why, is
// docs/STRUCTURED_OUTPUTS.md; it mirrors XGrammar 0.2.9's json_schema_converter.cc and must be
// re-read when XGrammar is upgraded. Must not call XGrammar (it checks, it does not compile).
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "common/json.h"
#include "common/status.h"

namespace kvasir::structured {

struct JsonSchemaPolicyOptions {
  // XGrammar's strict mode: what the schema leaves open (additional properties, items) is closed.
  bool strict = false;
};

// Changes to one schema object: keys set to a new value, dropped or renamed (patternProperties).
struct SchemaEdit {
  enum class Op { kSet, kDrop, kRename };
  Op op;
  std::string key;
  Json value;           // kSet
  std::string new_key;  // kRename
};
// Keyed by the object they change (nodes of the checked document, which must outlive the map).
using SchemaEdits = std::unordered_map<const Json*, std::vector<SchemaEdit>>;

// OK, or Unimplemented naming the keyword and its JSON pointer ("JSON schema keyword
// 'uniqueItems' at /properties/tags is not supported ..."), or InvalidArgument for a schema that
// is malformed in a way the policy must understand (duplicate keys, an unresolvable $ref).
// Edits needed before XGrammar reads the schema are added to *edits.
Status check_json_schema(const Json& schema, const JsonSchemaPolicyOptions& options, SchemaEdits* edits);

// `doc` as compact JSON text with the edits applied.
std::string dump_with_edits(const Json& doc, const SchemaEdits& edits);

}  // namespace kvasir::structured
