// StructuredOutputSpec: what a request asks its output to match (vLLM's StructuredOutputsParams):
// a JSON schema, any JSON object, a regex, one of a list of strings, an EBNF/GBNF grammar or an
// XGrammar structural tag. Plain data carried in SamplingParams; the structured/ library compiles
// it into a token-level grammar. Must not know about tokenizers or grammar engines.
#pragma once

#include <string>
#include <vector>

namespace kvasir {

struct StructuredOutputSpec {
  enum class Kind {
    kJsonSchema,     // text: the schema, as JSON text
    kJsonObject,     // any JSON object (response_format json_object); text unused
    kRegex,          // text: the pattern
    kChoice,         // choices: the output is exactly one of them
    kGrammar,        // text: EBNF / GBNF
    kStructuralTag,  // text: the structural tag, as JSON text
  };
  Kind kind = Kind::kJsonObject;
  std::string text;
  std::vector<std::string> choices;

  // A stable text naming the grammar, for caches (kind, then the payload, length-prefixed).
  std::string cache_key() const {
    std::string k(1, static_cast<char>('0' + static_cast<int>(kind)));
    k += std::to_string(text.size()) + ':' + text;
    for (const auto& c : choices) k += std::to_string(c.size()) + ':' + c;
    return k;
  }
  bool operator==(const StructuredOutputSpec&) const = default;
};

const char* structured_output_kind_name(StructuredOutputSpec::Kind kind);

}  // namespace kvasir
