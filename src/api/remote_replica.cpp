#include "api/remote_replica.h"

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "api/data_parallel.h"
#include "api/rank_setup.h"
#include "common/log.h"
#include "dist/tcp_communicator.h"
#include "executor/in_process_executor.h"
#include "executor/remote_worker.h"
#include "executor/step_broadcast.h"

namespace kvasir {
namespace {

constexpr int kNodeZero = 0;  // node 0's rank in a replica's step group
constexpr int kReplica = 1;   // the remote replica's rank
// To form the group (the other node may start well after node 0) and for one step's answer.
constexpr int64_t kTimeoutMs = 60'000;

std::string named(int replica) { return "data-parallel replica " + std::to_string(replica); }

// Node 0's Worker for a remote replica: a failed step says which replica and where, since the
// step group's own words ("model rank 0", "rank 1") name ranks of a group the user never made.
class RemoteReplicaWorker final : public Worker {
 public:
  RemoteReplicaWorker(std::string name, std::unique_ptr<Worker> steps) : name_(std::move(name)), steps_(std::move(steps)) {}
  StepResult execute_model(const SchedulerOutput& so, const GrammarBitmaskFuture& bitmask) override {
    StepResult r = steps_->execute_model(so, bitmask);
    if (!r.ok()) return Status(r.status().code(), name_ + ": " + r.status().message());
    return r;
  }

 private:
  std::string name_;
  std::unique_ptr<Worker> steps_;
};

StatusOr<std::unique_ptr<dist::Communicator>> join_step_group(const EngineArgs& args, int replica, int rank,
                                                               int64_t timeout_ms = kTimeoutMs) {
  dist::TcpCommunicatorOptions o;
  o.master_addr = args.data_parallel.address;
  o.master_port = args.data_parallel.replica_port(replica);
  // Strays (another replica's node dialling the wrong port) are refused by the id.
  o.group_id = "kvasir-dp-replica-" + std::to_string(replica);
  o.rank = rank;
  o.world_size = 2;
  o.timeout_ms = timeout_ms;
  KVASIR_ASSIGN_OR_RETURN(auto c, dist::TcpCommunicator::create(o));
  return std::unique_ptr<dist::Communicator>(std::move(c));
}

// One replica on a headless node, from joining its step group to node 0's stop.
Status run_replica(const EngineArgs& args, int replica, int local_replica) {
  const EngineArgs ra = data_parallel_replica_args(args, local_replica, static_cast<int>(std::thread::hardware_concurrency()));
  KVASIR_ASSIGN_OR_RETURN(auto comm, join_step_group(args, replica, kReplica));
  // Node 0 waits for the info in one op: while the model loads, say so every few seconds.
  ModelRankInfoSender info(*comm, kNodeZero);
  KVASIR_ASSIGN_OR_RETURN(RankSetup setup, set_up_rank(ra, nullptr));
  if (setup.model->backend->device() != Device::kCpu)
    return unimplemented("data-parallel replicas across nodes run on the CPU backend only (not supported yet on "
                         "CUDA); pass --device cpu");
  KVASIR_RETURN_IF_ERROR(info.send(ModelRankInfo{setup.num_kv_blocks, setup.max_model_len}));
  KVASIR_LOG_INFO("%s: %s, %d KV blocks, serving node 0's steps", named(replica).c_str(),
                  setup.model->backend->name().c_str(), setup.num_kv_blocks);
  ReplyingWorker worker(*comm, kNodeZero, std::make_unique<RunnerWorker>(std::move(setup.runner)));
  return serve_steps(*comm, worker);
}

}  // namespace

StatusOr<RemoteReplica> connect_remote_replica(const EngineArgs& args, int replica) {
  const std::string where = named(replica) + " at --data-parallel-address " + args.data_parallel.address +
                            " port " + std::to_string(args.data_parallel.replica_port(replica)) +
                            " (--data-parallel-rpc-port + " + std::to_string(replica) + ")";
  RemoteReplica r;
  // Test-only (tests/server/test_multi_node_dp.py): a node that never joins, named without waiting a minute.
  const char* test_timeout = std::getenv("KVASIR_TEST_DP_JOIN_TIMEOUT_MS");
  auto comm = join_step_group(args, replica, kNodeZero, test_timeout ? std::atoll(test_timeout) : kTimeoutMs);
  if (!comm.ok())
    return Status(comm.status().code(), where + ": its node did not join: " + comm.status().message());
  r.comm = std::make_unique<RemoteReplicaLink>(std::move(comm).value());
  auto info = recv_model_rank_info(*r.comm, kReplica);
  if (!info.ok())
    return Status(info.status().code(),
                  where + ": did not start: " + info.status().message() + "; see its node's messages");
  r.num_kv_blocks = info->num_kv_blocks;
  r.max_model_len = info->max_model_len;
  r.worker = std::make_unique<RemoteReplicaWorker>(
      named(replica) + " (on another node, met at " + args.data_parallel.address + ":" +
          std::to_string(args.data_parallel.replica_port(replica)) + ")",
      std::make_unique<BroadcastingWorker>(*r.comm, std::make_unique<RemoteWorker>(*r.comm, kReplica)));
  KVASIR_LOG_INFO("%s: on another node, reached at %s:%d, %d KV blocks", named(replica).c_str(),
                  args.data_parallel.address.c_str(), args.data_parallel.replica_port(replica), r.num_kv_blocks);
  return r;
}

int run_headless_replicas(const EngineArgs& args) {
  const DataParallelArgs& dp = args.data_parallel;
  // Before joining or loading anything: node 0 then names this node as not started.
  if (device_flag_selects_gpu(args.device)) {
    KVASIR_LOG_ERROR("data-parallel replicas across nodes run on the CPU backend only (not supported yet on CUDA); "
                     "pass --device cpu");
    return 1;
  }
  const int local = dp.local_size(args.data_parallel_size);
  std::vector<Status> results(static_cast<size_t>(local));
  std::vector<std::thread> threads;
  for (int j = 0; j < local; ++j) {
    threads.emplace_back([&args, &results, j, start = dp.start_rank] { results[j] = run_replica(args, start + j, j); });
  }
  for (std::thread& t : threads) t.join();
  int rc = 0;
  for (int j = 0; j < local; ++j) {
    if (results[j].ok()) continue;
    KVASIR_LOG_ERROR("%s: %s", named(dp.start_rank + j).c_str(), results[j].to_string().c_str());
    rc = 1;
  }
  return rc;
}

}  // namespace kvasir
