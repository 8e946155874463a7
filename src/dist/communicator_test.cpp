// The CPU communicators (shared memory, TCP) with 2, 3 and 4 ranks in forked processes: every op
// on tiny, odd and large (64 MiB) buffers equals a serial reference bit for bit on every rank, and
// a rank that dies, stalls or calls a different op makes the others fail with a message, in
// bounded time, instead of hanging.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dist/communicator_test_util.h"
#include "dist/rank_order_sum.h"
#include "dist/shm_communicator.h"
#include "dist/tcp_communicator.h"
#include "quant/block_formats.h"

namespace kvasir::dist {
namespace {

using testing::input_value;
using testing::run_ranks;

enum class Kind { kShm, kTcp };

// What the parent prepares before forking: a unique group id, or a listening socket for rank 0.
struct Group {
  Kind kind;
  int n;
  int64_t timeout_ms;
  std::string group_id;
  int listen_fd = -1;
  int port = 0;

  Group(Kind k, int world, int64_t timeout) : kind(k), n(world), timeout_ms(timeout) {
    static int counter = 0;
    group_id = "test-" + std::to_string(getpid()) + "-" + std::to_string(++counter);
    if (kind == Kind::kTcp) {
      listen_fd = testing::listen_on_loopback(&port);
      if (listen_fd < 0) ADD_FAILURE() << "cannot listen on loopback: " << std::strerror(errno);
    }
  }
  ~Group() {
    if (listen_fd >= 0) close(listen_fd);
  }

  StatusOr<std::unique_ptr<Communicator>> make(int rank) const {
    if (kind == Kind::kShm) {
      ShmCommunicatorOptions o;
      o.group_id = group_id;
      o.rank = rank;
      o.world_size = n;
      o.timeout_ms = timeout_ms;
      auto c = ShmCommunicator::create(o);
      if (!c.ok()) return c.status();
      return std::unique_ptr<Communicator>(std::move(c).value());
    }
    TcpCommunicatorOptions o;
    o.master_addr = "127.0.0.1";
    o.master_port = port;
    o.group_id = group_id;
    o.rank = rank;
    o.world_size = n;
    o.timeout_ms = timeout_ms;
    if (rank == 0) o.listen_fd = dup(listen_fd);
    auto c = TcpCommunicator::create(o);
    if (!c.ok()) return c.status();
    return std::unique_ptr<Communicator>(std::move(c).value());
  }
};

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

// The serial reference: float32 sum in rank order 0, 1, ..., n-1, written out independently of
// sum_in_rank_order.
float reference_sum_f32(int n, uint64_t i, uint64_t salt) {
  float acc = input_value(0, i, salt);
  for (int r = 1; r < n; ++r) acc += input_value(r, i, salt);
  return acc;
}
uint16_t reference_sum_bf16(int n, uint64_t i, uint64_t salt) {
  float acc = quant::bf16_to_f32(f32_to_bf16(input_value(0, i, salt)));
  for (int r = 1; r < n; ++r) acc += quant::bf16_to_f32(f32_to_bf16(input_value(r, i, salt)));
  return f32_to_bf16(acc);
}
// Through int: a negative float converted straight to uint8_t is undefined (UBSan stops on it).
uint8_t byte_of(int r, uint64_t i) { return static_cast<uint8_t>(static_cast<int>(input_value(r, i, 77) * 16.0f)); }

int all_reduce_checks(Communicator& c, int rank, int n) {
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{4099}, size_t{1000003}}) {
    const uint64_t salt = count * 31 + 1;
    std::vector<float> buf(count);
    for (size_t i = 0; i < count; ++i) buf[i] = input_value(rank, i, salt);
    RANK_OK(c.all_reduce_sum(buf.data(), count, DType::kF32));
    for (size_t i = 0; i < count; ++i)
      RANK_CHECK(same_bits(buf[i], reference_sum_f32(n, i, salt)), "f32 all_reduce of %zu: element %zu differs", count, i);
  }
  for (size_t count : {size_t{1}, size_t{12345}}) {
    const uint64_t salt = count * 7 + 3;
    std::vector<uint16_t> buf(count);
    for (size_t i = 0; i < count; ++i) buf[i] = f32_to_bf16(input_value(rank, i, salt));
    RANK_OK(c.all_reduce_sum(buf.data(), count, DType::kBF16));
    for (size_t i = 0; i < count; ++i)
      RANK_CHECK(buf[i] == reference_sum_bf16(n, i, salt), "bf16 all_reduce of %zu: element %zu differs", count, i);
  }
  return 0;
}

int gather_scatter_checks(Communicator& c, int rank, int n) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{3}, size_t{(5u << 20) + 3}}) {
    std::vector<uint8_t> send(bytes), recv(bytes * n + 1, 0xee);
    for (size_t i = 0; i < bytes; ++i) send[i] = byte_of(rank, i);
    RANK_OK(c.all_gather(send.data(), recv.data(), bytes));
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < bytes; ++i)
        RANK_CHECK(recv[r * bytes + i] == byte_of(r, i), "all_gather of %zu: rank %d byte %zu differs", bytes, r, i);
    RANK_CHECK(recv[bytes * n] == 0xee, "all_gather wrote past its output");
  }
  for (size_t count : {size_t{1}, size_t{777}, size_t{600001}}) {
    const uint64_t salt = count + 99;
    std::vector<float> send(count * n), recv(count);
    for (size_t i = 0; i < send.size(); ++i) send[i] = input_value(rank, i, salt);
    RANK_OK(c.reduce_scatter_sum(send.data(), recv.data(), count, DType::kF32));
    for (size_t i = 0; i < count; ++i)
      RANK_CHECK(same_bits(recv[i], reference_sum_f32(n, rank * count + i, salt)),
                 "f32 reduce_scatter of %zu: element %zu differs", count, i);
  }
  {
    const size_t count = 333;
    std::vector<uint16_t> send(count * n), recv(count);
    for (size_t i = 0; i < send.size(); ++i) send[i] = f32_to_bf16(input_value(rank, i, 5));
    RANK_OK(c.reduce_scatter_sum(send.data(), recv.data(), count, DType::kBF16));
    for (size_t i = 0; i < count; ++i)
      RANK_CHECK(recv[i] == reference_sum_bf16(n, rank * count + i, 5), "bf16 reduce_scatter: element %zu differs", i);
  }
  return 0;
}

int broadcast_p2p_checks(Communicator& c, int rank, int n) {
  for (int root = 0; root < n; ++root)
    for (size_t bytes : {size_t{1}, size_t{(3u << 20) + 1}}) {
      std::vector<uint8_t> buf(bytes);
      for (size_t i = 0; i < bytes; ++i) buf[i] = rank == root ? byte_of(root, i) : 0;
      RANK_OK(c.broadcast(buf.data(), bytes, root));
      for (size_t i = 0; i < bytes; ++i)
        RANK_CHECK(buf[i] == byte_of(root, i), "broadcast of %zu from %d: byte %zu differs", bytes, root, i);
    }
  // Every ordered pair, one pair at a time in the same order on every rank (so no cycle of
  // blocked senders): the lower rank sends first.
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{(1u << 20) + 7}})
    for (int a = 0; a < n; ++a)
      for (int b = a + 1; b < n; ++b) {
        if (rank != a && rank != b) continue;
        const int peer = rank == a ? b : a;
        std::vector<uint8_t> out(bytes), in(bytes);
        for (size_t i = 0; i < bytes; ++i) out[i] = byte_of(rank * 10 + peer, i);
        if (rank == a) {
          RANK_OK(c.send(out.data(), bytes, peer));
          RANK_OK(c.recv(in.data(), bytes, peer));
        } else {
          RANK_OK(c.recv(in.data(), bytes, peer));
          RANK_OK(c.send(out.data(), bytes, peer));
        }
        for (size_t i = 0; i < bytes; ++i)
          RANK_CHECK(in[i] == byte_of(peer * 10 + rank, i), "recv of %zu from %d: byte %zu differs", bytes, peer, i);
      }
  for (int i = 0; i < 3; ++i) RANK_OK(c.barrier());
  return 0;
}

class CommunicatorTest : public ::testing::TestWithParam<std::tuple<Kind, int>> {
 protected:
  Kind kind() const { return std::get<0>(GetParam()); }
  int n() const { return std::get<1>(GetParam()); }
};

TEST_P(CommunicatorTest, EveryOpEqualsTheSerialReferenceBitForBitOnEveryRank) {
  Group g(kind(), n(), 60'000);
  const auto codes = run_ranks(n(), [&](int rank) {
    auto c = g.make(rank);
    RANK_CHECK(c.ok(), "create: %s", c.status().to_string().c_str());
    RANK_CHECK((*c)->rank() == rank && (*c)->world_size() == g.n, "rank/world size");
    if (int rc = all_reduce_checks(**c, rank, g.n)) return rc;
    if (int rc = gather_scatter_checks(**c, rank, g.n)) return rc;
    return broadcast_p2p_checks(**c, rank, g.n);
  });
  for (int r = 0; r < n(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

TEST_P(CommunicatorTest, AllReduceOf64MiBEqualsTheSerialReference) {
  Group g(kind(), n(), 60'000);
  const auto codes = run_ranks(n(), [&](int rank) {
    auto c = g.make(rank);
    RANK_CHECK(c.ok(), "create: %s", c.status().to_string().c_str());
    const size_t count = (64u << 20) / 4;
    std::vector<float> buf(count);
    for (size_t i = 0; i < count; ++i) buf[i] = input_value(rank, i, 64);
    RANK_OK((*c)->all_reduce_sum(buf.data(), count, DType::kF32));
    for (size_t i = 0; i < count; ++i)
      RANK_CHECK(same_bits(buf[i], reference_sum_f32(g.n, i, 64)), "element %zu differs", i);
    return 0;
  });
  for (int r = 0; r < n(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

// Rank n-1 dies (SIGKILL, no cleanup) while the others wait in a collective: they fail with a
// message naming it long before the 30 s timeout, and every later op fails too.
TEST_P(CommunicatorTest, KilledRankFailsThePendingOpOnEveryOtherRankQuickly) {
  Group g(kind(), n(), 30'000);
  const auto codes = run_ranks(n(), [&](int rank) {
    auto c = g.make(rank);
    RANK_CHECK(c.ok(), "create: %s", c.status().to_string().c_str());
    if (rank == g.n - 1) {
      usleep(200'000);
      raise(SIGKILL);
    }
    std::vector<float> buf(1 << 20, 1.0f);
    const auto t0 = std::chrono::steady_clock::now();
    Status s = (*c)->all_reduce_sum(buf.data(), buf.size(), DType::kF32);
    const double waited_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    RANK_CHECK(!s.ok(), "all_reduce succeeded with a dead rank");
    RANK_CHECK(waited_s < 5.0, "took %.1f s to notice the dead rank", waited_s);
    RANK_CHECK(s.message().find("rank") != std::string::npos, "message names no rank: %s", s.message().c_str());
    std::fprintf(stderr, "rank %d saw (%.2f s): %s\n", rank, waited_s, s.message().c_str());
    RANK_CHECK(!(*c)->barrier().ok(), "an op after the failure succeeded");
    return 0;
  });
  for (int r = 0; r + 1 < n(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
  EXPECT_EQ(codes[n() - 1], 128 + SIGKILL);
}

INSTANTIATE_TEST_SUITE_P(Cpu, CommunicatorTest,
                         ::testing::Combine(::testing::Values(Kind::kShm, Kind::kTcp), ::testing::Values(2, 3, 4)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) == Kind::kShm ? "Shm" : "Tcp") + "_" +
                                  std::to_string(std::get<1>(info.param)) + "Ranks";
                         });

class CommunicatorFaultTest : public ::testing::TestWithParam<Kind> {};

// A rank that is alive but never joins: the others fail at the timeout, naming it. When it finally
// calls, its ops fail too (the group is broken; over TCP its first barrier may still complete, as
// the others had entered it before timing out), so no rank hangs.
TEST_P(CommunicatorFaultTest, StalledRankTimesTheOthersOut) {
  Group g(GetParam(), 2, 300);
  const auto codes = run_ranks(2, [&](int rank) {
    auto c = g.make(rank);
    RANK_CHECK(c.ok(), "create: %s", c.status().to_string().c_str());
    if (rank == 1) usleep(1'500'000);
    const auto t0 = std::chrono::steady_clock::now();
    Status s = (*c)->barrier();
    if (s.ok() && rank == 1) s = (*c)->barrier();
    const double waited_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    RANK_CHECK(!s.ok(), "barrier succeeded although rank 1 stalled");
    if (rank == 0) {
      RANK_CHECK(waited_s < 1.2, "timeout of 0.3 s took %.2f s", waited_s);
      RANK_CHECK(s.message().find("timed out") != std::string::npos, "message: %s", s.message().c_str());
    }
    return 0;
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
}

TEST_P(CommunicatorFaultTest, RanksInDifferentCollectivesFailNamingBoth) {
  Group g(GetParam(), 2, 5'000);
  const auto codes = run_ranks(2, [&](int rank) {
    auto c = g.make(rank);
    RANK_CHECK(c.ok(), "create: %s", c.status().to_string().c_str());
    std::vector<float> a(10, 1.0f), b(20, 0.0f);
    Status s = rank == 0 ? (*c)->all_reduce_sum(a.data(), a.size(), DType::kF32)
                         : (*c)->all_gather(a.data(), b.data(), 40);
    RANK_CHECK(!s.ok(), "mismatched collectives succeeded");
    RANK_CHECK(s.message().find("all_reduce_sum") != std::string::npos &&
                   s.message().find("all_gather") != std::string::npos,
               "message: %s", s.message().c_str());
    return 0;
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
}

TEST_P(CommunicatorFaultTest, BadArgumentsAreRefusedAndLeaveTheGroupWorking) {
  Group g(GetParam(), 2, 5'000);
  const auto codes = run_ranks(2, [&](int rank) {
    auto c = g.make(rank);
    RANK_CHECK(c.ok(), "create: %s", c.status().to_string().c_str());
    uint16_t h[4] = {};
    RANK_CHECK((*c)->all_reduce_sum(h, 4, DType::kF16).code() == StatusCode::kInvalidArgument, "f16 accepted");
    RANK_CHECK((*c)->broadcast(h, 8, 2).code() == StatusCode::kInvalidArgument, "root 2 accepted");
    RANK_CHECK((*c)->send(h, 8, rank).code() == StatusCode::kInvalidArgument, "send to self accepted");
    RANK_CHECK((*c)->recv(h, 8, -1).code() == StatusCode::kInvalidArgument, "recv from -1 accepted");
    RANK_OK((*c)->barrier());
    return 0;
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
}

INSTANTIATE_TEST_SUITE_P(Cpu, CommunicatorFaultTest, ::testing::Values(Kind::kShm, Kind::kTcp),
                         [](const auto& info) { return std::string(info.param == Kind::kShm ? "Shm" : "Tcp"); });

// Connections to rank 0's port that are not ranks of this group (garbage, silence) are dropped:
// the group still forms, the silent one costing at most a few seconds.
TEST(TcpCommunicatorTest, StrayAndSilentConnectionsDoNotJoinTheGroup) {
  Group g(Kind::kTcp, 2, 30'000);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(g.port));
  int garbage = socket(AF_INET, SOCK_STREAM, 0), silent = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(silent, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(connect(garbage, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const char junk[40] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(write(garbage, junk, sizeof(junk)), static_cast<ssize_t>(sizeof(junk)));
  const auto codes = run_ranks(2, [&](int rank) {
    auto c = g.make(rank);
    RANK_CHECK(c.ok(), "create: %s", c.status().to_string().c_str());
    float x = static_cast<float>(rank + 1);
    RANK_OK((*c)->all_reduce_sum(&x, 1, DType::kF32));
    RANK_CHECK(x == 3.0f, "sum %f", x);
    return 0;
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
  close(garbage);
  close(silent);
}

TEST(CommunicatorOptionsTest, ImpossibleGroupsAreRefusedWithAMessage) {
  ShmCommunicatorOptions o;
  o.group_id = "bad/name";
  EXPECT_EQ(ShmCommunicator::create(o).status().code(), StatusCode::kInvalidArgument);
  o.group_id = "ok";
  o.world_size = 2;
  o.rank = 2;
  auto s = ShmCommunicator::create(o).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("rank 2"), std::string::npos) << s.message();
  TcpCommunicatorOptions t;
  t.world_size = 0;
  EXPECT_EQ(TcpCommunicator::create(t).status().code(), StatusCode::kInvalidArgument);
}

TEST(RankOrderSumTest, Bf16RoundsToNearestEvenAndKeepsNaN) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  float f;
  uint32_t halfway_even = 0x3f808000u, halfway_odd = 0x3f818000u, above = 0x3f808001u;
  std::memcpy(&f, &halfway_even, 4);
  EXPECT_EQ(f32_to_bf16(f), 0x3f80);
  std::memcpy(&f, &halfway_odd, 4);
  EXPECT_EQ(f32_to_bf16(f), 0x3f82);
  std::memcpy(&f, &above, 4);
  EXPECT_EQ(f32_to_bf16(f), 0x3f81);
  const uint16_t nan = f32_to_bf16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(quant::bf16_to_f32(nan)));
}

}  // namespace
}  // namespace kvasir::dist
