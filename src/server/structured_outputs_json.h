// Reads a request's structured-output fields into SamplingParams::structured_outputs, in every
// spelling vLLM accepts: OpenAI's `response_format` (text, json_object, json_schema, and vLLM's
// structural_tag), vLLM's `structured_outputs` object (json, regex, choice, grammar, json_object,
// structural_tag) and its older `guided_json` / `guided_regex` / `guided_choice` /
// `guided_grammar` fields. At most one constraint per request; options we do not implement
// (a whitespace pattern, turning off any-whitespace) are refused, never ignored. Only shapes are
// checked here: whether a schema, regex or grammar compiles is the grammar compiler's 400.
#pragma once

#include "common/json.h"
#include "core/sampling_params.h"

namespace kvasir {

Status apply_structured_outputs_json(const Json& body, SamplingParams* params);

}  // namespace kvasir
