// ThreadPool: fork-join parallel regions for the CPU backend, tuned for decode, where a token runs
// ~200 regions of 20-100 us each. Workers spin on an atomic generation counter between regions
// (then sleep on a futex after a grace period), so starting a region costs well under a microsecond.
// A region is num_threads() shares; any thread may claim any share, so a worker the OS has
// descheduled delays nobody: the caller runs its share instead.
// Must not queue tasks: one external thread submits at a time, a region returns only after every
// share finished, and nested regions run inline.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <vector>

namespace kvasir {

struct ThreadPoolOptions {
  // How long an idle worker spins before it sleeps. Regions closer together than this start
  // without a wake-up syscall; longer idle periods leave the cores to others.
  int spin_us = 1000;
};

class ThreadPool {
 public:
  // `num_threads` counts the calling thread: ThreadPool(1) starts no worker and runs inline.
  explicit ThreadPool(int num_threads, const ThreadPoolOptions& opts = {});
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Splits [0, n) into num_threads() contiguous, near-equal ranges and calls f(begin, end) once per
  // non-empty range, on whichever threads claim them. Best for uniform work (matmul rows).
  template <typename F>
  void parallel_for(int64_t n, F&& f) {
    if (n <= 0) return;
    if (n == 1 || num_threads_ == 1 || in_region()) {
      f(int64_t{0}, n);
      return;
    }
    using Fn = std::remove_reference_t<F>;
    run(
        [](void* ctx, int tid, int nt, int64_t total) {
          const int64_t b = total * tid / nt, e = total * (tid + 1) / nt;
          if (b < e) (*static_cast<Fn*>(ctx))(b, e);
        },
        const_cast<void*>(static_cast<const void*>(&f)), n);
  }

  // Hands out [0, n) in chunks of `grain` to whichever thread is free: for uneven work (attention
  // over sequences of different lengths). f(begin, end) may run many times per thread.
  template <typename F>
  void parallel_for_dynamic(int64_t n, int64_t grain, F&& f) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (n <= grain || num_threads_ == 1 || in_region()) {
      f(int64_t{0}, n);
      return;
    }
    struct Ctx {
      std::remove_reference_t<F>* f;
      int64_t grain;
      std::atomic<int64_t> next{0};
    } ctx{&f, grain};
    run(
        [](void* p, int, int, int64_t total) {
          auto* c = static_cast<Ctx*>(p);
          for (;;) {
            const int64_t b = c->next.fetch_add(c->grain, std::memory_order_relaxed);
            if (b >= total) break;
            (*c->f)(b, b + c->grain < total ? b + c->grain : total);
          }
        },
        &ctx, n);
  }

  // Calls f(share, num_shares) once for every share in [0, num_threads()); each share runs on one
  // thread (not necessarily a distinct one), so `share` can index per-share scratch.
  template <typename F>
  void run_on_all(F&& f) {
    if (num_threads_ == 1 || in_region()) {
      for (int t = 0; t < num_threads_; ++t) f(t, num_threads_);
      return;
    }
    using Fn = std::remove_reference_t<F>;
    run([](void* ctx, int tid, int nt, int64_t) { (*static_cast<Fn*>(ctx))(tid, nt); },
        const_cast<void*>(static_cast<const void*>(&f)), 0);
  }

 private:
  using TaskFn = void (*)(void* ctx, int thread_index, int num_threads, int64_t n);

  static bool in_region();
  void run(TaskFn fn, void* ctx, int64_t n);
  bool run_one_share();
  void worker_loop();

  const int num_threads_;
  const int64_t spin_ns_;
  std::vector<std::thread> workers_;

  // The region being run: written by the submitter before it reopens next_share_ (release), read
  // by a thread after it claims a share (acquire); rewritten only once every share is done.
  TaskFn fn_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_ = 0;
  std::atomic<bool> stop_{false};

  alignas(64) std::atomic<uint32_t> generation_{0};  // bumped per region: what idle workers watch
  alignas(64) std::atomic<int> next_share_;           // shares claimed so far (>= num_threads_: none left)
  alignas(64) std::atomic<int> done_shares_{0};
  alignas(64) std::atomic<int> num_sleeping_{0};
  std::atomic<bool> busy_{false};
};

}  // namespace kvasir
