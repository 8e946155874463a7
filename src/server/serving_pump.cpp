#include "server/serving_pump.h"

#include <algorithm>
#include <chrono>

namespace kvasir::server {

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
  Worker& w = *workers_[next_.fetch_add(1) % workers_.size()];
  {
    std::lock_guard<std::mutex> lock(w.mu);
    w.inbox.push_back(std::move(task));
  }
  w.cv.notify_one();
}

void ServingPump::stop() {
  if (stop_.exchange(true)) return;
  for (auto& w : workers_) {
    { std::lock_guard<std::mutex> lock(w->mu); }
    w->cv.notify_all();
  }
  for (auto& w : workers_) {
    if (w->thread.joinable()) w->thread.join();
  }
}

void ServingPump::run(Worker& w) {
  std::vector<std::shared_ptr<PumpTask>> active;
  while (!stop_.load()) {
    {
      std::unique_lock<std::mutex> lock(w.mu);
      if (active.empty()) w.cv.wait(lock, [&] { return stop_.load() || !w.inbox.empty(); });
      for (auto& t : w.inbox) active.push_back(std::move(t));
      w.inbox.clear();
    }
    bool busy = false;
    for (size_t i = 0; i < active.size();) {
      PumpTask::Progress p = active[i]->poll();
      if (p == PumpTask::Progress::kDone) {
        active[i] = std::move(active.back());
        active.pop_back();
        busy = true;  // a finished task may have freed room others wait for
        continue;
      }
      if (p == PumpTask::Progress::kBusy) busy = true;
      ++i;
    }
    if (!active.empty()) {
      // Deltas arrive once per engine step, so sweeping back to back only burns CPU: nap a
      // little after a sweep that moved something, longer after an idle one (new tasks wake us).
      const auto nap = busy ? std::chrono::microseconds(200) : std::chrono::microseconds(1000);
      std::unique_lock<std::mutex> lock(w.mu);
      w.cv.wait_for(lock, nap, [&] { return stop_.load() || !w.inbox.empty(); });
    }
  }
}

}  // namespace kvasir::server
