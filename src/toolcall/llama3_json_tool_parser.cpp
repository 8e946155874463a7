// llama3_json: Llama 3.1-3.3 (and Llama 4 with the JSON template) call tools by answering with
// JSON objects, optionally after <|python_tag|>, several separated by ';':
//   {"name": "get_weather", "parameters": {"city": "Paris"}}
//   <|python_tag|>{"name": "f", "parameters": {...}}; {"name": "g", "arguments": {...}}
// As in vLLM's streaming path the calls must open the output; anything else is content. Keys are
// checked strictly (name, parameters or arguments, and "type"), so a plain JSON answer such as
// {"answer": 42} is recognised as content at its first key instead of being held to the end.
#include <memory>

#include "toolcall/parsers.h"
#include "toolcall/stream_tool_parser.h"

namespace kvasir::toolcall {
namespace {

constexpr std::string_view kPythonTag = "<|python_tag|>";

const JsonCallKeys kKeys{{"parameters", "arguments"}, true, false, {"type"}};

constexpr ToolParserInfo kInfo{"llama3_json", false, true, false};

class Llama3JsonToolParser final : public StreamToolParser {
 public:
  explicit Llama3JsonToolParser(uint64_t seed) : StreamToolParser(kInfo, ToolCallIdStyle::kOpenAI, seed) {}

 private:
  enum class State { kStart, kObjectStart, kObject, kAfterObject, kTrailing };

  std::unique_ptr<StreamToolParser> fresh(uint64_t seed) const override {
    return std::make_unique<Llama3JsonToolParser>(seed);
  }

  void parse() override {
    while (true) {
      switch (state_) {
        case State::kStart:
          if (!open_leading_section(kPythonTag, '{')) return;
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
        case State::kAfterObject:
          if (!skip_spaces()) return;
          if (rest()[0] == ';') {
            consume(1);
            state_ = State::kObjectStart;
          } else if (rest()[0] == '{') {  // objects one after another, without ';'
            reader_.reset();
            state_ = State::kObject;
          } else {
            close_section();
            state_ = State::kTrailing;
          }
          break;
        case State::kTrailing:
          emit_content(rest().size());
          return;
      }
    }
  }

  State state_ = State::kStart;
  JsonCallReader reader_{&kKeys};
};

}  // namespace

std::unique_ptr<ToolParser> make_llama3_json_tool_parser(uint64_t seed) {
  return std::make_unique<Llama3JsonToolParser>(seed);
}

}  // namespace kvasir::toolcall
