// ShmCommunicator: a Communicator for processes on one host, over one POSIX shared-memory segment
// named by the group id. Each rank owns a staging slot; a collective moves through numbered rounds
// (write my slot, publish the round number, wait for everyone's, read, publish "consumed"), so a
// slot is never rewritten before every rank has read it. Point-to-point uses one slot per ordered
// pair of ranks with produced/consumed counters. All flags are std::atomic in the segment
// (release on publish, acquire on wait); waits spin, yield, then sleep (backoff.h).
//
// Liveness: each rank holds a process-shared robust mutex for as long as its communicator lives,
// so a rank that dies (even SIGKILL) is seen at once by the others (the kernel releases the mutex
// as owner-dead); a rank that destroys its communicator marks itself departed. Either fails every
// pending and later op on the others, and so does the group-wide failure flag a rank sets when it
// times out. Must not be shared between threads without external ordering (one caller at a time).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "dist/communicator.h"

namespace kvasir::dist {

struct ShmCommunicatorOptions {
  // Names the segment (/kvasir-dist-<group_id>); letters, digits, '.', '_' and '-', 1 to 128 of
  // them. Must be unique per launch: rank 0 removes a stale segment of that name and creates it.
  std::string group_id;
  int rank = 0;
  int world_size = 1;
  // How long create() waits for every rank to attach, and one op waits for its peers.
  int64_t timeout_ms = 60'000;
  size_t slot_bytes = 2u << 20;      // per-rank staging per collective round
  size_t p2p_slot_bytes = 256u << 10;  // per ordered pair of ranks
  // Called every few milliseconds while create() waits for the other ranks to attach; a non-OK
  // answer ends the wait with it (a launcher that sees a rank's process exit says so at once).
  std::function<Status()> while_attaching;
  // A wait yields this long before it starts to sleep (0: the default backoff, backoff.h): for a
  // group whose ranks answer each other within a device step and whose CPUs are idle meanwhile
  // (the multiprocess executor's front and model ranks on a GPU), where a sleep's wake-up would add
  // 20-200 us to every step.
  int64_t busy_wait_us = 0;
};

class ShmSegment;

class ShmCommunicator final : public Communicator {
 public:
  static constexpr int kMaxWorldSize = 64;

  // Attaches this rank to the group's segment (rank 0 creates it), waiting until every rank has.
  static StatusOr<std::unique_ptr<ShmCommunicator>> create(const ShmCommunicatorOptions& options);
  ~ShmCommunicator() override;

  int rank() const override;
  int world_size() const override;
  Status all_reduce_sum(void* data, size_t count, DType dtype) override;
  Status all_gather(const void* send, void* recv, size_t bytes_per_rank) override;
  Status reduce_scatter_sum(const void* send, void* recv, size_t count_per_rank, DType dtype) override;
  Status broadcast(void* data, size_t bytes, int root) override;
  Status send(const void* data, size_t bytes, int peer) override;
  Status recv(void* data, size_t bytes, int peer) override;
  Status barrier() override;

 private:
  explicit ShmCommunicator(std::unique_ptr<ShmSegment> segment);
  std::unique_ptr<ShmSegment> seg_;
};

}  // namespace kvasir::dist
