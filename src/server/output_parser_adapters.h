// The seam between ChatOutputParser and the parser libraries (toolcall/, reasoning/): a tool
// parser for tool_choice "auto" and a reasoning splitter, each made by its vLLM name, seen
// through the few operations the server needs. Internal to the server library; must not know
// about requests, JSON shapes or HTTP.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "server/chat_output_parser.h"

namespace kvasir::server {

class AutoToolCalls {
 public:
  virtual ~AutoToolCalls() = default;
  // Streaming: appends the content and tool-call deltas `text` completes (and what was held back
  // when `finished`).
  virtual void feed(std::string_view text, bool finished, OutputDelta* out) = 0;
  // Whole output: content (null when only calls) and calls.
  virtual void parse(std::string_view text, ParsedOutput* out) = 0;
  virtual size_t num_calls() const = 0;
  virtual bool needs_special_tokens() const = 0;
};

class ReasoningSplitter {
 public:
  virtual ~ReasoningSplitter() = default;
  // Streaming: appends the reasoning part of `text` to *reasoning and returns the content part.
  virtual std::string feed(std::string_view text, bool finished, std::string* reasoning) = 0;
  // Whole output: reasoning and content, each null when absent.
  virtual void parse(std::string_view text, std::optional<std::string>* reasoning,
                     std::optional<std::string>* content) = 0;
  virtual bool needs_special_tokens() const = 0;
};

// Unknown names are invalid_argument listing the known ones.
StatusOr<std::unique_ptr<AutoToolCalls>> make_auto_tool_calls(const std::string& name);
StatusOr<std::unique_ptr<ReasoningSplitter>> make_reasoning_splitter(const std::string& name,
                                                                      const ReasoningContext& context);

}  // namespace kvasir::server
