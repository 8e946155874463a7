// Tool-call parsers (vLLM's `--tool-call-parser NAME`): a model's raw output text -> OpenAI's
// `content` + `tool_calls`, all at once (parse_complete) or as the text streams (feed/finish,
// deltas shaped as OpenAI streams them). Pure text in, plain data out: no engine, tokenizer or
// server types, no I/O; malformed model output never fails, it is content.
//
// Streaming contract (per request: one parser object, fed in order, then finish() once):
//  - text that could still be the start of a tool-call marker is held back until it is decided;
//  - whitespace next to a tool call is not content (except what separates text before a call from
//    text after it); content is otherwise verbatim: an output without calls comes back byte for
//    byte;
//  - a call's first delta carries index, id, type "function" and function {name, arguments}
//    (arguments "" or its first piece); later deltas carry index and an arguments piece only;
//    indexes count 0, 1, ... in order; the pieces of a call concatenate to its arguments text;
//  - content and arguments pieces never end inside a UTF-8 character.
// Arguments are the model's own JSON text for the arguments object (validated as strict JSON as it
// streams; pythonic calls are converted, Python's json.dumps spacing), so streamed and complete
// results are byte-identical.
//
// When the text breaks a format's syntax before a call of that tool-call section began, the
// section's text and everything after it (later markers included) are content, in both modes.
// One divergence is unavoidable: a call whose arguments turn out malformed after they began to
// stream (or that generation cuts off) cannot be taken back from a stream. The stream then ends
// that call where the valid text ends and passes the rest through as content (stream_broken()
// says so); parse_complete instead returns that whole tool-call section and all that follows as
// content, as vLLM does when its parsers fail.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/status.h"

namespace kvasir {

// One complete call, as in a non-streaming chat.completion message's `tool_calls`.
struct ToolCall {
  std::string id;         // "call_" + 24 alphanumerics (mistral: 9 alphanumerics, its format)
  std::string name;
  std::string arguments;  // JSON text of the arguments object, e.g. {"city": "Paris"}
  Json to_json() const;   // {"id", "type": "function", "function": {"name", "arguments"}}
};

struct ParsedToolCalls {
  std::string content;              // text outside tool calls ("" when there is none)
  std::vector<ToolCall> tool_calls;
  bool tools_called() const { return !tool_calls.empty(); }
};

// One element of a streamed chunk's `delta.tool_calls`.
struct ToolCallDelta {
  int index = 0;
  std::string id;         // set on a call's first delta only (then name is set too)
  std::string name;
  std::string arguments;  // a piece of the arguments text, possibly ""
  bool is_first() const { return !id.empty(); }
  // First delta: {"index", "id", "type": "function", "function": {"name", "arguments"}};
  // later ones: {"index", "function": {"arguments"}}.
  Json to_json() const;
};

// What one feed()/finish() produced. A delta's content came before its tool calls (text that
// follows a call within one feed is held for the next delta), so send the content first. Only the
// last delta, from finish(), may carry content that came after its calls.
struct StreamDelta {
  std::string content;
  std::vector<ToolCallDelta> tool_calls;  // at most one entry per index, in index order
  bool empty() const { return content.empty() && tool_calls.empty(); }
};

// Folds a streamed delta into an accumulated result (what a client reassembles).
void append_delta(ParsedToolCalls& acc, const StreamDelta& delta);

// Static facts a caller needs to use a parser.
struct ToolParserInfo {
  std::string_view name;
  // Text may come before the first call. When false a call must open the output (optionally after
  // whitespace and the format's start token); anything else makes the whole output content.
  bool content_before_calls = true;
  // The format's markers are special tokens in the model's vocabulary: detokenize with
  // skip_special_tokens = false or the parser never sees them (vLLM's adjust_request does this).
  bool needs_special_tokens = false;
  // What the parser reads from the request besides the text: none of ours reads anything (not
  // the tool list, not tool_choice); kept so a caller does not have to assume.
  bool needs_request_tools = false;
};

class ToolParser {
 public:
  virtual ~ToolParser() = default;
  virtual const ToolParserInfo& info() const = 0;

  // Streaming. Feed each newly generated piece of text (any split, even inside a UTF-8 character
  // or a marker), then call finish() once when generation ends; feed() after finish() aborts.
  virtual StreamDelta feed(std::string_view delta) = 0;
  virtual StreamDelta finish() = 0;
  // Calls started so far in the stream (a chat completion's finish_reason becomes "tool_calls"
  // when this is > 0 and generation stopped normally).
  virtual size_t num_tool_calls() const = 0;
  // A call that had begun streaming turned out malformed or was cut off (see the top comment).
  virtual bool stream_broken() const = 0;

  // The whole output at once. Runs on a fresh state: it neither reads nor changes the stream's.
  virtual ParsedToolCalls parse_complete(std::string_view model_output) = 0;
};

// `name`: hermes, llama3_json (alias llama4_json), mistral, pythonic, deepseek_v3. An unknown name
// is invalid_argument listing the supported ones.
StatusOr<std::unique_ptr<ToolParser>> make_tool_parser(std::string_view name);
// The names make_tool_parser takes, aliases included, sorted.
std::vector<std::string> tool_parser_names();

}  // namespace kvasir
