// StepQueue: the CUDA backend's recorded op stream. Backend ops do not launch at once: each one
// appends a plain OpRecord (op_records.h) and copies its host inputs (token ids, positions, block tables, ...)
// into one pinned staging arena. At a read-back (copy_to_host, sample, synchronize) the queue
// flushes: one H2D copy of the arena, then either a cached CUDA graph of the very same record
// sequence or the kernels one by one. Only "graphable" steps (launch shapes independent of the
// staged values: decode) are captured, on their second sighting. It also times the device: busy
// time per step and idle time between steps, from events. Must not know what the ops compute.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/cuda/op_records.h"

namespace kvasir::cuda {

struct StepStats {
  int64_t steps = 0, graph_steps = 0, captures = 0;
  double busy_ms = 0, idle_ms = 0;              // all steps
  double graph_busy_ms = 0, graph_idle_ms = 0;  // graph steps that follow a graph step (decode)
};

class StepQueue {
 public:
  using ExecuteFn = void (*)(void* ctx, const OpRecord& op, const uint8_t* arena, cudaStream_t s);

  // profile: every step runs eagerly with an event pair around each op (KVASIR_CUDA_PROFILE).
  StepQueue(cudaStream_t stream, ExecuteFn fn, void* ctx, bool enable_graphs, int max_graphs, bool profile);
  ~StepQueue();
  StepQueue(const StepQueue&) = delete;
  StepQueue& operator=(const StepQueue&) = delete;

  // A zeroed record at the end of the step. graphable = its launch shape depends only on counts.
  OpRecord& add(OpKind kind, bool graphable);
  // Copies host bytes into the arena (once per step per (pointer, size, version) and contents for
  // arrays of at most kComparedStageBytes; larger ones once per (pointer, size, version)); returns
  // the offset. An array the caller refills in place within a step carries a version that changes
  // with each refill (staging_version.h); 0 is the caller's promise that the array stays as it is
  // until the next read-back.
  static constexpr size_t kComparedStageBytes = 4096;
  int64_t stage(const void* host, size_t bytes, uint64_t version = 0);
  bool empty() const { return ops_.empty(); }
  // A zeroed record placed before record `at` (at <= size()) of the step: an op that must run
  // earlier than the call that asked for it. Invalidates references to the step's records.
  OpRecord& insert(size_t at, OpKind kind, bool graphable);
  size_t size() const { return ops_.size(); }
  const OpRecord& record(size_t i) const { return ops_[i]; }
  OpRecord& record(size_t i) { return ops_[i]; }
  // The step's last record, for fusing the next op into it; null when the step is empty.
  OpRecord* last() { return ops_.empty() ? nullptr : &ops_.back(); }
  // The record before it (null when there is none), and dropping the last record, for a fusion
  // that folds the last two records into one.
  OpRecord* before_last() { return ops_.size() < 2 ? nullptr : &ops_[ops_.size() - 2]; }
  void drop_last() { ops_.pop_back(); }

  // Copies the arena over and runs the step; false when nothing was recorded.
  bool flush();
  // Starts the ops recorded so far without ending the step: what is recorded next runs at the
  // next flush(), after them. For a step that waits on host work (grammar masks) between its
  // forward pass and its sampling, so the device runs meanwhile. The arena keeps growing within
  // the step, so nothing the device may still be reading is overwritten.
  bool submit();
  // After the caller's read-back copies were enqueued: ends the step's timing and waits for it
  // (and for every step ended before it).
  void finish();
  // Overlapped steps: ends the step flushed last (its read-back copies enqueued) without waiting
  // for it; the next step may be recorded and launched behind it. Returns the step's ticket.
  // complete(ticket) waits for that step and every step ended before it (no-op once done).
  // At most kMaxEnded steps stay ended and unwaited: ending one more first waits for the oldest.
  static constexpr int kMaxEnded = 2;
  uint64_t end_step();
  void complete(uint64_t ticket);

  const StepStats& stats() const { return stats_; }
  // When profiling: the device time per op kind so far (empty otherwise).
  std::string profile_report() const;
  void disable_graphs() { enable_graphs_ = false; }

 private:
  struct Graph {
    std::vector<OpRecord> ops;
    cudaGraphExec_t exec = nullptr;
  };
  uint64_t signature() const;
  void run_eager(const uint8_t* arena);
  bool capture(uint64_t sig, const uint8_t* arena);
  void ensure_device_arena(size_t bytes);
  void clear_graphs();

  cudaStream_t stream_;
  ExecuteFn fn_;
  void* ctx_;
  bool enable_graphs_;
  int max_graphs_;

  std::vector<OpRecord> ops_;
  bool graphable_ = true;
  struct Staged {
    const void* host;
    size_t bytes;
    uint64_t version;
    int64_t offset;
  };
  std::vector<Staged> staged_;
  uint8_t* host_arena_ = nullptr;  // pinned
  size_t host_cap_ = 0, used_ = 0;
  size_t copied_ = 0;  // arena bytes already copied to the device this step (submit())
  bool launch(bool end_of_step);
  uint8_t* dev_arena_ = nullptr;
  size_t dev_cap_ = 0;

  std::unordered_map<uint64_t, std::vector<Graph>> graphs_;
  std::unordered_map<uint64_t, int> sightings_;
  int num_graphs_ = 0;

  bool profile_ = false;
  std::vector<cudaEvent_t> prof_events_;
  std::vector<OpKind> prof_pending_;
  double prof_ms_[static_cast<int>(OpKind::kNumKinds)] = {};
  int64_t prof_count_[static_cast<int>(OpKind::kNumKinds)] = {};

  // Device timing, one slot per step in a ring: a step's events stay valid until the step after
  // it has been waited for (its idle time reads this step's end), so kMaxEnded + 2 slots.
  struct StepEvents {
    cudaEvent_t start = nullptr, end = nullptr;
    bool is_graph = false;
  };
  static constexpr int kSlots = kMaxEnded + 2;
  StepEvents slots_[kSlots];
  uint64_t next_ticket_ = 0;       // the open (or next) step's ticket; its slot is ticket % kSlots
  uint64_t completed_ = 0;         // steps waited for: tickets below this
  bool step_open_ = false, step_is_graph_ = false, prev_was_graph_ = false;
  // The host arena's last copy to the device: a new step must not overwrite the arena before it ran.
  cudaEvent_t arena_copied_ = nullptr;
  bool arena_in_flight_ = false;
  void complete_one();
  StepStats stats_;
};

}  // namespace kvasir::cuda
