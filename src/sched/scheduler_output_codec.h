// The wire form of one step's input: SchedulerOutput and the step's GrammarBitmask as bytes, so
// that rank 0 can broadcast them to the worker processes of a parallel group (and a worker can
// read them back). Fixed little-endian layout, a magic and version word first; decoding checks
// every length against the bytes left, so a truncated or corrupt message is a Status, never a
// crash or a huge allocation. Knows nothing of communicators or processes.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "common/status.h"
#include "sched/grammar_bitmask.h"
#include "sched/scheduler_output.h"

namespace kvasir {

// One step as the workers receive it: the diff, and the grammar masks when the step has any.
struct StepMessage {
  SchedulerOutput scheduler_output;
  std::optional<GrammarBitmask> grammar_bitmask;
};

// Appends the encoding to `out` (cleared first); `out` keeps its capacity between steps.
void encode_step(const SchedulerOutput& so, const GrammarBitmask* bitmask, std::vector<uint8_t>& out);
StatusOr<StepMessage> decode_step(const uint8_t* data, size_t size);

}  // namespace kvasir
