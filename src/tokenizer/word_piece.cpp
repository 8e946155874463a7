#include "tokenizer/word_piece.h"

#include "tokenizer/unicode_util.h"

namespace kvasir::tok {

void WordPiece::encode(std::string_view word, const BpeModel& vocab, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  // Character boundaries: a piece must not end inside a UTF-8 sequence.
  std::vector<size_t> bounds{0};
  for (size_t i = 0; i < word.size();) {
    size_t n = 0;
    first_code_point(word.substr(i), &n);
    i += n;
    bounds.push_back(i);
  }
  auto unk = [&] {
    if (options_.unk_id >= 0) out->push_back(options_.unk_id);
  };
  if (bounds.size() - 1 > options_.max_input_chars_per_word) return unk();
  const size_t first = out->size();
  std::string piece;
  size_t start = 0;  // index into bounds
  while (start + 1 < bounds.size()) {
    int32_t found = -1;
    size_t end = bounds.size() - 1;
    for (; end > start; --end) {
      piece = start == 0 ? options_.word_prefix : options_.continuing_subword_prefix;
      piece.append(word.substr(bounds[start], bounds[end] - bounds[start]));
      found = vocab.token_to_id(piece);
      if (found >= 0) break;
    }
    if (found < 0) {  // HF: the whole word becomes unk, pieces found so far included
      out->resize(first);
      return unk();
    }
    out->push_back(found);
    start = end;
  }
}

}  // namespace kvasir::tok
