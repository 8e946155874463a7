// libFuzzer target: request JSON -> SamplingParams (type checks) -> validate (range checks), the
// path every HTTP and JSONL request takes before it reaches the engine.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/sampling_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto j = kvasir::parse_json(text);
  if (!j.ok()) return 0;
  for (bool chat : {false, true}) {
    kvasir::SamplingParams p;
    if (kvasir::apply_sampling_json(*j, &p, chat).ok()) (void)p.validate(49152, 20);
  }
  return 0;
}
