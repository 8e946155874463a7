// hermes: Hermes 2 Pro, Qwen2.5 and Qwen3 (and models trained on their template) write each call
// as a JSON object in a <tool_call> block, anywhere in the text:
//   Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>
// Text before, between and after blocks is content. Like vLLM, a block the output ends inside is
// still a call when its object is complete; two objects in one block are two calls; a call
// without "arguments" gets {}.
#include <algorithm>
#include <memory>

#include "toolcall/parsers.h"
#include "toolcall/stream_tool_parser.h"
#include "common/text_match.h"

namespace kvasir::toolcall {
namespace {

constexpr std::string_view kStart = "<tool_call>";
constexpr std::string_view kEnd = "</tool_call>";

const JsonCallKeys kKeys{{"arguments", "parameters"}, false, true, {}};

// Some Hermes-format models mark <tool_call> special; skipping it would hide every call (vLLM keeps
// special tokens for hermes too).
constexpr ToolParserInfo kInfo{"hermes", true, true, false};

class HermesToolParser final : public StreamToolParser {
 public:
  explicit HermesToolParser(uint64_t seed) : StreamToolParser(kInfo, ToolCallIdStyle::kOpenAI, seed) {}

 private:
  enum class State { kContent, kObjectStart, kObject, kAfterObject };

  std::unique_ptr<StreamToolParser> fresh(uint64_t seed) const override {
    return std::make_unique<HermesToolParser>(seed);
  }

  void parse() override {
    while (true) {
      switch (state_) {
        case State::kContent:
          if (open_section_at({kStart}) < 0) return;
          state_ = State::kObjectStart;
          break;
        case State::kObjectStart:
          if (!expect('{')) return;
          reader_.reset();
          state_ = State::kObject;
          break;
        case State::kObject:
          if (!read_call(reader_)) return;
          state_ = State::kAfterObject;
          break;
        case State::kAfterObject: {
          if (!skip_spaces()) return;  // at the end finish() closes the block
          std::string_view in = rest();
          Prefix p = match_prefix(in, kEnd, at_eof());
          if (p == Prefix::kPartial) return;
          if (p == Prefix::kFull || (at_eof() && kEnd.substr(0, in.size()) == in)) {
            consume(std::min(in.size(), kEnd.size()));  // a close tag cut off by the end counts
          } else if (in[0] == '{') {
            reader_.reset();
            state_ = State::kObject;
            break;
          }
          // Anything else ends the block without its close tag (lenient, as vLLM is).
          close_section();
          state_ = State::kContent;
          break;
        }
      }
    }
  }

  State state_ = State::kContent;
  JsonCallReader reader_{&kKeys};
};

}  // namespace

std::unique_ptr<ToolParser> make_hermes_tool_parser(uint64_t seed) {
  return std::make_unique<HermesToolParser>(seed);
}

}  // namespace kvasir::toolcall
