// Communicator: the collectives one rank of a fixed group of processes calls to exchange tensor
// data (vLLM's DeviceCommunicatorBase: all-reduce, all-gather, reduce-scatter, broadcast,
// send/recv, barrier). Every rank calls the same collectives in the same order with the same
// sizes; a call returns when this rank's part is complete. It moves bytes and sums numbers, and
// knows nothing of models or requests.
//
// Failure is a Status, never a hang or an abort: a peer that exits or crashes, or one that does
// not join a collective within the timeout, fails the pending call on every other rank, and once
// one call failed every later call on that communicator fails with the same Status (the group is
// broken; it is rebuilt by restarting it, not repaired).
//
// Sums are bitwise deterministic and identical on every rank (see rank_order_sum.h).
// Implementations: ShmCommunicator (processes on one host), TcpCommunicator (between hosts),
// NcclCommunicator (GPUs, with -DKVASIR_CUDA=ON; its buffers are device memory).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "core/dtype.h"

namespace kvasir::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // In place: data[i] = sum over ranks r of rank r's data[i]. dtype kF32 or kBF16.
  virtual Status all_reduce_sum(void* data, size_t count, DType dtype) = 0;  // [count]
  // recv = the ranks' send buffers one after another, rank order. send and recv must not overlap.
  virtual Status all_gather(const void* send,  // [bytes_per_rank]
                            void* recv,        // [world_size * bytes_per_rank]
                            size_t bytes_per_rank) = 0;
  // recv[i] = sum over ranks r of rank r's send[rank() * count_per_rank + i].
  virtual Status reduce_scatter_sum(const void* send,  // [world_size * count_per_rank]
                                    void* recv,        // [count_per_rank]
                                    size_t count_per_rank, DType dtype) = 0;
  // Every rank's data = root's data.
  virtual Status broadcast(void* data, size_t bytes, int root) = 0;
  // Point to point; a send is matched by the recv on `peer` with the same size, in order.
  virtual Status send(const void* data, size_t bytes, int peer) = 0;
  virtual Status recv(void* data, size_t bytes, int peer) = 0;
  // Returns once every rank has entered it.
  virtual Status barrier() = 0;
};

// The element size of a dtype the sums accept (kF32, kBF16), or 0 for any other.
size_t reduce_element_bytes(DType dtype);

}  // namespace kvasir::dist
