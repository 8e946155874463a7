// The I/O threads' connection state machine (see http_io_loop.h): reading and parsing requests,
// dispatching them, writing responses and SSE streams through the Outbox, half-close, lingering
// after an error, time-outs.
#include "server/http_io_loop.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/log.h"
#include "server/http_outbox.h"
#include "server/http_parser.h"

namespace kvasir::http {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kReadChunkBytes = 64 * 1024;
// Input buffered while a response is pending (pipelined requests); past it we stop reading
// but still learn about a hang-up through EPOLLRDHUP.
constexpr size_t kMaxPipelinedBytes = 1 << 20;
// After an error response, how long we keep draining what the client still sends so that
// closing does not turn into a reset that destroys the response in flight.
constexpr auto kLingerTime = std::chrono::milliseconds(1000);
constexpr uint64_t kMailboxId = 0;

// Connection state owned by its I/O thread.
struct Conn {
  enum class State { kReading, kResponding, kLingering };
  int fd = -1;
  uint64_t id = 0;
  std::string remote;
  std::shared_ptr<Outbox> outbox;
  RequestParser parser;
  State state = State::kReading;
  std::string in;  // unparsed input from in_pos on
  size_t in_pos = 0;
  std::string out;  // bytes being written, from out_pos on
  size_t out_pos = 0;
  bool have_last = false;      // `out` holds the end of the current response
  bool response_sent = false;  // ... and it has left: the connection may move on
  bool close_after = false;
  bool sent_continue = false;
  bool reading = true;    // EPOLLIN wanted (registered unless input_ended)
  bool peer_done = false;    // the peer sent FIN: it may still read, but sends nothing more
  bool input_ended = false;  // ... and every byte before the FIN has been read
  bool answer_begun = false;  // bytes of the current response came from the outbox
  int version_minor = 1;      // of the request being answered
  bool want_out = false;  // EPOLLOUT registered
  bool dead = false;
  bool request_timing = false;
  Clock::time_point idle_since;     // kReading: since when no byte of the next request came
  Clock::time_point request_start;  // first byte of the request being received
  Clock::time_point linger_until;
};

}  // namespace

// A complete response for a request we refuse (options.error_page, else plain text); closes after it.
std::string error_response(const ServerOptions& options, int status, std::string_view detail) {
  Response r;
  if (options.error_page) r = options.error_page(status, detail);
  if (!options.error_page || r.body.empty()) {
    r.headers = {{"Content-Type", "text/plain"}};
    r.body = std::string(status_reason(status)) + "\n";
  }
  return format_response_head(status, r.headers, "Content-Length: " + std::to_string(r.body.size()), false) +
         r.body;
}

class IoLoop::Impl {
 public:
  Impl(const ServerOptions& options, const Handler& handler, std::atomic<size_t>& num_connections,
         std::atomic<bool>& draining)
      : options_(options),
        handler_(handler),
        num_connections_(num_connections),
        draining_(draining) {
    limits_ = ParserLimits{options.max_header_bytes, options.max_header_count,
                           options.max_uri_bytes, options.max_body_bytes};
    const auto shortest = std::min(options.header_timeout, options.idle_timeout);
    tick_ = std::clamp(shortest / 10, std::chrono::milliseconds(5), std::chrono::milliseconds(100));
  }
  ~Impl() {
    if (epoll_fd_ >= 0) close(epoll_fd_);
  }

  Status init() {
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd_ < 0 || mailbox_->event_fd < 0)
      return internal_error("epoll/eventfd: " + std::string(strerror(errno)));
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kMailboxId;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, mailbox_->event_fd, &ev) != 0)
      return internal_error("epoll_ctl");
    return Status();
  }

  void post_accepted(int fd, std::string remote) {
    mailbox_->post([&](Mailbox& m) { m.accepted.emplace_back(fd, std::move(remote)); });
  }
  void request_stop() {
    mailbox_->post([](Mailbox& m) { m.stop = true; });
  }

  void run() {
    std::vector<epoll_event> events(256);
    auto next_scan = Clock::now() + tick_;
    while (!stopping_) {
      const int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()),
                               static_cast<int>(tick_.count()));
      for (int i = 0; i < n; ++i) {
        if (events[i].data.u64 == kMailboxId) {
          drain_mailbox();
        } else if (Conn* c = find(events[i].data.u64)) {
          on_event(*c, events[i].events);
        }
      }
      const auto now = Clock::now();
      if (now >= next_scan) {
        check_timeouts(now);
        next_scan = now + tick_;
      }
      for (uint64_t id : graveyard_) conns_.erase(id);
      graveyard_.clear();
    }
    for (auto& [id, c] : conns_) close_conn(*c);
    conns_.clear();
    std::lock_guard<std::mutex> lock(mailbox_->mu);
    for (auto& [fd, remote] : mailbox_->accepted) {
      close(fd);
      num_connections_.fetch_sub(1);
    }
    mailbox_->accepted.clear();
  }

 private:
  Conn* find(uint64_t id) {
    auto it = conns_.find(id);
    return it == conns_.end() || it->second->dead ? nullptr : it->second.get();
  }

  void drain_mailbox() {
    uint64_t counter;
    [[maybe_unused]] const ssize_t r = read(mailbox_->event_fd, &counter, sizeof counter);
    std::vector<uint64_t> ready;
    std::vector<std::pair<int, std::string>> accepted;
    {
      std::lock_guard<std::mutex> lock(mailbox_->mu);
      ready.swap(mailbox_->ready);
      accepted.swap(mailbox_->accepted);
      stopping_ = mailbox_->stop;
    }
    for (auto& [fd, remote] : accepted) add_conn(fd, std::move(remote));
    for (uint64_t id : ready) {
      if (Conn* c = find(id)) drive(*c);
    }
  }

  void add_conn(int fd, std::string remote) {
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->id = next_id_++;
    c->remote = std::move(remote);
    c->parser = RequestParser(limits_);
    c->outbox = std::make_shared<Outbox>();
    c->outbox->conn_id = c->id;
    c->outbox->mailbox = mailbox_;
    c->idle_since = Clock::now();
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // SSE events go out at once
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = c->id;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      close(fd);
      num_connections_.fetch_sub(1);
      return;
    }
    conns_.emplace(c->id, std::move(c));
  }

  void set_reading(Conn& c, bool on) {
    if (c.reading == on) return;
    c.reading = on;
    update_interest(c);
  }
  void set_want_out(Conn& c, bool on) {
    if (c.want_out == on) return;
    c.want_out = on;
    update_interest(c);
  }
  // EPOLLIN and EPOLLRDHUP are level-triggered: once the peer's FIN is seen they would fire
  // forever, so they go (a reset still arrives as EPOLLERR / EPOLLHUP, which need no interest).
  void update_interest(Conn& c) {
    epoll_event ev{};
    ev.events = (c.peer_done ? 0u : EPOLLRDHUP) | (c.reading && !c.input_ended ? EPOLLIN : 0u) |
                (c.want_out ? EPOLLOUT : 0u);
    ev.data.u64 = c.id;
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
  }

  void close_conn(Conn& c) {
    if (c.dead) return;
    c.dead = true;
    c.outbox->close();  // rings a job waiting to hear of the hang-up
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
    close(c.fd);
    num_connections_.fetch_sub(1);
    graveyard_.push_back(c.id);
  }

  void on_event(Conn& c, uint32_t events) {
    if (events & (EPOLLERR | EPOLLHUP)) return close_conn(c);  // reset: the client is gone
    if ((events & EPOLLRDHUP) && !(events & EPOLLIN)) return on_peer_done(c);
    if (events & EPOLLIN) {
      const ssize_t n = recv(c.fd, read_buf_.data(), read_buf_.size(), 0);
      if (n == 0) {
        c.input_ended = true;
        return on_peer_done(c);
      }
      if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return close_conn(c);
      } else if (c.state == Conn::State::kLingering) {
        // discard: the request was refused
      } else {
        c.in.append(read_buf_.data(), static_cast<size_t>(n));
        if (c.state == Conn::State::kResponding && c.in.size() - c.in_pos >= kMaxPipelinedBytes) {
          set_reading(c, false);
        }
        if (c.state == Conn::State::kReading) drive(c);
      }
    }
    // Output may be pending outside kResponding too (a 100 Continue): flush it first.
    if ((events & EPOLLOUT) && !c.dead && flush(c)) drive(c);
  }

  // The peer sent FIN (seen as EPOLLRDHUP, or as the end of input). HTTP allows a half-close, so
  // a request in flight is still answered; a request not complete yet never will be.
  void on_peer_done(Conn& c) {
    c.peer_done = true;
    update_interest(c);
    if (c.state == Conn::State::kLingering) return close_conn(c);
    if (c.state == Conn::State::kReading) {
      if (c.input_ended) close_conn(c);
      return;
    }
    // kResponding. A client that closed outright (not just its sending side) answers any byte
    // with a reset, which ends the request at once instead of after its whole generation. An
    // interim 100 is such a byte that HTTP/1.1 clients must accept before the final response
    // (RFC 9110 15.2); HTTP/1.0 clients get none, and a response already under way needs none.
    if (c.version_minor == 1 && !c.answer_begun && c.out_pos == c.out.size()) {
      c.out += "HTTP/1.1 100 Continue\r\n\r\n";
      flush(c);
    }
  }

  // Advances the connection as far as it can go without blocking.
  void drive(Conn& c) {
    while (!c.dead) {
      if (c.state == Conn::State::kLingering) return;
      if (c.state == Conn::State::kResponding) {
        if (!flush(c) || !c.response_sent) return;
        c.response_sent = false;
        if (c.close_after) return finish_close(c);
        c.state = Conn::State::kReading;
        c.idle_since = Clock::now();
        c.sent_continue = false;
        set_reading(c, true);
      }
      if (c.in_pos == c.in.size()) {
        if (c.input_ended) close_conn(c);  // answered everything the peer sent before its FIN
        return;
      }
      size_t used = 0;
      const auto result = c.parser.feed(std::string_view(c.in).substr(c.in_pos), &used);
      c.in_pos += used;
      if (c.in_pos == c.in.size()) {
        c.in.clear();
        c.in_pos = 0;
      } else if (c.in_pos > kReadChunkBytes) {
        c.in.erase(0, c.in_pos);
        c.in_pos = 0;
      }
      if (!c.request_timing && c.parser.started()) {
        c.request_timing = true;
        c.request_start = Clock::now();
      }
      if (result == RequestParser::Result::kError) {
        fail_request(c, c.parser.error_status(), c.parser.error_message());
      } else if (result == RequestParser::Result::kComplete) {
        dispatch(c);
      } else {
        if (c.parser.expects_continue() && !c.sent_continue) {
          c.sent_continue = true;
          c.out += "HTTP/1.1 100 Continue\r\n\r\n";
          flush(c);
        }
        if (c.input_ended) close_conn(c);  // the rest of this request will never come
        return;
      }
    }
  }

  void dispatch(Conn& c) {
    const bool keep_alive = c.parser.keep_alive() && !draining_.load();
    Request request = c.parser.take_request();
    request.remote_addr = c.remote;
    c.state = Conn::State::kResponding;
    c.request_timing = false;
    c.close_after = !keep_alive;
    c.answer_begun = false;
    c.version_minor = request.version_minor;
    const bool head = request.method == "HEAD";
    std::shared_ptr<Reply> exchange = make_reply(c.outbox, keep_alive, head, request.version_minor);
    try {
      handler_(std::move(request), exchange);
    } catch (const std::exception& e) {
      KVASIR_LOG_ERROR("http handler threw: %s", e.what());
      exchange->respond(internal_error_response());
    } catch (...) {
      KVASIR_LOG_ERROR("http handler threw");
      exchange->respond(internal_error_response());
    }
  }

  Response internal_error_response() const {
    if (options_.error_page) return options_.error_page(500, {});
    return Response{500, {{"Content-Type", "text/plain"}}, "internal error\n"};
  }

  // Answers a request we refuse (parse error, timeout) and closes after it.
  void fail_request(Conn& c, int status, std::string_view detail = {}) {
    c.out += error_response(options_, status, detail);
    c.have_last = true;
    c.close_after = true;
    c.state = Conn::State::kResponding;
    c.request_timing = false;
  }

  // Half-closes, then drains input until the client closes or kLingerTime passes.
  void finish_close(Conn& c) {
    if (c.input_ended || (!c.parser.started() && c.in_pos == c.in.size())) return close_conn(c);
    shutdown(c.fd, SHUT_WR);
    c.state = Conn::State::kLingering;
    c.linger_until = Clock::now() + kLingerTime;
    c.in.clear();
    c.in_pos = 0;
    set_reading(c, true);
  }

  // Writes what is queued; false when the connection was closed. Sets response_sent once
  // the last byte of the current response left.
  bool flush(Conn& c) {
    while (true) {
      if (c.out_pos == c.out.size()) {
        c.out.clear();
        c.out_pos = 0;
        std::lock_guard<std::mutex> lock(c.outbox->mu);
        c.out.swap(c.outbox->out);
        c.outbox->wake_queued = false;
        if (!c.out.empty()) c.answer_begun = true;
        if (c.outbox->response_done) {
          c.have_last = true;
          c.close_after |= c.outbox->close_after;
          c.outbox->response_done = false;
          c.outbox->close_after = false;
        }
        if (c.out.empty()) break;
      }
      const ssize_t n =
          send(c.fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos, MSG_NOSIGNAL);
      if (n > 0) {
        c.out_pos += static_cast<size_t>(n);
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        set_want_out(c, true);
        return true;
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        close_conn(c);
        return false;
      }
    }
    set_want_out(c, false);
    if (c.have_last) {
      c.have_last = false;
      c.response_sent = true;
    }
    return true;
  }

  void check_timeouts(Clock::time_point now) {
    for (auto& [id, ptr] : conns_) {
      Conn& c = *ptr;
      if (c.dead) continue;
      if (c.state == Conn::State::kLingering) {
        if (now >= c.linger_until) close_conn(c);
      } else if (c.state == Conn::State::kReading) {
        if (c.request_timing) {
          if (now - c.request_start > options_.header_timeout) {
            fail_request(c, 408);
            drive(c);
          }
        } else if (now - c.idle_since > options_.idle_timeout) {
          close_conn(c);
        }
      }
    }
  }

  const ServerOptions& options_;
  const Handler& handler_;
  std::atomic<size_t>& num_connections_;
  std::atomic<bool>& draining_;
  ParserLimits limits_;
  std::chrono::milliseconds tick_;
  int epoll_fd_ = -1;
  std::shared_ptr<Mailbox> mailbox_ = std::make_shared<Mailbox>();
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns_;
  std::vector<uint64_t> graveyard_;  // closed this round; erased once no event can name them
  std::vector<char> read_buf_ = std::vector<char>(kReadChunkBytes);
  uint64_t next_id_ = kMailboxId + 1;
  bool stopping_ = false;
};


IoLoop::IoLoop(const ServerOptions& options, const Handler& handler, std::atomic<size_t>& num_connections,
               std::atomic<bool>& draining)
    : impl_(std::make_unique<Impl>(options, handler, num_connections, draining)) {}
IoLoop::~IoLoop() = default;
Status IoLoop::init() { return impl_->init(); }
void IoLoop::post_accepted(int fd, std::string remote) { impl_->post_accepted(fd, std::move(remote)); }
void IoLoop::request_stop() { impl_->request_stop(); }
void IoLoop::run() { impl_->run(); }

}  // namespace kvasir::http
