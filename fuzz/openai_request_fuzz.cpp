// libFuzzer target: an HTTP body as /v1/completions, /v1/chat/completions and /v1/responses
// receive it -> parse_json_object_body -> parse_*_request (type checks, SamplingParams, tools) ->
// validate (ranges) -> the message normalization chat templates see and the tool-choice grammar;
// the body's text also goes through the scan of grammar-forced tool calls (model output). Errors
// are fine; crashes, UB, leaks and hangs are not.
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/forced_tool_calls.h"
#include "server/openai_protocol.h"
#include "server/responses_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  auto j = kvasir::server::parse_json_object_body(body);
  if (!j.ok()) return 0;
  const kvasir::SamplingParams defaults;
  kvasir::server::CompletionRequest completion;
  if (kvasir::server::parse_completion_request(*j, defaults, &completion).ok()) {
    (void)completion.params.validate(49152, 20);
  }
  kvasir::server::ChatRequest chat;
  if (kvasir::server::parse_chat_request(*j, defaults, &chat).ok()) {
    (void)chat.params.validate(49152, 20);
    (void)kvasir::server::normalize_chat_messages_for_template(chat.messages);
    (void)kvasir::server::tool_choice_structured_output(chat.tools);
  }
  kvasir::server::ResponsesRequest responses;
  if (kvasir::server::parse_responses_request(*j, defaults, &responses).ok()) {
    (void)responses.params.validate(49152, 20);
    (void)kvasir::server::normalize_chat_messages_for_template(responses.input);
    (void)kvasir::server::tool_choice_structured_output(responses.tools);
  }
  (void)kvasir::server::parse_required_calls(body);
  return 0;
}
