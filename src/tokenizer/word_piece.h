// WordPiece: BERT's word -> ids rule, HF `tokenizers`' WordPiece model: the longest vocabulary
// piece that starts the word, then the longest that continues it, and so on; a word with a part
// no piece covers (or longer than max_input_chars_per_word characters) becomes one unk. Pieces
// are looked up in a BpeModel used as a plain vocabulary (it holds no merges). Must not split
// text into words (BertPreTokenizer does).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/bpe_model.h"

namespace kvasir::tok {

struct WordPieceOptions {
  // HF writes continuations with "##" and word starts bare; llama.cpp's GGUF files respell the
  // same vocabulary as word starts with U+2581 and continuations bare.
  std::string word_prefix;
  std::string continuing_subword_prefix = "##";
  int32_t unk_id = -1;  // -1: an uncovered word yields no id
  size_t max_input_chars_per_word = 100;
};

class WordPiece {
 public:
  WordPiece() = default;
  explicit WordPiece(WordPieceOptions options) : options_(std::move(options)) {}

  // Appends the ids of `word` to out.
  void encode(std::string_view word, const BpeModel& vocab, std::vector<int32_t>* out) const;

 private:
  WordPieceOptions options_;
};

}  // namespace kvasir::tok
