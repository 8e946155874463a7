// mistral: Mistral models mark calls with the [TOOL_CALLS] special token, in three generations:
//   [TOOL_CALLS] [{"name": "add", "arguments": {"a": 1}}, {...}]      v3 tokenizer (7B v0.3; Nemo
//                                                                    adds a 9-character "id")
//   [TOOL_CALLS]add{"a": 1}[TOOL_CALLS]mul{"b": 2}                    v11 (Small 3.1), as text
//   [TOOL_CALLS]add[ARGS]{"a": 1}, [TOOL_CALLS]add[CALL_ID]x[ARGS]{}   v11+/v13 control tokens
// Content may precede the first [TOOL_CALLS]. Ids are 9 alphanumerics (mistral_common refuses
// any other id when the conversation comes back); an id the model wrote is ignored, as in vLLM.
#include <memory>
#include <string>

#include "toolcall/json_scanner.h"
#include "toolcall/parsers.h"
#include "toolcall/stream_tool_parser.h"
#include "common/text_match.h"

namespace kvasir::toolcall {
namespace {

constexpr std::string_view kToolCalls = "[TOOL_CALLS]";
constexpr std::string_view kArgs = "[ARGS]";
constexpr std::string_view kCallId = "[CALL_ID]";
constexpr size_t kMaxNameBytes = 256;
constexpr size_t kMaxCallIdBytes = 64;

const JsonCallKeys kKeys{{"arguments"}, false, true, {}};

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
         c == '.';
}

constexpr ToolParserInfo kInfo{"mistral", true, true, false};

class MistralToolParser final : public StreamToolParser {
 public:
  explicit MistralToolParser(uint64_t seed) : StreamToolParser(kInfo, ToolCallIdStyle::kMistral, seed) {}

 private:
  enum class State {
    kContent, kAfterMarker,                          // [TOOL_CALLS], then '[' or a name
    kArrayItem, kArrayObject, kArrayAfter,           // the JSON array form
    kName, kAfterName, kCallId, kArgs,               // the name{args} forms
  };

  std::unique_ptr<StreamToolParser> fresh(uint64_t seed) const override {
    return std::make_unique<MistralToolParser>(seed);
  }

  void parse() override {
    while (true) {
      switch (state_) {
        case State::kContent:
          if (open_section_at({kToolCalls}) < 0) return;
          state_ = State::kAfterMarker;
          break;
        case State::kAfterMarker:
          if (!skip_spaces()) return;
          if (rest()[0] == '[') {
            consume(1);
            state_ = State::kArrayItem;
          } else if (is_name_char(rest()[0])) {
            name_.clear();
            state_ = State::kName;
          } else {
            return fail();
          }
          break;
        case State::kArrayItem:
          if (!skip_spaces()) return;
          if (rest()[0] == '{') {
            reader_.reset();
            state_ = State::kArrayObject;
          } else if (rest()[0] == ']' && section_calls() > 0) {  // after a trailing comma
            consume(1);
            close_section();
            state_ = State::kContent;
          } else {
            return fail();
          }
          break;
        case State::kArrayObject:
          if (!read_call(reader_)) return;
          state_ = State::kArrayAfter;
          break;
        case State::kArrayAfter:
          if (!skip_spaces()) return;
          if (rest()[0] == ',') {
            consume(1);
            state_ = State::kArrayItem;
          } else if (rest()[0] == ']') {
            consume(1);
            close_section();
            state_ = State::kContent;
          } else {
            return fail();
          }
          break;
        case State::kName: {
          std::string_view in = rest();
          size_t n = 0;
          while (n < in.size() && is_name_char(in[n])) ++n;
          name_.append(in.substr(0, n));
          consume(n);
          if (name_.size() > kMaxNameBytes) return fail();
          if (n == in.size()) return;  // the name may go on
          state_ = State::kAfterName;
          break;
        }
        case State::kAfterName: {
          if (!skip_spaces()) return;
          std::string_view in = rest();
          if (in[0] == '{') {
            state_ = State::kArgs;
            break;
          }
          Prefix args = match_prefix(in, kArgs, at_eof());
          Prefix id = match_prefix(in, kCallId, at_eof());
          if (args == Prefix::kFull) {
            consume(kArgs.size());
            state_ = State::kArgs;
          } else if (id == Prefix::kFull) {
            consume(kCallId.size());
            state_ = State::kCallId;
          } else if (args == Prefix::kPartial || id == Prefix::kPartial) {
            return;
          } else {
            return fail();
          }
          break;
        }
        case State::kCallId: {
          MarkerFind f = find_marker(rest(), {kArgs}, at_eof());
          consume(f.content_end);  // the model's own id: ours replaces it
          call_id_bytes_ += f.content_end;
          if (call_id_bytes_ > kMaxCallIdBytes) return fail();
          if (f.which < 0) return;
          consume(kArgs.size());
          state_ = State::kArgs;
          break;
        }
        case State::kArgs:
          if (!read_call_arguments(name_, scanner_)) return;
          end_call();
          close_section();
          call_id_bytes_ = 0;
          state_ = State::kContent;
          break;
      }
    }
  }

  State state_ = State::kContent;
  JsonCallReader reader_{&kKeys};
  JsonScanner scanner_;
  std::string name_;
  size_t call_id_bytes_ = 0;
};

}  // namespace

std::unique_ptr<ToolParser> make_mistral_tool_parser(uint64_t seed) {
  return std::make_unique<MistralToolParser>(seed);
}

}  // namespace kvasir::toolcall
