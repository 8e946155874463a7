#include "dist/tcp_subgroup.h"

#include <cstdio>
#include <cstring>

#include "dist/shm_communicator.h"
#include "dist/tcp_socket.h"

namespace kvasir::dist {
namespace {

// What each rank of the parent publishes: a leader its listener, the others nothing.
struct LeaderEndpoint {
  char addr[64];  // numeric, NUL-terminated
  uint32_t port;  // 0: not a leader
  uint32_t reserved;
};

Status check_members(const Communicator& parent, const SubgroupOptions& o) {
  const std::string what = "subgroup '" + o.group_id + "' of rank " + std::to_string(parent.rank());
  if (o.members.empty()) return invalid_argument(what + ": no members");
  bool has_self = false;
  for (size_t i = 0; i < o.members.size(); ++i) {
    const int m = o.members[i];
    if (m < 0 || m >= parent.world_size())
      return invalid_argument(what + ": member " + std::to_string(m) + " is not a rank of the parent group of " +
                              std::to_string(parent.world_size()));
    if (i > 0 && m <= o.members[i - 1]) return invalid_argument(what + ": members must be ascending and distinct");
    has_self = has_self || m == parent.rank();
  }
  if (!has_self) return invalid_argument(what + ": this rank is not among the members");
  return Status();
}

int index_of(const std::vector<int>& members, int rank) {
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i] == rank) return static_cast<int>(i);
  return -1;
}

// Collective over the parent: a leader (when `listen`) binds its listener and every rank
// learns its own leader's endpoint. `listener` is the leader's, invalid elsewhere.
Status publish_leaders(Communicator& parent, const SubgroupOptions& o, bool listen, Socket& listener,
                       LeaderEndpoint& leader) {
  LeaderEndpoint mine{};
  Status local;
  if (listen && o.members[0] == parent.rank()) {
    auto l = listen_on(o.address.empty() ? "127.0.0.1" : o.address, 0, 128);
    if (l.ok()) {
      listener = std::move(l).value();
      std::snprintf(mine.addr, sizeof(mine.addr), "%s", local_address(listener.fd()).c_str());
      mine.port = static_cast<uint32_t>(local_port(listener.fd()));
    } else {
      local = unavailable("subgroup '" + o.group_id + "': its leader cannot listen on " + o.address + ": " +
                          l.status().message());
    }
  }
  // A leader that could not listen still takes part (port 0), so nobody waits on the exchange.
  std::vector<LeaderEndpoint> all(static_cast<size_t>(parent.world_size()));
  KVASIR_RETURN_IF_ERROR(parent.all_gather(&mine, all.data(), sizeof(mine)));
  KVASIR_RETURN_IF_ERROR(local);
  leader = all[static_cast<size_t>(o.members[0])];
  leader.addr[sizeof(leader.addr) - 1] = '\0';
  if (listen && leader.port == 0)
    return unavailable("subgroup '" + o.group_id + "': its leader (rank " + std::to_string(o.members[0]) +
                       ") could not listen (see its log)");
  return Status();
}

StatusOr<std::unique_ptr<TcpCommunicator>> connect_tcp(Communicator& parent, const SubgroupOptions& o,
                                                      Socket listener, const LeaderEndpoint& leader) {
  TcpCommunicatorOptions t;
  t.master_addr = leader.addr;
  t.master_port = static_cast<int>(leader.port);
  t.listen_fd = -1;
  if (listener.valid()) t.listen_fd = listener.release();  // the communicator owns it from here
  t.group_id = o.group_id;
  t.rank = index_of(o.members, parent.rank());
  t.world_size = static_cast<int>(o.members.size());
  t.timeout_ms = o.timeout_ms;
  return TcpCommunicator::create(t);
}

}  // namespace

StatusOr<std::unique_ptr<TcpCommunicator>> join_tcp_subgroup(Communicator& parent, const SubgroupOptions& o) {
  // Every rank joins the exchange, even one whose options are wrong, so the others do not wait.
  const Status valid = check_members(parent, o);
  SubgroupOptions checked = o;
  if (!valid.ok()) checked.members = {parent.rank()};
  Socket listener;
  LeaderEndpoint leader{};
  KVASIR_RETURN_IF_ERROR(publish_leaders(parent, checked, valid.ok(), listener, leader));
  KVASIR_RETURN_IF_ERROR(valid);
  return connect_tcp(parent, o, std::move(listener), leader);
}

StatusOr<std::unique_ptr<Communicator>> join_subgroup(Communicator& parent, const HostMap& hosts,
                                                      const SubgroupOptions& o) {
  if (hosts.world_size() != parent.world_size())
    return invalid_argument("subgroup '" + o.group_id + "': the host map has " + std::to_string(hosts.world_size()) +
                            " ranks, the parent group " + std::to_string(parent.world_size()));
  const Status valid = check_members(parent, o);
  const bool tcp = valid.ok() && !hosts.on_one_host(o.members);
  SubgroupOptions checked = o;
  if (!valid.ok()) checked.members = {parent.rank()};
  Socket listener;
  LeaderEndpoint leader{};
  KVASIR_RETURN_IF_ERROR(publish_leaders(parent, checked, tcp, listener, leader));
  KVASIR_RETURN_IF_ERROR(valid);
  if (tcp) {
    KVASIR_ASSIGN_OR_RETURN(auto c, connect_tcp(parent, o, std::move(listener), leader));
    return std::unique_ptr<Communicator>(std::move(c));
  }
  ShmCommunicatorOptions s;
  s.group_id = o.group_id;
  s.rank = index_of(o.members, parent.rank());
  s.world_size = static_cast<int>(o.members.size());
  s.timeout_ms = o.timeout_ms;
  s.busy_wait_us = o.busy_wait_us;
  KVASIR_ASSIGN_OR_RETURN(auto c, ShmCommunicator::create(s));
  return std::unique_ptr<Communicator>(std::move(c));
}

}  // namespace kvasir::dist
