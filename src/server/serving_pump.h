// ServingPump: a few threads that move engine output to HTTP clients for every request in
// flight. A thread sleeps, untimed, on its ready queue and polls only the tasks whose token was
// pushed there: by the output processor when a RequestStream gets its next delta, by an I/O
// thread when a client hangs up, by ServingPump::add for a task's first poll. No task waits on a
// timer, and thousands of idle streams cost nothing between their deltas. Must not block
// inside a poll, and must not touch a task from any thread but its pump thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "common/blocking_queue.h"

namespace kvasir::server {

// What a producer pushes to get a task polled: the task's token onto its pump thread's queue.
// Rings coalesce: tokens that pile up while the thread works buy one poll each sweep.
struct PumpBell {
  std::shared_ptr<BlockingQueue<uint64_t>> queue;
  uint64_t token = 0;
  void ring() const { queue->push(token); }
};

class PumpTask {
 public:
  enum class Progress { kWaiting, kDone };
  virtual ~PumpTask() = default;
  // Called once by ServingPump::add (on the adding thread), before the first poll: the task
  // arranges for `bell` to ring whenever it may progress (a delta, a hang-up). A ring that
  // comes before the task reaches its thread is not lost: add() rings once more after.
  virtual void attach(const PumpBell& bell) = 0;
  // Makes what progress it can without blocking, taking everything that is ready (the next
  // poll comes only with the next ring). kDone: the task is finished and dropped.
  virtual Progress poll() = 0;
};

class ServingPump {
 public:
  explicit ServingPump(int num_threads);
  ~ServingPump();
  ServingPump(const ServingPump&) = delete;
  ServingPump& operator=(const ServingPump&) = delete;

  void add(std::shared_ptr<PumpTask> task);
  // Joins the threads; tasks still active are dropped unpolled.
  void stop();
  // Times a pump thread came out of its wait (every one answers at least one ring).
  uint64_t num_wakeups() const { return num_wakeups_.load(std::memory_order_relaxed); }

 private:
  struct Worker {
    std::shared_ptr<BlockingQueue<uint64_t>> ready = std::make_shared<BlockingQueue<uint64_t>>();
    std::mutex mu;  // guards inbox
    std::vector<std::pair<uint64_t, std::shared_ptr<PumpTask>>> inbox;
    std::thread thread;
  };
  void run(Worker& w);

  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<uint64_t> next_token_{1};
  std::atomic<uint64_t> num_wakeups_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace kvasir::server
