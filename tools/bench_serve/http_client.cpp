#include "bench_serve/http_client.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>

namespace kvasir::bench {

StatusOr<BaseUrl> parse_base_url(std::string_view url) {
  BaseUrl out;
  if (url.substr(0, 8) == "https://")
    return invalid_argument("https is not supported (plain HTTP only): " +
                            std::string(url));
  if (url.substr(0, 7) == "http://")
    url.remove_prefix(7);
  const size_t slash = url.find('/');
  std::string_view authority = url.substr(0, slash);
  if (slash != std::string_view::npos) {
    std::string_view prefix = url.substr(slash);
    while (!prefix.empty() && prefix.back() == '/')
      prefix.remove_suffix(1);
    out.path_prefix = std::string(prefix);
  }
  if (authority.empty())
    return invalid_argument("base URL has no host");
  std::string_view host = authority;
  if (authority.front() == '[') { // [::1]:8000
    const size_t close = authority.find(']');
    if (close == std::string_view::npos)
      return invalid_argument("bad IPv6 host in base URL");
    host = authority.substr(1, close - 1);
    authority.remove_prefix(close + 1);
  } else {
    const size_t colon = authority.rfind(':');
    host = authority.substr(0, colon);
    authority = colon == std::string_view::npos ? std::string_view()
                                                : authority.substr(colon);
  }
  out.host = std::string(host);
  if (!authority.empty()) {
    if (authority.front() != ':' || authority.size() < 2 ||
        authority.size() > 6)
      return invalid_argument("bad port in base URL");
    int port = 0;
    for (char c : authority.substr(1)) {
      if (c < '0' || c > '9')
        return invalid_argument("bad port in base URL");
      port = port * 10 + (c - '0');
    }
    if (port < 1 || port > 65535)
      return invalid_argument("port out of range in base URL");
    out.port = port;
  } else {
    out.port = 80;
  }
  return out;
}

std::string build_post_request(const BaseUrl &url, const std::string &path,
                               std::string_view body,
                               const std::vector<std::string> &extra_headers) {
  std::string r = "POST " + url.path_prefix + path + " HTTP/1.1\r\nHost: ";
  r +=
      url.host.find(':') != std::string::npos ? "[" + url.host + "]" : url.host;
  r += ":" + std::to_string(url.port) + "\r\n";
  r += "Content-Type: application/json\r\nAccept: text/event-stream, "
       "application/json\r\n";
  r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  for (const auto &h : extra_headers)
    r += h + "\r\n";
  r += "\r\n";
  r.append(body);
  return r;
}

HttpConnection::~HttpConnection() { close(); }

HttpConnection &HttpConnection::operator=(HttpConnection &&o) noexcept {
  if (this != &o) {
    close();
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

void HttpConnection::close() {
  if (fd_ >= 0)
    ::close(fd_);
  fd_ = -1;
}

Status HttpConnection::wait_for(short events, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - Clock::now())
                          .count();
    if (left <= 0)
      return unavailable("request timed out");
    pollfd p{fd_, events, 0};
    const int r =
        ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1 << 30)));
    if (r > 0)
      return Status();
    if (r < 0 && errno != EINTR)
      return unavailable(std::string("poll: ") + std::strerror(errno));
  }
}

StatusOr<HttpConnection> HttpConnection::connect(const std::string &host,
                                                 int port,
                                                 Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo *res = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
      rc != 0) {
    return unavailable("cannot resolve " + host + ": " + ::gai_strerror(rc));
  }
  std::string last_error = "no address";
  for (addrinfo *ai = res; ai; ai = ai->ai_next) {
    const int fd =
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                 ai->ai_protocol);
    if (fd < 0)
      continue;
    HttpConnection c(fd);
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        last_error = std::strerror(errno);
        continue;
      }
      if (Status st = c.wait_for(POLLOUT, deadline); !st.ok()) {
        last_error = st.message();
        continue;
      }
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        last_error = std::strerror(err);
        continue;
      }
    }
    ::freeaddrinfo(res);
    return c;
  }
  ::freeaddrinfo(res);
  return unavailable("cannot connect to " + host + ":" + service + ": " +
                     last_error);
}

Status HttpConnection::send_all(std::string_view data,
                                Clock::time_point deadline) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      KVASIR_RETURN_IF_ERROR(wait_for(POLLOUT, deadline));
    } else if (n < 0 && errno != EINTR) {
      return unavailable(std::string("send: ") + std::strerror(errno));
    }
  }
  return Status();
}

StatusOr<size_t> HttpConnection::read_some(char *buf, size_t cap,
                                           Clock::time_point deadline) {
  for (;;) {
    const ssize_t n = ::recv(fd_, buf, cap, 0);
    if (n >= 0)
      return static_cast<size_t>(n);
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      KVASIR_RETURN_IF_ERROR(wait_for(POLLIN, deadline));
    } else if (errno != EINTR) {
      return unavailable(std::string("recv: ") + std::strerror(errno));
    }
  }
}

} // namespace kvasir::bench
