#include "dist/custom_all_reduce.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "dist/custom_all_reduce_kernels.h"

namespace kvasir::dist {

struct CustomAllReduceState {
  void* buffer = nullptr;                       // this rank's [signals | staging | results]
  std::vector<void*> opened;                    // peers' buffers opened over IPC (closed at the end)
  car::RankBuffers ranks{};
};

namespace {

Status cuda_error(const std::string& what, cudaError_t e) {
  (void)cudaGetLastError();
  return unavailable("custom all-reduce: " + what + ": " + cudaGetErrorString(e));
}

// What each rank tells the others at set-up: its buffer's IPC handle and device, and whether it
// got that far (so that one rank's failure fails every rank alike, never leaving a rank waiting).
struct Announcement {
  cudaIpcMemHandle_t handle;
  int32_t device;
  int32_t ok;
};

}  // namespace

StatusOr<std::unique_ptr<CustomAllReduce>> CustomAllReduce::create(const CustomAllReduceOptions& o,
                                                                    Communicator* bootstrap) {
  if (o.world_size < 1 || o.world_size > kMaxRanks || o.rank < 0 || o.rank >= o.world_size)
    return invalid_argument("custom all-reduce: rank " + std::to_string(o.rank) + " of world size " +
                            std::to_string(o.world_size) + " (at most " + std::to_string(kMaxRanks) + " ranks)");
  if (o.max_bytes == 0 || o.max_bytes % 16 != 0 || o.one_shot_max_bytes > o.max_bytes)
    return invalid_argument("custom all-reduce: max_bytes must be a positive multiple of 16, at least one_shot_max_bytes");
  if (o.world_size > 1 && (bootstrap == nullptr || bootstrap->world_size() != o.world_size ||
                           bootstrap->rank() != o.rank))
    return invalid_argument("custom all-reduce: a world size above 1 needs a CPU bootstrap communicator of the same ranks");
  static_assert(car::kMaxRanks == kMaxRanks);

  std::unique_ptr<CustomAllReduce> c(new CustomAllReduce());
  c->rank_ = o.rank;
  c->world_size_ = o.world_size;
  c->device_ = o.device;
  c->max_bytes_ = o.max_bytes;
  c->one_shot_max_bytes_ = o.one_shot_max_bytes;
  c->state_ = std::make_unique<CustomAllReduceState>();
  CustomAllReduceState& st = *c->state_;

  // This rank's buffer, zeroed (flags and counters start at 0 on every rank) before anyone sees it.
  Status local;
  Announcement mine{};
  mine.device = o.device;
  cudaError_t e = cudaSetDevice(o.device);
  if (e != cudaSuccess) local = cuda_error("cudaSetDevice(" + std::to_string(o.device) + ")", e);
  const size_t total = car::kDataOffset + 2 * o.max_bytes;
  if (local.ok() && (e = cudaMalloc(&st.buffer, total)) != cudaSuccess) local = cuda_error("cudaMalloc", e);
  if (local.ok() && (e = cudaMemset(st.buffer, 0, total)) != cudaSuccess) local = cuda_error("cudaMemset", e);
  if (local.ok() && (e = cudaDeviceSynchronize()) != cudaSuccess) local = cuda_error("zeroing the buffer", e);
  if (local.ok() && o.world_size > 1 && (e = cudaIpcGetMemHandle(&mine.handle, st.buffer)) != cudaSuccess)
    local = cuda_error("cudaIpcGetMemHandle", e);
  mine.ok = local.ok() ? 1 : 0;

  std::vector<Announcement> all(static_cast<size_t>(o.world_size));
  all[static_cast<size_t>(o.rank)] = mine;
  if (o.world_size > 1) {
    Status s = bootstrap->all_gather(&mine, all.data(), sizeof(Announcement));
    if (!s.ok()) return unavailable("custom all-reduce: exchanging IPC handles: " + s.message());
  }
  for (int r = 0; r < o.world_size; ++r)
    if (!all[static_cast<size_t>(r)].ok)
      return local.ok() ? unavailable("custom all-reduce: rank " + std::to_string(r) + " could not set up its buffer")
                        : local;

  // Open every peer's buffer; then agree that every rank could.
  std::vector<uint8_t*> bases(static_cast<size_t>(o.world_size), nullptr);
  bases[static_cast<size_t>(o.rank)] = static_cast<uint8_t*>(st.buffer);
  for (int r = 0; r < o.world_size && local.ok(); ++r) {
    if (r == o.rank) continue;
    const int peer_device = all[static_cast<size_t>(r)].device;
    if (peer_device != o.device) {
      int can = 0;
      e = cudaDeviceCanAccessPeer(&can, o.device, peer_device);
      if (e != cudaSuccess || !can) {
        local = unavailable("custom all-reduce: device " + std::to_string(o.device) + " has no peer access to rank " +
                            std::to_string(r) + "'s device " + std::to_string(peer_device));
        break;
      }
    }
    void* p = nullptr;
    e = cudaIpcOpenMemHandle(&p, all[static_cast<size_t>(r)].handle, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      local = cuda_error("cudaIpcOpenMemHandle of rank " + std::to_string(r) + "'s buffer", e);
      break;
    }
    st.opened.push_back(p);
    bases[static_cast<size_t>(r)] = static_cast<uint8_t*>(p);
  }
  if (o.world_size > 1) {
    const int32_t ok = local.ok() ? 1 : 0;
    std::vector<int32_t> oks(static_cast<size_t>(o.world_size));
    Status s = bootstrap->all_gather(&ok, oks.data(), sizeof(ok));
    if (!s.ok()) return unavailable("custom all-reduce: agreeing on the set-up: " + s.message());
    for (int r = 0; r < o.world_size; ++r)
      if (!oks[static_cast<size_t>(r)] && local.ok())
        local = unavailable("custom all-reduce: rank " + std::to_string(r) + " could not open its peers' buffers");
  }
  if (!local.ok()) return local;

  st.ranks.rank = o.rank;
  st.ranks.world_size = o.world_size;
  st.ranks.timeout_ns = static_cast<uint64_t>(std::max<int64_t>(o.timeout_ms, 0)) * 1000000ull;
  for (int r = 0; r < o.world_size; ++r) {
    uint8_t* base = bases[static_cast<size_t>(r)];
    st.ranks.signals[r] = reinterpret_cast<car::Signals*>(base);
    st.ranks.staging[r] = base + car::kDataOffset;
    st.ranks.results[r] = base + car::kDataOffset + o.max_bytes;
  }
  return c;
}

CustomAllReduce::~CustomAllReduce() {
  if (!state_) return;
  cudaSetDevice(device_);
  for (void* p : state_->opened) cudaIpcCloseMemHandle(p);
  if (state_->buffer != nullptr) cudaFree(state_->buffer);
}

CustomAllReduce::Algorithm CustomAllReduce::algorithm_for(size_t bytes) const {
  if (bytes > max_bytes_) return Algorithm::kNone;
  return bytes <= one_shot_max_bytes_ ? Algorithm::kOneShot : Algorithm::kTwoShot;
}

Status CustomAllReduce::all_reduce_sum(void* data, size_t count, DType dtype, cudaStream_t stream) {
  const size_t elem = reduce_element_bytes(dtype);
  if (elem == 0)
    return invalid_argument("custom all-reduce: sums float32 or bf16, not " + std::string(dtype_name(dtype)));
  if (count == 0) return Status();
  const size_t bytes = count * elem;
  const Algorithm a = algorithm_for(bytes);
  if (a == Algorithm::kNone)
    return invalid_argument("custom all-reduce: " + std::to_string(bytes) + " bytes exceed its " +
                            std::to_string(max_bytes_) + "-byte buffer (use NCCL)");
  const car::RankBuffers& b = state_->ranks;
  cudaError_t e = cudaMemcpyAsync(const_cast<uint8_t*>(b.staging[rank_]), data, bytes, cudaMemcpyDeviceToDevice, stream);
  if (e != cudaSuccess) return cuda_error("staging copy", e);
  const car::Elem el = dtype == DType::kBF16 ? car::Elem::kBf16 : car::Elem::kF32;
  if (a == Algorithm::kOneShot) car::launch_one_shot(b, el, data, count, stream);
  else car::launch_two_shot(b, el, data, count, stream);
  e = cudaGetLastError();
  return e == cudaSuccess ? Status() : cuda_error("launch", e);
}

Status CustomAllReduce::all_gather(const void* send, void* recv, size_t bytes_per_rank, cudaStream_t stream) {
  if (bytes_per_rank > max_bytes_)
    return invalid_argument("custom all-reduce: an all-gather of " + std::to_string(bytes_per_rank) +
                            " bytes per rank exceeds its " + std::to_string(max_bytes_) + "-byte buffer (use NCCL)");
  if (bytes_per_rank == 0) return Status();
  const car::RankBuffers& b = state_->ranks;
  cudaError_t e = cudaMemcpyAsync(const_cast<uint8_t*>(b.staging[rank_]), send, bytes_per_rank,
                                  cudaMemcpyDeviceToDevice, stream);
  if (e != cudaSuccess) return cuda_error("staging copy", e);
  car::launch_gather(b, recv, bytes_per_rank, stream);
  e = cudaGetLastError();
  return e == cudaSuccess ? Status() : cuda_error("launch", e);
}

}  // namespace kvasir::dist
