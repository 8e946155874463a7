// RequestStream: the per-request channel from the output processor to one client (an HTTP
// handler or the offline API). Deltas queue up in order; the last one has finished = true.
// Thread-safe; the consumer may block, poll, or wait with a time-out.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>

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
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (out.finished) --num_open_;
      items_.push_back(std::move(out));
    }
    cv_.notify_all();
  }

 private:
  std::string request_id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> items_;
  int num_open_;
};

}  // namespace kvasir
