#include "dist/device_communicator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/log.h"

namespace kvasir::dist {

StatusOr<std::unique_ptr<DeviceCommunicator>> DeviceCommunicator::create(const DeviceCommunicatorOptions& o,
                                                                          Communicator* bootstrap) {
  std::unique_ptr<DeviceCommunicator> c(new DeviceCommunicator());
  c->device_ = o.device;
  NcclCommunicatorOptions no;
  no.rank = o.rank;
  no.world_size = o.world_size;
  no.device = o.device;
  no.timeout_ms = o.timeout_ms;
  KVASIR_ASSIGN_OR_RETURN(c->nccl_, NcclCommunicator::create(no, bootstrap));
  const char* off = std::getenv("KVASIR_DISABLE_CUSTOM_ALL_REDUCE");
  const bool disabled = !o.custom_all_reduce || (off != nullptr && std::strcmp(off, "0") != 0 && *off != '\0');
  if (!disabled) {
    CustomAllReduceOptions co;
    co.rank = o.rank;
    co.world_size = o.world_size;
    co.device = o.device;
    co.max_bytes = o.custom_max_bytes;
    co.one_shot_max_bytes = std::min(co.one_shot_max_bytes, co.max_bytes);
    auto custom = CustomAllReduce::create(co, bootstrap);
    if (custom.ok()) {
      c->custom_ = std::move(custom).value();
    } else if (custom.status().code() == StatusCode::kInvalidArgument) {
      return custom.status();
    } else {
      // Every rank saw the same outcome (create agrees on it), so all fall back alike.
      KVASIR_LOG_WARN("rank %d: custom all-reduce unavailable, using NCCL for every collective: %s", o.rank,
                      custom.status().message().c_str());
    }
  }
  return c;
}

bool DeviceCommunicator::capturable_all_reduce(size_t bytes) const {
  return custom_ != nullptr && custom_->algorithm_for(bytes) != CustomAllReduce::Algorithm::kNone;
}

bool DeviceCommunicator::capturable_all_gather(size_t bytes_per_rank) const {
  return custom_ != nullptr && bytes_per_rank <= custom_->max_bytes();
}

Status DeviceCommunicator::all_reduce_sum(void* data, size_t count, DType dtype, cudaStream_t stream) {
  const size_t elem = reduce_element_bytes(dtype);
  if (elem == 0) return invalid_argument("device communicator: sums float32 or bf16, not " + std::string(dtype_name(dtype)));
  if (capturable_all_reduce(count * elem)) return custom_->all_reduce_sum(data, count, dtype, stream);
  return nccl_->enqueue_all_reduce_sum(data, count, dtype, stream);
}

Status DeviceCommunicator::all_gather(const void* send, void* recv, size_t bytes_per_rank, cudaStream_t stream) {
  if (capturable_all_gather(bytes_per_rank)) return custom_->all_gather(send, recv, bytes_per_rank, stream);
  return nccl_->enqueue_all_gather(send, recv, bytes_per_rank, stream);
}

}  // namespace kvasir::dist
