// Orders requests for the scheduler: the waiting queue (FCFS with push-front for preempted
// requests, or by (priority, arrival)) and the sort key that orders the running list, whose last
// entry is the next preemption victim. Holds non-owning pointers; must not touch KV blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/request.h"
#include "sched/scheduler_config.h"

namespace kvasir {

// Lower keys are served first and preempted last.
using RequestOrderKey = std::tuple<int64_t, double, uint64_t>;
RequestOrderKey running_order_key(SchedulingPolicy policy, const Request& r);

class RequestQueue {
 public:
  explicit RequestQueue(SchedulingPolicy policy) : policy_(policy) {}

  void push_back(Request* r);  // a new arrival
  // A preempted request: first in line under FCFS; under priority it takes its (priority,
  // arrival) place, ahead of later arrivals of the same priority.
  void push_front(Request* r);
  Request* front() const { return queue_.begin()->second; }
  void pop_front();
  bool remove(const Request* r);  // false when not queued

  size_t size() const { return queue_.size(); }
  bool empty() const { return queue_.empty(); }
  std::vector<Request*> ordered() const;  // for tests and invariant checks

 private:
  using Key = std::tuple<int64_t, double, int64_t>;
  void insert(Request* r, int64_t seq);

  SchedulingPolicy policy_;
  std::map<Key, Request*> queue_;
  std::unordered_map<RequestIdx, Key> keys_;
  int64_t next_back_seq_ = 0;
  int64_t next_front_seq_ = -1;
};

}  // namespace kvasir
