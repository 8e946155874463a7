// libFuzzer target: request JSON -> SamplingParams (server/sampling_json: type checks) -> the
// engine's RequestValidator (ranges, vocabulary bounds, max_model_len), the path every HTTP and
// JSONL request takes before it reaches the engine.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/request_validator.h"
#include "server/sampling_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const kvasir::RequestValidator validator(kvasir::RequestLimits{49152, 8192, 20});
  static const std::vector<int32_t> prompt = {1, 2, 3};
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto j = kvasir::parse_json(text);
  if (!j.ok()) return 0;
  for (bool chat : {false, true}) {
    kvasir::SamplingParams p;
    if (kvasir::apply_sampling_json(*j, &p, chat).ok()) (void)validator.check(prompt, p);
  }
  return 0;
}
