#include "tokenizer/gguf_vocab.h"

namespace kvasir {
namespace {

// Absent keys are fine (NotFound -> nullopt); any other error (wrong type) is reported.
template <typename T>
StatusOr<std::optional<T>> optional_key(StatusOr<T> v) {
  if (v.ok()) return std::optional<T>(std::move(v).value());
  if (v.status().code() == StatusCode::kNotFound) return std::optional<T>();
  return v.status();
}

Status read_id(const GgufFile& f, const char* key, int32_t* out) {
  KVASIR_ASSIGN_OR_RETURN(std::optional<int64_t> v, optional_key(f.get_i64(key)));
  if (v && *v >= 0 && *v <= INT32_MAX) *out = static_cast<int32_t>(*v);
  return Status();
}

}  // namespace

StatusOr<VocabSpec> vocab_spec_from_gguf(const GgufFile& f) {
  VocabSpec spec;
  KVASIR_ASSIGN_OR_RETURN(std::optional<std::string_view> model, optional_key(f.get_string("tokenizer.ggml.model")));
  if (!model) return not_found("GGUF file has no tokenizer (tokenizer.ggml.model is missing)");
  spec.model = std::string(*model);
  spec.architecture = std::string(f.architecture());
  KVASIR_ASSIGN_OR_RETURN(std::optional<std::string_view> pre, optional_key(f.get_string("tokenizer.ggml.pre")));
  if (pre) spec.pre = std::string(*pre);

  KVASIR_ASSIGN_OR_RETURN(std::vector<std::string_view> tokens, f.get_string_array("tokenizer.ggml.tokens"));
  spec.tokens.assign(tokens.begin(), tokens.end());
  KVASIR_ASSIGN_OR_RETURN(std::optional<std::vector<float>> scores,
                          optional_key(f.get_f32_array("tokenizer.ggml.scores")));
  if (scores) spec.scores = std::move(*scores);
  KVASIR_ASSIGN_OR_RETURN(std::optional<std::vector<int32_t>> types,
                          optional_key(f.get_i32_array("tokenizer.ggml.token_type")));
  if (types) spec.token_types = std::move(*types);
  KVASIR_ASSIGN_OR_RETURN(std::optional<std::vector<std::string_view>> merges,
                          optional_key(f.get_string_array("tokenizer.ggml.merges")));
  if (merges) spec.merges.assign(merges->begin(), merges->end());

  KVASIR_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.bos_token_id", &spec.bos_id));
  KVASIR_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.eos_token_id", &spec.eos_id));
  KVASIR_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.unknown_token_id", &spec.unk_id));
  KVASIR_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.padding_token_id", &spec.pad_id));
  // BERT vocabularies name their begin and end tokens cls and sep (llama.cpp spells it
  // "seperator"); llama.cpp uses them as bos and eos.
  if (spec.bos_id < 0) KVASIR_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.cls_token_id", &spec.bos_id));
  if (spec.eos_id < 0) KVASIR_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.seperator_token_id", &spec.eos_id));
  KVASIR_ASSIGN_OR_RETURN(spec.add_bos, optional_key(f.get_bool("tokenizer.ggml.add_bos_token")));
  KVASIR_ASSIGN_OR_RETURN(spec.add_eos, optional_key(f.get_bool("tokenizer.ggml.add_eos_token")));
  KVASIR_ASSIGN_OR_RETURN(spec.add_space_prefix, optional_key(f.get_bool("tokenizer.ggml.add_space_prefix")));
  KVASIR_ASSIGN_OR_RETURN(std::optional<std::string_view> tmpl, optional_key(f.get_string("tokenizer.chat_template")));
  if (tmpl) spec.chat_template = std::string(*tmpl);
  return spec;
}

StatusOr<Tokenizer> tokenizer_from_gguf(const GgufFile& file) {
  KVASIR_ASSIGN_OR_RETURN(VocabSpec spec, vocab_spec_from_gguf(file));
  return tokenizer_from_vocab_spec(spec);
}

}  // namespace kvasir
