#include "dist/tcp_communicator.h"

#include <algorithm>
#include <cstring>

#include "dist/op_kind.h"
#include "dist/rank_order_sum.h"

namespace kvasir::dist {
namespace {

constexpr uint64_t kHelloMagic = 0x6b7648454c4c4f31ull;  // "kvHELLO1"

// What a rank says when it connects: to rank 0 (with the port it listens on) and to its mesh peers.
struct Hello {
  uint64_t magic;
  uint64_t group_hash;
  uint32_t world_size;
  uint32_t rank;
  uint32_t listen_port;
  uint32_t reserved;
};

// One entry of the table rank 0 sends back: where rank r listens.
struct TableEntry {
  char addr[64];  // numeric, NUL-terminated
  uint32_t port;
  uint32_t reserved;
};

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

size_t num_rounds(size_t total, size_t per_round) { return std::max<size_t>(1, (total + per_round - 1) / per_round); }

std::string rank_str(int r) { return "rank " + std::to_string(r); }

}  // namespace

StatusOr<std::unique_ptr<TcpCommunicator>> TcpCommunicator::create(const TcpCommunicatorOptions& o) {
  Socket listener(o.listen_fd);  // owned from here on, whatever happens
  if (o.world_size < 1 || o.world_size > kMaxWorldSize)
    return invalid_argument("tcp communicator: world size " + std::to_string(o.world_size) + " is not in [1, " +
                            std::to_string(kMaxWorldSize) + "]");
  if (o.rank < 0 || o.rank >= o.world_size)
    return invalid_argument("tcp communicator: rank " + std::to_string(o.rank) + " is not in [0, " +
                            std::to_string(o.world_size) + ")");
  if (o.timeout_ms <= 0) return invalid_argument("tcp communicator: timeout_ms must be positive");
  if (o.chunk_bytes < 4096 || o.chunk_bytes % 64 != 0 || o.chunk_bytes > (size_t{1} << 30))
    return invalid_argument("tcp communicator: chunk_bytes must be a multiple of 64 in [4096, 1 GiB]");
  if (o.listen_fd < 0 && (o.master_port <= 0 || o.master_port > 65535))
    return invalid_argument("tcp communicator: master port " + std::to_string(o.master_port) + " is not in [1, 65535]");
  std::unique_ptr<TcpCommunicator> c(new TcpCommunicator());
  c->rank_ = o.rank;
  c->world_size_ = o.world_size;
  c->timeout_ms_ = o.timeout_ms;
  c->chunk_bytes_ = o.chunk_bytes;
  c->peers_.resize(o.world_size);
  c->sent_.assign(o.world_size, 0);
  c->received_.assign(o.world_size, 0);
  c->inputs_.resize(o.world_size);
  c->transfers_.reserve(o.world_size);
  Status s = c->connect_group(o, std::move(listener));
  if (!s.ok()) return s;
  c->scratch_.resize(c->chunk_bytes_ * o.world_size);
  return c;
}

Status TcpCommunicator::connect_group(const TcpCommunicatorOptions& o, Socket listener) {
  const Deadline deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(o.timeout_ms);
  const uint64_t group_hash = fnv1a(o.group_id);
  const std::string where = "tcp communicator (" + rank_str(rank_) + " of " + std::to_string(world_size_) + ")";
  if (world_size_ == 1) {
    address_ = o.master_addr;
    return Status();
  }
  // A connection that says nothing must not hold up the group: its hello gets a few seconds.
  auto hello_deadline = [&] { return std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(5)); };
  if (rank_ == 0) {
    if (!listener.valid()) {
      auto l = listen_on(o.master_addr, o.master_port, 128);
      if (!l.ok()) return l.status();
      listener = std::move(l).value();
    }
    std::vector<TableEntry> table(world_size_);
    for (int joined = 1; joined < world_size_;) {
      // In slices, so that while_attaching hears of a rank that will never dial.
      const Deadline slice = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(100));
      auto a = accept_until(listener, slice);
      const auto now = std::chrono::steady_clock::now();
      if (!a.ok() && now >= slice && now < deadline) {  // nobody dialled in this slice: wait on
        if (o.while_attaching) KVASIR_RETURN_IF_ERROR(o.while_attaching());
        continue;
      }
      if (!a.ok())
        return unavailable(where + ": only " + std::to_string(joined - 1) + " of " + std::to_string(world_size_ - 1) +
                           " ranks joined within " + std::to_string(o.timeout_ms) + " ms");
      Hello h{};
      if (!read_all(a->fd(), &h, sizeof(h), hello_deadline()).ok() || h.magic != kHelloMagic ||
          h.group_hash != group_hash)
        continue;  // a stray connection or another group's rank: not ours, drop it
      if (h.world_size != static_cast<uint32_t>(world_size_) || h.rank == 0 || h.rank >= h.world_size ||
          peers_[h.rank].valid())
        return invalid_argument(where + ": a rank joined as rank " + std::to_string(h.rank) + " of " +
                                std::to_string(h.world_size) + " (a duplicate, or ranks disagree on the world size)");
      const std::string addr = peer_address(a->fd());
      std::snprintf(table[h.rank].addr, sizeof(table[h.rank].addr), "%s", addr.c_str());
      table[h.rank].port = h.listen_port;
      peers_[h.rank] = std::move(a).value();
      ++joined;
    }
    for (int r = 1; r < world_size_; ++r) {
      Status s = write_all(peers_[r].fd(), table.data(), sizeof(TableEntry) * table.size(), deadline);
      if (!s.ok()) return unavailable(where + ": sending the address table to " + rank_str(r) + ": " + s.message());
    }
  } else {
    auto m = dial_until(o.master_addr, o.master_port, deadline);
    if (!m.ok()) return unavailable(where + ": rank 0 at " + o.master_addr + ":" + std::to_string(o.master_port) +
                                    " did not answer: " + m.status().message());
    // Listen for the higher ranks on the address this host uses to reach rank 0.
    auto l = listen_on(local_address(m->fd()), 0, 128);
    if (!l.ok()) return l.status();
    listener = std::move(l).value();
    const Hello hello{kHelloMagic, group_hash, static_cast<uint32_t>(world_size_), static_cast<uint32_t>(rank_),
                      static_cast<uint32_t>(local_port(listener.fd())), 0};
    std::vector<TableEntry> table(world_size_);
    Status s = write_all(m->fd(), &hello, sizeof(hello), deadline);
    if (s.ok()) s = read_all(m->fd(), table.data(), sizeof(TableEntry) * table.size(), deadline);
    if (!s.ok()) return unavailable(where + ": rank 0 refused or lost the group (see its log): " + s.message());
    peers_[0] = std::move(m).value();
    for (int r = 1; r < rank_; ++r) {
      table[r].addr[sizeof(table[r].addr) - 1] = '\0';
      auto d = dial_until(table[r].addr, static_cast<int>(table[r].port), deadline);
      if (d.ok()) s = write_all(d->fd(), &hello, sizeof(hello), deadline);
      if (!d.ok() || !s.ok())
        return unavailable(where + ": cannot reach " + rank_str(r) + " at " + table[r].addr + ":" +
                           std::to_string(table[r].port) + ": " + (d.ok() ? s : d.status()).message());
      peers_[r] = std::move(d).value();
    }
    for (int joined = rank_ + 1; joined < world_size_;) {
      auto a = accept_until(listener, deadline);
      if (!a.ok()) return unavailable(where + ": the higher ranks did not all connect in time");
      Hello h{};
      if (!read_all(a->fd(), &h, sizeof(h), hello_deadline()).ok() || h.magic != kHelloMagic ||
          h.group_hash != group_hash)
        continue;
      if (h.rank <= static_cast<uint32_t>(rank_) || h.rank >= static_cast<uint32_t>(world_size_) ||
          peers_[h.rank].valid())
        return invalid_argument(where + ": unexpected connection from rank " + std::to_string(h.rank));
      peers_[h.rank] = std::move(a).value();
      ++joined;
    }
  }
  for (int r = 0; r < world_size_; ++r)
    if (r != rank_) set_nodelay_nonblocking(peers_[r].fd());
  address_ = local_address(peers_[rank_ == 0 ? 1 : 0].fd());
  return Status();
}

Status TcpCommunicator::run(const char* op, std::vector<Transfer>& transfers) {
  if (!sticky_.ok()) return sticky_;
  Status s = exchange(transfers, op, timeout_ms_);
  if (s.ok()) return s;
  sticky_ = s;
  // Wake every peer at once: whatever it waits for from this rank will not come.
  for (Socket& p : peers_) p.shutdown_both();
  return s;
}

Status TcpCommunicator::check_dtype(const char* op, DType dtype) const {
  if (reduce_element_bytes(dtype) != 0) return Status();
  return invalid_argument(std::string("tcp communicator: ") + op + " sums float32 or bf16, not " +
                          std::string(dtype_name(dtype)));
}

Transfer& TcpCommunicator::add_transfer(int peer, OpKind kind, uint64_t seq) {
  Transfer& t = transfers_.emplace_back();
  t.peer = peer;
  t.fd = peers_[peer].fd();
  t.kind = static_cast<uint32_t>(kind);
  t.seq = seq;
  return t;
}

Status TcpCommunicator::all_reduce_sum(void* data, size_t count, DType dtype) {
  Status s = check_dtype("all_reduce_sum", dtype);
  if (!s.ok()) return s;
  const size_t es = reduce_element_bytes(dtype), per = chunk_bytes_ / es;
  auto* bytes = static_cast<uint8_t*>(data);
  for (size_t i = 0, rounds = num_rounds(count, per); i < rounds; ++i) {
    const size_t off = i * per, len = std::min(per, count - std::min(count, off));
    const uint64_t seq = ++collective_seq_;
    transfers_.clear();
    for (int p = 0; p < world_size_; ++p) {
      if (p == rank_) continue;
      Transfer& t = add_transfer(p, OpKind::kAllReduce, seq);
      t.has_send = t.has_recv = true;
      t.send = bytes + off * es;
      t.send_bytes = t.recv_bytes = len * es;
      t.recv = scratch_.data() + p * chunk_bytes_;
    }
    s = run("all_reduce_sum", transfers_);
    if (!s.ok()) return s;
    for (int p = 0; p < world_size_; ++p)
      inputs_[p] = p == rank_ ? bytes + off * es : scratch_.data() + p * chunk_bytes_;
    sum_in_rank_order(inputs_.data(), world_size_, bytes + off * es, len, dtype);
  }
  return Status();
}

Status TcpCommunicator::all_gather(const void* send, void* recv, size_t bytes_per_rank) {
  auto* dst = static_cast<uint8_t*>(recv);
  const uint64_t seq = ++collective_seq_;
  transfers_.clear();
  for (int p = 0; p < world_size_; ++p) {
    if (p == rank_) continue;
    Transfer& t = add_transfer(p, OpKind::kAllGather, seq);
    t.has_send = t.has_recv = true;
    t.send = send;
    t.send_bytes = t.recv_bytes = bytes_per_rank;
    t.recv = dst + p * bytes_per_rank;
  }
  Status s = run("all_gather", transfers_);
  if (!s.ok()) return s;
  if (bytes_per_rank > 0) std::memcpy(dst + rank_ * bytes_per_rank, send, bytes_per_rank);
  return Status();
}

Status TcpCommunicator::reduce_scatter_sum(const void* send, void* recv, size_t count_per_rank, DType dtype) {
  Status s = check_dtype("reduce_scatter_sum", dtype);
  if (!s.ok()) return s;
  const size_t es = reduce_element_bytes(dtype), per = chunk_bytes_ / es;
  const auto* src = static_cast<const uint8_t*>(send);
  auto* dst = static_cast<uint8_t*>(recv);
  for (size_t i = 0, rounds = num_rounds(count_per_rank, per); i < rounds; ++i) {
    const size_t off = i * per, len = std::min(per, count_per_rank - std::min(count_per_rank, off));
    const uint64_t seq = ++collective_seq_;
    transfers_.clear();
    // Each peer gets only its own part of this rank's input.
    for (int p = 0; p < world_size_; ++p) {
      if (p == rank_) continue;
      Transfer& t = add_transfer(p, OpKind::kReduceScatter, seq);
      t.has_send = t.has_recv = true;
      t.send = src + (p * count_per_rank + off) * es;
      t.send_bytes = t.recv_bytes = len * es;
      t.recv = scratch_.data() + p * chunk_bytes_;
    }
    s = run("reduce_scatter_sum", transfers_);
    if (!s.ok()) return s;
    for (int p = 0; p < world_size_; ++p)
      inputs_[p] = p == rank_ ? src + (rank_ * count_per_rank + off) * es : scratch_.data() + p * chunk_bytes_;
    sum_in_rank_order(inputs_.data(), world_size_, dst + off * es, len, dtype);
  }
  return Status();
}

Status TcpCommunicator::broadcast(void* data, size_t bytes, int root) {
  if (root < 0 || root >= world_size_)
    return invalid_argument("tcp communicator: broadcast root " + std::to_string(root) + " is not a rank");
  const uint64_t seq = ++collective_seq_;
  transfers_.clear();
  for (int p = 0; p < world_size_; ++p) {
    if (p == rank_ || (rank_ != root && p != root)) continue;
    Transfer& t = add_transfer(p, OpKind::kBroadcast, seq);
    if (rank_ == root) {
      t.has_send = true;
      t.send = data;
      t.send_bytes = bytes;
    } else {
      t.has_recv = true;
      t.recv = data;
      t.recv_bytes = bytes;
    }
  }
  return run("broadcast", transfers_);
}

Status TcpCommunicator::barrier() {
  const uint64_t seq = ++collective_seq_;
  transfers_.clear();
  for (int p = 0; p < world_size_; ++p) {
    if (p == rank_) continue;
    Transfer& t = add_transfer(p, OpKind::kBarrier, seq);
    t.has_send = t.has_recv = true;
  }
  return run("barrier", transfers_);
}

Status TcpCommunicator::send(const void* data, size_t bytes, int peer) {
  if (peer < 0 || peer >= world_size_ || peer == rank_)
    return invalid_argument("tcp communicator: send to " + std::to_string(peer) + ": not another rank");
  transfers_.clear();
  Transfer& t = add_transfer(peer, OpKind::kSend, sent_[peer]++);
  t.has_send = true;
  t.send = data;
  t.send_bytes = bytes;
  return run("send", transfers_);
}

Status TcpCommunicator::recv(void* data, size_t bytes, int peer) {
  if (peer < 0 || peer >= world_size_ || peer == rank_)
    return invalid_argument("tcp communicator: recv from " + std::to_string(peer) + ": not another rank");
  transfers_.clear();
  Transfer& t = add_transfer(peer, OpKind::kSend, received_[peer]++);
  t.has_recv = true;
  t.recv = data;
  t.recv_bytes = bytes;
  return run("recv", transfers_);
}

}  // namespace kvasir::dist
