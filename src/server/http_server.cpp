// Threading: one acceptor thread hands sockets round-robin to `num_io_threads` IoLoops. Each
// loop owns its connections outright (level-triggered epoll, non-blocking sockets); other
// threads reach a connection only through its Outbox (http_outbox.h). A connection serves one
// request at a time: while a response is pending it keeps reading (to notice a hang-up) and
// buffers pipelined bytes, parsing them once the response has been sent. A peer that half-closes
// (shutdown(SHUT_WR) after its request, as curl and proxies may) still gets its answer; only a
// reset or a failed write ends a request early.
#include "server/http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "common/log.h"
#include "server/http_io_loop.h"

namespace kvasir::http {
namespace {

// Answers a socket we will not serve (best effort: it must not block) and closes it.
void reject_socket(const ServerOptions& options, int fd, int status) {
  const std::string bytes = error_response(options, status);
  [[maybe_unused]] const ssize_t n =
      send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  shutdown(fd, SHUT_WR);
  close(fd);
}

std::string describe_peer(const sockaddr_storage& ss, socklen_t len) {
  char host[NI_MAXHOST];
  char serv[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&ss), len, host, sizeof host, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  return ss.ss_family == AF_INET6 ? "[" + std::string(host) + "]:" + serv
                                  : std::string(host) + ":" + serv;
}

}  // namespace

struct HttpServer::Impl {
  ServerOptions options;
  Handler handler;
  std::mutex lifecycle_mu;
  int listen_fd = -1;
  int accept_wake_fd = -1;
  int port = 0;
  bool started = false;
  std::thread acceptor;
  std::vector<std::unique_ptr<IoLoop>> loops;
  std::vector<std::thread> threads;
  std::atomic<size_t> num_connections{0};
  std::atomic<bool> draining{false};

  void accept_loop() {
    size_t next = 0;
    while (true) {
      pollfd fds[2] = {{listen_fd, POLLIN, 0}, {accept_wake_fd, POLLIN, 0}};
      if (poll(fds, 2, -1) < 0 && errno != EINTR) break;
      if (fds[1].revents) break;
      while (true) {
        sockaddr_storage ss{};
        socklen_t len = sizeof ss;
        const int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            // Out of descriptors: back off rather than spin on a listener that stays readable.
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          }
          break;
        }
        if (num_connections.load() >= options.max_connections) {
          reject_socket(options, fd, 503);
          continue;
        }
        num_connections.fetch_add(1);
        loops[next++ % loops.size()]->post_accepted(fd, describe_peer(ss, len));
      }
    }
  }

  void stop_accepting_locked() {
    draining.store(true);
    if (acceptor.joinable()) {
      const uint64_t one = 1;
      [[maybe_unused]] const ssize_t n = write(accept_wake_fd, &one, sizeof one);
      acceptor.join();
    }
    if (listen_fd >= 0) close(listen_fd);
    listen_fd = -1;
  }
};

HttpServer::HttpServer(const ServerOptions& options, Handler handler)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  impl_->handler = std::move(handler);
}

HttpServer::~HttpServer() {
  stop();
  if (impl_->accept_wake_fd >= 0) close(impl_->accept_wake_fd);
}

Status HttpServer::start() {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.lifecycle_mu);
  if (s.started) return invalid_argument("http server already started");
  if (s.options.num_io_threads < 1) return invalid_argument("num_io_threads must be >= 1");
  if (s.options.port < 0 || s.options.port > 65535) return invalid_argument("port out of range");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* list = nullptr;
  const std::string port = std::to_string(s.options.port);
  const int rc = getaddrinfo(s.options.host.empty() ? nullptr : s.options.host.c_str(),
                             port.c_str(), &hints, &list);
  if (rc != 0)
    return invalid_argument("cannot resolve host '" + s.options.host + "': " + gai_strerror(rc));
  std::string error = "no address";
  for (addrinfo* ai = list; ai != nullptr && s.listen_fd < 0; ai = ai->ai_next) {
    const int fd =
        socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) {
      s.listen_fd = fd;
    } else {
      error = strerror(errno);
      close(fd);
    }
  }
  freeaddrinfo(list);
  if (s.listen_fd < 0)
    return unavailable("cannot listen on " + s.options.host + ":" + port + ": " + error);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(s.listen_fd, reinterpret_cast<sockaddr*>(&ss), &len);
  s.port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  s.accept_wake_fd = eventfd(0, EFD_CLOEXEC);
  if (s.accept_wake_fd < 0) return internal_error("eventfd: " + std::string(strerror(errno)));
  for (int i = 0; i < s.options.num_io_threads; ++i) {
    auto loop = std::make_unique<IoLoop>(s.options, s.handler, s.num_connections, s.draining);
    KVASIR_RETURN_IF_ERROR(loop->init());
    s.loops.push_back(std::move(loop));
  }
  for (auto& loop : s.loops) s.threads.emplace_back([l = loop.get()] { l->run(); });
  s.acceptor = std::thread([&s] { s.accept_loop(); });
  s.started = true;
  return Status();
}

int HttpServer::port() const { return impl_->port; }

void HttpServer::stop_accepting() {
  std::lock_guard<std::mutex> lock(impl_->lifecycle_mu);
  impl_->stop_accepting_locked();
}

void HttpServer::stop() {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.lifecycle_mu);
  s.stop_accepting_locked();
  for (auto& loop : s.loops) loop->request_stop();
  for (auto& t : s.threads) t.join();
  s.threads.clear();
  s.loops.clear();
}

size_t HttpServer::num_connections() const { return impl_->num_connections.load(); }

}  // namespace kvasir::http
