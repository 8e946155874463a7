// ServingPump: a few threads that move engine output to HTTP clients for every request in
// flight. Each thread sweeps its tasks with non-blocking polls (drain the RequestStream, write
// SSE chunks, notice a vanished client) and naps between sweeps (0.2 ms after a busy one, 1 ms
// after an idle one), so thousands of open streams cost a handful of threads, not one each.
// Must not block inside a poll.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace kvasir::server {

class PumpTask {
 public:
  enum class Progress { kIdle, kBusy, kDone };
  virtual ~PumpTask() = default;
  // Makes what progress it can without blocking. kDone: the task is finished and dropped.
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

 private:
  struct Worker {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::shared_ptr<PumpTask>> inbox;
    std::thread thread;
  };
  void run(Worker& w);

  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<size_t> next_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace kvasir::server
