// Tokenizer: text <-> token ids for one model, token for token what HF `tokenizers` produces.
// The pipeline is HF's: added/special tokens are cut out first (raw, then normalized), each piece
// between them is normalized, pre-tokenized into words, and each word BPE-encoded; the post
// processor adds bos/eos when asked. Words are BPE-encoded, or WordPiece-encoded (BERT) when the
// parts carry a WordPiece rule; the BpeModel is then the vocabulary only. Built by a loader (hf_loader.h: tokenizer.json,
// gguf_vocab.h: GGUF metadata), immutable afterwards and safe to share between threads.
// Must not render chat templates or know about requests (chat/ and engine/ do).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "tokenizer/added_vocab.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoders.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizers.h"
#include "tokenizer/word_piece.h"

namespace kvasir {

// Special-token facts a loader found (tokenizer_config.json, GGUF keys); -1 / "" when unknown.
struct TokenizerInfo {
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t pad_id = -1;
  int32_t unk_id = -1;
  std::string bos_token;
  std::string eos_token;
  std::string chat_template;
};

// Everything a loader assembles; Tokenizer::create checks it and takes it over.
struct TokenizerParts {
  tok::Normalizer normalizer;
  tok::PreTokenizer pre_tokenizer;
  tok::BpeModel model;
  std::optional<tok::WordPiece> word_piece;  // set: words are encoded by WordPiece over `model`'s vocabulary
  tok::PostProcessor post_processor;
  tok::Decoder decoder;
  std::vector<tok::AddedToken> added_tokens;
  TokenizerInfo info;
};

class Tokenizer {
 public:
  static StatusOr<Tokenizer> create(TokenizerParts parts);

  // Invalid UTF-8 in `text` is first replaced by U+FFFD (HF only ever sees valid strings).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;
  // Ids outside the vocabulary are skipped, as HF does.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;
  // Decodes ids that continue already-decoded text (no start-of-text space stripping); the
  // incremental detokenizer's building block.
  std::string decode_continuation(std::span<const int32_t> ids, bool skip_special_tokens) const;

  std::optional<std::string_view> id_to_token(int32_t id) const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // One past the largest id (model vocabulary and added tokens).
  size_t vocab_size() const { return vocab_size_; }

  int32_t bos_id() const { return info_.bos_id; }  // -1 when the model has none
  int32_t eos_id() const { return info_.eos_id; }
  int32_t pad_id() const { return info_.pad_id; }
  int32_t unk_id() const { return info_.unk_id; }
  const std::string& bos_token() const { return info_.bos_token; }
  const std::string& eos_token() const { return info_.eos_token; }
  const std::string& chat_template() const { return info_.chat_template; }
  // Ids encode(..., true) puts around the text (e.g. {bos} and {}).
  const std::vector<int32_t>& special_prefix() const { return post_.prefix(); }
  const std::vector<int32_t>& special_suffix() const { return post_.suffix(); }

  // A special added token (skipped by decode(skip_special_tokens = true)).
  bool is_special(int32_t id) const;
  // A <0xNN> byte token that the decoder fuses with its neighbours.
  bool is_byte_fallback_token(int32_t id) const;
  bool decoder_has_byte_fallback() const { return decoder_.has_byte_fallback(); }
  // The bytes `id` adds to decoded text that it continues, raw (a token holding part of a UTF-8
  // character gives those bytes); nullopt outside the vocabulary. Exact when
  // decoder_is_per_token(): then decode_continuation(ids) is the concatenation of these. What
  // grammar engines (structured/) match tokens against.
  std::optional<std::string> token_bytes(int32_t id) const;
  bool decoder_is_per_token() const { return decoder_.per_token(); }
  const std::vector<tok::AddedToken>& added_tokens() const { return added_.tokens(); }

 private:
  Tokenizer() = default;
  void encode_text(std::string_view text, bool at_origin, tok::BpeScratch* scratch,
                   std::vector<int32_t>* ids) const;
  std::string decode_impl(std::span<const int32_t> ids, bool skip_special, bool continuation) const;
  const tok::AddedToken* added_by_id(int32_t id) const;

  tok::Normalizer normalizer_;
  tok::PreTokenizer pre_tokenizer_;
  tok::BpeModel model_;
  std::optional<tok::WordPiece> word_piece_;
  tok::PostProcessor post_;
  tok::Decoder decoder_;
  tok::AddedVocab added_;
  std::vector<int32_t> added_index_;  // id -> index into added_.tokens(), -1 when not added
  tok::TokenMap added_ids_;           // content -> id of added tokens
  std::vector<bool> byte_token_;      // id -> is a <0xNN> model token
  TokenizerInfo info_;
  size_t vocab_size_ = 0;
};

}  // namespace kvasir
