#include "structured/json_schema_policy.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "structured/json_schema_shape.h"
#include "structured/request_regex.h"

namespace kvasir::structured {
namespace {

// What a keyword is: an annotation, a container of subschemas, one XGrammar dispatches on, one of
// the per-type vocabularies (it constrains only instances of that type), never enforced, unknown.
enum class Vocab { kAnnotation, kContainer, kDispatch, kNumeric, kString, kArray, kObject, kNever, kUnknown };

Vocab vocab_of(std::string_view k) {
  struct Group {
    Vocab vocab;
    std::vector<std::string_view> names;
  };
  static const Group kGroups[] = {
      // OpenAPI's discriminator only names the property that tells oneOf branches apart.
      {Vocab::kAnnotation,
       {"title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly", "$comment", "$schema",
        "$anchor", "$dynamicAnchor", "discriminator"}},
      {Vocab::kContainer, {"$defs", "definitions", "$id"}},
      {Vocab::kDispatch, {"$ref", "const", "enum", "anyOf", "oneOf", "allOf", "type"}},
      {Vocab::kNumeric, {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}},
      {Vocab::kString,
       {"minLength", "maxLength", "pattern", "format", "contentEncoding", "contentMediaType", "contentSchema"}},
      {Vocab::kArray,
       {"items", "prefixItems", "unevaluatedItems", "minItems", "maxItems", "uniqueItems", "contains", "minContains",
        "maxContains", "additionalItems"}},
      {Vocab::kObject,
       {"properties", "required", "patternProperties", "propertyNames", "additionalProperties", "unevaluatedProperties",
        "minProperties", "maxProperties", "dependentRequired", "dependentSchemas", "dependencies"}},
      {Vocab::kNever, {"not", "if", "then", "else", "$dynamicRef", "$recursiveRef", "$recursiveAnchor", "$vocabulary"}},
  };
  for (const Group& g : kGroups) {
    for (std::string_view name : g.names) {
      if (k == name) return g.vocab;
    }
  }
  if (k.substr(0, 2) == "x-") return Vocab::kAnnotation;  // vendor extensions
  return Vocab::kUnknown;
}

uint8_t vocab_types(Vocab v) {
  switch (v) {
    case Vocab::kNumeric: return kTypeInteger | kTypeFraction;
    case Vocab::kString: return kTypeString;
    case Vocab::kArray: return kTypeArray;
    case Vocab::kObject: return kTypeObject;
    default: return 0;
  }
}

// XGrammar's built-in string formats (JSONFormatToRegexPattern) whose regex is no wider than the
// format: email, ipv4, uri and uuid pass JSON-Schema-Test-Suite's optional/format tests
// (json_schema_suite_test.cpp); ipv6, uri-reference, duration and the JSON pointers were read
// against their RFCs. hostname is refused (no label or total length limits, no IDNA checks), as
// is uri-template (unverified).
bool builtin_format(std::string_view f) {
  static const char* const kFormats[] = {
      "email", "ipv4", "ipv6", "uuid", "uri", "uri-reference", "duration", "json-pointer", "relative-json-pointer"};
  for (const char* name : kFormats) {
    if (f == name) return true;
  }
  return false;
}

// XGrammar's date and time regexes accept 2021-02-30 and a leap second at any minute: these
// exact ones (leap years included; no leap seconds, a narrowing) replace them as patterns.
constexpr const char* kDate =
    "(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|"
    "02-(?:0[1-9]|1[0-9]|2[0-8]))|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29)";
constexpr const char* kTime =
    "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";

std::optional<std::string> format_as_pattern(std::string_view f) {
  if (f == "date") return std::string("^") + kDate + "$";
  if (f == "time") return std::string("^") + kTime + "$";
  if (f == "date-time") return std::string("^") + kDate + "[Tt]" + kTime + "$";
  return std::nullopt;
}

std::string pointer_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string where(const std::string& path) {
  return path.empty() ? "the schema root" : path;
}

Status refuse(std::string_view keyword, const std::string& path, std::string_view why);

Status pattern_error(std::string_view keyword, const std::string& path, const Status& s) {
  if (s.code() == StatusCode::kUnimplemented) return refuse(keyword, path, s.message());
  return Status(s.code(), "JSON schema keyword '" + std::string(keyword) + "' at " + where(path) + ": " + s.message());
}

// The keyword whose value holds the subschema at `path`, so a refusal names it: "/anyOf/1" ->
// anyOf, "/properties/a" -> properties, "/$defs/b" -> $defs, "/items" -> items. A schema-array
// keyword counts only before an index, so a property named "anyOf" is not taken for one.
std::string holding_keyword(const std::string& path) {
  const size_t last = path.rfind('/');
  if (last == std::string::npos) return path;
  const std::string tail = path.substr(last + 1);
  const size_t before = last == 0 ? std::string::npos : path.rfind('/', last - 1);
  if (before != std::string::npos) {
    const std::string parent = path.substr(before + 1, last - before - 1);
    const bool index = !tail.empty() && std::all_of(tail.begin(), tail.end(), [](char c) { return c >= '0' && c <= '9'; });
    const bool holds_names = parent == "properties" || parent == "patternProperties" || parent == "$defs" ||
                             parent == "definitions" || parent == "dependentSchemas";
    const bool holds_list = parent == "anyOf" || parent == "oneOf" || parent == "allOf" || parent == "prefixItems";
    if (holds_names || (holds_list && index)) return parent;
  }
  return tail;
}

Status refuse(std::string_view keyword, const std::string& path, std::string_view why) {
  std::string m = "JSON schema keyword '" + std::string(keyword) + "' at " + where(path) + " is not supported";
  if (!why.empty()) m += ": " + std::string(why);
  return unimplemented(std::move(m));
}

// 2^53 - 1: the largest integer every JSON implementation reads exactly (RFC 8259 §6).
constexpr int64_t kMaxSafeInteger = 9007199254740991;

bool is_whole(const Json& v, int64_t* out) {
  if (v.is_int()) {
    *out = v.as_int();
    return true;
  }
  if (!v.is_number()) return false;
  double d = v.as_double();
  if (!(std::fabs(d) < 9.0e15) || d != std::floor(d)) return false;
  *out = static_cast<int64_t>(d);
  return true;
}

class Walker {
 public:
  Walker(const Json& root, const JsonSchemaPolicyOptions& options, SchemaEdits* edits)
      : root_(root), options_(options), edits_(edits) {}

  Status walk(const Json& s, const std::string& path, bool property_name = false) {
    if (s.is_bool()) {
      if (s.as_bool() || path.empty()) return Status();  // false at the root: XGrammar reports it
      return refuse(holding_keyword(path), path,
                    "its subschema 'false' (no value allowed) cannot be expressed by XGrammar");
    }
    if (!s.is_object()) return invalid_argument("JSON schema at " + where(path) + " must be an object or a boolean");
    if (!visited_.insert({&s, property_name}).second) return Status();
    const Json::Object& obj = s.as_object();
    for (const auto& [key, value] : obj) {
      switch (vocab_of(key)) {
        case Vocab::kNever: return refuse(key, path, "XGrammar does not enforce it");
        case Vocab::kUnknown: return refuse(key, path, "unknown keyword");
        case Vocab::kContainer:
          if (key == "$id" && !path.empty()) return refuse(key, path, "only at the schema root");
          if (key != "$id" && value.is_object()) {
            for (const auto& [name, sub] : value.as_object()) {
              KVASIR_RETURN_IF_ERROR(walk(sub, path + "/" + key + "/" + pointer_escape(name)));
            }
          }
          break;
        default: break;
      }
    }
    if (property_name) return check_property_names(s, path);
    return check_branch(s, path);
  }

 private:
  // XGrammar reads a schema object through the first of these that is present and ignores the
  // rest of the object's assertions, so those must be absent (or implied).
  Status check_branch(const Json& s, const std::string& path) {
    static const char* const kOrder[] = {"$ref", "const", "enum", "anyOf", "oneOf", "allOf"};
    for (const char* branch : kOrder) {
      if (!s.contains(branch)) continue;
      for (const auto& [key, value] : s.as_object()) {
        Vocab v = vocab_of(key);
        if (key == branch || v == Vocab::kAnnotation || v == Vocab::kContainer) continue;
        if (std::string_view(branch) == "const" && key == "enum" && json_in(*s.find("const"), value)) {
          continue;
        }
        if ((std::string_view(branch) == "const" || std::string_view(branch) == "enum") && key == "type" &&
            values_match_type(s.find(branch), value, std::string_view(branch) == "const")) {
          continue;
        }
        return refuse(key, path, std::string("XGrammar reads only '") + branch + "' in this schema object");
      }
      std::string at = path + "/" + branch;
      const Json& v = *s.find(branch);
      if (std::string_view(branch) == "$ref") return check_ref(v, path);
      if (std::string_view(branch) == "enum" && v.is_array() && v.size() == 0) {
        return invalid_argument("JSON schema keyword 'enum' at " + where(path) +
                                " is an empty list: no value satisfies the schema, so no output could");
      }
      if (std::string_view(branch) == "anyOf" || std::string_view(branch) == "oneOf" ||
          std::string_view(branch) == "allOf") {
        if (!v.is_array()) return Status();  // XGrammar reports it
        if (std::string_view(branch) == "allOf" && v.size() != 1) {
          return refuse(branch, path, "only with a single subschema (XGrammar does not intersect schemas)");
        }
        for (size_t i = 0; i < v.size(); ++i) {
          KVASIR_RETURN_IF_ERROR(walk(v.as_array()[i], at + "/" + std::to_string(i)));
        }
        if (std::string_view(branch) == "oneOf" && !oneof_disjoint(root_, v)) {
          return refuse(branch, path,
                        "its branches must be provably disjoint (distinct types, distinct const/enum "
                        "values or a required property with distinct const/enum values): XGrammar "
                        "accepts a value matching several branches");
        }
      }
      return Status();
    }
    uint8_t types = 0;
    if (const Json* t = s.find("type")) {
      // XGrammar reads an empty list as no type at all and drops the other keywords with it.
      if (t->is_array() && t->size() == 0)
        return invalid_argument("JSON schema 'type' at " + where(path) + " is an empty list");
      types = type_mask(*t);
      if (types == 0) return Status();  // a malformed or unknown type: XGrammar reports it
    } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("unevaluatedProperties")) {
      types = kTypeObject;  // XGrammar reads it as an object: a narrowing
    } else if (s.contains("items") || s.contains("prefixItems") || s.contains("unevaluatedItems")) {
      types = kTypeArray;
    }
    for (const auto& [key, value] : s.as_object()) {
      uint8_t applies = vocab_types(vocab_of(key));
      if (applies == 0) continue;
      if (types == 0) return refuse(key, path, "XGrammar enforces it only beside 'type'");
      if ((applies & types) == 0) continue;  // constrains no instance the type admits
      if (vocab_of(key) == Vocab::kString) continue;
      KVASIR_RETURN_IF_ERROR(check_typed(s, key, value, types, path));
    }
    if (types & (kTypeInteger | kTypeFraction)) bound_numbers(s);
    if (types & kTypeString) return check_string_keywords(s, path);
    return Status();
  }

  // XGrammar writes a number without bounds as an unbounded run of digits, and a small model can
  // emit digits until max_tokens. Given both bounds it writes a range grammar instead, so the
  // sides a schema leaves open get ±(2^53-1), the integers JSON numbers interoperate in (RFC 8259
  // §6): at most 16 integer digits (a number's range form also has at most 6 fraction digits and
  // no exponent). Only a narrowing. Left alone: multipleOf (XGrammar drops it beside a range that
  // wide) and a side the other bound reaches or lies beyond (the range could be empty).
  void bound_numbers(const Json& s) {
    if (s.contains("multipleOf")) return;
    auto beyond = [&](const char* inclusive, const char* exclusive, double limit, bool below) {
      for (const char* k : {inclusive, exclusive}) {
        const Json* b = s.find(k);
        if (b == nullptr) continue;
        if (!b->is_number()) return true;  // XGrammar reports it
        double v = b->as_double();
        if (below ? v <= limit : v >= limit) return true;
      }
      return false;
    };
    const bool has_lo = s.contains("minimum") || s.contains("exclusiveMinimum");
    const bool has_hi = s.contains("maximum") || s.contains("exclusiveMaximum");
    if (!has_lo && !beyond("maximum", "exclusiveMaximum", -kMaxSafeInteger, /*below=*/true)) {
      edit(s, {SchemaEdit::Op::kSet, "minimum", Json(-kMaxSafeInteger), ""});
    }
    if (!has_hi && !beyond("minimum", "exclusiveMinimum", kMaxSafeInteger, /*below=*/false)) {
      edit(s, {SchemaEdit::Op::kSet, "maximum", Json(kMaxSafeInteger), ""});
    }
  }

  // minLength, maxLength, pattern and format, which XGrammar reads as one string rule.
  Status check_string_keywords(const Json& s, const std::string& path) {
    for (const char* k : {"contentEncoding", "contentMediaType", "contentSchema"}) {
      if (s.contains(k)) return refuse(k, path, "XGrammar does not enforce it");
    }
    const Json* pattern = s.find("pattern");
    const Json* format = s.find("format");
    const bool lengths = s.contains("minLength") || s.contains("maxLength");
    std::optional<std::string> format_pattern;
    if (format != nullptr) {
      std::string name = format->is_string() ? format->as_string() : format->dump();
      format_pattern = format->is_string() ? format_as_pattern(name) : std::nullopt;
      if (!format_pattern && !(format->is_string() && builtin_format(name))) {
        return refuse("format", path, "format '" + name + "' is not enforced");
      }
      if (pattern != nullptr) return refuse("pattern", path, "XGrammar drops it next to 'format'");
    }
    if (lengths && (pattern != nullptr || format != nullptr)) {
      return refuse(s.contains("minLength") ? "minLength" : "maxLength", path,
                    "XGrammar drops it next to 'pattern' or 'format'");
    }
    if (format_pattern) {
      edit(s, {SchemaEdit::Op::kDrop, "format", Json(), ""});
      edit(s, {SchemaEdit::Op::kSet, "pattern", Json(*format_pattern), ""});
      return Status();
    }
    if (pattern != nullptr && pattern->is_string()) {
      StatusOr<std::string> p = json_schema_pattern_to_xgrammar(pattern->as_string());
      if (!p.ok()) return pattern_error("pattern", path, p.status());
      if (*p != pattern->as_string()) edit(s, {SchemaEdit::Op::kSet, "pattern", Json(*p), ""});
    }
    return Status();
  }

  Status check_typed(const Json& s, const std::string& key, const Json& value, uint8_t types, const std::string& path) {
    const std::string at = path + "/" + key;
    // Numbers.
    if (key == "multipleOf") return check_multiple_of(s, types, path);
    if (vocab_of(key) == Vocab::kNumeric) return Status();
    // Arrays.
    if (key == "items" || key == "unevaluatedItems") {
      if (key == "unevaluatedItems" && s.contains("items")) return Status();  // every item is evaluated
      return value.is_object() ? walk(value, at) : Status();
    }
    if (key == "prefixItems") {
      if (!value.is_array()) return Status();
      for (size_t i = 0; i < value.size(); ++i) {
        KVASIR_RETURN_IF_ERROR(walk(value.as_array()[i], at + "/" + std::to_string(i)));
      }
      return Status();
    }
    if (key == "minItems" || key == "maxItems") return Status();
    if (key == "uniqueItems") {
      return value.is_bool() && !value.as_bool() ? Status() : refuse(key, path, "XGrammar does not enforce it");
    }
    // Objects.
    if (key == "properties") {
      if (!value.is_object()) return Status();
      for (const auto& [name, sub] : value.as_object()) {
        KVASIR_RETURN_IF_ERROR(walk(sub, at + "/" + pointer_escape(name)));
      }
      return Status();
    }
    if (key == "required") return check_required(s, value, path);
    if (key == "additionalProperties" || key == "unevaluatedProperties") {
      if (key == "unevaluatedProperties" && s.contains("additionalProperties")) return Status();
      return value.is_object() ? walk(value, at) : Status();
    }
    if (key == "patternProperties") return check_pattern_properties(s, value, path);
    if (key == "propertyNames") return check_property_names_use(s, value, path);
    if (key == "minProperties" || key == "maxProperties") return Status();
    return refuse(key, path, "XGrammar does not enforce it");
  }

  Status check_ref(const Json& ref, const std::string& path) {
    if (!ref.is_string()) return Status();  // XGrammar reports it
    const std::string& uri = ref.as_string();
    if (uri != "#" && uri.rfind("#/", 0) != 0) {
      return refuse("$ref", path, "'" + uri + "': only local references ('#' or '#/...') are supported");
    }
    std::string target_path;
    const Json* target = resolve_ref(root_, uri, &target_path);
    if (target == nullptr)
      return invalid_argument("JSON schema $ref '" + uri + "' at " + where(path) + " cannot be resolved");
    return walk(*target, target_path);
  }

  Status check_multiple_of(const Json& s, uint8_t types, const std::string& path) {
    if (types & kTypeFraction) return refuse("multipleOf", path, "XGrammar enforces it only on integers");
    int64_t m = 0;
    const Json& v = *s.find("multipleOf");
    if (v.is_number() && v.as_double() <= 0) return Status();  // XGrammar reports it
    if (!is_whole(v, &m) || m > 1024) {
      return refuse("multipleOf", path, "XGrammar enforces only whole numbers up to 1024");
    }
    const Json* lo[] = {s.find("minimum"), s.find("exclusiveMinimum")};
    const Json* hi[] = {s.find("maximum"), s.find("exclusiveMaximum")};
    bool has_lo = lo[0] || lo[1], has_hi = hi[0] || hi[1];
    if (!has_lo && !has_hi) return Status();
    if (!has_lo || !has_hi) return refuse("multipleOf", path, "XGrammar drops it beside a one-sided range");
    int64_t min = INT64_MIN, max = INT64_MAX, b = 0;
    for (int i = 0; i < 2; ++i) {
      if (lo[i] != nullptr) {
        if (!is_whole(*lo[i], &b)) return Status();  // XGrammar reports a fractional bound
        min = std::max(min, i == 0 ? b : b + 1);
      }
      if (hi[i] != nullptr) {
        if (!is_whole(*hi[i], &b)) return Status();
        max = std::min(max, i == 0 ? b : b - 1);
      }
    }
    if (min <= max && max - min >= 9999) {
      return refuse("multipleOf", path, "XGrammar drops it beside a range of more than 10000 integers");
    }
    return Status();
  }

  Status check_required(const Json& s, const Json& required, const std::string& path) {
    if (!required.is_array()) return Status();
    const Json* props = s.find("properties");
    for (const Json& name : required.as_array()) {
      if (!name.is_string()) return Status();  // XGrammar reports it
      if (props == nullptr || !props->is_object() || props->find(name.as_string()) == nullptr) {
        return refuse("required", path,
                      "'" + name.as_string() + "' is not in 'properties' (XGrammar enforces only listed properties)");
      }
    }
    return Status();
  }

  static bool has_named_properties(const Json& s) {
    const Json* p = s.find("properties");
    return p != nullptr && p->is_object() && p->size() > 0;
  }

  Status check_pattern_properties(const Json& s, const Json& pp, const std::string& path) {
    if (!pp.is_object()) return Status();
    if (has_named_properties(s)) {
      return refuse("patternProperties", path,
                    "not together with 'properties' (a listed key matching a pattern must satisfy both)");
    }
    if (s.contains("propertyNames")) return refuse("patternProperties", path, "not together with 'propertyNames'");
    if (pp.size() > 1)
      return refuse("patternProperties", path, "only one pattern (keys matching several must satisfy all)");
    for (const auto& [pattern, sub] : pp.as_object()) {
      StatusOr<std::string> p = json_schema_pattern_to_xgrammar(pattern);
      if (!p.ok()) return pattern_error("patternProperties", path, p.status());
      if (*p != pattern) edit(pp, {SchemaEdit::Op::kRename, pattern, Json(), *p});
      KVASIR_RETURN_IF_ERROR(walk(sub, path + "/patternProperties/" + pointer_escape(pattern)));
    }
    return Status();
  }

  Status check_property_names_use(const Json& s, const Json& names, const std::string& path) {
    if (has_named_properties(s)) return refuse("propertyNames", path, "not together with 'properties'");
    if (s.contains("patternProperties")) return refuse("propertyNames", path, "not together with 'patternProperties'");
    // XGrammar lets keys in even when no additional property may be there.
    bool open = !options_.strict;
    if (const Json* a = s.find("additionalProperties")) {
      open = !(a->is_bool() && !a->as_bool());
    } else if (const Json* u = s.find("unevaluatedProperties")) {
      open = !(u->is_bool() && !u->as_bool());
    }
    if (!open) return refuse("propertyNames", path, "only when additional properties are allowed");
    return walk(names, path + "/propertyNames", /*property_name=*/true);
  }

  // A propertyNames schema becomes the key's grammar: it must produce only JSON strings.
  Status check_property_names(const Json& s, const std::string& path) {
    for (const auto& [key, value] : s.as_object()) {
      Vocab v = vocab_of(key);
      if (v == Vocab::kAnnotation || v == Vocab::kContainer) continue;
      bool ok = false;
      if (key == "type") {
        ok = value.is_string() && value.as_string() == "string";
      } else if (key == "const") {
        ok = value.is_string() && !s.contains("enum");
      } else if (key == "enum") {
        ok = value.is_array() && !s.contains("const");
        if (ok) {
          for (const Json& e : value.as_array()) ok = ok && e.is_string();
        }
      } else if (key == "pattern" || key == "format" || key == "minLength" || key == "maxLength") {
        ok = !s.contains("const") && !s.contains("enum");
      }
      if (!ok)
        return refuse(key, path,
                      "in 'propertyNames' only type string, pattern, format, minLength, maxLength and string "
                      "const/enum are enforced");
    }
    return check_string_keywords(s, path);
  }

  void edit(const Json& node, SchemaEdit e) { (*edits_)[&node].push_back(std::move(e)); }

  const Json& root_;
  JsonSchemaPolicyOptions options_;
  SchemaEdits* edits_;
  std::set<std::pair<const Json*, bool>> visited_;
};

}  // namespace

Status check_json_schema(const Json& schema, const JsonSchemaPolicyOptions& options, SchemaEdits* edits) {
  if (auto dup = find_duplicate_key(schema)) {
    return invalid_argument("JSON schema has a key twice in the object at " + where(*dup));
  }
  return Walker(schema, options, edits).walk(schema, "");
}

namespace {

void dump_to(const Json& node, const SchemaEdits& edits, std::string& out) {
  if (node.is_array()) {
    out += '[';
    for (size_t i = 0; i < node.size(); ++i) {
      if (i > 0) out += ',';
      dump_to(node.as_array()[i], edits, out);
    }
    out += ']';
    return;
  }
  if (!node.is_object()) {
    out += node.dump();
    return;
  }
  auto it = edits.find(&node);
  const std::vector<SchemaEdit>* mine = it == edits.end() ? nullptr : &it->second;
  auto find_edit = [&](const std::string& key) -> const SchemaEdit* {
    if (mine == nullptr) return nullptr;
    const SchemaEdit* found = nullptr;
    for (const SchemaEdit& e : *mine) {
      if (e.key == key) found = &e;
    }
    return found;
  };
  out += '{';
  bool first = true;
  auto emit = [&](const std::string& key, const Json& value, bool plain) {
    if (!first) out += ',';
    first = false;
    json_escape_to(out, key);
    out += ':';
    if (plain) {
      out += value.dump();
    } else {
      dump_to(value, edits, out);
    }
  };
  for (const auto& [key, value] : node.as_object()) {
    const SchemaEdit* e = find_edit(key);
    if (e == nullptr) {
      emit(key, value, false);
    } else if (e->op == SchemaEdit::Op::kSet) {
      emit(key, e->value, true);
    } else if (e->op == SchemaEdit::Op::kRename) {
      emit(e->new_key, value, false);
    }
  }
  if (mine != nullptr) {
    for (const SchemaEdit& e : *mine) {
      if (e.op == SchemaEdit::Op::kSet && node.find(e.key) == nullptr && find_edit(e.key) == &e) {
        emit(e.key, e.value, true);
      }
    }
  }
  out += '}';
}

}  // namespace

std::string dump_with_edits(const Json& doc, const SchemaEdits& edits) {
  std::string out;
  dump_to(doc, edits, out);
  return out;
}

}  // namespace kvasir::structured
