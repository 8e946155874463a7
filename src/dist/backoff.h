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
  void pause() {
    ++iter_;
    if (iter_ < 64) {
      __builtin_ia32_pause();
    } else if (iter_ < 256) {
      sched_yield();
    } else {
      const int64_t ns = iter_ < 512 ? 20'000 : (iter_ < 1024 ? 200'000 : 1'000'000);
      timespec ts{0, ns};
      nanosleep(&ts, nullptr);
    }
  }
  bool check_due() const { return iter_ >= 256 || (iter_ & 31) == 0; }

 private:
  int64_t iter_ = 0;
};

}  // namespace kvasir::dist
