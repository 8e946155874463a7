// IncrementalDetokenizer: streaming text for a growing list of generated ids. Each step returns
// the text the new id completes; the deltas are always whole UTF-8 characters and, with flush()
// at the end, concatenate to exactly Tokenizer::decode(all ids). Like vLLM's
// detokenize_incrementally it re-decodes only a small window after a read offset; it holds back
// text that later ids could still change (a trailing U+FFFD from an incomplete byte sequence, a
// run of <0xNN> byte-fallback tokens) and decodes windows after the first in "continuation" mode
// so start-of-text space stripping happens once. One instance per sequence; not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace kvasir {

class IncrementalDetokenizer {
 public:
  // `prompt_ids`: when the output continues a prompt, the prompt's ids; only whether they hold
  // visible text matters (then the first output token keeps its leading space).
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens,
                         std::span<const int32_t> prompt_ids = {});

  // Appends `id`; returns the newly final text (often empty while bytes are pending).
  std::string step(int32_t id);
  // Returns everything still held back. Call once, after the last step.
  std::string flush();

  // All text returned so far.
  const std::string& text() const { return text_; }
  size_t num_tokens() const { return num_tokens_; }

 private:
  std::string emit(bool final);
  bool visible(int32_t id) const;

  const Tokenizer& tokenizer_;
  bool skip_special_;
  bool started_ = false;        // start-of-text decoding rules are already used up
  std::vector<int32_t> window_;  // ids after the read offset, not yet final
  size_t pending_bytes_ = 0;    // bytes of the window's text already returned
  size_t num_tokens_ = 0;
  std::string text_;
};

}  // namespace kvasir
