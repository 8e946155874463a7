#include "kv/block_pool.h"

#include "common/check.h"

namespace kvasir {

BlockPool::BlockPool(int num_blocks, bool enable_caching) : enable_caching_(enable_caching) {
  KVASIR_CHECK_MSG(num_blocks >= 2, "the pool needs the null block and at least one more");
  const auto n = static_cast<size_t>(num_blocks);
  ref_cnt_.assign(n, 0);
  prev_.assign(n + 1, 0);
  next_.assign(n + 1, 0);
  in_free_list_.assign(n, 0);
  hash_.resize(n);
  has_hash_.assign(n, 0);
  const BlockId sentinel = num_blocks;
  prev_[n] = next_[n] = sentinel;
  // Block 0 stays out of the list forever: it is the null block.
  for (BlockId b = 1; b < num_blocks; ++b) list_push_back(b);
}

double BlockPool::usage() const {
  const int usable = num_blocks() - 1;
  return 1.0 - static_cast<double>(num_free_) / static_cast<double>(usable);
}

void BlockPool::list_push_back(BlockId b) {
  const BlockId sentinel = num_blocks();
  const BlockId tail = prev_[sentinel];
  prev_[b] = tail;
  next_[b] = sentinel;
  next_[tail] = b;
  prev_[sentinel] = b;
  in_free_list_[b] = 1;
  ++num_free_;
}

void BlockPool::list_remove(BlockId b) {
  KVASIR_CHECK(in_free_list_[b]);
  next_[prev_[b]] = next_[b];
  prev_[next_[b]] = prev_[b];
  in_free_list_[b] = 0;
  --num_free_;
}

void BlockPool::evict_hash(BlockId b) {
  if (!has_hash_[b]) return;
  const auto it = cached_.find(hash_[b]);
  KVASIR_CHECK(it != cached_.end() && it->second == b);
  {
    std::lock_guard<std::mutex> lock(cached_mu_);
    cached_.erase(it);
  }
  has_hash_[b] = 0;
  ++num_evictions_;
}

std::vector<BlockId> BlockPool::get_new_blocks(int n) {
  std::vector<BlockId> out;
  get_new_blocks(n, out);
  return out;
}

void BlockPool::get_new_blocks(int n, std::vector<BlockId>& out) {
  KVASIR_CHECK_MSG(n >= 0 && n <= num_free_, "get_new_blocks past the free count");
  const BlockId sentinel = num_blocks();
  out.reserve(out.size() + static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const BlockId b = next_[sentinel];
    list_remove(b);
    evict_hash(b);
    KVASIR_CHECK(ref_cnt_[b] == 0);
    ref_cnt_[b] = 1;
    out.push_back(b);
  }
}

std::optional<BlockId> BlockPool::get_cached_block(const BlockHash& hash) const {
  if (!enable_caching_) return std::nullopt;
  const auto it = cached_.find(hash);
  if (it == cached_.end()) return std::nullopt;
  return it->second;
}

int BlockPool::count_cached_prefix(std::span<const BlockHash> chain) const {
  if (!enable_caching_) return 0;
  std::lock_guard<std::mutex> lock(cached_mu_);
  int n = 0;
  for (const BlockHash& h : chain) {
    if (cached_.find(h) == cached_.end()) break;  // chained: nothing after a miss can match
    ++n;
  }
  return n;
}

void BlockPool::touch(std::span<const BlockId> blocks) {
  for (BlockId b : blocks) {
    KVASIR_CHECK(b > kNullBlockId && b < num_blocks());
    if (ref_cnt_[b] == 0) list_remove(b);
    ++ref_cnt_[b];
  }
}

void BlockPool::free_block(BlockId b) {
  KVASIR_CHECK(b > kNullBlockId && b < num_blocks());
  KVASIR_CHECK_MSG(ref_cnt_[b] > 0, "double free of a KV block");
  if (--ref_cnt_[b] == 0) list_push_back(b);
}

void BlockPool::free_blocks(std::span<const BlockId> ordered) {
  for (BlockId b : ordered) free_block(b);
}

bool BlockPool::cache_full_block(BlockId b, const BlockHash& hash) {
  KVASIR_CHECK(enable_caching_);
  KVASIR_CHECK(b > kNullBlockId && b < num_blocks());
  KVASIR_CHECK_MSG(ref_cnt_[b] > 0, "only a held block can be published");
  if (has_hash_[b]) {
    KVASIR_CHECK_MSG(hash_[b] == hash, "a block's hash is write-once");
    return true;
  }
  {
    std::lock_guard<std::mutex> lock(cached_mu_);
    if (!cached_.emplace(hash, b).second) return false;
  }
  hash_[b] = hash;
  has_hash_[b] = 1;
  return true;
}

bool BlockPool::reset_prefix_cache() {
  if (num_free_ != num_blocks() - 1) return false;
  {
    std::lock_guard<std::mutex> lock(cached_mu_);
    cached_.clear();
  }
  has_hash_.assign(has_hash_.size(), 0);
  return true;
}

std::optional<BlockHash> BlockPool::block_hash(BlockId b) const {
  if (!has_hash_[b]) return std::nullopt;
  return hash_[b];
}

void BlockPool::check_invariants() const {
  const BlockId sentinel = num_blocks();
  std::vector<uint8_t> seen(static_cast<size_t>(num_blocks()), 0);
  int listed = 0;
  BlockId prev = sentinel;
  for (BlockId b = next_[sentinel]; b != sentinel; prev = b, b = next_[b]) {
    KVASIR_CHECK_MSG(b > kNullBlockId && b < num_blocks(), "free list holds a bad block id");
    KVASIR_CHECK_MSG(!seen[b], "a block is in the free list twice");
    KVASIR_CHECK_MSG(prev_[b] == prev, "free list back link broken");
    seen[b] = 1;
    KVASIR_CHECK_MSG(ref_cnt_[b] == 0, "a referenced block is in the free list");
    KVASIR_CHECK(in_free_list_[b]);
    ++listed;
    KVASIR_CHECK_MSG(listed <= num_blocks(), "free list has a cycle");
  }
  KVASIR_CHECK(prev_[sentinel] == prev);
  KVASIR_CHECK_MSG(listed == num_free_, "free count out of step with the free list");
  int unreferenced = 0;
  int hashed = 0;
  for (BlockId b = 0; b < num_blocks(); ++b) {
    KVASIR_CHECK_MSG(ref_cnt_[b] >= 0, "negative ref count");
    if (b == kNullBlockId) {
      KVASIR_CHECK_MSG(ref_cnt_[b] == 0 && !in_free_list_[b] && !has_hash_[b], "null block used");
      continue;
    }
    if (ref_cnt_[b] == 0) ++unreferenced;
    KVASIR_CHECK(static_cast<bool>(in_free_list_[b]) == static_cast<bool>(seen[b]));
    if (has_hash_[b]) {
      ++hashed;
      const auto it = cached_.find(hash_[b]);
      KVASIR_CHECK_MSG(it != cached_.end() && it->second == b, "hashed block missing from the map");
    }
  }
  KVASIR_CHECK_MSG(unreferenced == num_free_, "free list size != blocks with ref 0");
  KVASIR_CHECK_MSG(hashed == static_cast<int>(cached_.size()), "stale entries in the hash map");
  for (const auto& [hash, b] : cached_) {
    KVASIR_CHECK(b > kNullBlockId && b < num_blocks() && has_hash_[b] && hash_[b] == hash);
  }
  if (!enable_caching_) KVASIR_CHECK(cached_.empty());
}

}  // namespace kvasir
