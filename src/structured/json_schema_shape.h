// Facts about JSON schemas that the keyword policy needs beyond one object's keys: which JSON
// types a schema admits, JSON-Schema value equality (1 == 1.0), local $ref resolution as
// XGrammar does it (JSON pointer, percent-decoding), and a sound proof that oneOf branches are
// pairwise disjoint (then XGrammar's anyOf reading of oneOf is exact). Pure functions over Json.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/json.h"

namespace kvasir::structured {

// JSON types as bits; a number with a fractional part is kTypeFraction, a whole one kTypeInteger.
inline constexpr uint8_t kTypeNull = 1, kTypeBoolean = 2, kTypeInteger = 4, kTypeFraction = 8, kTypeString = 16,
                         kTypeArray = 32, kTypeObject = 64;

// The types a "type" value names ("number" is integer and fraction); 0 when malformed or unknown.
uint8_t type_mask(const Json& type);
uint8_t value_type(const Json& value);

// JSON Schema equality: numbers by value, objects regardless of key order.
bool json_equal(const Json& a, const Json& b);
// Whether `value` is an element of the array `values`.
bool json_in(const Json& value, const Json& values);
// Whether a const value (`single`) or every enum value has a type that `type` names.
bool values_match_type(const Json* values, const Json& type, bool single);

// The JSON pointer of the first object holding a key twice, or nullopt. Parsers disagree on which
// duplicate wins, so a document with one is refused before XGrammar's parser sees it.
std::optional<std::string> find_duplicate_key(const Json& doc);

// The schema a local $ref ("#" or "#/pointer") names, or nullptr; *path gets its JSON pointer.
const Json* resolve_ref(const Json& root, const std::string& uri, std::string* path);

// true when no value can match two of the branches of `options` (a oneOf array).
bool oneof_disjoint(const Json& root, const Json& options);

}  // namespace kvasir::structured
