// TCP plumbing for TcpCommunicator: an owning socket handle, listen / dial with retries until a
// deadline, blocking-with-deadline reads and writes for the handshake, and `exchange`, which moves
// a set of framed transfers (each a send and/or a receive with one peer) all at once with poll(),
// so that ranks sending large frames to each other never block on each other. Knows nothing of
// collectives beyond the frame header it checks.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace kvasir::dist {

using Deadline = std::chrono::steady_clock::time_point;

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket();
  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void shutdown_both();  // wakes the peer with EOF; the fd stays open until destruction
  int release() {  // the fd, no longer owned
    const int f = fd_;
    fd_ = -1;
    return f;
  }

 private:
  int fd_ = -1;
};

// Every frame starts with this header; the receiver checks each field against what it expects.
struct FrameHeader {
  uint32_t magic;
  uint32_t kind;  // OpKind
  uint64_t seq;
  uint64_t bytes;
};

// One peer's part of an op: send `send_bytes` from `send` and/or receive exactly `recv_bytes`
// into `recv`, each as one frame of `kind` numbered `seq`.
struct Transfer {
  int peer = -1;
  int fd = -1;
  uint32_t kind = 0;
  uint64_t seq = 0;
  const void* send = nullptr;
  size_t send_bytes = 0;
  bool has_send = false;
  void* recv = nullptr;
  size_t recv_bytes = 0;
  bool has_recv = false;
  // Progress, owned by exchange().
  FrameHeader out_header{}, in_header{};
  size_t sent = 0, received = 0;
};

StatusOr<Socket> listen_on(const std::string& addr, int port, int backlog);
StatusOr<Socket> accept_until(const Socket& listener, Deadline deadline);
// Dials addr:port until it answers or the deadline passes (the listener may not be up yet).
StatusOr<Socket> dial_until(const std::string& addr, int port, Deadline deadline);
Status write_all(int fd, const void* data, size_t bytes, Deadline deadline);
Status read_all(int fd, void* data, size_t bytes, Deadline deadline);
void set_nodelay_nonblocking(int fd);
// The numeric address and port of the socket's local / remote end.
std::string local_address(int fd);
std::string peer_address(int fd);
int local_port(int fd);

// Moves every transfer to completion, or fails on the first broken socket or bad header, or when
// no byte moved for idle_timeout_ms (a slow but moving transfer of a large buffer is not cut off),
// naming the peer and `op`.
Status exchange(std::vector<Transfer>& transfers, const char* op, int64_t idle_timeout_ms);

}  // namespace kvasir::dist
