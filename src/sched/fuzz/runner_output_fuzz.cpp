// libFuzzer target for the step result decoder (sched/runner_output_codec.h): what the engine's
// process of a multiprocess executor decodes from bytes model rank 0 sent. Decodes the input;
// what decodes must re-encode to exactly the input (the layout has one encoding per value).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "sched/runner_output_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto m = kvasir::decode_runner_output(data, size);
  if (!m.ok()) return 0;
  std::vector<uint8_t> again;
  kvasir::encode_runner_output(*m, again);
  if (again.size() != size || (size != 0 && std::memcmp(again.data(), data, size) != 0)) std::abort();
  return 0;
}
