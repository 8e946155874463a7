// libFuzzer target for the tool-call parsers: model output is untrusted text. The first byte picks
// the parser, the second seeds how the text is cut into stream pieces, the rest is the output.
// Besides the sanitizers' checks it pins down the parsers' promises:
//  - parse_complete: every call has a name and arguments that parse_json reads as an object;
//    with no calls the content is the output verbatim;
//  - the stream's deltas are OpenAI-shaped (first delta per index with id and name, indexes
//    0..k-1 in order, unique ids), and reassemble to parse_complete's result unless the stream
//    reports a broken call, in which case parse_complete's calls are the stream's first ones.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "common/json.h"
#include "toolcall/tool_parser.h"

namespace {

constexpr const char* kParsers[] = {"deepseek_v3", "hermes", "llama3_json", "mistral", "pythonic"};

void check(bool ok) {
  if (!ok) __builtin_trap();
}

bool json_object(const std::string& text) {
  auto j = kvasir::parse_json(text);
  return j.ok() && j->is_object();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const char* name = kParsers[data[0] % (sizeof(kParsers) / sizeof(kParsers[0]))];
  uint64_t seed = data[1];
  std::string_view text(reinterpret_cast<const char*>(data) + 2, size - 2);

  auto parser = std::move(kvasir::make_tool_parser(name)).value();
  kvasir::ParsedToolCalls whole = parser->parse_complete(text);
  for (const kvasir::ToolCall& c : whole.tool_calls) {
    check(!c.name.empty() && !c.id.empty());
    check(json_object(c.arguments));
  }
  if (!whole.tools_called()) check(whole.content == text);

  auto stream = std::move(kvasir::make_tool_parser(name)).value();
  kvasir::ParsedToolCalls got;
  std::set<std::string> ids;
  int next_index = 0;
  auto take = [&](const kvasir::StreamDelta& d) {
    int last = -1;
    for (const kvasir::ToolCallDelta& t : d.tool_calls) {
      check(t.index > last);
      last = t.index;
      if (t.is_first()) {
        check(t.index == next_index++ && !t.name.empty() && ids.insert(t.id).second);
      } else {
        check(t.index < next_index && t.name.empty() && !t.arguments.empty());
      }
    }
    kvasir::append_delta(got, d);
  };
  size_t pos = 0;
  while (pos < text.size()) {
    size_t piece = text.size() - pos;
    if (seed != 0) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;  // LCG
      piece = std::min<size_t>(piece, 1 + (seed >> 33) % 13);
    }
    take(stream->feed(text.substr(pos, piece)));
    pos += piece;
  }
  take(stream->finish());
  check(stream->num_tool_calls() == got.tool_calls.size());

  if (!stream->stream_broken()) {
    check(got.content == whole.content);
    check(got.tool_calls.size() == whole.tool_calls.size());
  } else {
    check(got.tool_calls.size() > whole.tool_calls.size());
  }
  for (size_t i = 0; i < whole.tool_calls.size(); ++i) {
    check(got.tool_calls[i].name == whole.tool_calls[i].name);
    check(got.tool_calls[i].arguments == whole.tool_calls[i].arguments);
  }
  return 0;
}
