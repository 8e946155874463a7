// Subgroups of a 4-rank TCP group on loopback, in forked processes, with simulated hosts (each
// rank states a host id of the test's choosing): stages on one host each meet over shared memory,
// groups that span hosts over TCP (also groups of non-contiguous ranks), and either way their sums
// equal the serial sum over their own members while the parent group keeps working. A member that
// dies fails its subgroup's pending op on the others quickly; impossible member lists are refused
// by name on every rank without a hang. Plus the host map's arithmetic.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dist/communicator_test_util.h"
#include "dist/host_identity.h"
#include "dist/shm_communicator.h"
#include "dist/tcp_communicator.h"
#include "dist/tcp_subgroup.h"

namespace kvasir::dist {
namespace {

using testing::input_value;
using testing::run_ranks;

// The parent: a TCP group on loopback whose rank 0 listens on a socket bound before the fork.
struct Parent {
  int listen_fd = -1;
  int port = 0;
  std::string group_id;

  Parent() {
    static int counter = 0;
    group_id = "subgroup-test-" + std::to_string(getpid()) + "-" + std::to_string(++counter);
    listen_fd = testing::listen_on_loopback(&port);
    if (listen_fd < 0) ADD_FAILURE() << "cannot listen on loopback: " << std::strerror(errno);
  }
  ~Parent() {
    if (listen_fd >= 0) close(listen_fd);
  }

  StatusOr<std::unique_ptr<TcpCommunicator>> join(int rank, int n, int64_t timeout_ms = 30'000) const {
    TcpCommunicatorOptions o;
    o.master_port = port;
    o.group_id = group_id;
    o.rank = rank;
    o.world_size = n;
    o.timeout_ms = timeout_ms;
    if (rank == 0) o.listen_fd = dup(listen_fd);
    return TcpCommunicator::create(o);
  }
};

// The float32 sum in member order of input_value(member, i, salt): what a subgroup's
// all-reduce must give bit for bit (rank_order_sum.h, the subgroup's rank order).
float member_sum(const std::vector<int>& members, uint64_t i, uint64_t salt) {
  float acc = input_value(members[0], i, salt);
  for (size_t m = 1; m < members.size(); ++m) acc += input_value(members[m], i, salt);
  return acc;
}

// Each rank: join the parent, state its host, join its subgroup by host, and check the kind of
// communicator it got, its rank in it, a 3 MiB all-reduce (several TCP chunks) and an all-gather
// among the members; then the parent still sums over all 4.
int join_by_host_and_sum(const Parent& p, int rank, const std::vector<std::string>& hosts,
                         const std::vector<std::vector<int>>& groups, bool expect_tcp) {
  auto parent = p.join(rank, 4);
  RANK_CHECK(parent.ok(), "parent: %s", parent.status().to_string().c_str());
  auto map = exchange_host_ids(**parent, hosts[rank]);
  RANK_CHECK(map.ok(), "hosts: %s", map.status().to_string().c_str());
  const std::vector<int>* mine = nullptr;
  int g = 0;
  for (size_t i = 0; i < groups.size(); ++i)
    for (int m : groups[i])
      if (m == rank) mine = &groups[i], g = static_cast<int>(i);
  SubgroupOptions o;
  o.members = *mine;
  o.group_id = p.group_id + "-sub" + std::to_string(g);
  o.address = (*parent)->address();
  auto sub = join_subgroup(**parent, *map, o);
  RANK_CHECK(sub.ok(), "subgroup: %s", sub.status().to_string().c_str());
  const bool is_tcp = dynamic_cast<TcpCommunicator*>(sub->get()) != nullptr;
  const bool is_shm = dynamic_cast<ShmCommunicator*>(sub->get()) != nullptr;
  RANK_CHECK(is_tcp == expect_tcp && is_shm == !expect_tcp, "got %s, wanted %s", is_tcp ? "tcp" : "shm",
             expect_tcp ? "tcp" : "shm");
  RANK_CHECK((*sub)->world_size() == static_cast<int>(mine->size()), "world size %d", (*sub)->world_size());
  RANK_CHECK(mine->at((*sub)->rank()) == rank, "subgroup rank %d is not parent rank %d", (*sub)->rank(), rank);
  const size_t n = (3u << 20) / sizeof(float) + 7;
  std::vector<float> buf(n);
  for (size_t i = 0; i < n; ++i) buf[i] = input_value(rank, i, 11);
  RANK_OK((*sub)->all_reduce_sum(buf.data(), n, DType::kF32));
  for (size_t i = 0; i < n; ++i) {
    const float want = member_sum(*mine, i, 11);
    RANK_CHECK(std::memcmp(&buf[i], &want, 4) == 0, "element %zu: %g, want %g", i, buf[i], want);
  }
  const int32_t me = rank;
  std::vector<int32_t> gathered(mine->size());
  RANK_OK((*sub)->all_gather(&me, gathered.data(), sizeof(me)));
  RANK_CHECK(gathered == std::vector<int32_t>(mine->begin(), mine->end()), "all-gather out of member order");
  float one = 1.0f;
  RANK_OK((*parent)->all_reduce_sum(&one, 1, DType::kF32));
  RANK_CHECK(one == 4.0f, "parent sum after the subgroups: %g", one);
  return 0;
}

TEST(HostMapTest, NumbersHostsAndLocalRanksInRankOrder) {
  const HostMap m({"b", "a", "b", "a", "c"});
  EXPECT_EQ(m.world_size(), 5);
  EXPECT_EQ(m.num_hosts(), 3);
  EXPECT_EQ(m.host_of(0), 0);
  EXPECT_EQ(m.host_of(1), 1);
  EXPECT_EQ(m.host_of(4), 2);
  EXPECT_EQ(m.local_rank(0), 0);
  EXPECT_EQ(m.local_rank(2), 1);
  EXPECT_EQ(m.local_rank(3), 1);
  EXPECT_EQ(m.local_rank(4), 0);
  EXPECT_EQ(m.ranks_on_host(1), 2);
  EXPECT_EQ(m.ranks_on_host(4), 1);
  EXPECT_TRUE(m.on_one_host({0, 2}));
  EXPECT_TRUE(m.on_one_host({4}));
  EXPECT_FALSE(m.on_one_host({0, 1}));
}

TEST(HostMapTest, ThisHostIdIsStableAndOverridable) {
  EXPECT_EQ(this_host_id(), this_host_id());
  EXPECT_FALSE(this_host_id().empty());
  EXPECT_LE(this_host_id().size(), HostMap::kMaxIdBytes);
  setenv("KVASIR_HOST_ID", "node-7", 1);
  EXPECT_EQ(this_host_id(), "node-7");
  unsetenv("KVASIR_HOST_ID");
}

// vLLM's order with 2 ranks per host: TP ranks contiguous, so each stage sits on one host.
TEST(TcpSubgroupTest, StagesOnOneHostEachMeetOverSharedMemory) {
  Parent p;
  const auto codes = run_ranks(4, [&](int rank) {
    return join_by_host_and_sum(p, rank, {"host-a", "host-a", "host-b", "host-b"}, {{0, 1}, {2, 3}}, false);
  });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

// mpirun --map-by node: ranks alternate hosts, so each stage's TP group spans both.
TEST(TcpSubgroupTest, StagesSpanningHostsMeetOverTcp) {
  Parent p;
  const auto codes = run_ranks(4, [&](int rank) {
    return join_by_host_and_sum(p, rank, {"host-a", "host-b", "host-a", "host-b"}, {{0, 1}, {2, 3}}, true);
  });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

// Non-contiguous members, and one group across hosts next to one on a single host.
TEST(TcpSubgroupTest, MixedAndInterleavedGroupsEachTakeTheirOwnTransport) {
  Parent p;
  const auto codes = run_ranks(4, [&](int rank) {
    // {0, 2} spans host-a and host-b; {1, 3} are both on host-c.
    const std::vector<std::string> hosts = {"host-a", "host-c", "host-b", "host-c"};
    return join_by_host_and_sum(p, rank, hosts, {{0, 2}, {1, 3}}, rank % 2 == 0);
  });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

TEST(TcpSubgroupTest, SendAndRecvBetweenMembersOfATcpSubgroup) {
  Parent p;
  const auto codes = run_ranks(4, [&](int rank) {
    auto parent = p.join(rank, 4);
    RANK_CHECK(parent.ok(), "parent: %s", parent.status().to_string().c_str());
    SubgroupOptions o;
    o.members = rank % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3};
    o.group_id = p.group_id + (rank % 2 == 0 ? "-even" : "-odd");
    o.address = (*parent)->address();
    auto sub = join_tcp_subgroup(**parent, o);
    RANK_CHECK(sub.ok(), "subgroup: %s", sub.status().to_string().c_str());
    std::vector<uint8_t> msg(100'003);
    if ((*sub)->rank() == 0) {
      for (size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<uint8_t>(i * 7 + rank);
      RANK_OK((*sub)->send(msg.data(), msg.size(), 1));
    } else {
      RANK_OK((*sub)->recv(msg.data(), msg.size(), 0));
      const int from = rank - 2;
      for (size_t i = 0; i < msg.size(); ++i)
        RANK_CHECK(msg[i] == static_cast<uint8_t>(i * 7 + from), "byte %zu from rank %d", i, from);
    }
    RANK_OK((*sub)->barrier());
    return 0;
  });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

TEST(TcpSubgroupTest, AKilledMemberFailsItsSubgroupsPendingOpQuickly) {
  Parent p;
  const auto codes = run_ranks(4, [&](int rank) {
    auto parent = p.join(rank, 4);
    RANK_CHECK(parent.ok(), "parent: %s", parent.status().to_string().c_str());
    SubgroupOptions o;
    o.members = rank < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
    o.group_id = p.group_id + (rank < 2 ? "-s0" : "-s1");
    o.address = (*parent)->address();
    o.timeout_ms = 30'000;
    auto sub = join_tcp_subgroup(**parent, o);
    RANK_CHECK(sub.ok(), "subgroup: %s", sub.status().to_string().c_str());
    if (rank == 3) {
      usleep(200'000);
      raise(SIGKILL);
    }
    if (rank != 2) return 0;  // stage 0 is not touched by it
    std::vector<float> buf(1 << 16, 1.0f);
    const auto t0 = std::chrono::steady_clock::now();
    Status s = (*sub)->all_reduce_sum(buf.data(), buf.size(), DType::kF32);
    const double waited_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    RANK_CHECK(!s.ok(), "all-reduce succeeded with its peer dead");
    RANK_CHECK(waited_s < 5.0, "took %.1f s to notice", waited_s);
    RANK_CHECK(s.message().find("rank 1") != std::string::npos, "names no peer: %s", s.message().c_str());
    return 0;
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
  EXPECT_EQ(codes[3], 128 + SIGKILL);
}

TEST(TcpSubgroupTest, ImpossibleMemberListsAreRefusedByNameOnEveryRankWithoutAHang) {
  struct Case {
    std::vector<int> members;
    const char* says;
  };
  const std::vector<Case> cases = {{{}, "no members"},
                                   {{0, 9}, "member 9 is not a rank of the parent group of 4"},
                                   {{1, 0}, "ascending and distinct"},
                                   {{-1}, "member -1"}};
  for (const Case& c : cases) {
    Parent p;
    const auto codes = run_ranks(4, [&](int rank) {
      auto parent = p.join(rank, 4);
      RANK_CHECK(parent.ok(), "parent: %s", parent.status().to_string().c_str());
      SubgroupOptions o;
      o.members = c.members;
      o.group_id = p.group_id + "-bad";
      o.address = (*parent)->address();
      const auto t0 = std::chrono::steady_clock::now();
      auto sub = join_subgroup(**parent, HostMap({"a", "a", "b", "b"}), o);
      RANK_CHECK(!sub.ok(), "members accepted");
      RANK_CHECK(sub.status().code() == StatusCode::kInvalidArgument, "%s", sub.status().to_string().c_str());
      RANK_CHECK(sub.status().message().find(c.says) != std::string::npos, "%s", sub.status().message().c_str());
      RANK_CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5), "took too long");
      float one = 1.0f;
      RANK_OK((*parent)->all_reduce_sum(&one, 1, DType::kF32));
      RANK_CHECK(one == 4.0f, "parent broken after the refusal");
      return 0;
    });
    for (int r = 0; r < 4; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r << ": " << c.says;
  }
  // This rank is not among the members.
  Parent p;
  const auto codes = run_ranks(2, [&](int rank) {
    auto parent = p.join(rank, 2);
    RANK_CHECK(parent.ok(), "parent: %s", parent.status().to_string().c_str());
    SubgroupOptions o;
    o.members = {1 - rank};
    o.group_id = p.group_id + "-other";
    auto sub = join_tcp_subgroup(**parent, o);
    RANK_CHECK(!sub.ok() && sub.status().message().find("not among the members") != std::string::npos, "%s",
               sub.status().to_string().c_str());
    return 0;
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

}  // namespace
}  // namespace kvasir::dist
