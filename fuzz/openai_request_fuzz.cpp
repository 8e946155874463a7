// libFuzzer target: an HTTP body as /v1/completions and /v1/chat/completions receive it ->
// parse_json_object_body -> parse_*_request (type checks, SamplingParams) -> validate (ranges)
// -> the message normalization chat templates see. Errors are fine; crashes, UB, leaks and
// hangs are not.
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/openai_protocol.h"

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
  }
  return 0;
}
