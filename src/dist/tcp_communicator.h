// TcpCommunicator: a Communicator between hosts over TCP. Rank 0 listens on the master address;
// every other rank connects to it, says who it is and where it listens, and gets the table of all
// ranks' addresses back; then each pair of ranks connects directly (the higher rank dials), so
// every collective is a set of point-to-point frames (header: kind, sequence number, length)
// progressed together by poll(). Sums are done by every rank over all ranks' chunks in rank order
// (rank_order_sum.h): more bytes on the wire than a ring, but deterministic and identical.
//
// A peer that exits closes its sockets, which fails the pending op at once; a peer that is silent
// fails it at the timeout; on any failure this rank shuts all its sockets, so its peers fail at
// once too (no rank waits for a timeout that another rank already hit). One caller at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "dist/communicator.h"
#include "dist/op_kind.h"
#include "dist/tcp_socket.h"

namespace kvasir::dist {

struct TcpCommunicatorOptions {
  std::string master_addr = "127.0.0.1";  // rank 0's address (IPv4 or IPv6, or a host name)
  int master_port = 0;
  // Rank 0 only: an already listening socket to use instead of binding master_addr:master_port (a
  // launcher that chose the port); the communicator takes ownership.
  int listen_fd = -1;
  // Every rank states it; a connection with another id is refused (a stray or another group).
  std::string group_id = "kvasir";
  int rank = 0;
  int world_size = 1;
  int64_t timeout_ms = 60'000;   // to form the group, and for one op to hear from its peers
  // Rank 0 only: called about every 100 ms while it waits for the others to join; a failure ends
  // the wait with it (a launcher that sees a rank it started exit before joining).
  std::function<Status()> while_attaching;
  size_t chunk_bytes = 1u << 20;  // the piece of a sum exchanged per round (bounds the scratch)
};

class TcpCommunicator final : public Communicator {
 public:
  static constexpr int kMaxWorldSize = 1024;

  static StatusOr<std::unique_ptr<TcpCommunicator>> create(const TcpCommunicatorOptions& options);
  ~TcpCommunicator() override = default;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  // A numeric address of this host that the group's ranks reach it at (the local end of its
  // connection to rank 0; rank 0's, of its connection from rank 1): where a subgroup this rank
  // leads listens (tcp_subgroup.h).
  const std::string& address() const { return address_; }
  Status all_reduce_sum(void* data, size_t count, DType dtype) override;
  Status all_gather(const void* send, void* recv, size_t bytes_per_rank) override;
  Status reduce_scatter_sum(const void* send, void* recv, size_t count_per_rank, DType dtype) override;
  Status broadcast(void* data, size_t bytes, int root) override;
  Status send(const void* data, size_t bytes, int peer) override;
  Status recv(void* data, size_t bytes, int peer) override;
  Status barrier() override;

 private:
  TcpCommunicator() = default;
  Status connect_group(const TcpCommunicatorOptions& options, Socket listener);
  Status run(const char* op, std::vector<Transfer>& transfers);  // sticky failure, shuts sockets
  Status check_dtype(const char* op, DType dtype) const;
  Transfer& add_transfer(int peer, OpKind kind, uint64_t seq);

  int rank_ = 0, world_size_ = 1;
  std::string address_;
  int64_t timeout_ms_ = 0;
  size_t chunk_bytes_ = 0;
  std::vector<Socket> peers_;            // [world_size], peers_[rank_] unused
  std::vector<uint8_t> scratch_;         // [world_size * chunk_bytes]: the peers' chunks of a sum
  uint64_t collective_seq_ = 0;          // same on every rank: collectives are called in order
  std::vector<uint64_t> sent_, received_;  // [world_size] point-to-point frames per direction
  std::vector<Transfer> transfers_;      // reused each op
  std::vector<const void*> inputs_;      // [world_size]: the buffers a sum reads, in rank order
  Status sticky_;
};

}  // namespace kvasir::dist
