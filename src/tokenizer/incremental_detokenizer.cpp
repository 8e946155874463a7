#include "tokenizer/incremental_detokenizer.h"

namespace kvasir {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// Length of `text` without its trailing U+FFFD characters: an incomplete byte sequence decodes
// to U+FFFD now but to a real character once the next token brings the missing bytes.
size_t stable_length(const std::string& text) {
  size_t n = text.size();
  while (n >= kReplacement.size() && std::string_view(text).substr(n - kReplacement.size(), kReplacement.size()) == kReplacement) {
    n -= kReplacement.size();
  }
  return n;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens,
                                               std::span<const int32_t> prompt_ids)
    : tokenizer_(tokenizer), skip_special_(skip_special_tokens) {
  for (int32_t id : prompt_ids) started_ = started_ || visible(id);
}

bool IncrementalDetokenizer::visible(int32_t id) const {
  if (!tokenizer_.id_to_token(id).has_value()) return false;
  return !(skip_special_ && tokenizer_.is_special(id));
}

std::string IncrementalDetokenizer::step(int32_t id) {
  window_.push_back(id);
  ++num_tokens_;
  return emit(/*final=*/false);
}

std::string IncrementalDetokenizer::flush() { return emit(/*final=*/true); }

std::string IncrementalDetokenizer::emit(bool final) {
  size_t end = window_.size();
  // A run of byte-fallback tokens is decoded as one group: a later byte can still change how the
  // whole run decodes, so it stays pending until a visible non-byte token closes it (tokens that
  // decode to nothing, like skipped special tokens, do not close it).
  if (!final && tokenizer_.decoder_has_byte_fallback()) {
    while (end > 0 && (tokenizer_.is_byte_fallback_token(window_[end - 1]) || !visible(window_[end - 1]))) {
      --end;
    }
  }
  if (end == 0) return "";
  std::span<const int32_t> ids(window_.data(), end);
  std::string text = started_ ? tokenizer_.decode_continuation(ids, skip_special_)
                              : tokenizer_.decode(ids, skip_special_);
  size_t stable = final ? text.size() : stable_length(text);
  std::string delta;
  if (stable > pending_bytes_) delta = text.substr(pending_bytes_, stable - pending_bytes_);
  if (stable == text.size()) {
    // Clean end: everything up to `end` is final; the next window starts there.
    for (size_t i = 0; i < end && !started_; ++i) started_ = visible(window_[i]);
    window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(end));
    pending_bytes_ = 0;
  } else if (stable > pending_bytes_) {
    pending_bytes_ = stable;
  }
  text_ += delta;
  return delta;
}

}  // namespace kvasir
