// KvCacheManager: which KV blocks each request holds. Finds prefix-cache hits for a new request,
// grows a request's block table for the tokens about to be computed (or answers nullopt: no room,
// a normal outcome the scheduler handles by preempting), publishes blocks once their KV is
// computed, and frees a request's blocks. Never decides who runs: that is the scheduler's job.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/ids.h"
#include "kv/block_pool.h"

namespace kvasir {

class Request;

struct PrefixCacheStats {
  int64_t num_requests = 0;      // lookups made
  int64_t num_query_tokens = 0;  // tokens of the requests looked up
  int64_t num_hit_tokens = 0;    // of those, tokens served from the cache
};

class KvCacheManager {
 public:
  KvCacheManager(int num_blocks, int block_size, int max_model_len, bool enable_prefix_caching);

  struct ComputedBlocks {
    std::vector<BlockId> blocks;  // cached blocks for the request's leading full blocks
    int num_computed_tokens = 0;  // blocks.size() * block_size
  };
  // The longest cached prefix of the request. Capped at num_tokens - 1 (rounded down to a block)
  // so the last token is always computed: its logits are needed to sample. Empty when caching is
  // off or the request asks for prompt logprobs (those need every prompt token computed).
  // Updates the request's block hashes. Takes no reference: pass the result to allocate_slots.
  ComputedBlocks get_computed_blocks(Request& request);

  // Makes room for num_new_tokens more tokens after request.num_computed_tokens() plus the
  // num_new_computed_tokens covered by new_computed_blocks (a prefix hit, only on admission).
  // Returns the newly allocated blocks (not the hit blocks), or nullopt when the pool cannot
  // supply them, in which case nothing changed.
  std::optional<std::vector<BlockId>> allocate_slots(
      Request& request, int num_new_tokens, int num_new_computed_tokens = 0,
      std::span<const BlockId> new_computed_blocks = {});

  // Publishes in the prefix cache every full block among the request's first num_computed_tokens
  // tokens, once their KV has really been written (after the step that computed them).
  void cache_blocks(Request& request, int num_computed_tokens);

  // Releases the request's blocks, tail first into the LRU so a prefix outlives its suffix.
  void free(const Request& request);

  // The request's block table (empty when it holds none).
  std::span<const BlockId> get_block_ids(const Request& request) const;

  // n > 1 sampling: child (no blocks yet, same leading tokens) shares parent's computed full
  // blocks. Sets child's num_computed_tokens and returns it.
  int fork(const Request& parent, Request& child);

  int block_size() const { return block_size_; }
  int num_blocks() const { return pool_.num_blocks(); }
  int get_num_free_blocks() const { return pool_.get_num_free_blocks(); }
  // Blocks needed to hold num_tokens tokens.
  int num_blocks_for(int num_tokens) const { return (num_tokens + block_size_ - 1) / block_size_; }
  double usage() const { return pool_.usage(); }
  bool prefix_caching_enabled() const { return enable_prefix_caching_; }
  const PrefixCacheStats& prefix_cache_stats() const { return stats_; }
  bool reset_prefix_cache() { return pool_.reset_prefix_cache(); }
  const BlockPool& pool() const { return pool_; }

  // Pool invariants, plus: every ref count equals the number of tables holding the block, and no
  // table holds the null block or a block twice.
  void check_invariants() const;

 private:
  struct Table {
    std::vector<BlockId> blocks;
    int num_cached_blocks = 0;  // leading blocks already published (or found in the cache)
  };

  int block_size_;
  int max_model_len_;
  bool enable_prefix_caching_;
  BlockPool pool_;
  std::unordered_map<RequestIdx, Table> tables_;
  PrefixCacheStats stats_;
};

}  // namespace kvasir
