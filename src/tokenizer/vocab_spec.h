// VocabSpec: a GGUF-style vocabulary as plain data (the `tokenizer.ggml.*` keys), and the
// function that turns it into a Tokenizer with the HF-equivalent pipeline: "gpt2" = byte-level
// BPE whose pre-tokenizer regexes are chosen by the `pre` name (as llama.cpp does), "llama" =
// SentencePiece BPE merging by piece score with <0xNN> byte fallback and an optional space
// prefix, "bert" = WordPiece as llama.cpp writes it (word starts marked with U+2581). Must not
// read files (gguf_vocab.h fills a VocabSpec from a GgufFile).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "tokenizer/tokenizer.h"

namespace kvasir {

// tokenizer.ggml.token_type values.
enum class GgufTokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct VocabSpec {
  std::string architecture;          // general.architecture (gemma* needs its own merge order)
  std::string model;                 // tokenizer.ggml.model: "gpt2", "llama" or "bert"
  std::string pre;                   // tokenizer.ggml.pre ("" = default)
  std::vector<std::string> tokens;   // id -> text
  std::vector<float> scores;         // "llama": id -> score (empty: all 0)
  std::vector<int32_t> token_types;  // id -> GgufTokenType (empty: all normal)
  std::vector<std::string> merges;   // "gpt2": "left right", best first
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  std::optional<bool> add_bos;           // unset: llama.cpp's default for the model type
  std::optional<bool> add_eos;
  std::optional<bool> add_space_prefix;  // "llama" only; unset: true
  std::string chat_template;
};

StatusOr<Tokenizer> tokenizer_from_vocab_spec(const VocabSpec& spec);

// The pre-tokenizer regexes (applied in order, each isolating its matches) for a "gpt2"
// vocabulary's `pre` name; Unimplemented for names we do not know.
StatusOr<std::vector<std::string>> bpe_pre_tokenizer_regexes(const std::string& pre);
// Every `pre` name bpe_pre_tokenizer_regexes knows ("" means "default"), in table order.
std::vector<std::string> bpe_pre_tokenizer_names();

}  // namespace kvasir
