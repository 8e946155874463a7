// Test helpers for communicators: run one function per rank in forked processes (so every rank is
// a real process, as in production) and collect each rank's verdict; deterministic inputs that any
// rank can compute for any other rank, so the serial reference needs no exchange. Test-only.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

// Inside a rank's body (a function of `int rank` returning its exit code): print where and why
// the rank failed, then return 1 from the body.
#define RANK_CHECK(cond, ...)                                              \
  do {                                                                     \
    if (!(cond)) {                                                         \
      std::fprintf(stderr, "rank %d: %s:%d: ", rank, __FILE__, __LINE__); \
      std::fprintf(stderr, __VA_ARGS__);                                   \
      std::fprintf(stderr, "\n");                                          \
      return 1;                                                            \
    }                                                                      \
  } while (0)

#define RANK_OK(expr)                                                    \
  do {                                                                   \
    Status s_ = (expr);                                                  \
    RANK_CHECK(s_.ok(), "%s failed: %s", #expr, s_.to_string().c_str()); \
  } while (0)

namespace kvasir::dist::testing {

// A socket listening on 127.0.0.1 at a free port (written to *port), made by the parent before it
// forks so that rank 0 can take it over; -1 when loopback refuses.
inline int listen_on_loopback(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd, 64) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

// Rank r's element i of buffer `salt`: a float in [-8, 8) with a full mantissa, so that sums round.
inline float input_value(int r, uint64_t i, uint64_t salt) {
  uint64_t x = (static_cast<uint64_t>(r) + 1) * 0x9e3779b97f4a7c15ull ^ (i + 1) * 0xbf58476d1ce4e5b9ull ^ salt;
  x ^= x >> 31;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 29;
  return static_cast<float>(static_cast<double>(x >> 11) / 9007199254740992.0 * 16.0 - 8.0);
}

// Forks `n` ranks, runs body(rank) in each and returns each rank's exit code (0 = passed; a rank
// prints why it failed). A rank still running after `limit` is killed and reported as 124, so a
// hang fails the test instead of hanging it.
inline std::vector<int> run_ranks(int n, const std::function<int(int)>& body,
                                  std::chrono::milliseconds limit = std::chrono::seconds(120)) {
  std::vector<pid_t> pids(n, -1);
  std::fflush(nullptr);
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      const int code = body(r);
      std::fflush(nullptr);
      _exit(code);
    }
    pids[r] = pid;
  }
  std::vector<int> codes(n, -1);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int left = n;
  while (left > 0) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < n; ++r)
        if (pids[r] == pid) {
          codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
          --left;
        }
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < n; ++r)
        if (codes[r] < 0) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], nullptr, 0);
          codes[r] = 124;
          std::fprintf(stderr, "rank %d did not finish within the limit: killed\n", r);
        }
      break;
    }
    usleep(2000);
  }
  return codes;
}

}  // namespace kvasir::dist::testing
