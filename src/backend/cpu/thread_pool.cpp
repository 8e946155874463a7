#include "backend/cpu/thread_pool.h"

#include <chrono>

#include "common/check.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KVASIR_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define KVASIR_CPU_RELAX() asm volatile("yield")
#else
#define KVASIR_CPU_RELAX() ((void)0)
#endif

namespace kvasir {
namespace {

// Set while a thread runs a share, so a nested parallel_for runs inline instead of waiting on
// the pool it is part of.
thread_local bool t_in_region = false;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Reading the clock costs ~20 ns and a pause ~40 ns on recent x86: check every 64 pauses.
constexpr int kRelaxPerClockCheck = 64;
// The caller waiting for the last share yields its core after this many pauses, in case the
// share's thread was descheduled (oversubscribed machines).
constexpr int kCallerSpinsBeforeYield = 2048;

}  // namespace

bool ThreadPool::in_region() { return t_in_region; }

ThreadPool::ThreadPool(int num_threads, const ThreadPoolOptions& opts)
    : num_threads_(num_threads < 1 ? 1 : num_threads),
      spin_ns_(static_cast<int64_t>(opts.spin_us < 0 ? 0 : opts.spin_us) * 1000),
      next_share_(num_threads_) {
  workers_.reserve(static_cast<size_t>(num_threads_ - 1));
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  if (workers_.empty()) return;
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

bool ThreadPool::run_one_share() {
  int share = next_share_.load(std::memory_order_relaxed);
  while (share < num_threads_) {
    if (next_share_.compare_exchange_weak(share, share + 1, std::memory_order_acquire, std::memory_order_relaxed)) {
      t_in_region = true;
      fn_(ctx_, share, num_threads_, n_);
      t_in_region = false;
      done_shares_.fetch_add(1, std::memory_order_release);
      return true;
    }
  }
  return false;
}

void ThreadPool::run(TaskFn fn, void* ctx, int64_t n) {
  const bool was_busy = busy_.exchange(true, std::memory_order_acquire);
  KVASIR_CHECK_MSG(!was_busy, "ThreadPool used from two threads at once");
  // Every share of the previous region is done, so no thread reads these fields now.
  fn_ = fn;
  ctx_ = ctx;
  n_ = n;
  done_shares_.store(0, std::memory_order_relaxed);
  next_share_.store(0, std::memory_order_release);  // publishes the fields to claimers
  // seq_cst pairs with the worker's num_sleeping_ increment then generation_ re-check: either the
  // worker sees the new generation, or we see it counted as sleeping and wake it.
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (num_sleeping_.load(std::memory_order_seq_cst) > 0) generation_.notify_all();

  while (run_one_share()) {
  }
  int spins = 0;
  while (done_shares_.load(std::memory_order_acquire) != num_threads_) {
    if (++spins < kCallerSpinsBeforeYield) {
      KVASIR_CPU_RELAX();
    } else {
      std::this_thread::yield();
    }
  }
  busy_.store(false, std::memory_order_release);
}

void ThreadPool::worker_loop() {
  // Generation 0 is the constructor's: a worker that starts late (its shares already run by the
  // caller) still sees every later bump, the destructor's included.
  uint32_t seen = 0;
  for (;;) {
    uint32_t g;
    const int64_t deadline = now_ns() + spin_ns_;
    int relax = 0;
    while ((g = generation_.load(std::memory_order_acquire)) == seen) {
      KVASIR_CPU_RELAX();
      if (++relax < kRelaxPerClockCheck) continue;
      relax = 0;
      if (now_ns() < deadline) continue;
      num_sleeping_.fetch_add(1, std::memory_order_seq_cst);
      if (generation_.load(std::memory_order_seq_cst) == seen) generation_.wait(seen, std::memory_order_acquire);
      num_sleeping_.fetch_sub(1, std::memory_order_relaxed);
    }
    seen = g;
    if (stop_.load(std::memory_order_acquire)) return;
    while (run_one_share()) {
    }
  }
}

}  // namespace kvasir
