// libFuzzer target for the reasoning parsers: model output is untrusted text. The first byte picks
// the parser and its options (enable_thinking, how the prompt ends), the second seeds how the
// text is cut into stream pieces, the rest is the output. Pins down: streaming any split gives
// parse_complete's result; reasoning_ended() after the stream agrees with is_reasoning_end();
// the content is a suffix of the output and the reasoning a piece of it (nothing invented).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "reasoning/reasoning_parser.h"

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  static constexpr const char* kPrompts[] = {"", "<|im_start|>assistant\n<think>\n",
                                             "<|im_start|>assistant\n<think>\n\n</think>\n\n"};
  const char* name = (data[0] & 1) ? "qwen3" : "deepseek_r1";
  kvasir::ReasoningParserOptions options;
  options.enable_thinking = (data[0] & 2) == 0;
  options.prompt = kPrompts[(data[0] >> 2) % 3];
  uint64_t seed = data[1];
  std::string_view text(reinterpret_cast<const char*>(data) + 2, size - 2);

  auto parser = std::move(kvasir::make_reasoning_parser(name, options)).value();
  kvasir::ReasoningResult whole = parser->parse_complete(text);
  check(whole.content.size() <= text.size() && text.substr(text.size() - whole.content.size()) == whole.content);
  check(text.find(whole.reasoning) != std::string_view::npos);

  kvasir::ReasoningResult got;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t piece = text.size() - pos;
    if (seed != 0) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;  // LCG
      piece = std::min<size_t>(piece, 1 + (seed >> 33) % 11);
    }
    kvasir::ReasoningDelta d = parser->feed(text.substr(pos, piece));
    pos += piece;
    if (!d.content.empty()) check(parser->reasoning_ended());
    got.reasoning += d.reasoning;
    got.content += d.content;
  }
  check(parser->reasoning_ended() == parser->is_reasoning_end(text));
  kvasir::ReasoningDelta d = parser->finish();
  got.reasoning += d.reasoning;
  got.content += d.content;
  check(got.reasoning == whole.reasoning && got.content == whole.content);
  return 0;
}
