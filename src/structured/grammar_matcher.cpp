#include "structured/grammar_matcher.h"

#include <algorithm>
#include <exception>
#include <string>

#include "common/check.h"
#include "common/log.h"
#include "structured/compiled_grammar.h"

namespace kvasir::structured {

struct GrammarMatcher::Impl {
  xgrammar::GrammarMatcher matcher;
  bool failed = false;  // XGrammar threw: the matcher allows only the stop tokens from now on
};

namespace {

xgrammar::GrammarMatcher make_matcher(const CompiledGrammar& grammar) {
  try {
    return xgrammar::GrammarMatcher(grammar.xgrammar());
  } catch (const std::exception& e) {
    // The compiled grammar came from our compiler with a checked vocabulary: a broken invariant.
    ::kvasir::detail::check_failed("XGrammar matcher construction", __FILE__, __LINE__, e.what());
  }
}

void fill_stop_only(const VocabFacts& vocab, std::span<int32_t> row) {
  std::fill(row.begin(), row.begin() + bitmask_words(vocab.model_vocab_size), 0);
  for (int32_t id : vocab.stop_token_ids) row[id / 32] |= static_cast<int32_t>(1u << (id % 32));
}

}  // namespace

GrammarMatcher::GrammarMatcher(CompiledGrammarPtr grammar) : grammar_(std::move(grammar)) {
  KVASIR_CHECK(grammar_ != nullptr);
  impl_ = std::make_unique<Impl>(Impl{make_matcher(*grammar_)});
}

GrammarMatcher::~GrammarMatcher() = default;
GrammarMatcher::GrammarMatcher(GrammarMatcher&&) noexcept = default;
GrammarMatcher& GrammarMatcher::operator=(GrammarMatcher&&) noexcept = default;

int32_t GrammarMatcher::model_vocab_size() const {
  return grammar_->vocab().model_vocab_size;
}

bool GrammarMatcher::accept_token(int32_t token_id) {
  const VocabFacts& vocab = grammar_->vocab();
  // XGrammar logs a warning for each of these; they are simply not allowed.
  if (token_id < 0 || token_id >= vocab.model_vocab_size || !vocab.selectable[token_id]) return false;
  if (impl_->failed || is_terminated()) return false;
  bool accepted = false;
  try {
    accepted = impl_->matcher.AcceptToken(token_id);
  } catch (const std::exception& e) {
    KVASIR_LOG_ERROR("grammar matcher failed accepting token %d: %s", token_id, e.what());
    impl_->failed = true;
    return false;
  }
  if (accepted) ++num_accepted_;
  return accepted;
}

bool GrammarMatcher::accept_string(std::string_view bytes) {
  if (impl_->failed || is_terminated()) return false;
  bool accepted = false;
  try {
    accepted = impl_->matcher.AcceptString(std::string(bytes));
  } catch (const std::exception& e) {
    KVASIR_LOG_ERROR("grammar matcher failed accepting a string: %s", e.what());
    impl_->failed = true;
    return false;
  }
  if (accepted) ++num_accepted_;
  return accepted;
}

bool GrammarMatcher::fill_bitmask(std::span<int32_t> row) {
  const VocabFacts& vocab = grammar_->vocab();
  const int32_t words = bitmask_words(vocab.model_vocab_size);
  KVASIR_CHECK(static_cast<int32_t>(row.size()) >= words);
  if (impl_->failed || is_terminated()) {
    fill_stop_only(vocab, row);
    return true;
  }
  int64_t shape[1] = {words};
  DLTensor tensor{};
  tensor.data = row.data();
  tensor.device = DLDevice{kDLCPU, 0};
  tensor.ndim = 1;
  tensor.dtype = DLDataType{kDLInt, 32, 1};
  tensor.shape = shape;
  tensor.strides = nullptr;
  tensor.byte_offset = 0;
  try {
    return impl_->matcher.FillNextTokenBitmask(&tensor);
  } catch (const std::exception& e) {
    KVASIR_LOG_ERROR("grammar matcher failed filling a bitmask: %s", e.what());
    impl_->failed = true;
    fill_stop_only(vocab, row);
    return true;
  }
}

void GrammarMatcher::rollback(int32_t num_tokens) {
  KVASIR_CHECK(num_tokens >= 0 && num_tokens <= num_accepted_);
  if (num_tokens == 0) return;
  try {
    impl_->matcher.Rollback(num_tokens);
  } catch (const std::exception& e) {
    KVASIR_LOG_ERROR("grammar matcher failed rolling back: %s", e.what());
    impl_->failed = true;
  }
  num_accepted_ -= num_tokens;
}

void GrammarMatcher::reset() {
  impl_->matcher.Reset();
  impl_->failed = false;
  num_accepted_ = 0;
}

bool GrammarMatcher::is_terminated() const {
  return impl_->matcher.IsTerminated();
}
bool GrammarMatcher::is_completed() const {
  return impl_->matcher.IsCompleted();
}

}  // namespace kvasir::structured
