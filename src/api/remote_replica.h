// Data-parallel replicas on other nodes (vLLM's --data-parallel-size-local < --data-parallel-size,
// the other nodes --headless). Node 0 keeps the API server, the routing and every replica's engine
// and scheduler; a replica on another node is a remote model: node 0's engine sends each step to
// it and gets the sampled tokens back, exactly as the multiprocess executor's front does with its
// model ranks (api/multiprocess_executor.h), only over TCP. Each remote replica has its own step
// group of two ranks (node 0 rank 0, the replica rank 1) meeting at --data-parallel-address :
// --data-parallel-rpc-port + replica, so one replica's step never waits behind another's.
//
// A headless node is one process running its replicas, a thread each: join the replica's step
// group, build the model, KV cache and runner (api/rank_setup.h), tell node 0 the block count and
// max_model_len, then run steps until node 0 stops the group. A node that dies breaks its groups,
// so node 0's step for that replica fails and the engine group fails every replica (the fault
// path of engine/engine_group.h). CPU backend only. Knows no HTTP and no request.
#pragma once

#include <atomic>
#include <memory>

#include "common/status.h"
#include "dist/communicator.h"
#include "executor/executor.h"
#include "setup/engine_args.h"

namespace kvasir {

// A remote replica's step group as node 0 holds it: every op passed through, and whether one
// failed. A failed op means the link is gone for good (the node died, or the network did), which
// is what tells a lost node apart from a replica whose step failed (that engine is dead, its node
// still there): only the first ends the server (tools/cmd_serve.cpp).
class RemoteReplicaLink final : public dist::Communicator {
 public:
  explicit RemoteReplicaLink(std::unique_ptr<dist::Communicator> comm) : comm_(std::move(comm)) {}
  bool lost() const { return lost_.load(std::memory_order_acquire); }

  int rank() const override { return comm_->rank(); }
  int world_size() const override { return comm_->world_size(); }
  Status all_reduce_sum(void* data, size_t count, DType dtype) override {
    return watch(comm_->all_reduce_sum(data, count, dtype));
  }
  Status all_gather(const void* send, void* recv, size_t bytes_per_rank) override {
    return watch(comm_->all_gather(send, recv, bytes_per_rank));
  }
  Status reduce_scatter_sum(const void* send, void* recv, size_t count_per_rank, DType dtype) override {
    return watch(comm_->reduce_scatter_sum(send, recv, count_per_rank, dtype));
  }
  Status broadcast(void* data, size_t bytes, int root) override { return watch(comm_->broadcast(data, bytes, root)); }
  Status send(const void* data, size_t bytes, int peer) override { return watch(comm_->send(data, bytes, peer)); }
  Status recv(void* data, size_t bytes, int peer) override { return watch(comm_->recv(data, bytes, peer)); }
  Status barrier() override { return watch(comm_->barrier()); }

 private:
  Status watch(Status s) {
    if (!s.ok()) lost_.store(true, std::memory_order_release);
    return s;
  }
  std::unique_ptr<dist::Communicator> comm_;
  std::atomic<bool> lost_{false};
};

// Node 0's end of one remote replica.
struct RemoteReplica {
  std::unique_ptr<RemoteReplicaLink> comm;   // the replica's step group; node 0 is rank 0
  int num_kv_blocks = 0;                     // as the replica planned its KV cache
  int max_model_len = 0;                     // as the replica fitted it to that cache
  std::unique_ptr<Worker> worker;            // the engine's Worker; refers to comm
};

// Listens at the replica's port, waits until its node joins and says its model and KV cache are
// ready. A port in use, a node that never comes (the join timeout) or fails to load is named.
StatusOr<RemoteReplica> connect_remote_replica(const EngineArgs& args, int replica);

// A --headless node's whole life: replicas start_rank .. start_rank + size_local - 1, a thread
// each, until node 0 stops them. Returns the process exit code (0: stopped by node 0).
int run_headless_replicas(const EngineArgs& args);

}  // namespace kvasir
