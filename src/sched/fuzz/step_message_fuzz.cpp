// libFuzzer target for the step message decoder (sched/scheduler_output_codec.h): what a
// tensor-parallel worker decodes from bytes rank 0 broadcast (over TCP between hosts). Decodes
// the input; what decodes must re-encode to bytes that decode and re-encode to themselves (the
// first re-encoding may differ from the input only in the order of num_scheduled_tokens, which
// encode sorts).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "sched/scheduler_output_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto m = kvasir::decode_step(data, size);
  if (!m.ok()) return 0;
  std::vector<uint8_t> again;
  kvasir::encode_step(m->scheduler_output, m->grammar_bitmask ? &*m->grammar_bitmask : nullptr, again);
  auto m2 = kvasir::decode_step(again.data(), again.size());
  if (!m2.ok()) std::abort();
  std::vector<uint8_t> third;
  kvasir::encode_step(m2->scheduler_output, m2->grammar_bitmask ? &*m2->grammar_bitmask : nullptr, third);
  if (third != again) std::abort();
  return 0;
}
