// Reading a tokenizer from GGUF metadata: collects the `tokenizer.ggml.*` keys (model, pre,
// tokens, scores, token_type, merges, special ids, add_bos/eos/space_prefix) and
// `tokenizer.chat_template` into a VocabSpec, then builds the Tokenizer (vocab_spec.h). Missing
// optional keys fall back to llama.cpp's defaults; keys of the wrong type are errors. Must not
// read tensors.
#pragma once

#include "common/status.h"
#include "loader/gguf_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab_spec.h"

namespace kvasir {

StatusOr<VocabSpec> vocab_spec_from_gguf(const GgufFile& file);
StatusOr<Tokenizer> tokenizer_from_gguf(const GgufFile& file);

}  // namespace kvasir
