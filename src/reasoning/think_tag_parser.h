// ThinkTagParser: the <think> ... </think> state machine both reasoning parsers are settings of.
// It starts either inside the reasoning (DeepSeek-R1, or a prompt that opened <think>), waiting to
// see whether the output opens with <think> (Qwen3), or in the content (thinking off). A <think>
// at the very start of the reasoning is the opener and is dropped; everything until </think> is
// reasoning, everything after it content. Output that never closes </think> stays reasoning.
#pragma once

#include <string>
#include <string_view>

#include "reasoning/reasoning_parser.h"

namespace kvasir::reasoning {

struct ThinkTagConfig {
  std::string_view name;
  std::string_view open = "<think>";
  std::string_view close = "</think>";
  // With no hint from the prompt: true, the output starts inside the reasoning (DeepSeek-R1);
  // false, reasoning happens only if the output opens with the open tag (Qwen3).
  bool starts_in_reasoning = false;
  bool honours_enable_thinking = false;  // enable_thinking = false: all content
};

class ThinkTagParser final : public ReasoningParser {
 public:
  ThinkTagParser(const ThinkTagConfig& config, const ReasoningParserOptions& options);

  std::string_view name() const override { return config_.name; }
  ReasoningDelta feed(std::string_view delta) override;
  ReasoningDelta finish() override;
  bool reasoning_ended() const override { return state_ == State::kContentStart || state_ == State::kContent; }
  ReasoningResult parse_complete(std::string_view model_output) const override;
  bool is_reasoning_end(std::string_view output_so_far) const override;

 private:
  enum class State {
    kOpen,            // the output may open with <think>: leading whitespace held
    kReasoningStart,  // inside the reasoning, nothing yet: whitespace and an opener dropped
    kReasoning,
    kContentStart,    // after </think>: whitespace dropped
    kContent,
  };
  enum class Initial { kOpen, kReasoning, kContent };

  ThinkTagParser(const ThinkTagConfig& config, Initial initial);
  void run();
  void reasoning_text(std::string_view text);  // trailing whitespace held until text follows

  ThinkTagConfig config_;
  Initial initial_;
  State state_;
  std::string buf_;
  size_t avail_ = 0;  // bytes of buf_ that end on a whole UTF-8 character
  bool eof_ = false;
  bool finished_ = false;
  std::string held_space_;
  ReasoningDelta out_;
};

}  // namespace kvasir::reasoning
