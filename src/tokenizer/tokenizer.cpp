#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "common/quoted_text.h"
#include "common/utf8.h"
#include "tokenizer/unicode_util.h"

namespace kvasir {

StatusOr<Tokenizer> Tokenizer::create(TokenizerParts parts) {
  Tokenizer t;
  t.normalizer_ = std::move(parts.normalizer);
  t.pre_tokenizer_ = std::move(parts.pre_tokenizer);
  t.model_ = std::move(parts.model);
  t.word_piece_ = std::move(parts.word_piece);
  t.post_ = std::move(parts.post_processor);
  t.decoder_ = std::move(parts.decoder);
  t.info_ = std::move(parts.info);

  size_t size = t.model_.vocab_size();
  for (const tok::AddedToken& a : parts.added_tokens) {
    if (a.id < 0) return invalid_argument("added token '" + quoted_text(a.content) + "' has a negative id");
    if (a.content.empty()) return invalid_argument("added token with id " + std::to_string(a.id) + " is empty");
    size = std::max(size, static_cast<size_t>(a.id) + 1);
  }
  t.vocab_size_ = size;
  std::vector<std::string> normalized;
  normalized.reserve(parts.added_tokens.size());
  for (const tok::AddedToken& a : parts.added_tokens) {
    normalized.push_back(a.normalized ? t.normalizer_.normalize(a.content) : a.content);
  }
  t.added_index_.assign(size, -1);
  for (size_t i = 0; i < parts.added_tokens.size(); ++i) {
    int32_t& slot = t.added_index_[parts.added_tokens[i].id];
    if (slot < 0) slot = static_cast<int32_t>(i);
    t.added_ids_.emplace(parts.added_tokens[i].content, parts.added_tokens[i].id);
  }
  t.added_.build(std::move(parts.added_tokens), normalized);

  t.byte_token_.assign(size, false);
  for (size_t id = 0; id < t.model_.vocab_size(); ++id) {
    const std::string* s = t.model_.id_to_token(static_cast<int32_t>(id));
    t.byte_token_[id] = s != nullptr && s->size() == 6 && s->compare(0, 3, "<0x") == 0 && (*s)[5] == '>';
  }
  auto check_id = [&](int32_t id, const char* what) -> Status {
    if (id >= static_cast<int32_t>(size)) {
      return invalid_argument(std::string(what) + " id " + std::to_string(id) + " is outside the vocabulary");
    }
    return Status();
  };
  KVASIR_RETURN_IF_ERROR(check_id(t.info_.bos_id, "bos"));
  KVASIR_RETURN_IF_ERROR(check_id(t.info_.eos_id, "eos"));
  KVASIR_RETURN_IF_ERROR(check_id(t.info_.pad_id, "pad"));
  KVASIR_RETURN_IF_ERROR(check_id(t.info_.unk_id, "unk"));
  for (int32_t id : t.post_.prefix()) KVASIR_RETURN_IF_ERROR(check_id(id, "post-processor"));
  for (int32_t id : t.post_.suffix()) KVASIR_RETURN_IF_ERROR(check_id(id, "post-processor"));
  return t;
}

void Tokenizer::encode_text(std::string_view text, bool at_origin, tok::BpeScratch* scratch,
                            std::vector<int32_t>* ids) const {
  std::vector<tok::PreToken> words;
  words.push_back(tok::PreToken{std::string(text), at_origin});
  pre_tokenizer_.pre_tokenize(&words);
  for (const tok::PreToken& w : words) {
    if (word_piece_) {
      word_piece_->encode(w.text, model_, ids);
    } else {
      model_.encode(w.text, scratch, ids);
    }
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::string clean;
  if (!utf8_valid(text)) {
    clean = tok::utf8_lossy(text);
    text = clean;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 8);
  if (add_special_tokens) ids = post_.prefix();
  tok::BpeScratch scratch;
  std::vector<tok::AddedVocab::Segment> raw, sub;
  added_.split(text, /*normalized_set=*/false, &raw);
  for (const auto& seg : raw) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    std::string_view piece = text.substr(seg.begin, seg.end - seg.begin);
    const bool at_origin = seg.begin == 0;
    std::string normalized;
    if (!normalizer_.empty()) {
      normalized = normalizer_.normalize(piece);
      piece = normalized;
    }
    if (!added_.has_normalized()) {
      encode_text(piece, at_origin, &scratch, &ids);
      continue;
    }
    sub.clear();
    added_.split(piece, /*normalized_set=*/true, &sub);
    for (const auto& s : sub) {
      if (s.id >= 0) {
        ids.push_back(s.id);
      } else {
        encode_text(piece.substr(s.begin, s.end - s.begin), at_origin && s.begin == 0, &scratch, &ids);
      }
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), post_.suffix().begin(), post_.suffix().end());
  return ids;
}

const tok::AddedToken* Tokenizer::added_by_id(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= added_index_.size() || added_index_[id] < 0) return nullptr;
  return &added_.tokens()[added_index_[id]];
}

std::string Tokenizer::decode_impl(std::span<const int32_t> ids, bool skip_special,
                                   bool continuation) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (const tok::AddedToken* a = added_by_id(id); a != nullptr) {
      if (!(skip_special && a->special)) tokens.push_back(a->content);
      continue;
    }
    if (const std::string* s = model_.id_to_token(id); s != nullptr) tokens.push_back(*s);
  }
  return decoder_.decode(std::move(tokens), continuation);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  return decode_impl(ids, skip_special_tokens, /*continuation=*/false);
}

std::string Tokenizer::decode_continuation(std::span<const int32_t> ids, bool skip_special_tokens) const {
  return decode_impl(ids, skip_special_tokens, /*continuation=*/true);
}

std::optional<std::string_view> Tokenizer::id_to_token(int32_t id) const {
  if (const tok::AddedToken* a = added_by_id(id); a != nullptr) return std::string_view(a->content);
  if (const std::string* s = model_.id_to_token(id); s != nullptr) return std::string_view(*s);
  return std::nullopt;
}

std::optional<std::string> Tokenizer::token_bytes(int32_t id) const {
  std::optional<std::string_view> token = id_to_token(id);
  if (!token) return std::nullopt;
  return decoder_.token_bytes(std::string(*token));
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto it = added_ids_.find(token); it != added_ids_.end()) return it->second;
  int32_t id = model_.token_to_id(token);
  if (id < 0) return std::nullopt;
  return id;
}

bool Tokenizer::is_special(int32_t id) const {
  const tok::AddedToken* a = added_by_id(id);
  return a != nullptr && a->special;
}

bool Tokenizer::is_byte_fallback_token(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < byte_token_.size() && byte_token_[id] &&
         added_by_id(id) == nullptr;
}

}  // namespace kvasir
