// TokenVocab: what every token of a model's vocabulary writes into the output, as bytes, which is
// what a grammar engine matches tokens against. Byte-level BPE tokens (GPT-2, SmolLM2, Llama-3)
// map their byte-level characters back to bytes; SentencePiece tokens (Gemma, Llama-2) turn U+2581
// into a space and <0xNN> into byte NN; a token holding part of a UTF-8 character gives those
// bytes. Special (control) tokens and ids without a token get no bytes: a grammar can never
// produce them (stop tokens are allowed separately). Must not know about grammars.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "tokenizer/tokenizer.h"

namespace kvasir::structured {

struct TokenVocab {
  // [tokenizer vocab_size]: the bytes of each id; empty for special tokens and unused ids.
  std::vector<std::string> token_bytes;
  int32_t num_special = 0;  // ids with no bytes
};

// Unimplemented when the tokenizer's decoder is not a per-token map (WordPiece cleanup: the
// text of a token would depend on its neighbours).
StatusOr<TokenVocab> build_token_vocab(const Tokenizer& tokenizer);

}  // namespace kvasir::structured
