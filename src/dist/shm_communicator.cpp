#include "dist/shm_communicator.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "dist/op_kind.h"
#include "dist/rank_order_sum.h"
#include "dist/shm_segment.h"

namespace kvasir::dist {
namespace {

OpTag tag(OpKind kind, uint64_t bytes, int64_t arg) { return OpTag{static_cast<uint32_t>(kind), bytes, arg}; }

// Every collective takes at least one round, even of zero bytes, so that ranks agree on how many
// rounds there were and a size mismatch shows up in the tags instead of as a hang.
size_t num_rounds(size_t total, size_t per_round) { return std::max<size_t>(1, (total + per_round - 1) / per_round); }

// memcpy that takes an empty copy from a null buffer: a zero-element collective (its single round)
// may be handed data == nullptr, which memcpy itself does not allow even for zero bytes.
void copy_bytes(void* dst, const void* src, size_t n) {
  if (n > 0) std::memcpy(dst, src, n);
}

Status bad_dtype(const char* op, DType dtype) {
  return invalid_argument(std::string("shm communicator: ") + op + " sums float32 or bf16, not " +
                          std::string(dtype_name(dtype)));
}

}  // namespace

StatusOr<std::unique_ptr<ShmCommunicator>> ShmCommunicator::create(const ShmCommunicatorOptions& options) {
  auto seg = ShmSegment::attach(options);
  if (!seg.ok()) return seg.status();
  return std::unique_ptr<ShmCommunicator>(new ShmCommunicator(std::move(seg).value()));
}

ShmCommunicator::ShmCommunicator(std::unique_ptr<ShmSegment> segment) : seg_(std::move(segment)) {}
ShmCommunicator::~ShmCommunicator() = default;

int ShmCommunicator::rank() const { return seg_->rank(); }
int ShmCommunicator::world_size() const { return seg_->world_size(); }

Status ShmCommunicator::all_reduce_sum(void* data, size_t count, DType dtype) {
  const size_t es = reduce_element_bytes(dtype);
  if (es == 0) return bad_dtype("all_reduce_sum", dtype);
  const int n = world_size();
  const size_t per = seg_->slot_bytes() / es;
  std::vector<const void*> inputs(n);  // small: one pointer per rank
  for (int r = 0; r < n; ++r) inputs[r] = seg_->slot(r);
  auto* bytes = static_cast<uint8_t*>(data);
  for (size_t i = 0, rounds = num_rounds(count, per); i < rounds; ++i) {
    const size_t off = i * per, len = std::min(per, count - std::min(count, off));
    Status s = seg_->round(
        "all_reduce_sum", tag(OpKind::kAllReduce, count * es, static_cast<int64_t>(dtype)),
        [&](uint8_t* slot) { copy_bytes(slot, bytes + off * es, len * es); },
        [&] { sum_in_rank_order(inputs.data(), n, bytes + off * es, len, dtype); });
    if (!s.ok()) return s;
  }
  return Status();
}

Status ShmCommunicator::all_gather(const void* send, void* recv, size_t bytes_per_rank) {
  const int n = world_size();
  const size_t per = seg_->slot_bytes();
  const auto* src = static_cast<const uint8_t*>(send);
  auto* dst = static_cast<uint8_t*>(recv);
  for (size_t i = 0, rounds = num_rounds(bytes_per_rank, per); i < rounds; ++i) {
    const size_t off = i * per, len = std::min(per, bytes_per_rank - std::min(bytes_per_rank, off));
    Status s = seg_->round(
        "all_gather", tag(OpKind::kAllGather, bytes_per_rank, 0),
        [&](uint8_t* slot) { copy_bytes(slot, src + off, len); },
        [&] {
          for (int r = 0; r < n; ++r) copy_bytes(dst + r * bytes_per_rank + off, seg_->slot(r), len);
        });
    if (!s.ok()) return s;
  }
  return Status();
}

Status ShmCommunicator::reduce_scatter_sum(const void* send, void* recv, size_t count_per_rank, DType dtype) {
  const size_t es = reduce_element_bytes(dtype);
  if (es == 0) return bad_dtype("reduce_scatter_sum", dtype);
  const int n = world_size(), me = rank();
  // A round carries the same element range of every rank's part: slot = [n][per].
  const size_t per = seg_->slot_bytes() / (es * n);
  const auto* src = static_cast<const uint8_t*>(send);
  auto* dst = static_cast<uint8_t*>(recv);
  std::vector<const void*> inputs(n);
  for (size_t i = 0, rounds = num_rounds(count_per_rank, per); i < rounds; ++i) {
    const size_t off = i * per, len = std::min(per, count_per_rank - std::min(count_per_rank, off));
    for (int r = 0; r < n; ++r) inputs[r] = seg_->slot(r) + me * len * es;
    Status s = seg_->round(
        "reduce_scatter_sum", tag(OpKind::kReduceScatter, count_per_rank * es, static_cast<int64_t>(dtype)),
        [&](uint8_t* slot) {
          for (int part = 0; part < n; ++part)
            copy_bytes(slot + part * len * es, src + (part * count_per_rank + off) * es, len * es);
        },
        [&] { sum_in_rank_order(inputs.data(), n, dst + off * es, len, dtype); });
    if (!s.ok()) return s;
  }
  return Status();
}

Status ShmCommunicator::broadcast(void* data, size_t bytes, int root) {
  if (root < 0 || root >= world_size())
    return invalid_argument("shm communicator: broadcast root " + std::to_string(root) + " is not a rank");
  const bool is_root = root == rank();
  const size_t per = seg_->slot_bytes();
  auto* buf = static_cast<uint8_t*>(data);
  for (size_t i = 0, rounds = num_rounds(bytes, per); i < rounds; ++i) {
    const size_t off = i * per, len = std::min(per, bytes - std::min(bytes, off));
    Status s = seg_->round(
        "broadcast", tag(OpKind::kBroadcast, bytes, root),
        [&](uint8_t* slot) {
          if (is_root) copy_bytes(slot, buf + off, len);
        },
        [&] {
          if (!is_root) copy_bytes(buf + off, seg_->slot(root), len);
        });
    if (!s.ok()) return s;
  }
  return Status();
}

Status ShmCommunicator::barrier() {
  return seg_->round("barrier", tag(OpKind::kBarrier, 0, 0), [](uint8_t*) {}, [] {});
}

Status ShmCommunicator::send(const void* data, size_t bytes, int peer) {
  if (peer < 0 || peer >= world_size() || peer == rank())
    return invalid_argument("shm communicator: send to " + std::to_string(peer) + ": not another rank");
  if (!seg_->sticky().ok()) return seg_->sticky();
  ShmChannelState& ch = seg_->channel(rank(), peer);
  uint8_t* slot = seg_->p2p_slot(rank(), peer);
  const size_t per = seg_->p2p_slot_bytes();
  const auto* src = static_cast<const uint8_t*>(data);
  for (size_t off = 0; off < bytes; off += per) {
    const size_t len = std::min(per, bytes - off);
    const uint64_t produced = ch.produced.load(std::memory_order_relaxed);  // only this rank writes it
    Status s = seg_->wait([&] { return ch.consumed.load(std::memory_order_acquire) == produced; }, peer, "send");
    if (!s.ok()) return s;
    copy_bytes(slot, src + off, len);
    ch.chunk_bytes.store(len, std::memory_order_relaxed);
    ch.produced.store(produced + 1, std::memory_order_release);
  }
  return Status();
}

Status ShmCommunicator::recv(void* data, size_t bytes, int peer) {
  if (peer < 0 || peer >= world_size() || peer == rank())
    return invalid_argument("shm communicator: recv from " + std::to_string(peer) + ": not another rank");
  if (!seg_->sticky().ok()) return seg_->sticky();
  ShmChannelState& ch = seg_->channel(peer, rank());
  const uint8_t* slot = seg_->p2p_slot(peer, rank());
  const size_t per = seg_->p2p_slot_bytes();
  auto* dst = static_cast<uint8_t*>(data);
  for (size_t off = 0; off < bytes; off += per) {
    const size_t len = std::min(per, bytes - off);
    const uint64_t consumed = ch.consumed.load(std::memory_order_relaxed);  // only this rank writes it
    Status s = seg_->wait([&] { return ch.produced.load(std::memory_order_acquire) > consumed; }, peer, "recv");
    if (!s.ok()) return s;
    const uint64_t sent = ch.chunk_bytes.load(std::memory_order_relaxed);
    if (sent != len)
      return seg_->fail(invalid_argument("shm communicator: recv of " + std::to_string(bytes) + " bytes from rank " +
                                         std::to_string(peer) + " met a chunk of " + std::to_string(sent) +
                                         " bytes where it expected " + std::to_string(len) +
                                         " (send and recv sizes differ)"));
    copy_bytes(dst + off, slot, len);
    ch.consumed.store(consumed + 1, std::memory_order_release);
  }
  return Status();
}

}  // namespace kvasir::dist
