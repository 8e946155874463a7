#include "server/handler_pool.h"

#include <malloc.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <exception>

#include "common/log.h"

namespace kvasir::server {
namespace {

constexpr size_t kTrimAfterBytes = size_t{4} << 20;

}  // namespace

HandlerPool::HandlerPool(HandlerPoolOptions options) : options_(options) {
  const int n = std::max(1, options_.num_threads);
  threads_.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { work(); });
}

HandlerPool::~HandlerPool() { stop(); }

bool HandlerPool::try_submit(size_t bytes, std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || num_tasks_ >= options_.max_tasks) return false;
    if (num_tasks_ > 0 && num_bytes_ + bytes > options_.max_bytes) return false;
    ++num_tasks_;
    num_bytes_ += bytes;
    queue_.push_back(Task{bytes, std::move(task)});
  }
  cv_.notify_one();
  return true;
}

void HandlerPool::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

size_t HandlerPool::num_tasks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return num_tasks_;
}

void HandlerPool::work() {
  if (options_.nice_increment != 0) {  // Linux: per thread; failing leaves the thread as it was
    const auto tid = static_cast<id_t>(syscall(SYS_gettid));
    errno = 0;
    const int nice = getpriority(PRIO_PROCESS, tid);
    if (errno == 0) setpriority(PRIO_PROCESS, tid, std::min(19, nice + options_.nice_increment));
  }
  while (true) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    // A handler answers its own errors; one that throws must not take the pool down with it.
    try {
      task.run();
    } catch (const std::exception& e) {
      KVASIR_LOG_ERROR("request handler threw: %s", e.what());
    } catch (...) {
      KVASIR_LOG_ERROR("request handler threw");
    }
    task.run = nullptr;  // the request (and its body) goes before the bytes are released
    {
      // Released before the trim below: a trim of a big heap takes milliseconds, and a client
      // that sends its next maximal body as soon as it has its answer must not be refused (429)
      // for a body already freed.
      std::lock_guard<std::mutex> lock(mu_);
      --num_tasks_;
      num_bytes_ -= task.bytes;
    }
    // After freeing a big block glibc raises its mmap threshold (up to 32 MiB), so the next big
    // body lands in a thread's heap arena, which keeps it resident once freed: every arena would
    // hold the high-water mark of past uploads. Handing free pages back after a big request
    // keeps resident memory at what the requests in flight hold.
    if (task.bytes >= kTrimAfterBytes) malloc_trim(0);
  }
}

}  // namespace kvasir::server
