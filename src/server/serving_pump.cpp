#include "server/serving_pump.h"

#include <algorithm>
#include <optional>
#include <unordered_map>

namespace kvasir::server {
namespace {

// Tokens taken per sweep at most, so a flood of rings cannot keep one sweep going forever; the
// rest wait in the queue for the next sweep (no ring is dropped).
constexpr size_t kMaxTokensPerSweep = 4096;

}  // namespace

ServingPump::ServingPump(int num_threads) {
  const int n = std::max(1, num_threads);
  for (int i = 0; i < n; ++i) workers_.push_back(std::make_unique<Worker>());
  for (auto& w : workers_) {
    Worker* wp = w.get();
    w->thread = std::thread([this, wp] { run(*wp); });
  }
}

ServingPump::~ServingPump() { stop(); }

void ServingPump::add(std::shared_ptr<PumpTask> task) {
  const uint64_t token = next_token_.fetch_add(1);
  Worker& w = *workers_[token % workers_.size()];
  const PumpBell bell{w.ready, token};
  task->attach(bell);
  {
    std::lock_guard<std::mutex> lock(w.mu);
    w.inbox.emplace_back(token, std::move(task));
  }
  // The first poll. The thread takes its inbox after draining the queue, so this ring (or one
  // from attach) finds the task there, whichever sweep it lands in.
  bell.ring();
}

void ServingPump::stop() {
  if (stop_.exchange(true)) return;
  for (auto& w : workers_) w->ready->close();
  for (auto& w : workers_) {
    if (w->thread.joinable()) w->thread.join();
  }
}

void ServingPump::run(Worker& w) {
  std::unordered_map<uint64_t, std::shared_ptr<PumpTask>> active;
  std::vector<uint64_t> due;
  while (true) {
    // Untimed: only a ring or stop() ends the wait. The queue's own lock orders every push
    // against this check, so a ring between a sweep and the wait is still in the queue.
    std::optional<uint64_t> first = w.ready->pop();
    if (!first || stop_.load()) return;
    num_wakeups_.fetch_add(1, std::memory_order_relaxed);
    due.assign(1, *first);
    while (due.size() < kMaxTokensPerSweep) {
      std::optional<uint64_t> t = w.ready->try_pop();
      if (!t) break;
      due.push_back(*t);
    }
    {
      std::lock_guard<std::mutex> lock(w.mu);
      for (auto& [token, task] : w.inbox) active.emplace(token, std::move(task));
      w.inbox.clear();
    }
    std::sort(due.begin(), due.end());
    due.erase(std::unique(due.begin(), due.end()), due.end());
    for (uint64_t token : due) {
      auto it = active.find(token);
      if (it == active.end()) continue;  // finished already; a late ring is harmless
      if (it->second->poll() == PumpTask::Progress::kDone) active.erase(it);
    }
  }
}

}  // namespace kvasir::server
