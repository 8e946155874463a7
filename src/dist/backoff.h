// Backoff: how a rank waits for a peer without a syscall per check and without burning a core
// that the peer may need: a few spins, then yields, then sleeps growing to 1 ms. The caller
// checks its condition before each pause; `check_due` says when the slower checks (peer liveness,
// the deadline) are due, so they do not run on every spin.
#pragma once

#include <sched.h>
#include <time.h>

#include <cstdint>

namespace kvasir::dist {

class Backoff {
 public:
  // yield_ns > 0: keep yielding (never sleeping) until that long has passed since the first
  // yield, for a waiter whose peer answers within a step and whose core is not needed meanwhile
  // (ShmCommunicatorOptions::busy_wait_us); a sleep's wake-up costs 20-200 us.
  explicit Backoff(int64_t yield_ns = 0) : yield_ns_(yield_ns) {}

  void pause() {
    ++iter_;
    if (iter_ < 64) {
      __builtin_ia32_pause();
    } else if (iter_ < 256 || still_yielding()) {
      sched_yield();
    } else {
      ++sleeps_;
      const int64_t ns = sleeps_ < 256 ? 20'000 : (sleeps_ < 768 ? 200'000 : 1'000'000);
      timespec ts{0, ns};
      nanosleep(&ts, nullptr);
    }
  }
  bool check_due() const { return sleeps_ > 0 || (iter_ & 31) == 0; }

 private:
  static int64_t now_ns() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
  }
  // Reads the clock once per 64 yields.
  bool still_yielding() {
    if (yield_ns_ <= 0 || sleeps_ > 0) return false;
    if (yield_start_ == 0) yield_start_ = now_ns();
    if ((iter_ & 63) != 0) return true;
    if (now_ns() - yield_start_ < yield_ns_) return true;
    yield_ns_ = 0;
    return false;
  }

  int64_t iter_ = 0;
  int64_t sleeps_ = 0;
  int64_t yield_ns_ = 0;
  int64_t yield_start_ = 0;
};

}  // namespace kvasir::dist
