// Tool-call ids for the calls a parser finds. Models do not write usable ids, so the server makes
// them: OpenAI's shape ("call_" + 24 alphanumerics) or Mistral's (exactly 9 alphanumerics, which
// its chat template refuses otherwise). Each parser owns a generator seeded once from the OS, so
// there is no global state and ids do not repeat across requests.
#pragma once

#include <cstdint>
#include <string>

namespace kvasir::toolcall {

enum class ToolCallIdStyle { kOpenAI, kMistral };

class ToolCallIdGenerator {
 public:
  ToolCallIdGenerator(ToolCallIdStyle style, uint64_t seed) : style_(style), state_(seed) {}
  std::string next();
  uint64_t next_u64();  // splitmix64
  ToolCallIdStyle style() const { return style_; }

 private:
  ToolCallIdStyle style_;
  uint64_t state_;
};

uint64_t random_seed();  // from std::random_device

}  // namespace kvasir::toolcall
