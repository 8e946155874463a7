// deepseek_v3: DeepSeek V3 / R1-0528 wrap calls in their own special tokens (fullwidth bars and
// U+2581 in the names), each call naming its type, then the function, then fenced JSON:
//   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n
//   {"city": "Paris"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>...<｜tool▁call▁end｜><｜tool▁calls▁end｜>
// Content may precede the block. DeepSeek V3.1's form, name before the separator and bare JSON
// after it (<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜>), is
// read too. Missing fences, call-end or block-end tokens after a complete call are tolerated.
#include <memory>
#include <string>

#include "toolcall/json_scanner.h"
#include "toolcall/parsers.h"
#include "toolcall/stream_tool_parser.h"
#include "common/text_match.h"

namespace kvasir::toolcall {
namespace {

constexpr std::string_view kCallsBegin = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "begin\xEF\xBD\x9C>";
constexpr std::string_view kCallsEnd = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "end\xEF\xBD\x9C>";
constexpr std::string_view kCallBegin = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "begin\xEF\xBD\x9C>";
constexpr std::string_view kCallEnd = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "end\xEF\xBD\x9C>";
constexpr std::string_view kSep = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "sep\xEF\xBD\x9C>";
constexpr std::string_view kFence = "```";
constexpr size_t kMaxNameBytes = 256;

std::string_view trim(std::string_view s) {
  s.remove_prefix(count_spaces(s));
  return s.substr(0, trim_end(s));
}

constexpr ToolParserInfo kInfo{"deepseek_v3", true, true, false};

class DeepSeekV3ToolParser final : public StreamToolParser {
 public:
  explicit DeepSeekV3ToolParser(uint64_t seed) : StreamToolParser(kInfo, ToolCallIdStyle::kOpenAI, seed) {}

 private:
  enum class State {
    kContent,
    kBetween,    // inside the block, between calls
    kType,       // after call-begin: "function" (V3) or the name (V3.1), up to the separator
    kName,       // after the separator: the name up to "\n" (V3) or '{' (V3.1)
    kFence,      // "```json" before the arguments
    kFenceLang,  // the fence's language tag
    kArgs,       // whitespace, then the arguments object
    kAfterArgs,  // closing fence, then call-end
    kCallEnd,
  };

  std::unique_ptr<StreamToolParser> fresh(uint64_t seed) const override {
    return std::make_unique<DeepSeekV3ToolParser>(seed);
  }

  // Reads text up to `stop` into *into (bounded); true once `stop` was consumed.
  bool read_until(std::string_view stop, std::string* into, bool* failed) {
    MarkerFind f = find_marker(rest(), {stop}, at_eof());
    into->append(rest().substr(0, f.content_end));
    consume(f.content_end);
    if (into->size() > kMaxNameBytes || (f.which < 0 && at_eof())) *failed = true;
    if (f.which < 0 || *failed) return false;
    consume(stop.size());
    return true;
  }

  // After a complete call, text that is not the format's next token ends the block (lenient).
  void end_block_leniently() {
    close_section();
    state_ = State::kContent;
  }

  void parse() override {
    bool failed = false;
    while (true) {
      switch (state_) {
        case State::kContent: {
          int which = open_section_at({kCallsBegin, kCallBegin});
          if (which < 0) return;
          type_.clear();
          state_ = which == 0 ? State::kBetween : State::kType;
          break;
        }
        case State::kBetween: {
          if (!skip_spaces()) return;
          std::string_view in = rest();
          Prefix call = match_prefix(in, kCallBegin, at_eof());
          Prefix end = match_prefix(in, kCallsEnd, at_eof());
          if (call == Prefix::kFull) {
            consume(kCallBegin.size());
            type_.clear();
            state_ = State::kType;
          } else if (end == Prefix::kFull) {
            consume(kCallsEnd.size());
            close_section();
            state_ = State::kContent;
          } else if (call == Prefix::kPartial || end == Prefix::kPartial) {
            return;
          } else if (section_calls() > 0) {
            end_block_leniently();
          } else {
            return fail();
          }
          break;
        }
        case State::kType:
          if (!read_until(kSep, &type_, &failed)) {
            if (failed) return fail();
            return;
          }
          name_.clear();
          state_ = State::kName;
          break;
        case State::kName: {
          std::string_view in = rest();
          if (name_.empty() && count_spaces(in) == in.size() && !at_eof()) return;
          if (trim(name_).empty() && !in.empty() && in[count_spaces(in)] == '{') {
            // V3.1: the name came before the separator and the arguments follow it directly.
            name_ = std::string(trim(type_));
            skip_spaces();
            if (name_.empty() || name_.find('\n') != std::string::npos) return fail();
            state_ = State::kArgs;
            break;
          }
          if (!read_until("\n", &name_, &failed)) {
            if (failed) return fail();
            return;
          }
          name_ = std::string(trim(name_));
          if (name_.empty()) return fail();
          state_ = State::kFence;
          break;
        }
        case State::kFence: {
          if (!skip_spaces()) return;
          std::string_view in = rest();
          if (in[0] == '{') {  // no fence: tolerated
            state_ = State::kArgs;
            break;
          }
          Prefix p = match_prefix(in, kFence, at_eof());
          if (p == Prefix::kPartial) return;
          if (p == Prefix::kNo) return fail();
          consume(kFence.size());
          state_ = State::kFenceLang;
          break;
        }
        case State::kFenceLang: {
          std::string_view in = rest();
          size_t n = 0;
          while (n < in.size() && n < 16 && ((in[n] >= 'a' && in[n] <= 'z') || (in[n] >= 'A' && in[n] <= 'Z'))) ++n;
          if (n == in.size() && !at_eof()) return;  // "json" may still be arriving
          consume(n);
          state_ = State::kArgs;
          break;
        }
        case State::kArgs:
          if (!read_call_arguments(name_, scanner_)) return;
          end_call();
          state_ = State::kAfterArgs;
          break;
        case State::kAfterArgs: {
          if (!skip_spaces()) return;
          std::string_view in = rest();
          Prefix p = match_prefix(in, kFence, at_eof());
          if (p == Prefix::kPartial) return;
          if (p == Prefix::kFull) consume(kFence.size());
          state_ = State::kCallEnd;
          break;
        }
        case State::kCallEnd: {
          if (!skip_spaces()) return;
          std::string_view in = rest();
          Prefix p = match_prefix(in, kCallEnd, at_eof());
          if (p == Prefix::kPartial) return;
          if (p == Prefix::kFull) {
            consume(kCallEnd.size());
            state_ = State::kBetween;
          } else {
            end_block_leniently();
          }
          break;
        }
      }
    }
  }

  State state_ = State::kContent;
  JsonScanner scanner_;
  std::string type_;
  std::string name_;
};

}  // namespace

std::unique_ptr<ToolParser> make_deepseek_v3_tool_parser(uint64_t seed) {
  return std::make_unique<DeepSeekV3ToolParser>(seed);
}

}  // namespace kvasir::toolcall
