#include "server/structured_outputs_json.h"

#include <optional>
#include <string>

namespace kvasir {
namespace {

using Kind = StructuredOutputSpec::Kind;

// A schema may come as an object or as its JSON text (vLLM accepts both for guided_json).
Status schema_text(const Json& v, const std::string& field, std::string* out) {
  if (v.is_object() || v.is_bool()) {
    *out = v.dump();
    return Status();
  }
  if (v.is_string()) {
    auto parsed = parse_json(v.as_string());
    if (!parsed.ok()) return invalid_argument("'" + field + "' is not valid JSON: " + parsed.status().message());
    if (!parsed->is_object() && !parsed->is_bool()) return invalid_argument("'" + field + "' must be a JSON schema object");
    *out = v.as_string();
    return Status();
  }
  return invalid_argument("'" + field + "' must be a JSON schema object");
}

Status want_string(const Json& v, const std::string& field, std::string* out) {
  if (!v.is_string()) return invalid_argument("'" + field + "' must be a string");
  *out = v.as_string();
  return Status();
}

Status choices_of(const Json& v, const std::string& field, std::vector<std::string>* out) {
  if (!v.is_array() || v.size() == 0) return invalid_argument("'" + field + "' must be a non-empty list of strings");
  for (const Json& c : v.as_array()) {
    if (!c.is_string()) return invalid_argument("'" + field + "' must be a non-empty list of strings");
    out->push_back(c.as_string());
  }
  return Status();
}

// One constraint per request: a second source is a clear error, not a silent override.
class Collector {
 public:
  Status set(const std::string& source, StructuredOutputSpec spec) {
    if (spec_) {
      return invalid_argument("only one structured output constraint is allowed per request ('" + source_ +
                              "' and '" + source + "' were both given)");
    }
    spec_ = std::move(spec);
    source_ = source;
    return Status();
  }
  std::optional<StructuredOutputSpec> take() { return std::move(spec_); }

 private:
  std::optional<StructuredOutputSpec> spec_;
  std::string source_;
};

StructuredOutputSpec make(Kind kind, std::string text = {}, std::vector<std::string> choices = {}) {
  StructuredOutputSpec s;
  s.kind = kind;
  s.text = std::move(text);
  s.choices = std::move(choices);
  return s;
}

Status read_response_format(const Json& rf, Collector* c) {
  const Json* type = rf.is_object() ? rf.find("type") : nullptr;
  if (!type || !type->is_string()) return invalid_argument("'response_format' must be an object with a string 'type'");
  const std::string& t = type->as_string();
  if (t == "text") return Status();
  if (t == "json_object") return c->set("response_format", make(Kind::kJsonObject));
  if (t == "json_schema") {
    const Json* js = rf.find("json_schema");
    if (!js || !js->is_object()) return invalid_argument("'response_format.json_schema' must be an object");
    const Json* schema = js->find("schema");
    if (!schema || schema->is_null()) return invalid_argument("'response_format.json_schema.schema' is required");
    if (const Json* strict = js->find("strict"); strict && !strict->is_null() && !strict->is_bool()) {
      return invalid_argument("'response_format.json_schema.strict' must be a boolean");
    }
    std::string text;
    KVASIR_RETURN_IF_ERROR(schema_text(*schema, "response_format.json_schema.schema", &text));
    return c->set("response_format", make(Kind::kJsonSchema, std::move(text)));
  }
  if (t == "structural_tag") return c->set("response_format", make(Kind::kStructuralTag, rf.dump()));
  return invalid_argument("response_format type '" + t +
                          "' is not supported (expected text, json_object, json_schema or structural_tag)");
}

Status read_structured_outputs(const Json& so, Collector* c) {
  if (!so.is_object()) return invalid_argument("'structured_outputs' must be an object");
  for (const auto& [key, v] : so.as_object()) {
    if (v.is_null()) continue;
    const std::string field = "structured_outputs." + key;
    if (key == "json") {
      std::string text;
      KVASIR_RETURN_IF_ERROR(schema_text(v, field, &text));
      KVASIR_RETURN_IF_ERROR(c->set(field, make(Kind::kJsonSchema, std::move(text))));
    } else if (key == "regex") {
      std::string text;
      KVASIR_RETURN_IF_ERROR(want_string(v, field, &text));
      KVASIR_RETURN_IF_ERROR(c->set(field, make(Kind::kRegex, std::move(text))));
    } else if (key == "choice") {
      std::vector<std::string> choices;
      KVASIR_RETURN_IF_ERROR(choices_of(v, field, &choices));
      KVASIR_RETURN_IF_ERROR(c->set(field, make(Kind::kChoice, {}, std::move(choices))));
    } else if (key == "grammar") {
      std::string text;
      KVASIR_RETURN_IF_ERROR(want_string(v, field, &text));
      KVASIR_RETURN_IF_ERROR(c->set(field, make(Kind::kGrammar, std::move(text))));
    } else if (key == "json_object") {
      if (!v.is_bool()) return invalid_argument("'" + field + "' must be a boolean");
      if (v.as_bool()) KVASIR_RETURN_IF_ERROR(c->set(field, make(Kind::kJsonObject)));
    } else if (key == "structural_tag") {
      std::string text;
      KVASIR_RETURN_IF_ERROR(want_string(v, field, &text));
      KVASIR_RETURN_IF_ERROR(c->set(field, make(Kind::kStructuralTag, std::move(text))));
    } else if (key == "disable_fallback" || key == "backend") {
      // No fallback backend exists to disable; one backend (XGrammar) serves every request.
      if (key == "backend" && (!v.is_string() || (v.as_string() != "xgrammar" && v.as_string() != "auto"))) {
        return unimplemented("'" + field + "' must be \"xgrammar\" or \"auto\" (the only grammar backend here)");
      }
    } else if (key == "disable_any_whitespace" || key == "disable_additional_properties") {
      if (!v.is_bool()) return invalid_argument("'" + field + "' must be a boolean");
      if (v.as_bool()) return unimplemented("'" + field + "' is not supported");
    } else {
      return unimplemented("'" + field + "' is not supported");
    }
  }
  return Status();
}

}  // namespace

Status apply_structured_outputs_json(const Json& body, SamplingParams* p) {
  if (!body.is_object()) return invalid_argument("request body must be a JSON object");
  Collector c;
  if (const Json* rf = body.find("response_format"); rf && !rf->is_null()) {
    KVASIR_RETURN_IF_ERROR(read_response_format(*rf, &c));
  }
  if (const Json* so = body.find("structured_outputs"); so && !so->is_null()) {
    KVASIR_RETURN_IF_ERROR(read_structured_outputs(*so, &c));
  }
  if (const Json* v = body.find("guided_json"); v && !v->is_null()) {
    std::string text;
    KVASIR_RETURN_IF_ERROR(schema_text(*v, "guided_json", &text));
    KVASIR_RETURN_IF_ERROR(c.set("guided_json", make(Kind::kJsonSchema, std::move(text))));
  }
  if (const Json* v = body.find("guided_regex"); v && !v->is_null()) {
    std::string text;
    KVASIR_RETURN_IF_ERROR(want_string(*v, "guided_regex", &text));
    KVASIR_RETURN_IF_ERROR(c.set("guided_regex", make(Kind::kRegex, std::move(text))));
  }
  if (const Json* v = body.find("guided_choice"); v && !v->is_null()) {
    std::vector<std::string> choices;
    KVASIR_RETURN_IF_ERROR(choices_of(*v, "guided_choice", &choices));
    KVASIR_RETURN_IF_ERROR(c.set("guided_choice", make(Kind::kChoice, {}, std::move(choices))));
  }
  if (const Json* v = body.find("guided_grammar"); v && !v->is_null()) {
    std::string text;
    KVASIR_RETURN_IF_ERROR(want_string(*v, "guided_grammar", &text));
    KVASIR_RETURN_IF_ERROR(c.set("guided_grammar", make(Kind::kGrammar, std::move(text))));
  }
  if (const Json* v = body.find("guided_decoding_backend"); v && !v->is_null()) {
    if (!v->is_string() || (v->as_string() != "xgrammar" && v->as_string() != "auto")) {
      return unimplemented("'guided_decoding_backend' must be \"xgrammar\" or \"auto\" (the only grammar backend here)");
    }
  }
  if (const Json* v = body.find("guided_whitespace_pattern"); v && !v->is_null()) {
    return unimplemented("'guided_whitespace_pattern' is not supported");
  }
  if (auto spec = c.take()) p->structured_outputs = std::move(*spec);
  return Status();
}

}  // namespace kvasir
