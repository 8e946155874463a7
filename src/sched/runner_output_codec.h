// The wire form of one step's result: ModelRunnerOutput as bytes, so that model rank 0 of a
// multiprocess executor (--distributed-executor-backend mp) can send it back to the process that
// runs the engine. Same layout rules as the step codec (sched/scheduler_output_codec.h): fixed
// little-endian fields (sched/wire_io.h), a magic and version word first, every length checked on
// decode, so a truncated or corrupt message is a Status, never a crash or a huge allocation.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "sched/scheduler_output.h"

namespace kvasir {

// Writes the encoding to `out` (cleared first); `out` keeps its capacity between steps.
void encode_runner_output(const ModelRunnerOutput& output, std::vector<uint8_t>& out);
StatusOr<ModelRunnerOutput> decode_runner_output(const uint8_t* data, size_t size);

}  // namespace kvasir
