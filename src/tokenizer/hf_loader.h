// Loading a Tokenizer from Hugging Face files: tokenizer.json (model, added tokens, normalizer,
// pre-tokenizer, post-processor, decoder) plus, when present, tokenizer_config.json (bos/eos/pad
// token strings, add_bos_token/add_eos_token, chat_template) and chat_template.jinja.
// Unsupported components (WordPiece/Unigram models, Precompiled normalizers...) give
// Unimplemented, never a silently different tokenization. Must not download anything.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "tokenizer/tokenizer.h"

namespace kvasir {

// `path`: a directory holding tokenizer.json (and maybe tokenizer_config.json,
// chat_template.jinja), or a tokenizer.json file.
StatusOr<Tokenizer> load_hf_tokenizer(const std::string& path);

// From file contents; `tokenizer_config_json` and `chat_template` may be empty.
StatusOr<Tokenizer> tokenizer_from_hf_json(std::string_view tokenizer_json,
                                           std::string_view tokenizer_config_json,
                                           std::string_view chat_template = {});

}  // namespace kvasir
