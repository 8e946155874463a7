// The collectives by number, as ranks state them to each other (the shm round tag, the TCP frame
// header) so that ranks in different collectives fail with a message naming both.
#pragma once

#include <cstdint>

namespace kvasir::dist {

enum class OpKind : uint32_t {
  kAllReduce = 1,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kBarrier,
  kSend,
};

const char* op_kind_name(uint32_t kind);

}  // namespace kvasir::dist
