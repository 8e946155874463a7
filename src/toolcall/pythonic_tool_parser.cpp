// pythonic: Llama 3.2, Llama 4 and ToolACE-style models answer a tool call with a Python list of
// calls taking keyword arguments, optionally inside Llama 4's <|python_start|> ... <|python_end|>:
//   [get_weather(city='San Francisco', unit="celsius"), get_time(tz='PST')]
// Argument values are Python literals (python_literal.h), converted to a JSON object with
// json.dumps's spacing, {"city": "San Francisco", "unit": "celsius"}, streamed one keyword
// argument at a time (a call starts once its first argument, or its ')', is complete). As in
// vLLM, the list must open the output, otherwise all of it is content; text after it is content.
#include <memory>
#include <set>
#include <string>

#include "toolcall/parsers.h"
#include "toolcall/python_literal.h"
#include "toolcall/stream_tool_parser.h"
#include "common/text_match.h"

namespace kvasir::toolcall {
namespace {

constexpr std::string_view kPythonStart = "<|python_start|>";
constexpr std::string_view kPythonEnd = "<|python_end|>";
constexpr size_t kMaxNameBytes = 256;

bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_ident(char c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }

constexpr ToolParserInfo kInfo{"pythonic", false, false, false};

class PythonicToolParser final : public StreamToolParser {
 public:
  explicit PythonicToolParser(uint64_t seed) : StreamToolParser(kInfo, ToolCallIdStyle::kOpenAI, seed) {}

 private:
  enum class State {
    kStart, kListOpen, kCallName, kAfterName, kArgName, kAfterArgName, kArgValue, kAfterArg,
    kAfterCall, kAfterList, kTrailing,
  };
  enum class Ident { kWait, kNone, kRead };

  std::unique_ptr<StreamToolParser> fresh(uint64_t seed) const override {
    return std::make_unique<PythonicToolParser>(seed);
  }

  // Reads an identifier at the cursor once it is known to be complete.
  Ident read_ident(std::string* into) {
    std::string_view in = rest();
    if (in.empty() || !is_ident_start(in[0])) return Ident::kNone;
    size_t n = 1;
    while (n < in.size() && is_ident(in[n])) ++n;
    if (n > kMaxNameBytes) return Ident::kNone;
    if (n == in.size() && !at_eof()) return Ident::kWait;
    into->assign(in.substr(0, n));
    consume(n);
    return Ident::kRead;
  }

  // The call's JSON so far gets one more member (the call starts with its first one).
  bool add_argument(const Json& value) {
    if (!arg_names_.insert(arg_name_).second) return false;  // Python refuses repeated keywords
    std::string piece = call_begun_ ? ", " : "{";
    json_escape_to(piece, arg_name_);
    piece += ": ";
    Json::DumpOptions py;  // json.dumps(..., ensure_ascii=False) spacing, as vLLM's output
    py.item_sep = ", ";
    py.key_sep = ": ";
    piece += value.dump(py);
    if (!call_begun_) begin_call(name_);
    call_begun_ = true;
    call_arguments(piece);
    return true;
  }

  void close_call() {
    consume(1);  // ')'
    if (!call_begun_) begin_call(name_);
    call_arguments(call_begun_ ? "}" : "{}");
    end_call();
    call_begun_ = false;
    state_ = State::kAfterCall;
  }

  void parse() override {
    while (true) {
      switch (state_) {
        case State::kStart:
          if (!open_leading_section(kPythonStart, '[')) return;
          state_ = State::kListOpen;
          break;
        case State::kListOpen:
          if (!expect('[')) return;
          consume(1);
          state_ = State::kCallName;
          break;
        case State::kCallName: {
          if (!skip_spaces()) return;
          if (rest()[0] == ']' && section_calls() > 0) {  // after a trailing comma
            consume(1);
            close_section();
            state_ = State::kAfterList;
            break;
          }
          Ident r = read_ident(&name_);
          if (r == Ident::kWait) return;
          if (r == Ident::kNone) return fail();
          state_ = State::kAfterName;
          break;
        }
        case State::kAfterName:
          if (!expect('(')) return;
          consume(1);
          arg_names_.clear();
          state_ = State::kArgName;
          break;
        case State::kArgName: {
          if (!skip_spaces()) return;
          if (rest()[0] == ')') {
            close_call();
            break;
          }
          Ident r = read_ident(&arg_name_);
          if (r == Ident::kWait) return;
          if (r == Ident::kNone) return fail();  // positional arguments have no JSON name
          state_ = State::kAfterArgName;
          break;
        }
        case State::kAfterArgName:
          if (!expect('=')) return;
          consume(1);
          value_.clear();
          end_ = PyLiteralEnd();
          state_ = State::kArgValue;
          break;
        case State::kArgValue: {
          if (value_.empty()) skip_spaces();
          size_t n = 0;
          PyLiteralEnd::State s = end_.scan(rest(), at_eof(), &n);
          value_.append(rest().substr(0, n));
          consume(n);
          if (s == PyLiteralEnd::State::kError) return fail();
          if (s == PyLiteralEnd::State::kMore) return;
          auto v = parse_python_literal(value_);
          if (!v.ok() || !add_argument(*v)) return fail();
          state_ = State::kAfterArg;
          break;
        }
        case State::kAfterArg:
          if (!skip_spaces()) return;
          if (rest()[0] == ',') {
            consume(1);
            state_ = State::kArgName;
          } else if (rest()[0] == ')') {
            close_call();
          } else {
            return fail();
          }
          break;
        case State::kAfterCall:
          if (!skip_spaces()) return;
          if (rest()[0] == ',') {
            consume(1);
            state_ = State::kCallName;
          } else if (rest()[0] == ']') {
            consume(1);
            close_section();
            state_ = State::kAfterList;
          } else {
            return fail();
          }
          break;
        case State::kAfterList: {
          emit_content(count_spaces(rest()));  // dropped: whitespace after calls
          std::string_view in = rest();
          if (in.empty()) return;
          Prefix p = match_prefix(in, kPythonEnd, at_eof());
          if (p == Prefix::kPartial) return;
          if (p == Prefix::kFull) consume(kPythonEnd.size());
          state_ = State::kTrailing;
          break;
        }
        case State::kTrailing:
          emit_content(rest().size());
          return;
      }
    }
  }

  State state_ = State::kStart;
  std::string name_;
  std::string arg_name_;
  std::set<std::string> arg_names_;
  std::string value_;  // the current argument's Python text
  PyLiteralEnd end_;
  bool call_begun_ = false;  // the current call has begun (its first argument was complete)
};

}  // namespace

std::unique_ptr<ToolParser> make_pythonic_tool_parser(uint64_t seed) {
  return std::make_unique<PythonicToolParser>(seed);
}

}  // namespace kvasir::toolcall
