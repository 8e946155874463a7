// BlockingQueue<T>: the only way threads hand work to each other (HTTP -> engine -> output
// processor). Unbounded by design: producers that need back-pressure (the server's admission
// queue) bound themselves. close() wakes every waiter; pops then drain what is left.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>

namespace kvasir {

template <typename T>
class BlockingQueue {
 public:
  void push(T value) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      items_.push_back(std::move(value));
      ++num_pushed_;
    }
    cv_.notify_one();
  }
  // Waits for an item; nullopt once closed and empty.
  std::optional<T> pop() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !items_.empty() || closed_; });
    return take(lock);
  }
  // Waits at most `timeout`; nullopt on time-out or when closed and empty.
  template <typename Rep, typename Period>
  std::optional<T> pop_for(std::chrono::duration<Rep, Period> timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !items_.empty() || closed_; });
    return take(lock);
  }
  std::optional<T> try_pop() {
    std::unique_lock<std::mutex> lock(mu_);
    return take(lock);
  }
  void close() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
    }
    cv_.notify_all();
  }
  bool closed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return closed_;
  }
  // Items ever pushed (a consumer compares it with what it has finished).
  uint64_t num_pushed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return num_pushed_;
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return items_.size();
  }

 private:
  std::optional<T> take(std::unique_lock<std::mutex>&) {
    if (items_.empty()) return std::nullopt;
    T v = std::move(items_.front());
    items_.pop_front();
    return v;
  }
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<T> items_;
  bool closed_ = false;
  uint64_t num_pushed_ = 0;
};

}  // namespace kvasir
