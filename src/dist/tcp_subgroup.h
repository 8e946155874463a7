// Subgroups of a group's ranks (one pipeline stage's tensor-parallel ranks, say), each with its
// own Communicator: shared memory when all its ranks are on one host (HostMap), else TCP, its
// lowest rank (the leader) listening on an ephemeral port of its own address and the others
// dialling it there. The leaders' ports are published over the parent group, so every rank of the
// parent joins at the same point (a subgroup on one host takes part in that exchange too), then
// only waits for the ranks of its own subgroup. The parent stays usable and unchanged.
// Knows no model; the caller says which ranks belong together.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "dist/communicator.h"
#include "dist/host_identity.h"
#include "dist/tcp_communicator.h"

namespace kvasir::dist {

struct SubgroupOptions {
  // This rank's subgroup: ranks of the parent group, ascending, this rank among them. The
  // subgroup's rank r is members[r].
  std::vector<int> members;
  // The same on every member, different for every subgroup of every parent (a shared-memory name
  // and the TCP hello's group id).
  std::string group_id;
  // Where this rank listens should it lead a TCP subgroup: its address as the parent's ranks reach
  // it (TcpCommunicator::address()); empty: loopback (a parent on one host).
  std::string address;
  int64_t timeout_ms = 60'000;
  int64_t busy_wait_us = 0;  // shared memory: ShmCommunicatorOptions::busy_wait_us
};

// Every rank of `parent` calls it at the same point with its own subgroup; TCP for its subgroup
// whatever the hosts (tests, and join_subgroup's choice).
StatusOr<std::unique_ptr<TcpCommunicator>> join_tcp_subgroup(Communicator& parent, const SubgroupOptions& options);

// Every rank of `parent` calls it at the same point: shared memory when hosts puts all of this
// rank's subgroup on one host, else TCP.
StatusOr<std::unique_ptr<Communicator>> join_subgroup(Communicator& parent, const HostMap& hosts,
                                                      const SubgroupOptions& options);

}  // namespace kvasir::dist
