#include "server/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace kvasir::http {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct ClientResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::vector<std::string> chunks;
};

// A blocking loopback client that speaks just enough HTTP/1.1 to check the server.
class Client {
 public:
  explicit Client(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{5, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~Client() { close_now(); }
  bool connected() const { return connected_; }
  void shutdown_sending() { shutdown(fd_, SHUT_WR); }
  void close_now() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

  bool send_all(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  // Reads until `n` bytes are buffered; false on EOF, error or time-out.
  bool fill(size_t n) {
    char buf[65536];
    while (buf_.size() < n) {
      const ssize_t r = recv(fd_, buf, sizeof buf, 0);
      if (r <= 0) return false;
      buf_.append(buf, static_cast<size_t>(r));
    }
    return true;
  }
  std::string read_line() {
    size_t pos;
    while ((pos = buf_.find("\r\n")) == std::string::npos) {
      if (!fill(buf_.size() + 1)) return "<eof>";
    }
    std::string line = buf_.substr(0, pos);
    buf_.erase(0, pos + 2);
    return line;
  }
  std::string take(size_t n) {
    if (!fill(n)) return "<eof>";
    std::string s = buf_.substr(0, n);
    buf_.erase(0, n);
    return s;
  }
  // True when the server closed the connection (and nothing else arrives first).
  bool at_eof() { return buf_.empty() && !fill(1); }

  ClientResponse read_response(bool head = false) {
    ClientResponse r;
    std::string status_line = read_line();
    // Interim 1xx responses (clients must accept them at any time) come before the answer.
    while (status_line.rfind("HTTP/1.1 1", 0) == 0) {
      while (!read_line().empty()) {
      }
      status_line = read_line();
    }
    if (status_line.rfind("HTTP/1.1 ", 0) != 0) return r;
    r.status = std::stoi(status_line.substr(9, 3));
    for (std::string line = read_line(); !line.empty() && line != "<eof>"; line = read_line()) {
      const size_t colon = line.find(':');
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(tolower(c));
      r.headers[name] = line.substr(colon + 2);
    }
    if (head) return r;
    if (r.headers.count("content-length")) {
      r.body = take(std::stoul(r.headers["content-length"]));
    } else if (r.headers["transfer-encoding"] == "chunked") {
      while (true) {
        const size_t size = std::stoul(read_line(), nullptr, 16);
        if (size == 0) {
          read_line();
          break;
        }
        r.chunks.push_back(take(size));
        r.body += r.chunks.back();
        read_line();
      }
    } else if (r.status >= 200) {
      while (fill(buf_.size() + 1)) {
      }
      r.body.swap(buf_);
    }
    return r;
  }

  ClientResponse request(const std::string& raw) {
    send_all(raw);
    return read_response();
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  std::string buf_;
};

std::string get(const std::string& path) { return "GET " + path + " HTTP/1.1\r\nHost: t\r\n\r\n"; }
std::string post(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: t\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

// Answers "<method> <path> <body>" at once.
void echo(Request req, std::shared_ptr<Reply> reply) {
  reply->respond(Response{
      200, {{"Content-Type", "text/plain"}}, req.method + " " + req.path + " " + req.body});
}

// Starts a server on an ephemeral loopback port and owns the threads a test's handler spawns.
class ServerTest : public ::testing::Test {
 protected:
  void start(Handler handler, ServerOptions options = {}) {
    options.port = 0;
    server_ = std::make_unique<HttpServer>(options, std::move(handler));
    ASSERT_TRUE(server_->start().ok());
    port_ = server_->port();
    ASSERT_GT(port_, 0);
  }
  void spawn(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    threads_.emplace_back(std::move(fn));
  }
  void TearDown() override {
    if (server_) server_->stop();
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& t : threads_) t.join();
  }

  template <typename Pred>
  static bool wait_for(Pred pred, std::chrono::milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    while (!pred()) {
      if (Clock::now() > deadline) return false;
      std::this_thread::sleep_for(1ms);
    }
    return true;
  }

  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
  std::mutex mu_;
  std::vector<std::thread> threads_;
};

TEST_F(ServerTest, AnswersGetAndPost) {
  start(echo);
  Client c(port_);
  ASSERT_TRUE(c.connected());
  auto r = c.request(get("/v1/models?x=1"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "GET /v1/models ");
  EXPECT_EQ(r.headers["connection"], "keep-alive");
  EXPECT_EQ(r.headers["server"], "kvasir");
  EXPECT_FALSE(r.headers["date"].empty());
  r = c.request(post("/p", "hello"));
  EXPECT_EQ(r.body, "POST /p hello");
  EXPECT_EQ(r.headers["content-length"], "13");
}

TEST_F(ServerTest, KeepAliveServesManyRequestsOnOneConnection) {
  start(echo);
  Client c(port_);
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(c.request(post("/k", std::to_string(i))).body, "POST /k " + std::to_string(i));
  EXPECT_EQ(server_->num_connections(), 1u);
}

TEST_F(ServerTest, Http10ClosesAfterTheResponse) {
  start(echo);
  Client c(port_);
  auto r = c.request("GET /old HTTP/1.0\r\n\r\n");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["connection"], "close");
  EXPECT_TRUE(c.at_eof());
}

TEST_F(ServerTest, PipelinedRequestsAnsweredInOrderEvenWhenAnsweredLater) {
  start([this](Request req, std::shared_ptr<Reply> reply) {
    spawn([req = std::move(req), reply] {
      std::this_thread::sleep_for(std::chrono::milliseconds(req.path == "/1" ? 30 : 1));
      reply->respond(Response{200, {}, req.path});
    });
  });
  Client c(port_);
  c.send_all(get("/1") + post("/2", "xx") + get("/3") +
             "GET /4 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
  for (const char* path : {"/1", "/2", "/3", "/4"}) EXPECT_EQ(c.read_response().body, path);
  EXPECT_TRUE(c.at_eof());
}

TEST_F(ServerTest, ChunkedRequestBodyArrivingInPieces) {
  start(echo);
  Client c(port_);
  for (const char* piece : {"POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n4\r", "\nab",
                            "cd\r\n3;x=1\r\nefg", "\r\n0\r\n", "\r\n"}) {
    c.send_all(piece);
    std::this_thread::sleep_for(2ms);
  }
  EXPECT_EQ(c.read_response().body, "POST /c abcdefg");
}

TEST_F(ServerTest, MalformedPipelinedRequestAnsweredAfterTheGoodOne) {
  start(echo);
  Client c(port_);
  c.send_all(get("/ok") + "GET / HTTP/1.1\r\nBad Header\r\n\r\n" + get("/never"));
  EXPECT_EQ(c.read_response().body, "GET /ok ");
  const auto r = c.read_response();
  EXPECT_EQ(r.status, 400);
  EXPECT_TRUE(c.at_eof());
}

TEST_F(ServerTest, Http10StreamEndsByClosing) {
  start([this](Request, std::shared_ptr<Reply> reply) {
    auto stream = reply->stream();
    spawn([stream] {
      stream->start(200, {});
      stream->write("a");
      stream->write("b");
      stream->finish();
    });
  });
  Client c(port_);
  auto r = c.request("GET /s HTTP/1.0\r\n\r\n");
  EXPECT_EQ(r.headers["transfer-encoding"], "");  // HTTP/1.0 has no chunked coding
  EXPECT_EQ(r.headers["connection"], "close");
  EXPECT_EQ(r.body, "ab");
}

TEST_F(ServerTest, HeadHasLengthButNoBody) {
  start(echo);
  Client c(port_);
  c.send_all("HEAD /h HTTP/1.1\r\nHost: t\r\n\r\n");
  auto r = c.read_response(/*head=*/true);
  EXPECT_EQ(r.headers["content-length"], "8");
  EXPECT_EQ(c.request(get("/after")).body, "GET /after ");  // no stray body bytes in between
}

TEST_F(ServerTest, StreamsServerSentEventsFromAnotherThread) {
  start([this](Request req, std::shared_ptr<Reply> reply) {
    if (req.path != "/sse") return echo(std::move(req), std::move(reply));
    auto stream = reply->stream();
    spawn([stream] {
      EXPECT_TRUE(stream->start(200, {{"Content-Type", "text/event-stream"}}));
      for (int i = 0; i < 100; ++i)
        EXPECT_TRUE(stream->write("data: " + std::to_string(i) + "\n\n"));
      stream->finish();
    });
  });
  Client c(port_);
  auto r = c.request(get("/sse"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-type"], "text/event-stream");
  ASSERT_EQ(r.chunks.size(), 100u);
  EXPECT_EQ(r.chunks[42], "data: 42\n\n");
  EXPECT_EQ(c.request(get("/next")).body, "GET /next ");  // the connection survives the stream
}

TEST_F(ServerTest, ClientDisconnectClosesStreamPromptly) {
  std::atomic<int64_t> closed_at_us{0};
  start([&, this](Request, std::shared_ptr<Reply> reply) {
    auto stream = reply->stream();
    spawn([stream, &closed_at_us] {
      stream->start(200, {{"Content-Type", "text/event-stream"}});
      while (!stream->closed()) {
        stream->write("data: tick\n\n");
        std::this_thread::sleep_for(2ms);
      }
      closed_at_us =
          std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch())
              .count();
      EXPECT_FALSE(stream->write("data: late\n\n"));
    });
  });
  auto c = std::make_unique<Client>(port_);
  c->send_all(get("/sse"));
  ASSERT_EQ(c->read_line(), "HTTP/1.1 200 OK");
  const auto t0 = Clock::now();
  c.reset();
  ASSERT_TRUE(wait_for([&] { return closed_at_us.load() != 0; }, 1000ms));
  const auto t0_us =
      std::chrono::duration_cast<std::chrono::microseconds>(t0.time_since_epoch()).count();
  EXPECT_LT(closed_at_us.load() - t0_us, 100000);
}

TEST_F(ServerTest, QueuedRequestSeesClientGone) {
  std::mutex mu;
  std::shared_ptr<Reply> held;
  start([&](Request, std::shared_ptr<Reply> reply) {
    std::lock_guard<std::mutex> lock(mu);
    held = std::move(reply);  // "queued for the engine"
  });
  auto c = std::make_unique<Client>(port_);
  c->send_all(post("/v1/completions", "{}"));
  ASSERT_TRUE(wait_for(
      [&] {
        std::lock_guard<std::mutex> l(mu);
        return held != nullptr;
      },
      1000ms));
  EXPECT_FALSE(held->client_gone());
  c.reset();
  EXPECT_TRUE(wait_for([&] { return held->client_gone(); }, 100ms));
  held->respond(Response{200, {}, "too late"});  // dropped, not a crash
  EXPECT_TRUE(wait_for([&] { return server_->num_connections() == 0; }, 1000ms));
}

// The hang-up is pushed to the watcher's queue (no one polls client_gone()); a watcher that
// arrives after the hang-up is rung at once; an answered request's watcher lapses.
TEST_F(ServerTest, HangUpRingsTheWatcherQueue) {
  auto queue = std::make_shared<BlockingQueue<uint64_t>>();
  std::mutex mu;
  std::vector<std::shared_ptr<Reply>> held;
  start([&](Request req, std::shared_ptr<Reply> reply) {
    if (req.path == "/answered") {
      reply->notify_when_gone(queue, 9);
      return reply->respond(Response{200, {}, "ok"});
    }
    reply->notify_when_gone(queue, 7);
    std::lock_guard<std::mutex> lock(mu);
    held.push_back(std::move(reply));
  });
  auto c = std::make_unique<Client>(port_);
  c->send_all(post("/v1/completions", "{}"));
  ASSERT_TRUE(wait_for(
      [&] {
        std::lock_guard<std::mutex> l(mu);
        return !held.empty();
      },
      1000ms));
  EXPECT_FALSE(queue->try_pop().has_value());
  c.reset();
  const std::optional<uint64_t> token = queue->pop_for(5s);
  ASSERT_TRUE(token.has_value());
  EXPECT_EQ(*token, 7u);
  EXPECT_TRUE(held[0]->client_gone());  // set before the ring
  held[0]->notify_when_gone(queue, 8);  // too late: rung at once
  EXPECT_EQ(queue->pop_for(1s).value_or(0), 8u);

  auto c2 = std::make_unique<Client>(port_);
  c2->send_all(get("/answered"));
  EXPECT_EQ(c2->read_line(), "HTTP/1.1 200 OK");
  c2.reset();
  ASSERT_TRUE(wait_for([&] { return server_->num_connections() == 0; }, 1000ms));
  EXPECT_FALSE(queue->try_pop().has_value());  // the answered request's watcher lapsed
}

// HTTP allows a half-close: a client that shuts down its sending side after its requests still
// gets every answer, answered after the FIN arrived; then the server closes.
TEST_F(ServerTest, HalfClosedClientStillGetsItsAnswers) {
  start([this](Request req, std::shared_ptr<Reply> reply) {
    spawn([req = std::move(req), reply] {
      std::this_thread::sleep_for(50ms);
      echo(req, reply);
    });
  });
  Client c(port_);
  c.send_all(post("/a", "1") + post("/b", "2"));
  c.shutdown_sending();
  EXPECT_EQ(c.read_response().body, "POST /a 1");
  EXPECT_EQ(c.read_response().body, "POST /b 2");
  EXPECT_TRUE(c.at_eof());
  EXPECT_TRUE(wait_for([&] { return server_->num_connections() == 0; }, 1000ms));
}

TEST_F(ServerTest, HalfClosedPartialRequestIsClosedWithoutAnswer) {
  start(echo);
  Client c(port_);
  c.send_all("POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nabc");
  c.shutdown_sending();
  EXPECT_TRUE(c.at_eof());
  EXPECT_TRUE(wait_for([&] { return server_->num_connections() == 0; }, 1000ms));
}

TEST_F(ServerTest, DroppedReplyAndThrowingHandlerGive500) {
  start([](Request req, std::shared_ptr<Reply>) {
    if (req.path == "/throw") throw std::runtime_error("boom");
  });
  Client c(port_);
  EXPECT_EQ(c.request(get("/drop")).status, 500);
  EXPECT_EQ(c.request(get("/throw")).status, 500);
}

TEST_F(ServerTest, SlowlorisGets408) {
  ServerOptions options;
  options.header_timeout = 200ms;
  start(echo, options);
  Client c(port_);
  const auto t0 = Clock::now();
  c.send_all("GET / HTTP/1.1\r\n");
  for (int i = 0; i < 12; ++i) {  // one header byte at a time, never finishing
    std::this_thread::sleep_for(25ms);
    if (!c.send_all("X")) break;
  }
  auto r = c.read_response();
  EXPECT_EQ(r.status, 408);
  EXPECT_EQ(r.headers["connection"], "close");
  const auto elapsed = Clock::now() - t0;
  EXPECT_GE(elapsed, 200ms);
  EXPECT_LT(elapsed, 1000ms);
  EXPECT_TRUE(c.at_eof());
}

TEST_F(ServerTest, IdleKeepAliveConnectionClosedSilently) {
  ServerOptions options;
  options.idle_timeout = 150ms;
  start(echo, options);
  Client c(port_);
  EXPECT_EQ(c.request(get("/")).status, 200);
  const auto t0 = Clock::now();
  EXPECT_TRUE(c.at_eof());
  EXPECT_GE(Clock::now() - t0, 140ms);
}

TEST_F(ServerTest, OversizedRequestsGetPreciseStatuses) {
  ServerOptions options;
  options.max_header_bytes = 1024;
  options.max_uri_bytes = 256;
  options.max_body_bytes = 1000;
  options.max_header_count = 10;
  start(echo, options);
  auto status = [&](const std::string& raw) {
    Client c(port_);
    return c.request(raw).status;
  };
  EXPECT_EQ(status("GET / HTTP/1.1\r\nX: " + std::string(1100, 'a') + "\r\n\r\n"), 431);
  std::string many = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 11; ++i) many += "H" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(status(many + "\r\n"), 431);
  EXPECT_EQ(status("GET /" + std::string(300, 'u') + " HTTP/1.1\r\n\r\n"), 414);
  EXPECT_EQ(status("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1001\r\n\r\n"), 413);
  EXPECT_EQ(status("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3e9\r\n"), 413);
  EXPECT_EQ(status(post("/", std::string(1000, 'b'))), 200);
  EXPECT_EQ(status("GET / HTTP/3.0\r\n\r\n"), 505);
  EXPECT_EQ(status("POST / HTTP/1.1\r\nTransfer-Encoding: br\r\n\r\n"), 501);
  EXPECT_EQ(status(std::string("GET / HTTP/1.1\r\nA: \0\r\n\r\n", 24)), 400);
}

TEST_F(ServerTest, ExpectContinueGets100BeforeTheBody) {
  start(echo);
  Client c(port_);
  c.send_all("POST /e HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n");
  EXPECT_EQ(c.read_line(), "HTTP/1.1 100 Continue");
  EXPECT_EQ(c.read_line(), "");
  c.send_all("body");
  EXPECT_EQ(c.read_response().body, "POST /e body");
}

TEST_F(ServerTest, LargeResponseSurvivesPartialWrites) {
  const std::string big(4 << 20, 'z');
  start([&](Request, std::shared_ptr<Reply> reply) { reply->respond(Response{200, {}, big}); });
  Client c(port_);
  c.send_all(get("/big"));
  std::this_thread::sleep_for(50ms);  // let the server fill the socket and wait for EPOLLOUT
  EXPECT_EQ(c.read_response().body.size(), big.size());
}

TEST_F(ServerTest, TwoHundredConcurrentConnectionsTenRequestsEach) {
  ServerOptions options;
  options.num_io_threads = 4;
  start(
      [this](Request req, std::shared_ptr<Reply> reply) {
        if (req.body.size() % 2) return echo(std::move(req), std::move(reply));
        spawn([req = std::move(req), reply] { echo(req, reply); });  // half answered off-thread
      },
      options);
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 200; ++i) {
    clients.emplace_back([&, i] {
      Client c(port_);
      for (int j = 0; j < 10; ++j) {
        const std::string body = std::to_string(i) + "-" + std::to_string(j);
        if (c.request(post("/c", body)).body == "POST /c " + body) ++ok;
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), 2000);
}

TEST_F(ServerTest, BeyondMaxConnectionsGets503) {
  ServerOptions options;
  options.max_connections = 2;
  start(echo, options);
  Client a(port_), b(port_);
  EXPECT_EQ(a.request(get("/")).status, 200);
  EXPECT_EQ(b.request(get("/")).status, 200);
  Client c(port_);
  EXPECT_EQ(c.read_response().status, 503);
  a.close_now();
  ASSERT_TRUE(wait_for([&] { return server_->num_connections() < 2; }, 1000ms));
  Client d(port_);
  EXPECT_EQ(d.request(get("/")).status, 200);
}

TEST_F(ServerTest, StopAcceptingKeepsOpenConnectionsServing) {
  start(echo);
  Client a(port_);
  EXPECT_EQ(a.request(get("/")).status, 200);
  server_->stop_accepting();
  Client b(port_);
  EXPECT_FALSE(b.connected());
  auto r = a.request(get("/still"));
  EXPECT_EQ(r.body, "GET /still ");
  EXPECT_EQ(r.headers["connection"], "close");  // draining: no more keep-alive
}

TEST_F(ServerTest, StopWithOpenConnectionsReturnsPromptly) {
  std::mutex mu;
  std::vector<std::shared_ptr<Reply>> held;
  std::shared_ptr<Stream> stream;
  start([&](Request req, std::shared_ptr<Reply> reply) {
    std::lock_guard<std::mutex> lock(mu);
    if (req.path == "/sse") {
      stream = reply->stream();
      stream->start(200, {});
    }
    held.push_back(std::move(reply));
  });
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 10; ++i) clients.push_back(std::make_unique<Client>(port_));
  clients[0]->send_all(get("/queued"));
  clients[1]->send_all(get("/sse"));
  clients[2]->send_all("GET /partial HTTP/1.1\r\n");
  ASSERT_TRUE(wait_for(
      [&] {
        std::lock_guard<std::mutex> l(mu);
        return held.size() == 2;
      },
      1000ms));
  const auto t0 = Clock::now();
  server_->stop();
  EXPECT_LT(Clock::now() - t0, 500ms);
  EXPECT_EQ(server_->num_connections(), 0u);
  EXPECT_TRUE(stream->closed());
  EXPECT_FALSE(stream->write("x"));
  EXPECT_TRUE(held[0]->client_gone());
  held[0]->respond(Response{});
  server_.reset();  // replies outlive the server safely
  held.clear();
  stream.reset();
}

TEST(HttpServerStandalone, BindsLocalhostAndReportsBadHost) {
  ServerOptions options;
  options.host = "localhost";
  options.port = 0;
  HttpServer server(options, echo);
  ASSERT_TRUE(server.start().ok());
  EXPECT_GT(server.port(), 0);
  options.host = "no.such.host.invalid";
  HttpServer bad(options, echo);
  EXPECT_FALSE(bad.start().ok());
}

}  // namespace
}  // namespace kvasir::http
