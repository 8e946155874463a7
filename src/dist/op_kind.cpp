#include "dist/op_kind.h"

namespace kvasir::dist {

const char* op_kind_name(uint32_t kind) {
  switch (static_cast<OpKind>(kind)) {
    case OpKind::kAllReduce: return "all_reduce_sum";
    case OpKind::kAllGather: return "all_gather";
    case OpKind::kReduceScatter: return "reduce_scatter_sum";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kBarrier: return "barrier";
    case OpKind::kSend: return "send";
  }
  return "an unknown op";
}

}  // namespace kvasir::dist
