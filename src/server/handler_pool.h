// HandlerPool: a few threads that run the request handlers which read a body (JSON parsing,
// validation, chat templating, tokenization, grammar compilation), so that the HTTP I/O threads
// only move bytes: /health and running streams never wait behind another client's prompt.
// Bounded: at most `max_tasks` tasks are queued or running and they hold at most `max_bytes` of
// request bodies; past either, try_submit refuses and the caller answers 429 instead of queueing
// unbounded memory. Must not know about HTTP, routes or the engine.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvasir::server {

struct HandlerPoolOptions {
  int num_threads = 2;
  // Queued + running. A connection has one request in flight at a time, so the server's
  // connection bound (4,096) bounds this already; the bytes are the bound that matters.
  size_t max_tasks = 4096;
  size_t max_bytes = size_t{96} << 20;  // request bytes held by queued + running tasks
  // Added to the threads' nice value: on a busy machine preparing a new request yields the CPU
  // to the engine and the I/O threads, which serve requests already running.
  int nice_increment = 5;
};

class HandlerPool {
 public:
  explicit HandlerPool(HandlerPoolOptions options);
  ~HandlerPool();  // stop()
  HandlerPool(const HandlerPool&) = delete;
  HandlerPool& operator=(const HandlerPool&) = delete;

  // Queues `task`, which holds `bytes` of request data until it returns. False (the task is
  // not taken) when the pool is full or stopped. A task alone larger than max_bytes is taken
  // when the pool is idle, so that no request within the body limit can never run.
  bool try_submit(size_t bytes, std::function<void()> task);
  // Runs what is already queued, then joins the threads; later try_submit calls refuse.
  void stop();

  size_t num_tasks() const;  // queued + running
  const HandlerPoolOptions& options() const { return options_; }

 private:
  struct Task {
    size_t bytes;
    std::function<void()> run;
  };
  void work();

  const HandlerPoolOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  size_t num_tasks_ = 0;
  size_t num_bytes_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvasir::server
