#include "reasoning/think_tag_parser.h"

#include <utility>

#include "common/check.h"
#include "common/text_match.h"
#include "common/utf8.h"

namespace kvasir::reasoning {
namespace {

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

}  // namespace

ThinkTagParser::ThinkTagParser(const ThinkTagConfig& config, const ReasoningParserOptions& options)
    : ThinkTagParser(config, Initial::kOpen) {
  std::string_view prompt = options.prompt.substr(0, trim_end(options.prompt));
  if (config.honours_enable_thinking && !options.enable_thinking) {
    initial_ = Initial::kContent;
  } else if (ends_with(prompt, config.close)) {
    initial_ = Initial::kContent;
  } else if (ends_with(prompt, config.open) || config.starts_in_reasoning) {
    initial_ = Initial::kReasoning;
  }
  state_ = initial_ == Initial::kOpen ? State::kOpen
           : initial_ == Initial::kReasoning ? State::kReasoningStart
                                             : State::kContent;
}

ThinkTagParser::ThinkTagParser(const ThinkTagConfig& config, Initial initial)
    : config_(config),
      initial_(initial),
      state_(initial == Initial::kOpen        ? State::kOpen
             : initial == Initial::kReasoning ? State::kReasoningStart
                                              : State::kContent) {}

ReasoningDelta ThinkTagParser::feed(std::string_view delta) {
  KVASIR_CHECK_MSG(!finished_, "ReasoningParser::feed after finish");
  buf_.append(delta);
  avail_ = utf8_complete_prefix(buf_);
  run();
  return std::exchange(out_, ReasoningDelta());
}

ReasoningDelta ThinkTagParser::finish() {
  KVASIR_CHECK_MSG(!finished_, "ReasoningParser::finish called twice");
  finished_ = true;
  eof_ = true;
  avail_ = buf_.size();
  run();
  held_space_.clear();  // reasoning cut off by the end: its trailing whitespace goes too
  return std::exchange(out_, ReasoningDelta());
}

void ThinkTagParser::reasoning_text(std::string_view text) {
  size_t end = trim_end(text);
  if (end == 0) {
    held_space_.append(text);
    return;
  }
  out_.reasoning += held_space_;
  out_.reasoning.append(text.substr(0, end));
  held_space_.assign(text.substr(end));
}

void ThinkTagParser::run() {
  auto drop = [this](size_t n) {
    buf_.erase(0, n);
    avail_ -= n;
  };
  while (true) {
    std::string_view in(buf_.data(), avail_);
    switch (state_) {
      case State::kOpen: {
        size_t ws = count_spaces(in);
        if (ws == in.size() && !eof_) return;
        Prefix p = match_prefix(in.substr(ws), config_.open, eof_);
        if (p == Prefix::kPartial) return;
        if (p == Prefix::kFull) {
          drop(ws + config_.open.size());
          state_ = State::kReasoningStart;
        } else {
          state_ = State::kContent;  // no reasoning: the held whitespace is content
        }
        break;
      }
      case State::kReasoningStart: {
        drop(count_spaces(in));
        in = std::string_view(buf_.data(), avail_);  // drop() moved the bytes
        if (in.empty()) return;
        Prefix p = match_prefix(in, config_.open, eof_);
        if (p == Prefix::kPartial) return;
        if (p == Prefix::kFull) {
          drop(config_.open.size());  // the opener, when the prompt or the format already opened one
        } else {
          state_ = State::kReasoning;
        }
        break;
      }
      case State::kReasoning: {
        MarkerFind f = find_marker(in, {config_.close}, eof_);
        reasoning_text(in.substr(0, f.content_end));
        if (f.which < 0) {
          drop(f.content_end);
          return;
        }
        drop(f.content_end + config_.close.size());
        held_space_.clear();
        state_ = State::kContentStart;
        break;
      }
      case State::kContentStart: {
        size_t ws = count_spaces(in);
        drop(ws);
        if (avail_ == 0) return;
        state_ = State::kContent;
        break;
      }
      case State::kContent:
        out_.content.append(in);
        drop(in.size());
        return;
    }
  }
}

ReasoningResult ThinkTagParser::parse_complete(std::string_view model_output) const {
  ThinkTagParser p(config_, initial_);
  ReasoningDelta a = p.feed(model_output);
  ReasoningDelta b = p.finish();
  return ReasoningResult{a.reasoning + b.reasoning, a.content + b.content};
}

bool ThinkTagParser::is_reasoning_end(std::string_view output_so_far) const {
  ThinkTagParser p(config_, initial_);
  (void)p.feed(output_so_far);
  return p.reasoning_ended();
}

}  // namespace kvasir::reasoning
