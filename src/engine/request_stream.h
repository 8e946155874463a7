// RequestStream: the per-request channel from the output processor to one client (an HTTP
// handler or the offline API). Deltas queue up in order; the last one has finished = true.
// Thread-safe; the consumer may block, wait with a time-out, or take without waiting and ask
// to be told (a token pushed onto its queue) when the next delta is there.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "common/blocking_queue.h"
#include "engine/request_output.h"

namespace kvasir {

class RequestStream {
 public:
  RequestStream(std::string request_id, int num_children) : request_id_(std::move(request_id)), num_open_(num_children) {}

  const std::string& request_id() const { return request_id_; }

  // Blocks until the next delta; false once every child finished and all deltas were taken.
  bool next(RequestOutput* out) { return next_for(out, std::chrono::hours(24 * 365)); }
  template <typename Rep, typename Period>
  bool next_for(RequestOutput* out, std::chrono::duration<Rep, Period> timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !items_.empty() || num_open_ == 0; });
    if (items_.empty()) return false;
    *out = std::move(items_.front());
    items_.pop_front();
    return true;
  }
  // Takes the next delta if there is one; never waits (no futex call, no timer).
  bool try_next(RequestOutput* out) {
    std::lock_guard<std::mutex> lock(mu_);
    if (items_.empty()) return false;
    *out = std::move(items_.front());
    items_.pop_front();
    return true;
  }
  // Pushes `token` onto `ready` whenever the stream goes from nothing to take to something (at
  // once if it already has something), so one thread can wait on many streams without polling.
  // Coalesced: a consumer that takes everything per wake-up gets one token per batch of deltas.
  // One watcher; a later call replaces it.
  void notify_on_ready(std::shared_ptr<BlockingQueue<uint64_t>> ready, uint64_t token) {
    bool now = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready_ = ready;
      ready_token_ = token;
      now = !items_.empty();
    }
    if (now) ready->push(token);
  }
  // Every child sent its last delta (the consumer may not have taken them yet).
  bool all_finished() const {
    std::lock_guard<std::mutex> lock(mu_);
    return num_open_ == 0;
  }
  bool done() const {
    std::lock_guard<std::mutex> lock(mu_);
    return num_open_ == 0 && items_.empty();
  }

  // Producer side (output processor).
  void push(RequestOutput out) {
    std::shared_ptr<BlockingQueue<uint64_t>> ring;
    uint64_t token = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (out.finished) --num_open_;
      if (items_.empty() && ready_) {
        ring = ready_;
        token = ready_token_;
      }
      items_.push_back(std::move(out));
    }
    cv_.notify_all();
    if (ring) ring->push(token);
  }

 private:
  std::string request_id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> items_;
  int num_open_;
  std::shared_ptr<BlockingQueue<uint64_t>> ready_;  // notify_on_ready's watcher
  uint64_t ready_token_ = 0;
};

}  // namespace kvasir
