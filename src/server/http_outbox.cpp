#include "server/http_outbox.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdio>

namespace kvasir::http {
namespace {

using Headers = std::vector<std::pair<std::string, std::string>>;

// One request's answer: a Reply that may become a Stream. Completed from any thread.
class Exchange final : public Reply, public Stream, public std::enable_shared_from_this<Exchange> {
 public:
  Exchange(std::shared_ptr<Outbox> conn, bool keep_alive, bool head, int version_minor)
      : conn_(std::move(conn)),
        keep_alive_(keep_alive),
        head_(head),
        chunked_(version_minor == 1) {}

  // A dropped Reply must not leave the connection hanging.
  ~Exchange() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (phase_ == Phase::kNew || phase_ == Phase::kStreamTaken) {
      respond_locked(Response{500, {{"Content-Type", "text/plain"}}, "no response\n"});
    } else if (phase_ == Phase::kStreaming) {
      finish_locked();
    }
  }

  void respond(Response response) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (phase_ == Phase::kNew || phase_ == Phase::kStreamTaken) respond_locked(response);
  }
  std::shared_ptr<Stream> stream() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (phase_ == Phase::kNew) phase_ = Phase::kStreamTaken;
    return shared_from_this();
  }
  bool client_gone() const override { return conn_->closed.load(); }
  void notify_when_gone(std::shared_ptr<BlockingQueue<uint64_t>> queue, uint64_t token) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (phase_ == Phase::kDone) return;  // answered: the connection is the next request's
    watch_token_ = token;
    watching_ = true;
    conn_->watch(std::move(queue), token);
  }

  bool start(int status, const Headers& headers) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (phase_ != Phase::kNew && phase_ != Phase::kStreamTaken) return false;
    phase_ = Phase::kStreaming;
    // HTTP/1.0 has no chunked coding: the body ends when the connection does.
    if (!chunked_) keep_alive_ = false;
    return conn_->push(
        format_response_head(status, headers,
                             chunked_ && !head_ ? "Transfer-Encoding: chunked" : "", keep_alive_),
        false, false);
  }
  bool write(std::string_view data) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (phase_ != Phase::kStreaming) return false;
    if (data.empty() || head_) return !conn_->closed.load();  // an empty chunk would end the body
    if (!chunked_) return conn_->push(data, false, false);
    char size[32];
    const int n = snprintf(size, sizeof size, "%zx\r\n", data.size());
    std::string chunk;
    chunk.reserve(data.size() + static_cast<size_t>(n) + 2);
    chunk.append(size, static_cast<size_t>(n)).append(data).append("\r\n");
    return conn_->push(chunk, false, false);
  }
  void finish() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (phase_ == Phase::kStreaming) finish_locked();
  }
  bool closed() const override { return conn_->closed.load(); }

 private:
  enum class Phase { kNew, kStreamTaken, kStreaming, kDone };

  void respond_locked(const Response& r) {
    phase_ = Phase::kDone;
    unwatch_locked();
    const bool no_body = (r.status >= 100 && r.status < 200) || r.status == 204 || r.status == 304;
    const std::string framing = no_body ? "" : "Content-Length: " + std::to_string(r.body.size());
    std::string bytes = format_response_head(r.status, r.headers, framing, keep_alive_);
    if (!no_body && !head_) bytes += r.body;
    conn_->push(bytes, true, !keep_alive_);
  }
  void finish_locked() {
    phase_ = Phase::kDone;
    unwatch_locked();
    conn_->push(chunked_ && !head_ ? "0\r\n\r\n" : "", true, !keep_alive_);
  }

  void unwatch_locked() {
    if (watching_) conn_->unwatch(watch_token_);
    watching_ = false;
  }

  std::mutex mu_;
  const std::shared_ptr<Outbox> conn_;
  Phase phase_ = Phase::kNew;
  bool watching_ = false;
  uint64_t watch_token_ = 0;
  bool keep_alive_;
  const bool head_;
  const bool chunked_;
};

}  // namespace

Mailbox::Mailbox() : event_fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

Mailbox::~Mailbox() {
  if (event_fd >= 0) close(event_fd);
}

void Mailbox::notify() const {
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = write(event_fd, &one, sizeof one);
}

bool Outbox::push(std::string_view bytes, bool done, bool close_conn) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (closed.load()) return false;
    out.append(bytes);
    response_done |= done;
    close_after |= close_conn;
    // One wake-up per batch: the I/O thread clears the flag when it takes `out`.
    if (wake_queued) return true;
    wake_queued = true;
  }
  mailbox->post([this](Mailbox& m) { m.ready.push_back(conn_id); });
  return true;
}

void Outbox::close() {
  std::shared_ptr<BlockingQueue<uint64_t>> queue;
  uint64_t token = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    closed.store(true);
    out.clear();
    queue = std::move(gone_queue);
    gone_queue.reset();
    token = gone_token;
  }
  // After `closed` is set: whoever wakes on the token sees client_gone().
  if (queue) queue->push(token);
}

void Outbox::watch(std::shared_ptr<BlockingQueue<uint64_t>> queue, uint64_t token) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!closed.load()) {
      gone_queue = std::move(queue);
      gone_token = token;
      return;
    }
  }
  queue->push(token);
}

void Outbox::unwatch(uint64_t token) {
  std::lock_guard<std::mutex> lock(mu);
  if (gone_queue && gone_token == token) gone_queue.reset();
}

std::shared_ptr<Reply> make_reply(std::shared_ptr<Outbox> outbox, bool keep_alive, bool head,
                                  int version_minor) {
  return std::make_shared<Exchange>(std::move(outbox), keep_alive, head, version_minor);
}

}  // namespace kvasir::http
