// ShmSegment: the shared-memory segment behind ShmCommunicator and the rules for waiting on it:
// its layout (header, per-rank state, per-pair channel state, staging slots), attaching (rank 0
// creates, everyone waits for everyone), liveness of the peers, the group-wide failure flag, and
// `round`, the write-publish-read step every collective is made of. It moves no tensor data of
// its own and knows no collective; shm_communicator.cpp builds those from rounds.
#pragma once

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"
#include "dist/backoff.h"
#include "dist/shm_communicator.h"

namespace kvasir::dist {

// What every rank states about the collective it is in, so that ranks calling different
// collectives (or sizes) fail with a message instead of mixing bytes.
struct OpTag {
  uint32_t kind = 0;  // OpKind in shm_communicator.cpp
  uint64_t bytes = 0;
  int64_t arg = 0;  // dtype or root
};

struct alignas(64) ShmRankState {
  pthread_mutex_t alive;          // held by the rank's keeper thread while its communicator lives
  std::atomic<uint32_t> state;    // ShmSegment::kAbsent / kAttached / kDeparted
  std::atomic<uint64_t> written;  // the last round whose data this rank has put in its slot
  std::atomic<uint64_t> consumed;  // the last round in which this rank has read every slot
  std::atomic<uint32_t> op_kind;   // this rank's OpTag, valid once `written` is published
  std::atomic<uint64_t> op_bytes;
  std::atomic<int64_t> op_arg;
};

struct alignas(64) ShmChannelState {  // one ordered pair (src -> dst)
  std::atomic<uint64_t> produced;     // chunks the sender has put in the pair's slot
  std::atomic<uint64_t> consumed;     // chunks the receiver has taken out
  std::atomic<uint64_t> chunk_bytes;  // size of the chunk in the slot (checked against the recv)
};

class ShmSegment {
 public:
  static constexpr uint32_t kAbsent = 0, kAttached = 1, kDeparted = 2;

  static StatusOr<std::unique_ptr<ShmSegment>> attach(const ShmCommunicatorOptions& options);
  ~ShmSegment();

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  size_t slot_bytes() const { return slot_bytes_; }
  size_t p2p_slot_bytes() const { return p2p_slot_bytes_; }
  uint8_t* slot(int r) const;                 // [slot_bytes]
  uint8_t* p2p_slot(int src, int dst) const;  // [p2p_slot_bytes]
  ShmChannelState& channel(int src, int dst) const;

  // The first failure, once there was one: every later op returns it.
  const Status& sticky() const { return sticky_; }

  // One collective round: wait until every rank has read the previous round, fill(my slot),
  // publish, wait for every rank's data, check that all stated the same tag, consume(), publish.
  template <typename Fill, typename Consume>
  Status round(const char* op, const OpTag& tag, Fill&& fill, Consume&& consume);

  // Waits until ready() holds, failing on the group flag, on `peer`'s death or departure (every
  // peer when peer < 0) and at the timeout. A failure is made sticky and set group-wide.
  template <typename Ready>
  Status wait(Ready&& ready, int peer, const char* op);

  Status fail(Status s);  // makes s sticky (and returns it)

 private:
  ShmSegment() = default;
  Status create_or_open(const ShmCommunicatorOptions& options);
  Status wait_for_everyone();
  Status check_group(int peer, const char* op, std::chrono::steady_clock::time_point deadline);
  Status peer_alive(int peer, const char* op);
  Status group_failure_status() const;
  void raise_group_failure(uint32_t kind, int subject);
  // Every rank's tag of this round against this rank's: raises the group failure on a mismatch.
  Status tags_agree(const OpTag& tag, const char* op);
  // The mismatch, described, or OK; no side effects.
  Status tag_mismatch(const OpTag& tag, const char* op);
  // s (a failed wait) replaced by the mismatch it came from, when the tags show one.
  Status name_mismatch(const OpTag& tag, const char* op, Status s);
  ShmRankState& rank_state(int r) const;
  void start_keeper();
  void stop_keeper();

  std::string group_id_, name_;
  int rank_ = 0, world_size_ = 1;
  int64_t timeout_ms_ = 0;
  int64_t busy_wait_ns_ = 0;  // ShmCommunicatorOptions::busy_wait_us
  size_t slot_bytes_ = 0, p2p_slot_bytes_ = 0, total_bytes_ = 0;
  uint8_t* base_ = nullptr;
  bool unlinked_ = false;
  uint64_t round_ = 0;
  Status sticky_;
  std::function<Status()> while_attaching_;  // only during create()

  // The keeper thread holds this rank's `alive` mutex: robust mutexes belong to a thread, so the
  // caller's threads may come and go while the rank stays alive in the others' eyes.
  std::thread keeper_;
  std::mutex keeper_mu_;
  std::condition_variable keeper_cv_;
  bool keeper_locked_ = false, keeper_stop_ = false;
};

template <typename Ready>
Status ShmSegment::wait(Ready&& ready, int peer, const char* op) {
  if (!sticky_.ok()) return sticky_;
  // A broken group fails the op even if this wait could complete: the ranks must not disagree
  // on whether the group still works.
  Status broken = group_failure_status();
  if (!broken.ok()) return fail(unavailable(std::string(op) + " failed: " + broken.message()));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms_);
  Backoff backoff(busy_wait_ns_);
  while (!ready()) {
    if (backoff.check_due()) {
      Status s = check_group(peer, op, deadline);
      if (!s.ok()) {
        if (ready()) break;  // the peer finished its part before it went away
        return fail(std::move(s));
      }
    }
    backoff.pause();
  }
  return Status();
}

template <typename Fill, typename Consume>
Status ShmSegment::round(const char* op, const OpTag& tag, Fill&& fill, Consume&& consume) {
  if (!sticky_.ok()) return sticky_;
  const uint64_t k = ++round_;
  auto all_at_least = [this](std::atomic<uint64_t> ShmRankState::*field, uint64_t v) {
    for (int r = 0; r < world_size_; ++r)
      if ((rank_state(r).*field).load(std::memory_order_acquire) < v) return false;
    return true;
  };
  Status s = wait([&] { return all_at_least(&ShmRankState::consumed, k - 1); }, -1, op);
  if (!s.ok()) return s;
  fill(slot(rank_));
  ShmRankState& me = rank_state(rank_);
  me.op_kind.store(tag.kind, std::memory_order_relaxed);
  me.op_bytes.store(tag.bytes, std::memory_order_relaxed);
  me.op_arg.store(tag.arg, std::memory_order_relaxed);
  me.written.store(k, std::memory_order_release);
  s = wait([&] { return all_at_least(&ShmRankState::written, k); }, -1, op);
  // A peer that compared the tags first broke the group; with every tag of this round written,
  // this rank names both collectives too instead of only "broken".
  if (!s.ok()) return all_at_least(&ShmRankState::written, k) ? name_mismatch(tag, op, std::move(s)) : s;
  s = tags_agree(tag, op);
  if (!s.ok()) return s;
  consume();
  me.consumed.store(k, std::memory_order_release);
  return Status();
}

}  // namespace kvasir::dist
