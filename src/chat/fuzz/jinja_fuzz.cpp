// libFuzzer entry point for the chat-template engine: parses and renders arbitrary template text
// against a small chat context with tight limits. Any crash, hang, sanitizer report or unbounded
// allocation is a bug; errors are fine. Not built by CMake. Build and run, from the repo root:
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Isrc src/chat/fuzz/jinja_fuzz.cpp \
//     $(ls src/chat/*.cpp | grep -v _test.cpp) src/common/{json,status,utf8,log}.cpp -lutf8proc -o jinja_fuzz
//   ./jinja_fuzz -max_len=4096 -timeout=5 ../shared/testdata/chat_templates
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "chat/chat_template.h"
#include "common/json.h"

namespace {

const kvasir::Json& context() {
  static const kvasir::Json ctx = [] {
    auto j = kvasir::parse_json(R"({
      "messages": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi {{ x }}"},
        {"role": "assistant", "content": "", "tool_calls": [
          {"id": "call00001", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]},
        {"role": "tool", "tool_call_id": "call00001", "content": "42"}],
      "tools": [{"type": "function", "function": {"name": "f", "description": "d",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}]
    })");
    return j.ok() ? *j : kvasir::Json::object();
  }();
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvasir::ChatTemplateOptions opts;
  opts.limits.max_template_bytes = 64 << 10;
  opts.limits.max_output_bytes = 1 << 20;
  opts.limits.max_string_bytes = 1 << 20;
  opts.limits.max_steps = 200000;
  opts.limits.max_bytes_built = 64 << 20;
  opts.limits.max_loop_iterations = 100000;
  opts.limits.max_render_seconds = 2;
  std::tm now{};
  now.tm_year = 125;
  now.tm_mday = 1;
  opts.now = now;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto tmpl = kvasir::ChatTemplate::parse(text, opts.limits);
  if (!tmpl.ok()) return 0;
  kvasir::Json extra = kvasir::Json::object();
  extra.set("bos_token", "<s>");
  extra.set("eos_token", "</s>");
  (void)tmpl->render(*context().find("messages"), *context().find("tools"), true, extra, opts);
  return 0;
}
