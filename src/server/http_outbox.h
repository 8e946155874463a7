// Outbox: the one path by which response bytes travel from any thread to the I/O thread that
// owns a connection, and by which news of a hang-up travels back. The handler's Reply/Stream
// append to the connection's Outbox under its lock and wake the owner through its Mailbox (an
// eventfd, one write per batch); only that I/O thread touches the socket. When it closes the
// connection it rings the queue a request's watcher named. Must not do socket I/O or know
// about epoll.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/http_server.h"

namespace kvasir::http {

// Hands work to one I/O thread from other threads: connections with new output, accepted
// sockets, and the request to stop.
struct Mailbox {
  Mailbox();
  ~Mailbox();
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  // Runs fn on the mailbox under its lock, then wakes the I/O thread.
  template <typename Fn>
  void post(Fn fn) {
    {
      std::lock_guard<std::mutex> lock(mu);
      fn(*this);
    }
    notify();
  }
  void notify() const;

  const int event_fd;  // readable while posts are waiting; -1 if eventfd() failed
  std::mutex mu;
  std::vector<uint64_t> ready;                        // connection ids with new output
  std::vector<std::pair<int, std::string>> accepted;  // socket, remote address
  bool stop = false;
};

// What the Reply/Stream objects of one connection share with its I/O thread, under mu.
struct Outbox {
  // Queues bytes of the current response (`done`: they end it; `close_conn`: close after it)
  // and wakes the I/O thread; false, dropping them, once the connection is closed.
  bool push(std::string_view bytes, bool done, bool close_conn);
  // I/O thread: the connection is gone. Drops unsent bytes and rings the watcher, if any.
  void close();
  // Rings `queue` with `token` on close (at once when already closed); unwatch(token) forgets
  // it (only if it is still this token's, so a newer request's watcher stays).
  void watch(std::shared_ptr<BlockingQueue<uint64_t>> queue, uint64_t token);
  void unwatch(uint64_t token);

  uint64_t conn_id = 0;
  std::shared_ptr<Mailbox> mailbox;
  std::atomic<bool> closed{false};  // peer gone or server stopped; set under mu
  std::mutex mu;
  std::string out;             // response bytes not yet taken by the I/O thread
  bool response_done = false;  // the last byte of the current response is in `out`
  bool close_after = false;    // close once the current response is sent
  bool wake_queued = false;    // conn_id already posted to the mailbox
  std::shared_ptr<BlockingQueue<uint64_t>> gone_queue;  // rung by close(), see watch()
  uint64_t gone_token = 0;
};

// The Reply (which hands out itself as the Stream) of one request. `keep_alive` decides the
// Connection header; HTTP/1.0 streams are not chunked and end by closing the connection. A
// Reply dropped unanswered sends 500, a Stream dropped unfinished is finished.
std::shared_ptr<Reply> make_reply(std::shared_ptr<Outbox> outbox, bool keep_alive, bool head,
                                  int version_minor);

}  // namespace kvasir::http
