#include "dist/tcp_socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "dist/op_kind.h"

namespace kvasir::dist {
namespace {

constexpr uint32_t kFrameMagic = 0x6b764652;  // "kvFR"

int ms_until(Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1000));
}

Status sys_error(const std::string& what) { return unavailable(what + ": " + std::strerror(errno)); }

StatusOr<addrinfo*> resolve(const std::string& addr, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(addr.empty() ? nullptr : addr.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) return invalid_argument("tcp communicator: cannot resolve '" + addr + "': " + gai_strerror(rc));
  return res;
}

std::string numeric(const sockaddr_storage& ss, socklen_t len, int* port) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&ss), len, host, sizeof(host), serv, sizeof(serv),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "?";
  if (port) *port = std::atoi(serv);
  return host;
}

}  // namespace

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}
Socket::~Socket() {
  if (fd_ >= 0) close(fd_);
}
void Socket::shutdown_both() {
  if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
}

void set_nodelay_nonblocking(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

std::string local_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return numeric(ss, len, nullptr);
}
std::string peer_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return numeric(ss, len, nullptr);
}
int local_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  int port = 0;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) numeric(ss, len, &port);
  return port;
}

StatusOr<Socket> listen_on(const std::string& addr, int port, int backlog) {
  auto res = resolve(addr, port, true);
  if (!res.ok()) return res.status();
  Status last = unavailable("tcp communicator: no address to listen on for '" + addr + "'");
  for (addrinfo* ai = *res; ai; ai = ai->ai_next) {
    Socket s(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!s.valid()) continue;
    int one = 1;
    setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(s.fd(), ai->ai_addr, ai->ai_addrlen) == 0 && listen(s.fd(), backlog) == 0) {
      freeaddrinfo(*res);
      return s;
    }
    last = sys_error("tcp communicator: cannot listen on " + addr + ":" + std::to_string(port));
  }
  freeaddrinfo(*res);
  return last;
}

StatusOr<Socket> accept_until(const Socket& listener, Deadline deadline) {
  for (;;) {
    pollfd p{listener.fd(), POLLIN, 0};
    const int rc = poll(&p, 1, ms_until(deadline));
    if (rc > 0) {
      Socket s(accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC));
      if (s.valid()) return s;
      if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) return sys_error("tcp communicator: accept");
    } else if (rc < 0 && errno != EINTR) {
      return sys_error("tcp communicator: poll on the listener");
    }
    if (std::chrono::steady_clock::now() >= deadline) return unavailable("tcp communicator: no connection came in time");
  }
}

StatusOr<Socket> dial_until(const std::string& addr, int port, Deadline deadline) {
  auto res = resolve(addr, port, false);
  if (!res.ok()) return res.status();
  Status last = unavailable("tcp communicator: no address for '" + addr + "'");
  for (;;) {
    for (addrinfo* ai = *res; ai; ai = ai->ai_next) {
      Socket s(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
      if (!s.valid()) continue;
      if (connect(s.fd(), ai->ai_addr, ai->ai_addrlen) == 0) {
        freeaddrinfo(*res);
        return s;
      }
      last = sys_error("tcp communicator: cannot connect to " + addr + ":" + std::to_string(port));
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    usleep(10'000);  // the listener may not be up yet
  }
  freeaddrinfo(*res);
  return last;
}

Status write_all(int fd, const void* data, size_t bytes, Deadline deadline) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (bytes > 0) {
    pollfd pf{fd, POLLOUT, 0};
    if (poll(&pf, 1, ms_until(deadline)) < 0 && errno != EINTR) return sys_error("tcp communicator: poll");
    const ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
      return sys_error("tcp communicator: send");
    }
    if (bytes > 0 && std::chrono::steady_clock::now() >= deadline) return unavailable("tcp communicator: send timed out");
  }
  return Status();
}

Status read_all(int fd, void* data, size_t bytes, Deadline deadline) {
  auto* p = static_cast<uint8_t*>(data);
  while (bytes > 0) {
    pollfd pf{fd, POLLIN, 0};
    if (poll(&pf, 1, ms_until(deadline)) < 0 && errno != EINTR) return sys_error("tcp communicator: poll");
    const ssize_t n = ::recv(fd, p, bytes, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
    } else if (n == 0) {
      return unavailable("tcp communicator: the peer closed the connection");
    } else if (errno != EAGAIN && errno != EINTR) {
      return sys_error("tcp communicator: recv");
    }
    if (bytes > 0 && std::chrono::steady_clock::now() >= deadline) return unavailable("tcp communicator: recv timed out");
  }
  return Status();
}

namespace {

std::string peer_name(const Transfer& t) { return "rank " + std::to_string(t.peer); }

// Checks a received header against the transfer's expectation.
Status check_header(const Transfer& t, const char* op) {
  const FrameHeader& h = t.in_header;
  if (h.magic != kFrameMagic)
    return data_loss(std::string("tcp communicator: ") + op + ": " + peer_name(t) + " sent a frame without our magic");
  if (h.kind != t.kind || h.seq != t.seq || h.bytes != t.recv_bytes)
    return invalid_argument(std::string("tcp communicator: this rank is in ") + op_kind_name(t.kind) + " #" +
                            std::to_string(t.seq) + " expecting " + std::to_string(t.recv_bytes) + " bytes from " +
                            peer_name(t) + ", which sent " + op_kind_name(h.kind) + " #" + std::to_string(h.seq) +
                            " of " + std::to_string(h.bytes) + " bytes (ranks called different ops or sizes)");
  return Status();
}

// Moves what it can of t without blocking; sets *progressed when bytes moved.
Status pump(Transfer& t, short revents, const char* op, bool* progressed) {
  const size_t hdr = sizeof(FrameHeader);
  if (t.has_send && (revents & (POLLOUT | POLLERR | POLLHUP))) {
    while (t.sent < hdr + t.send_bytes) {
      const bool in_header = t.sent < hdr;
      const uint8_t* p = in_header ? reinterpret_cast<const uint8_t*>(&t.out_header) + t.sent
                                   : static_cast<const uint8_t*>(t.send) + (t.sent - hdr);
      const size_t len = in_header ? hdr - t.sent : t.send_bytes - (t.sent - hdr);
      const ssize_t n = ::send(t.fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        t.sent += static_cast<size_t>(n);
        *progressed = true;
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
      return unavailable(std::string("tcp communicator: ") + op + ": " + peer_name(t) +
                         " is gone (send: " + std::strerror(errno) + "; it exited, crashed or failed)");
    }
  }
  if (t.has_recv && (revents & (POLLIN | POLLHUP | POLLERR))) {
    while (t.received < hdr + t.recv_bytes) {
      const bool in_header = t.received < hdr;
      uint8_t* p = in_header ? reinterpret_cast<uint8_t*>(&t.in_header) + t.received
                             : static_cast<uint8_t*>(t.recv) + (t.received - hdr);
      const size_t len = in_header ? hdr - t.received : t.recv_bytes - (t.received - hdr);
      const ssize_t n = ::recv(t.fd, p, len, MSG_DONTWAIT);
      if (n > 0) {
        t.received += static_cast<size_t>(n);
        *progressed = true;
        if (t.received == hdr) {
          Status s = check_header(t, op);
          if (!s.ok()) return s;
        }
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
      return unavailable(std::string("tcp communicator: ") + op + ": " + peer_name(t) +
                         " closed its connection (it exited, crashed or its communicator failed)" +
                         (n < 0 ? std::string(": ") + std::strerror(errno) : std::string()));
    }
  }
  return Status();
}

bool done(const Transfer& t) {
  const size_t hdr = sizeof(FrameHeader);
  return (!t.has_send || t.sent == hdr + t.send_bytes) && (!t.has_recv || t.received == hdr + t.recv_bytes);
}

}  // namespace

Status exchange(std::vector<Transfer>& transfers, const char* op, int64_t idle_timeout_ms) {
  for (Transfer& t : transfers) {
    t.out_header = FrameHeader{kFrameMagic, t.kind, t.seq, t.send_bytes};
    t.sent = t.received = 0;
  }
  std::vector<pollfd> fds;  // small: one per peer of this op
  std::vector<Transfer*> waiting;
  auto last_progress = std::chrono::steady_clock::now();
  for (;;) {
    fds.clear();
    waiting.clear();
    for (Transfer& t : transfers) {
      if (done(t)) continue;
      const bool want_out = t.has_send && t.sent < sizeof(FrameHeader) + t.send_bytes;
      const bool want_in = t.has_recv && t.received < sizeof(FrameHeader) + t.recv_bytes;
      fds.push_back(pollfd{t.fd, static_cast<short>((want_out ? POLLOUT : 0) | (want_in ? POLLIN : 0)), 0});
      waiting.push_back(&t);
    }
    if (fds.empty()) return Status();
    const int rc = poll(fds.data(), fds.size(), 100);
    if (rc < 0 && errno != EINTR) return sys_error(std::string("tcp communicator: ") + op + ": poll");
    bool progressed = false;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Status s = pump(*waiting[i], fds[i].revents, op, &progressed);
      if (!s.ok()) return s;
    }
    const auto now = std::chrono::steady_clock::now();
    if (progressed) {
      last_progress = now;
    } else if (now - last_progress > std::chrono::milliseconds(idle_timeout_ms)) {
      std::string who;
      for (Transfer* t : waiting) who += (who.empty() ? "" : ", ") + peer_name(*t);
      return unavailable(std::string("tcp communicator: ") + op + " timed out after " +
                         std::to_string(idle_timeout_ms) + " ms without a byte from or to " + who);
    }
  }
}

}  // namespace kvasir::dist
