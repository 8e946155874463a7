#include "structured/token_vocab.h"

namespace kvasir::structured {

StatusOr<TokenVocab> build_token_vocab(const Tokenizer& tokenizer) {
  if (!tokenizer.decoder_is_per_token()) {
    return unimplemented(
        "structured outputs need a tokenizer whose decoder maps each token to fixed bytes "
        "(byte-level BPE or SentencePiece); this one's text depends on neighbouring tokens");
  }
  TokenVocab vocab;
  vocab.token_bytes.resize(tokenizer.vocab_size());
  for (size_t id = 0; id < vocab.token_bytes.size(); ++id) {
    auto token_id = static_cast<int32_t>(id);
    // Decoding with skip_special_tokens drops special tokens from the text, so a grammar that
    // allowed one would match bytes the output does not contain.
    std::optional<std::string> bytes;
    if (!tokenizer.is_special(token_id)) bytes = tokenizer.token_bytes(token_id);
    if (bytes && !bytes->empty()) {
      vocab.token_bytes[id] = std::move(*bytes);
    } else {
      ++vocab.num_special;
    }
  }
  return vocab;
}

}  // namespace kvasir::structured
