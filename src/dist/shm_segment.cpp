#include "dist/shm_segment.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstring>

#include "common/check.h"
#include "dist/op_kind.h"

namespace kvasir::dist {
namespace {

constexpr uint64_t kMagic = 0x6b76617369724453ull;  // "kvasirDS"
constexpr uint32_t kFailDead = 1, kFailTimeout = 3, kFailMismatch = 4;

static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "atomics in shared memory must be lock-free to be address-free");

struct ShmHeader {
  std::atomic<uint64_t> magic;  // published last by rank 0: the rest is initialized
  uint32_t world_size;
  uint64_t slot_bytes, p2p_slot_bytes, total_bytes;
  std::atomic<uint32_t> num_attached;
  // 0, or (kind << 16) | (1 + the rank the failure is about): the first failure anyone saw.
  std::atomic<uint32_t> failure;
};

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// Layout: header | rank states [N] | channel states [N*N] | slots [N] | p2p slots [N*N].
size_t ranks_offset() { return round_up(sizeof(ShmHeader), 64); }
size_t channels_offset(int n) { return ranks_offset() + sizeof(ShmRankState) * n; }
size_t slots_offset(int n) { return round_up(channels_offset(n) + sizeof(ShmChannelState) * n * n, 4096); }

bool valid_group_id(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  return true;
}

Status errno_status(const std::string& what) { return unavailable(what + ": " + std::strerror(errno)); }

void sleep_ms(int ms) { usleep(ms * 1000); }

}  // namespace

ShmRankState& ShmSegment::rank_state(int r) const {
  return reinterpret_cast<ShmRankState*>(base_ + ranks_offset())[r];
}
ShmChannelState& ShmSegment::channel(int src, int dst) const {
  return reinterpret_cast<ShmChannelState*>(base_ + channels_offset(world_size_))[src * world_size_ + dst];
}
uint8_t* ShmSegment::slot(int r) const { return base_ + slots_offset(world_size_) + slot_bytes_ * r; }
uint8_t* ShmSegment::p2p_slot(int src, int dst) const {
  return base_ + slots_offset(world_size_) + slot_bytes_ * world_size_ +
         p2p_slot_bytes_ * (static_cast<size_t>(src) * world_size_ + dst);
}

StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::attach(const ShmCommunicatorOptions& o) {
  if (!valid_group_id(o.group_id))
    return invalid_argument("shm communicator: group id '" + o.group_id +
                            "' must be 1-128 letters, digits, '.', '_' or '-'");
  if (o.world_size < 1 || o.world_size > ShmCommunicator::kMaxWorldSize)
    return invalid_argument("shm communicator: world size " + std::to_string(o.world_size) + " is not in [1, " +
                            std::to_string(ShmCommunicator::kMaxWorldSize) + "]");
  if (o.rank < 0 || o.rank >= o.world_size)
    return invalid_argument("shm communicator: rank " + std::to_string(o.rank) + " is not in [0, " +
                            std::to_string(o.world_size) + ")");
  if (o.timeout_ms <= 0) return invalid_argument("shm communicator: timeout_ms must be positive");
  if (o.busy_wait_us < 0 || o.busy_wait_us > 10'000'000)
    return invalid_argument("shm communicator: busy_wait_us must be in [0, 10 s]");
  if (o.slot_bytes < 4096 || o.slot_bytes % 64 || o.p2p_slot_bytes < 64 || o.p2p_slot_bytes % 64 ||
      o.slot_bytes > (size_t{1} << 30) || o.p2p_slot_bytes > (size_t{1} << 30))
    return invalid_argument("shm communicator: slot sizes must be multiples of 64, slot >= 4096, up to 1 GiB");
  std::unique_ptr<ShmSegment> seg(new ShmSegment());
  seg->group_id_ = o.group_id;
  seg->name_ = "/kvasir-dist-" + o.group_id;
  seg->rank_ = o.rank;
  seg->world_size_ = o.world_size;
  seg->timeout_ms_ = o.timeout_ms;
  seg->busy_wait_ns_ = o.busy_wait_us * 1000;
  seg->slot_bytes_ = o.slot_bytes;
  seg->p2p_slot_bytes_ = o.p2p_slot_bytes;
  seg->while_attaching_ = o.while_attaching;
  const size_t n = static_cast<size_t>(o.world_size);
  seg->total_bytes_ = slots_offset(o.world_size) + o.slot_bytes * n + o.p2p_slot_bytes * n * n;
  Status s = seg->create_or_open(o);
  if (!s.ok()) return s;
  seg->start_keeper();
  s = seg->wait_for_everyone();
  if (!s.ok()) return s;
  return seg;
}

Status ShmSegment::create_or_open(const ShmCommunicatorOptions& o) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms_);
  int fd = -1;
  if (rank_ == 0) {
    shm_unlink(name_.c_str());  // a stale segment of a crashed launch with the same id
    fd = shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) return errno_status("shm communicator: cannot create " + name_);
    if (ftruncate(fd, static_cast<off_t>(total_bytes_)) != 0) {
      Status s = errno_status("shm communicator: cannot size " + name_ + " to " + std::to_string(total_bytes_));
      close(fd);
      shm_unlink(name_.c_str());
      return s;
    }
  } else {
    // Rank 0 may not have created it yet: wait for the name, then for its full size.
    for (;;) {
      if (fd < 0) fd = shm_open(name_.c_str(), O_RDWR, 0600);
      struct stat st {};
      if (fd >= 0 && fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= sizeof(ShmHeader)) {
        if (static_cast<size_t>(st.st_size) != total_bytes_) {
          close(fd);
          return invalid_argument("shm communicator: segment " + name_ + " has " + std::to_string(st.st_size) +
                                  " bytes, this rank expects " + std::to_string(total_bytes_) +
                                  " (ranks disagree on world size or slot sizes)");
        }
        break;
      }
      if (fd < 0 && errno != ENOENT) return errno_status("shm communicator: cannot open " + name_);
      if (std::chrono::steady_clock::now() > deadline)
        return unavailable("shm communicator: rank 0 did not create " + name_ + " within " +
                           std::to_string(timeout_ms_) + " ms");
      sleep_ms(1);
    }
  }
  void* p = mmap(nullptr, total_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return errno_status("shm communicator: cannot map " + name_);
  base_ = static_cast<uint8_t*>(p);
  auto* h = reinterpret_cast<ShmHeader*>(base_);
  if (rank_ == 0) {
    // The file is zero-filled, so the atomics start at 0; only the mutexes need initializing.
    h->world_size = static_cast<uint32_t>(world_size_);
    h->slot_bytes = slot_bytes_;
    h->p2p_slot_bytes = p2p_slot_bytes_;
    h->total_bytes = total_bytes_;
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    for (int r = 0; r < world_size_; ++r) pthread_mutex_init(&rank_state(r).alive, &attr);
    pthread_mutexattr_destroy(&attr);
    h->magic.store(kMagic, std::memory_order_release);
    return Status();
  }
  Backoff backoff;
  while (h->magic.load(std::memory_order_acquire) != kMagic) {
    if (std::chrono::steady_clock::now() > deadline)
      return unavailable("shm communicator: " + name_ + " was not initialized within " +
                         std::to_string(timeout_ms_) + " ms");
    backoff.pause();
  }
  if (h->world_size != static_cast<uint32_t>(world_size_) || h->slot_bytes != slot_bytes_ ||
      h->p2p_slot_bytes != p2p_slot_bytes_)
    return invalid_argument("shm communicator: " + name_ + " was created for world size " +
                            std::to_string(h->world_size) + ", this rank expects " + std::to_string(world_size_) +
                            " (or the slot sizes differ)");
  return Status();
}

void ShmSegment::start_keeper() {
  keeper_ = std::thread([this] {
    ShmRankState& me = rank_state(rank_);
    const int rc = pthread_mutex_lock(&me.alive);
    if (rc == EOWNERDEAD) pthread_mutex_consistent(&me.alive);  // a stale owner of a reused segment
    std::unique_lock<std::mutex> lock(keeper_mu_);
    keeper_locked_ = true;
    keeper_cv_.notify_all();
    keeper_cv_.wait(lock, [this] { return keeper_stop_; });
    pthread_mutex_unlock(&me.alive);
  });
  std::unique_lock<std::mutex> lock(keeper_mu_);
  keeper_cv_.wait(lock, [this] { return keeper_locked_; });
}

void ShmSegment::stop_keeper() {
  if (!keeper_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(keeper_mu_);
    keeper_stop_ = true;
  }
  keeper_cv_.notify_all();
  keeper_.join();
}

Status ShmSegment::wait_for_everyone() {
  auto* h = reinterpret_cast<ShmHeader*>(base_);
  rank_state(rank_).state.store(kAttached, std::memory_order_release);
  h->num_attached.fetch_add(1, std::memory_order_acq_rel);
  Status s = wait([&] { return h->num_attached.load(std::memory_order_acquire) >= static_cast<uint32_t>(world_size_); },
                  -1, "attach");
  while_attaching_ = nullptr;
  if (!s.ok()) return s;
  if (rank_ == 0) {
    shm_unlink(name_.c_str());  // every rank has it mapped; nothing is left behind at exit
    unlinked_ = true;
  }
  return Status();
}

ShmSegment::~ShmSegment() {
  if (base_ != nullptr) {
    // Tell the peers this rank left on purpose before its mutex is released.
    rank_state(rank_).state.store(kDeparted, std::memory_order_release);
    stop_keeper();
    munmap(base_, total_bytes_);
  }
  if (rank_ == 0 && !unlinked_ && base_ != nullptr) shm_unlink(name_.c_str());
}

Status ShmSegment::fail(Status s) {
  if (sticky_.ok()) sticky_ = std::move(s);
  return sticky_;
}

void ShmSegment::raise_group_failure(uint32_t kind, int subject) {
  auto* h = reinterpret_cast<ShmHeader*>(base_);
  uint32_t expected = 0;
  h->failure.compare_exchange_strong(expected, (kind << 16) | static_cast<uint32_t>(subject + 1),
                                     std::memory_order_acq_rel);
}

Status ShmSegment::group_failure_status() const {
  const uint32_t f = reinterpret_cast<ShmHeader*>(base_)->failure.load(std::memory_order_acquire);
  if (f == 0) return Status();
  const uint32_t kind = f >> 16;
  const std::string who = "rank " + std::to_string(static_cast<int>(f & 0xffff) - 1);
  const std::string prefix = "shm communicator group '" + group_id_ + "' is broken: ";
  if (kind == kFailDead) return unavailable(prefix + who + " exited or crashed");
  if (kind == kFailTimeout) return unavailable(prefix + who + " timed out waiting for its peers");
  return unavailable(prefix + who + " saw ranks call different collectives");
}

Status ShmSegment::peer_alive(int peer, const char* op) {
  ShmRankState& st = rank_state(peer);
  const uint32_t state = st.state.load(std::memory_order_acquire);
  if (state == kDeparted) {
    // Not raised group-wide: ranks that finish their last op and leave are normal at shutdown,
    // and the others still finishing that op must not fail because of it.
    return unavailable("shm communicator: rank " + std::to_string(peer) + " left the group during " + op);
  }
  if (state != kAttached) return Status();  // not attached yet: create() is still waiting for it
  const int rc = pthread_mutex_trylock(&st.alive);
  if (rc == EBUSY) return Status();
  if (rc == EOWNERDEAD) pthread_mutex_consistent(&st.alive);
  if (rc == 0 || rc == EOWNERDEAD) pthread_mutex_unlock(&st.alive);
  // A departed rank stores kDeparted before releasing its mutex: look again before calling it dead.
  if (st.state.load(std::memory_order_acquire) == kDeparted) return peer_alive(peer, op);
  raise_group_failure(kFailDead, peer);
  return unavailable("shm communicator: rank " + std::to_string(peer) + " exited or crashed during " + op);
}

Status ShmSegment::check_group(int peer, const char* op, std::chrono::steady_clock::time_point deadline) {
  Status s = group_failure_status();
  if (!s.ok()) return unavailable(std::string(op) + " failed: " + s.message());
  if (while_attaching_) {
    s = while_attaching_();
    if (!s.ok()) return s;
  }
  for (int r = 0; r < world_size_; ++r) {
    if (r == rank_ || (peer >= 0 && r != peer)) continue;
    s = peer_alive(r, op);
    if (!s.ok()) return s;
  }
  if (std::chrono::steady_clock::now() > deadline) {
    raise_group_failure(kFailTimeout, rank_);
    return unavailable("shm communicator: " + std::string(op) + " on rank " + std::to_string(rank_) +
                       " timed out after " + std::to_string(timeout_ms_) + " ms waiting for " +
                       (peer >= 0 ? "rank " + std::to_string(peer) : std::string("its peers")));
  }
  return Status();
}

Status ShmSegment::tag_mismatch(const OpTag& tag, const char* op) {
  for (int r = 0; r < world_size_; ++r) {
    const ShmRankState& st = rank_state(r);
    const uint32_t kind = st.op_kind.load(std::memory_order_relaxed);
    const uint64_t bytes = st.op_bytes.load(std::memory_order_relaxed);
    const int64_t arg = st.op_arg.load(std::memory_order_relaxed);
    if (kind != tag.kind || bytes != tag.bytes || arg != tag.arg) {
      return invalid_argument("shm communicator: rank " + std::to_string(rank_) + " is in " + op + " of " +
                              std::to_string(tag.bytes) + " bytes (arg " + std::to_string(tag.arg) + ") but rank " +
                              std::to_string(r) + " is in " + op_kind_name(kind) + " of " + std::to_string(bytes) +
                              " bytes (arg " + std::to_string(arg) + ")");
    }
  }
  return Status();
}

Status ShmSegment::tags_agree(const OpTag& tag, const char* op) {
  Status s = tag_mismatch(tag, op);
  if (s.ok()) return s;
  raise_group_failure(kFailMismatch, rank_);
  return fail(std::move(s));
}

Status ShmSegment::name_mismatch(const OpTag& tag, const char* op, Status s) {
  Status m = tag_mismatch(tag, op);
  if (m.ok()) return s;
  sticky_ = m;  // the more precise reason for the same failure
  return m;
}

}  // namespace kvasir::dist
