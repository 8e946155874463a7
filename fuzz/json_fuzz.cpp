// libFuzzer target: the strict JSON parser (HTTP bodies, config files, safetensors headers) on
// arbitrary bytes; whatever parses must serialize and parse back to the same value.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto j = kvasir::parse_json(text);
  if (!j.ok()) return 0;
  auto again = kvasir::parse_json(j->dump());
  if (!again.ok() || !(*again == *j)) std::abort();
  return 0;
}
