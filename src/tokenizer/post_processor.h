// PostProcessor: the special tokens HF `tokenizers` wraps around one encoded sequence when
// add_special_tokens is set (TemplateProcessing's "single" template, RobertaProcessing,
// BertProcessing, ByteLevel = nothing, Sequence of these). Pairs are not supported: the engine
// only ever encodes one sequence. Must not touch the text.
#pragma once

#include <cstdint>
#include <vector>

#include "common/json.h"
#include "common/status.h"

namespace kvasir::tok {

class PostProcessor {
 public:
  // `j` is the tokenizer.json "post_processor" value; null adds nothing.
  static StatusOr<PostProcessor> from_json(const Json& j);
  static PostProcessor wrap(std::vector<int32_t> prefix, std::vector<int32_t> suffix);

  const std::vector<int32_t>& prefix() const { return prefix_; }
  const std::vector<int32_t>& suffix() const { return suffix_; }

 private:
  Status add_from_json(const Json& j);
  std::vector<int32_t> prefix_;
  std::vector<int32_t> suffix_;
};

}  // namespace kvasir::tok
