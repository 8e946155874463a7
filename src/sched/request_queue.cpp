#include "sched/request_queue.h"

#include "common/check.h"

namespace kvasir {

RequestOrderKey running_order_key(SchedulingPolicy policy, const Request& r) {
  // The request index breaks ties: it is the order of add_request.
  const int64_t prio = policy == SchedulingPolicy::kPriority ? r.priority() : 0;
  return {prio, r.arrival_time(), r.idx()};
}

void RequestQueue::insert(Request* r, int64_t seq) {
  Key key = policy_ == SchedulingPolicy::kPriority ? Key{r->priority(), r->arrival_time(), seq}
                                                   : Key{0, 0.0, seq};
  KVASIR_CHECK_MSG(keys_.emplace(r->idx(), key).second, "request queued twice");
  queue_.emplace(key, r);
}

void RequestQueue::push_back(Request* r) { insert(r, next_back_seq_++); }

void RequestQueue::push_front(Request* r) { insert(r, next_front_seq_--); }

void RequestQueue::pop_front() {
  KVASIR_CHECK(!queue_.empty());
  keys_.erase(queue_.begin()->second->idx());
  queue_.erase(queue_.begin());
}

bool RequestQueue::remove(const Request* r) {
  const auto it = keys_.find(r->idx());
  if (it == keys_.end()) return false;
  queue_.erase(it->second);
  keys_.erase(it);
  return true;
}

std::vector<Request*> RequestQueue::ordered() const {
  std::vector<Request*> out;
  out.reserve(queue_.size());
  for (const auto& [key, r] : queue_) out.push_back(r);
  return out;
}

}  // namespace kvasir
