// vLLM's flags for data-parallel replicas spread over nodes: --data-parallel-size-local (the
// replicas this node runs), --data-parallel-start-rank (the first of them, on a --headless node),
// --data-parallel-address (node 0's address) and --data-parallel-rpc-port (where node 0 meets the
// other nodes' replicas). Plain data; validate() checks them against --data-parallel-size and
// --headless once, at start, naming the flag that does not fit. Starting and joining replicas is
// api/remote_replica.h's job; splitting a node's cores between its replicas api/data_parallel.h's.
#pragma once

#include <optional>
#include <string>

#include "common/status.h"

namespace kvasir {

struct DataParallelArgs {
  static constexpr int kDefaultRpcPort = 29550;  // vLLM's data_parallel_rpc_port
  static constexpr const char* kDefaultAddress = "127.0.0.1";  // vLLM's data_parallel_master_ip

  // --data-parallel-size-local: replicas on this node; unset: every replica (one node).
  std::optional<int> size_local;
  // --data-parallel-start-rank: this node's first replica; 0 on node 0 (the API server's).
  int start_rank = 0;
  // --data-parallel-address: node 0's address; it listens there for the other nodes' replicas.
  std::string address = kDefaultAddress;
  // --data-parallel-rpc-port: remote replica i meets node 0 at address:rpc_port + i (one TCP step
  // group per replica, so the replicas' steps never queue behind each other).
  int rpc_port = kDefaultRpcPort;
  bool address_given = false;
  bool rpc_port_given = false;

  // The replicas this node runs, of data_parallel_size in all.
  int local_size(int data_parallel_size) const { return size_local.value_or(data_parallel_size); }
  // Whether some replica of data_parallel_size runs on another node.
  bool spans_nodes(int data_parallel_size) const { return local_size(data_parallel_size) < data_parallel_size; }
  // The port remote replica `replica` meets node 0 at.
  int replica_port(int replica) const { return rpc_port + replica; }

  // headless: --headless, a node that runs only replicas (no API server). Refused: any of these
  // flags with --data-parallel-size 1; a local size outside [0, D] or a start rank outside
  // [0, D); start + local past D; a start rank other than 0 on node 0; --headless with no local
  // replica or with start rank 0 (replica 0 is node 0's); ports past 65535.
  Status validate(int data_parallel_size, bool headless) const;
};

}  // namespace kvasir
