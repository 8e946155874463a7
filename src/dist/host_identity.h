// HostMap: which host each rank of a group is on, learnt once at join (every rank states its host
// id, an all-gather over the group), so that a subgroup whose ranks share a host meets over shared
// memory (and, on CUDA, sums over IPC buffers) while one that spans hosts meets over TCP (NCCL).
// A rank's index among the ranks of its host (its local rank) picks its GPU (launch_plan.h).
//
// A host is what shared memory reaches: one kernel boot (/proc/sys/kernel/random/boot_id) seen
// from one network and mount namespace (so the test's network namespaces, and containers, count as
// hosts of their own, which is conservative: TCP works wherever shared memory would).
// $KVASIR_HOST_ID overrides it (tests that simulate hosts inside one). Knows no model.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "dist/communicator.h"

namespace kvasir::dist {

// This process's host id: $KVASIR_HOST_ID, else boot id, network and mount namespace, host name.
std::string this_host_id();

class HostMap {
 public:
  static constexpr size_t kMaxIdBytes = 255;

  HostMap() = default;
  // ids: [world_size], rank r's host id.
  explicit HostMap(const std::vector<std::string>& ids);

  int world_size() const { return static_cast<int>(host_of_rank_.size()); }
  int num_hosts() const { return num_hosts_; }
  // Hosts numbered in order of their first rank.
  int host_of(int rank) const { return host_of_rank_[rank]; }
  // rank's index among its host's ranks (ascending rank), and how many ranks its host has.
  int local_rank(int rank) const;
  int ranks_on_host(int rank) const;
  // Whether every rank in `ranks` (world ranks) is on one host.
  bool on_one_host(const std::vector<int>& ranks) const;

 private:
  std::vector<int> host_of_rank_;  // [world_size]
  int num_hosts_ = 0;
};

// Every rank of `world` calls it at the same point with its own id (at most kMaxIdBytes).
StatusOr<HostMap> exchange_host_ids(Communicator& world, const std::string& mine);

}  // namespace kvasir::dist
