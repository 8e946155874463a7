#include "structured/structural_tag.h"

#include <utility>

#include "structured/json_schema_shape.h"
#include "structured/request_regex.h"

namespace kvasir::structured {
namespace {

bool is_legacy(const Json& tag) {
  return tag.is_object() && tag.contains("structures") && !tag.contains("format");
}

StatusOr<Json> from_legacy(const Json& tag) {
  const Json* structures = tag.find("structures");
  const Json* triggers = tag.find("triggers");
  if (!structures->is_array() || triggers == nullptr || !triggers->is_array()) {
    return invalid_argument("structural tag: 'structures' and 'triggers' must be arrays");
  }
  Json tags = Json::array();
  for (const Json& s : structures->as_array()) {
    const Json* begin = s.find("begin");
    const Json* schema = s.find("schema");
    const Json* end = s.find("end");
    if (begin == nullptr || !begin->is_string() || end == nullptr || !end->is_string() || schema == nullptr) {
      return invalid_argument("structural tag: each structure needs string 'begin' and 'end' and a 'schema'");
    }
    Json content = Json::object();
    content.set("type", "json_schema");
    content.set("json_schema", *schema);
    Json item = Json::object();
    item.set("type", "tag");
    item.set("begin", *begin);
    item.set("content", std::move(content));
    item.set("end", *end);
    tags.push_back(std::move(item));
  }
  Json format = Json::object();
  format.set("type", "triggered_tags");
  format.set("triggers", *triggers);
  format.set("tags", std::move(tags));
  Json out = Json::object();
  out.set("type", "structural_tag");
  out.set("format", std::move(format));
  return out;
}

// Every object with a json_schema member is a JSON-schema format (XGrammar also tries that
// reading for objects without a type), so each one's schema is checked.
Status check_schemas(const Json& node, const std::string& path, const JsonSchemaPolicyOptions& policy,
                     SchemaEdits* edits) {
  if (node.is_array()) {
    for (size_t i = 0; i < node.size(); ++i) {
      KVASIR_RETURN_IF_ERROR(check_schemas(node.as_array()[i], path + "/" + std::to_string(i), policy, edits));
    }
    return Status();
  }
  if (!node.is_object()) return Status();
  if (const Json* t = node.find("type"); t != nullptr && t->is_string() && t->as_string() == "qwen_xml_parameter") {
    return unimplemented("structural tag format 'qwen_xml_parameter' at " + path +
                         " is not supported: the JSON-schema policy covers JSON output only");
  }
  if (const Json* t = node.find("type"); t != nullptr && t->is_string() && t->as_string() == "regex") {
    if (const Json* pattern = node.find("pattern"); pattern != nullptr && pattern->is_string()) {
      Status s = check_output_regex(pattern->as_string());
      if (!s.ok()) return Status(s.code(), "structural tag regex at " + path + ": " + s.message());
    }
  }
  if (const Json* schema = node.find("json_schema")) {
    if (const Json* style = node.find("style");
        style != nullptr && !(style->is_string() && style->as_string() == "json")) {
      return unimplemented("structural tag json_schema style " + style->dump() + " at " + path +
                           " is not supported: the JSON-schema policy covers JSON output only");
    }
    if (node.contains("excludes")) {
      // XGrammar drops string length limits inside a schema format with excludes.
      return unimplemented("structural tag json_schema 'excludes' at " + path + " is not supported");
    }
    Status s = check_json_schema(*schema, policy, edits);
    if (!s.ok()) {
      return Status(s.code(), "structural tag schema at " + path + "/json_schema: " + s.message());
    }
  }
  for (const auto& [key, value] : node.as_object()) {
    if (key != "json_schema") KVASIR_RETURN_IF_ERROR(check_schemas(value, path + "/" + key, policy, edits));
  }
  return Status();
}

}  // namespace

StatusOr<std::string> normalize_structural_tag(const Json& tag, const JsonSchemaPolicyOptions& policy) {
  if (!tag.is_object()) return invalid_argument("structural tag must be a JSON object");
  if (auto dup = find_duplicate_key(tag)) {
    return invalid_argument("structural tag has a key twice in the object at " + (dup->empty() ? "/" : *dup));
  }
  Json normalized = tag;
  if (is_legacy(tag)) {
    KVASIR_ASSIGN_OR_RETURN(normalized, from_legacy(tag));
  }
  SchemaEdits edits;
  KVASIR_RETURN_IF_ERROR(check_schemas(normalized, "", policy, &edits));
  return dump_with_edits(normalized, edits);
}

}  // namespace kvasir::structured
