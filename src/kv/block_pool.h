// BlockPool: the fixed set of KV blocks, allocated once. Tracks a ref count and an optional content
// hash per block, keeps unreferenced blocks in an O(1) LRU free list (cached ones stay revivable
// until evicted from its head) and owns the hash -> block map of the prefix cache. Knows nothing of
// requests or tokens: the KV cache manager decides which blocks a request holds.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/ids.h"

namespace kvasir {

class BlockPool {
 public:
  // num_blocks includes block 0, the null block, which is never handed out: the runner may pad
  // block tables with it.
  BlockPool(int num_blocks, bool enable_caching);

  int num_blocks() const { return static_cast<int>(ref_cnt_.size()); }
  // Blocks that can be handed out now: never used, or cached and unreferenced (evictable).
  int get_num_free_blocks() const { return num_free_; }
  // Fraction of the usable (non-null) blocks held by requests, in [0, 1].
  double usage() const;

  // Pops n blocks from the head of the free list (least recently freed first), evicting their
  // cached hashes, each returned with ref count 1. n must not exceed get_num_free_blocks().
  std::vector<BlockId> get_new_blocks(int n);
  // Appends instead of returning, for callers that keep one table.
  void get_new_blocks(int n, std::vector<BlockId>& out);

  // The block holding this content, if cached (referenced or still in the free list).
  std::optional<BlockId> get_cached_block(const BlockHash& hash) const;
  // How many of the leading blocks of a hash chain are cached now. Callable from any thread (the
  // data-parallel router asks each replica while its engine thread runs): the hash map's writers
  // (publish, evict, reset; engine thread only) take the same lock.
  int count_cached_prefix(std::span<const BlockHash> chain) const;
  // ref++ for each block; a cached block with ref 0 leaves the free list (a prefix hit revives it).
  void touch(std::span<const BlockId> blocks);
  // ref-- for each; a block reaching 0 joins the tail of the free list in the order given, so the
  // first one freed is the first one evicted.
  void free_block(BlockId block);
  void free_blocks(std::span<const BlockId> ordered);

  // Publishes a full, computed block under its content hash. Hashes are write-once. Returns false
  // (and leaves the block unhashed) when another block already holds this content: the map keeps
  // one block per hash and the duplicate simply is not shared.
  bool cache_full_block(BlockId block, const BlockHash& hash);

  // Drops every cached hash; only possible when no block is referenced. Returns whether it did.
  bool reset_prefix_cache();

  int ref_cnt(BlockId block) const { return ref_cnt_[static_cast<size_t>(block)]; }
  std::optional<BlockHash> block_hash(BlockId block) const;
  int num_cached_blocks() const { return static_cast<int>(cached_.size()); }
  int64_t num_evictions() const { return num_evictions_; }
  bool caching_enabled() const { return enable_caching_; }

  // Aborts (KVASIR_CHECK) when the free list, ref counts or hash map disagree.
  void check_invariants() const;

 private:
  void list_push_back(BlockId b);
  void list_remove(BlockId b);
  void evict_hash(BlockId b);

  bool enable_caching_;
  std::vector<int32_t> ref_cnt_;
  // Intrusive doubly linked free list over block indices; index num_blocks() is the sentinel.
  std::vector<BlockId> prev_;
  std::vector<BlockId> next_;
  std::vector<uint8_t> in_free_list_;
  int num_free_ = 0;
  std::vector<BlockHash> hash_;
  std::vector<uint8_t> has_hash_;
  // Written on the owning (engine) thread under cached_mu_; that thread reads it without the lock
  // (it is the only writer), any other thread reads it under the lock.
  std::unordered_map<BlockHash, BlockId, BlockHashHasher> cached_;
  mutable std::mutex cached_mu_;
  int64_t num_evictions_ = 0;
};

}  // namespace kvasir
