// Test-only (no gtest: grammar_fuzz includes it too): a tiny SentencePiece vocabulary that a
// grammar compiles against in milliseconds yet that sees every byte: <unk> <s> </s>, the 256 byte
// tokens, printable ASCII and a few merged JSON pieces.
#pragma once

#include <cstdio>
#include <string>

#include "tokenizer/vocab_spec.h"

namespace kvasir::structured::testing {

inline VocabSpec tiny_vocab_spec() {
  VocabSpec v;
  v.model = "llama";
  v.add_space_prefix = false;
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.token_types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    v.tokens.push_back(buf);
    v.token_types.push_back(6);
  }
  v.tokens.push_back("\xE2\x96\x81");
  v.token_types.push_back(1);
  for (char c = 0x21; c < 0x7F; ++c) {
    v.tokens.push_back(std::string(1, c));
    v.token_types.push_back(1);
  }
  for (const char* piece : {"true", "false", "null", "{\"", "\":", "\",", "12", "ab", "\xE2\x96\x81\"", "}]"}) {
    v.tokens.push_back(piece);
    v.token_types.push_back(1);
  }
  // Merged pieces score above single characters, so tokenizing prefers them.
  v.scores.assign(v.tokens.size(), 0.0f);
  for (size_t i = 0; i < v.tokens.size(); ++i) v.scores[i] = -static_cast<float>(v.tokens[i].size() == 1 ? 10 : 1);
  v.bos_id = 1;
  v.eos_id = 2;
  v.unk_id = 0;
  return v;
}

}  // namespace kvasir::structured::testing
