#include "dist/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>

namespace kvasir::dist {

struct NcclState {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  void* barrier_word = nullptr;  // one float on the device: a barrier is an all-reduce of it
  int device = 0;
  bool aborted = false;
};

namespace {

Status nccl_error(const std::string& what, ncclResult_t r) {
  return unavailable("nccl communicator: " + what + ": " + ncclGetErrorString(r));
}
Status cuda_error(const std::string& what, cudaError_t e) {
  return unavailable("nccl communicator: " + what + ": " + cudaGetErrorString(e));
}

// Waits until the communicator has finished its pending NCCL call (non-blocking mode returns
// ncclInProgress) or fails: an asynchronous NCCL error, or the deadline.
Status wait_comm(NcclState& st, const char* op, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(st.comm, &async);
    if (r != ncclSuccess) return nccl_error(std::string(op) + ": querying the communicator", r);
    if (async == ncclSuccess) return Status();
    if (async != ncclInProgress) return nccl_error(op, async);
    if (std::chrono::steady_clock::now() > deadline) return unavailable(std::string("nccl communicator: ") + op + " timed out");
    usleep(100);
  }
}

ncclDataType_t nccl_type(DType dtype) { return dtype == DType::kBF16 ? ncclBfloat16 : ncclFloat32; }

}  // namespace

StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create(const NcclCommunicatorOptions& o,
                                                                      Communicator* bootstrap) {
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size)
    return invalid_argument("nccl communicator: rank " + std::to_string(o.rank) + " of world size " +
                            std::to_string(o.world_size) + " is not a rank");
  if (o.timeout_ms <= 0) return invalid_argument("nccl communicator: timeout_ms must be positive");
  if (o.world_size > 1 && (bootstrap == nullptr || bootstrap->world_size() != o.world_size ||
                           bootstrap->rank() != o.rank))
    return invalid_argument("nccl communicator: a world size above 1 needs a CPU bootstrap communicator of the "
                            "same ranks");
  int num_devices = 0;
  cudaError_t e = cudaGetDeviceCount(&num_devices);
  if (e != cudaSuccess) return cuda_error("no CUDA device", e);
  if (o.device < 0 || o.device >= num_devices)
    return invalid_argument("nccl communicator: device " + std::to_string(o.device) + " is not one of the " +
                            std::to_string(num_devices) + " CUDA devices");
  // Before NCCL reads its environment: NVLink multicast must stay off on these machines.
  setenv("NCCL_NVLS_ENABLE", "0", 1);

  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (o.rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return nccl_error("ncclGetUniqueId", r);
  }
  if (o.world_size > 1) {
    Status s = bootstrap->broadcast(&id, sizeof(id), 0);
    if (!s.ok()) return unavailable("nccl communicator: sending the NCCL id: " + s.message());
  }
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator());
  c->rank_ = o.rank;
  c->world_size_ = o.world_size;
  c->timeout_ms_ = o.timeout_ms;
  c->state_ = std::make_unique<NcclState>();
  NcclState& st = *c->state_;
  st.device = o.device;
  if ((e = cudaSetDevice(o.device)) != cudaSuccess) return cuda_error("cudaSetDevice", e);
  if ((e = cudaStreamCreateWithFlags(&st.stream, cudaStreamNonBlocking)) != cudaSuccess)
    return cuda_error("cudaStreamCreate", e);
  if ((e = cudaMalloc(&st.barrier_word, sizeof(float))) != cudaSuccess) return cuda_error("cudaMalloc", e);
  if ((e = cudaMemset(st.barrier_word, 0, sizeof(float))) != cudaSuccess) return cuda_error("cudaMemset", e);
  // Non-blocking: initialization that waits for a rank that never comes can time out and abort.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&st.comm, o.world_size, id, o.rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) return nccl_error("ncclCommInitRankConfig", r);
  Status s = wait_comm(st, "initialization",
                       std::chrono::steady_clock::now() + std::chrono::milliseconds(o.timeout_ms));
  if (!s.ok()) {
    ncclCommAbort(st.comm);
    st.aborted = true;
    return s;
  }
  return c;
}

NcclCommunicator::~NcclCommunicator() {
  if (!state_) return;
  cudaSetDevice(state_->device);
  if (state_->comm != nullptr) {
    if (state_->aborted) {
      // ncclCommAbort already freed it.
    } else if (sticky_.ok() && ncclCommFinalize(state_->comm) != ncclInternalError &&
               wait_comm(*state_, "finalize",
                         std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms_)).ok()) {
      ncclCommDestroy(state_->comm);
    } else {
      ncclCommAbort(state_->comm);
    }
  }
  if (state_->barrier_word != nullptr) cudaFree(state_->barrier_word);
  if (state_->stream != nullptr) cudaStreamDestroy(state_->stream);
}

Status NcclCommunicator::begin_op() {
  if (!sticky_.ok()) return sticky_;
  cudaError_t e = cudaSetDevice(state_->device);
  return e == cudaSuccess ? Status() : cuda_error("cudaSetDevice", e);
}

Status NcclCommunicator::run_op(const char* op, int enqueue_result) {
  const auto r = static_cast<ncclResult_t>(enqueue_result);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms_);
  Status s = (r == ncclSuccess || r == ncclInProgress) ? wait_comm(*state_, op, deadline) : nccl_error(op, r);
  while (s.ok()) {
    const cudaError_t e = cudaStreamQuery(state_->stream);
    if (e == cudaSuccess) return Status();
    if (e != cudaErrorNotReady) {
      s = cuda_error(std::string(op) + ": the stream failed", e);
      break;
    }
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(state_->comm, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      s = nccl_error(std::string(op) + " (a peer failed or went away)", async);
    } else if (std::chrono::steady_clock::now() > deadline) {
      s = unavailable("nccl communicator: " + std::string(op) + " on rank " + std::to_string(rank_) +
                      " timed out after " + std::to_string(timeout_ms_) + " ms");
    } else {
      usleep(20);
    }
  }
  sticky_ = s;
  // Abort frees the communicator and makes its kernels return, so the stream drains.
  ncclCommAbort(state_->comm);
  state_->aborted = true;
  return s;
}

Status NcclCommunicator::all_reduce_sum(void* data, size_t count, DType dtype) {
  if (reduce_element_bytes(dtype) == 0)
    return invalid_argument("nccl communicator: all_reduce_sum sums float32 or bf16, not " +
                            std::string(dtype_name(dtype)));
  Status s = begin_op();
  if (!s.ok()) return s;
  return run_op("all_reduce_sum",
                ncclAllReduce(data, data, count, nccl_type(dtype), ncclSum, state_->comm, state_->stream));
}

Status NcclCommunicator::all_gather(const void* send, void* recv, size_t bytes_per_rank) {
  Status s = begin_op();
  if (!s.ok()) return s;
  return run_op("all_gather", ncclAllGather(send, recv, bytes_per_rank, ncclUint8, state_->comm, state_->stream));
}

Status NcclCommunicator::reduce_scatter_sum(const void* send, void* recv, size_t count_per_rank, DType dtype) {
  if (reduce_element_bytes(dtype) == 0)
    return invalid_argument("nccl communicator: reduce_scatter_sum sums float32 or bf16, not " +
                            std::string(dtype_name(dtype)));
  Status s = begin_op();
  if (!s.ok()) return s;
  return run_op("reduce_scatter_sum", ncclReduceScatter(send, recv, count_per_rank, nccl_type(dtype), ncclSum,
                                                        state_->comm, state_->stream));
}

Status NcclCommunicator::broadcast(void* data, size_t bytes, int root) {
  if (root < 0 || root >= world_size_)
    return invalid_argument("nccl communicator: broadcast root " + std::to_string(root) + " is not a rank");
  Status s = begin_op();
  if (!s.ok()) return s;
  return run_op("broadcast", ncclBroadcast(data, data, bytes, ncclUint8, root, state_->comm, state_->stream));
}

Status NcclCommunicator::send(const void* data, size_t bytes, int peer) {
  if (peer < 0 || peer >= world_size_ || peer == rank_)
    return invalid_argument("nccl communicator: send to " + std::to_string(peer) + ": not another rank");
  Status s = begin_op();
  if (!s.ok()) return s;
  return run_op("send", ncclSend(data, bytes, ncclUint8, peer, state_->comm, state_->stream));
}

Status NcclCommunicator::recv(void* data, size_t bytes, int peer) {
  if (peer < 0 || peer >= world_size_ || peer == rank_)
    return invalid_argument("nccl communicator: recv from " + std::to_string(peer) + ": not another rank");
  Status s = begin_op();
  if (!s.ok()) return s;
  return run_op("recv", ncclRecv(data, bytes, ncclUint8, peer, state_->comm, state_->stream));
}

Status NcclCommunicator::barrier() {
  // NCCL has no barrier: an all-reduce of one word completes only once every rank has joined it.
  Status s = begin_op();
  if (!s.ok()) return s;
  return run_op("barrier",
                ncclAllReduce(state_->barrier_word, state_->barrier_word, 1, ncclFloat32, ncclSum, state_->comm,
                              state_->stream));
}

Status NcclCommunicator::accept_op(const char* op, int enqueue_result) {
  const auto r = static_cast<ncclResult_t>(enqueue_result);
  Status s = (r == ncclSuccess || r == ncclInProgress)
                 ? wait_comm(*state_, op, std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms_))
                 : nccl_error(op, r);
  if (s.ok()) return s;
  sticky_ = s;
  ncclCommAbort(state_->comm);
  state_->aborted = true;
  return s;
}

Status NcclCommunicator::enqueue_all_reduce_sum(void* data, size_t count, DType dtype, void* stream) {
  if (reduce_element_bytes(dtype) == 0)
    return invalid_argument("nccl communicator: all_reduce_sum sums float32 or bf16, not " +
                            std::string(dtype_name(dtype)));
  if (!sticky_.ok()) return sticky_;
  return accept_op("all_reduce_sum", ncclAllReduce(data, data, count, nccl_type(dtype), ncclSum, state_->comm,
                                                   static_cast<cudaStream_t>(stream)));
}

Status NcclCommunicator::enqueue_all_gather(const void* send, void* recv, size_t bytes_per_rank, void* stream) {
  if (!sticky_.ok()) return sticky_;
  return accept_op("all_gather", ncclAllGather(send, recv, bytes_per_rank, ncclUint8, state_->comm,
                                               static_cast<cudaStream_t>(stream)));
}

}  // namespace kvasir::dist
