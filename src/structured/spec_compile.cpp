// One uncached compile of a StructuredOutputSpec: the checks that come before XGrammar (size,
// UTF-8, nesting, the JSON-schema keyword policy, structural-tag normalization), the call into
// XGrammar, and the translation of whatever it throws into a Status.
#include <new>
#include <string>

#include "common/json.h"
#include "common/utf8.h"
#include "structured/compiled_grammar.h"
#include "structured/ebnf_text.h"
#include "structured/json_schema_policy.h"
#include "structured/request_regex.h"
#include "structured/structural_tag.h"

namespace kvasir::structured {
namespace {

// The grammar parsers recurse once per nesting level; deeper input than this is refused before
// it reaches them.
constexpr int kMaxNesting = 200;
// Schemas nest objects two levels per schema level ({"properties": {"a": {...}}}).
constexpr int kMaxJsonDepth = 2 * kMaxNesting;

const char* kind_label(StructuredOutputSpec::Kind kind) {
  switch (kind) {
    case StructuredOutputSpec::Kind::kJsonSchema: return "JSON schema";
    case StructuredOutputSpec::Kind::kJsonObject: return "JSON object";
    case StructuredOutputSpec::Kind::kRegex: return "regex";
    case StructuredOutputSpec::Kind::kChoice: return "choice";
    case StructuredOutputSpec::Kind::kGrammar: return "grammar";
    case StructuredOutputSpec::Kind::kStructuralTag: return "structural tag";
  }
  return "structured output";
}

// XGrammar's messages start with "[hh:mm:ss] /path/file.cc:123: "; the caller gets the rest.
std::string clean_message(std::string m) {
  if (!m.empty() && m[0] == '[') {
    if (size_t p = m.find("] "); p != std::string::npos) m.erase(0, p + 2);
  }
  if (size_t colon = m.find(": "); colon != std::string::npos) {
    std::string_view head(m.data(), colon);
    size_t line = head.rfind(':');
    bool source_ref = line != std::string_view::npos && line + 1 < head.size() &&
                      head.find(".cc") != std::string_view::npos &&
                      head.find_first_not_of("0123456789", line + 1) == std::string_view::npos;
    if (source_ref) m.erase(0, colon + 2);
  }
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  if (m.size() > 600) m = m.substr(0, 600) + "...";
  return m;
}

// Deepest nesting of ( and [ outside string literals: a cheap bound on the parsers' recursion.
int nesting_depth(std::string_view s) {
  int depth = 0, max_depth = 0;
  char quote = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '\\') {
      ++i;
    } else if (quote != 0) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '(' || c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
    } else if ((c == ')' || c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return max_depth;
}

Status check_text(std::string_view label, std::string_view text, const CompileSettings& settings) {
  if (text.size() > settings.max_spec_bytes) {
    return invalid_argument(std::string(label) + " is " + std::to_string(text.size()) +
                            " bytes, more than the limit of " + std::to_string(settings.max_spec_bytes));
  }
  if (!utf8_valid(text)) return invalid_argument(std::string(label) + " is not valid UTF-8");
  if (nesting_depth(text) > kMaxNesting) {
    return invalid_argument(std::string(label) + " nests deeper than " + std::to_string(kMaxNesting) + " levels");
  }
  return Status();
}

StatusOr<Json> parse_spec_json(std::string_view label, const std::string& text) {
  JsonParseLimits limits;
  limits.max_depth = kMaxJsonDepth;
  StatusOr<Json> json = parse_json(text, limits);
  if (!json.ok()) return invalid_argument(std::string(label) + " is not valid JSON: " + json.status().message());
  return json;
}

xgrammar::CompiledGrammar compile_xgrammar(xgrammar::GrammarCompiler& xg, const StructuredOutputSpec& spec,
                                           const std::string& text, const CompileSettings& settings) {
  std::optional<int> max_ws;
  if (settings.json_max_whitespace > 0) max_ws = settings.json_max_whitespace;
  using Kind = StructuredOutputSpec::Kind;
  switch (spec.kind) {
    case Kind::kJsonSchema:
      return xg.CompileJSONSchema(text, settings.json_any_whitespace, std::nullopt, std::nullopt, settings.json_strict,
                                  max_ws);
    case Kind::kJsonObject:
      // Any object: strict mode would leave only {} of {"type": "object"}.
      return xg.CompileJSONSchema(R"({"type": "object"})", settings.json_any_whitespace, std::nullopt, std::nullopt,
                                  /*strict_mode=*/false, max_ws);
    case Kind::kRegex: return xg.CompileRegex(text);
    case Kind::kChoice:
    case Kind::kGrammar: return xg.CompileGrammar(text, "root");
    case Kind::kStructuralTag: return xg.CompileStructuralTag(text);
  }
  throw std::invalid_argument("unknown structured output kind");
}

// The text XGrammar gets for a spec, after our own checks.
StatusOr<std::string> prepare(const StructuredOutputSpec& spec, const CompileSettings& settings) {
  using Kind = StructuredOutputSpec::Kind;
  const char* label = kind_label(spec.kind);
  switch (spec.kind) {
    case Kind::kJsonObject: return std::string();
    case Kind::kJsonSchema: {
      KVASIR_RETURN_IF_ERROR(check_text(label, spec.text, settings));
      KVASIR_ASSIGN_OR_RETURN(Json schema, parse_spec_json(label, spec.text));
      JsonSchemaPolicyOptions policy;
      policy.strict = settings.json_strict;
      SchemaEdits edits;
      KVASIR_RETURN_IF_ERROR(check_json_schema(schema, policy, &edits));
      // Our parse decides the structure; XGrammar's parser gets it back as canonical JSON.
      return dump_with_edits(schema, edits);
    }
    case Kind::kRegex:
      KVASIR_RETURN_IF_ERROR(check_text(label, spec.text, settings));
      if (spec.text.empty()) return invalid_argument("regex is empty");
      KVASIR_RETURN_IF_ERROR(check_output_regex(spec.text));
      return spec.text;
    case Kind::kChoice: {
      if (spec.choices.empty()) return invalid_argument("choice needs at least one string");
      size_t total = 0;
      for (const std::string& c : spec.choices) {
        total += c.size();
        if (!utf8_valid(c)) return invalid_argument("choice strings must be valid UTF-8");
      }
      if (total > settings.max_spec_bytes) return invalid_argument("choice strings are too long in total");
      return choice_ebnf(spec.choices);
    }
    case Kind::kGrammar:
      KVASIR_RETURN_IF_ERROR(check_text(label, spec.text, settings));
      if (spec.text.find("::=") == std::string::npos) {
        return invalid_argument("grammar has no rule: expected EBNF/GBNF rules `name ::= ...` with a `root` rule");
      }
      return gbnf_to_ebnf(spec.text);
    case Kind::kStructuralTag: {
      KVASIR_RETURN_IF_ERROR(check_text(label, spec.text, settings));
      KVASIR_ASSIGN_OR_RETURN(Json tag, parse_spec_json(label, spec.text));
      JsonSchemaPolicyOptions policy;
      policy.strict = settings.json_strict;
      return normalize_structural_tag(tag, policy);
    }
  }
  return invalid_argument("unknown structured output kind");
}

}  // namespace

CompileResult compile_spec(xgrammar::GrammarCompiler& compiler, const std::shared_ptr<const VocabFacts>& vocab,
                           const StructuredOutputSpec& spec, const CompileSettings& settings) {
  const char* label = kind_label(spec.kind);
  try {
    KVASIR_ASSIGN_OR_RETURN(std::string text, prepare(spec, settings));
    xgrammar::CompiledGrammar compiled = compile_xgrammar(compiler, spec, text, settings);
    return CompiledGrammarPtr(std::make_shared<const CompiledGrammar>(std::move(compiled), vocab));
  } catch (const std::bad_alloc&) {
    return resource_exhausted(std::string(label) + " needs too much memory to compile");
  } catch (const std::exception& e) {
    return invalid_argument(std::string("invalid ") + label + ": " + clean_message(e.what()));
  } catch (...) {
    return invalid_argument(std::string("invalid ") + label);
  }
}

}  // namespace kvasir::structured
