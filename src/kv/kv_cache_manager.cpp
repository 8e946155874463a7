#include "kv/kv_cache_manager.h"

#include <algorithm>

#include "common/check.h"
#include "core/request.h"
#include "kv/block_hash.h"

namespace kvasir {

KvCacheManager::KvCacheManager(int num_blocks, int block_size, int max_model_len,
                               bool enable_prefix_caching)
    : block_size_(block_size),
      max_model_len_(max_model_len),
      enable_prefix_caching_(enable_prefix_caching),
      pool_(num_blocks, enable_prefix_caching) {
  KVASIR_CHECK(block_size > 0 && max_model_len > 0);
}

KvCacheManager::ComputedBlocks KvCacheManager::get_computed_blocks(Request& request) {
  ComputedBlocks out;
  if (!enable_prefix_caching_ || request.sampling_params().prompt_logprobs.has_value()) return out;
  update_block_hashes(request, block_size_);
  const int max_hit_tokens = request.num_tokens() - 1;
  const size_t max_blocks = static_cast<size_t>(std::max(0, max_hit_tokens / block_size_));
  const auto& hashes = request.block_hashes();
  for (size_t i = 0; i < std::min(max_blocks, hashes.size()); ++i) {
    const std::optional<BlockId> b = pool_.get_cached_block(hashes[i]);
    if (!b) break;  // chained hashes: after a miss nothing later can match
    out.blocks.push_back(*b);
  }
  out.num_computed_tokens = static_cast<int>(out.blocks.size()) * block_size_;
  ++stats_.num_requests;
  stats_.num_query_tokens += request.num_tokens();
  stats_.num_hit_tokens += out.num_computed_tokens;
  return out;
}

std::optional<std::vector<BlockId>> KvCacheManager::allocate_slots(
    Request& request, int num_new_tokens, int num_new_computed_tokens,
    std::span<const BlockId> new_computed_blocks) {
  KVASIR_CHECK(num_new_tokens >= 0);
  KVASIR_CHECK(num_new_computed_tokens ==
               static_cast<int>(new_computed_blocks.size()) * block_size_);
  Table& table = tables_[request.idx()];
  KVASIR_CHECK_MSG(new_computed_blocks.empty() || table.blocks.empty(),
                   "prefix hits attach only to a request holding no blocks");
  const int num_computed = request.num_computed_tokens() + num_new_computed_tokens;
  const int num_tokens_needed = std::min(num_computed + num_new_tokens, max_model_len_);
  const int num_held = static_cast<int>(table.blocks.size() + new_computed_blocks.size());
  const int num_to_allocate = std::max(0, num_blocks_for(num_tokens_needed) - num_held);
  // A hit block sitting in the free list stops being free once touched, so it costs like a new one.
  int num_revived = 0;
  for (BlockId b : new_computed_blocks) num_revived += pool_.ref_cnt(b) == 0 ? 1 : 0;
  if (num_to_allocate + num_revived > pool_.get_num_free_blocks()) {
    if (table.blocks.empty()) tables_.erase(request.idx());
    return std::nullopt;
  }
  if (!new_computed_blocks.empty()) {
    pool_.touch(new_computed_blocks);
    table.blocks.assign(new_computed_blocks.begin(), new_computed_blocks.end());
    table.num_cached_blocks = static_cast<int>(new_computed_blocks.size());
  }
  std::vector<BlockId> fresh = pool_.get_new_blocks(num_to_allocate);
  table.blocks.insert(table.blocks.end(), fresh.begin(), fresh.end());
  return fresh;
}

void KvCacheManager::cache_blocks(Request& request, int num_computed_tokens) {
  if (!enable_prefix_caching_) return;
  const auto it = tables_.find(request.idx());
  if (it == tables_.end()) return;
  Table& table = it->second;
  KVASIR_CHECK(num_computed_tokens <= request.num_tokens());
  const int num_full =
      std::min(num_computed_tokens / block_size_, static_cast<int>(table.blocks.size()));
  if (num_full <= table.num_cached_blocks) return;
  update_block_hashes(request, block_size_);
  const auto& hashes = request.block_hashes();
  KVASIR_CHECK(static_cast<int>(hashes.size()) >= num_full);
  for (int i = table.num_cached_blocks; i < num_full; ++i) {
    pool_.cache_full_block(table.blocks[static_cast<size_t>(i)], hashes[static_cast<size_t>(i)]);
  }
  table.num_cached_blocks = num_full;
}

void KvCacheManager::free(const Request& request) {
  const auto it = tables_.find(request.idx());
  if (it == tables_.end()) return;
  const std::vector<BlockId>& blocks = it->second.blocks;
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) pool_.free_block(*b);
  tables_.erase(it);
}

std::span<const BlockId> KvCacheManager::get_block_ids(const Request& request) const {
  const auto it = tables_.find(request.idx());
  if (it == tables_.end()) return {};
  return it->second.blocks;
}

int KvCacheManager::fork(const Request& parent, Request& child) {
  KVASIR_CHECK_MSG(parent.idx() != child.idx(), "fork needs two distinct requests");
  KVASIR_CHECK_MSG(tables_.find(child.idx()) == tables_.end(), "fork child already holds blocks");
  const auto it = tables_.find(parent.idx());
  if (it == tables_.end()) return 0;
  const Table& src = it->second;
  // Only full, computed blocks: a partly written block would be written by both.
  const int max_tokens = std::min(parent.num_computed_tokens(), child.num_tokens() - 1);
  int n = std::min(std::max(0, max_tokens) / block_size_, static_cast<int>(src.blocks.size()));
  const auto p = parent.all_token_ids();
  const auto c = child.all_token_ids();
  const int same = static_cast<int>(
      std::mismatch(p.begin(), p.begin() + n * block_size_, c.begin()).first - p.begin());
  n = std::min(n, same / block_size_);
  if (n == 0) return 0;
  Table table;
  table.blocks.assign(src.blocks.begin(), src.blocks.begin() + n);
  table.num_cached_blocks = std::min(n, src.num_cached_blocks);
  pool_.touch(table.blocks);
  tables_.emplace(child.idx(), std::move(table));
  child.set_num_computed_tokens(n * block_size_);
  return n * block_size_;
}

void KvCacheManager::check_invariants() const {
  pool_.check_invariants();
  std::vector<int> refs(static_cast<size_t>(pool_.num_blocks()), 0);
  std::vector<RequestIdx> last_holder(static_cast<size_t>(pool_.num_blocks()), 0);
  for (const auto& [idx, table] : tables_) {
    KVASIR_CHECK(table.num_cached_blocks >= 0 &&
                 table.num_cached_blocks <= static_cast<int>(table.blocks.size()));
    for (BlockId b : table.blocks) {
      KVASIR_CHECK_MSG(b > kNullBlockId && b < pool_.num_blocks(), "a table holds a bad block id");
      const auto i = static_cast<size_t>(b);
      KVASIR_CHECK_MSG(refs[i] == 0 || last_holder[i] != idx + 1, "a table holds a block twice");
      last_holder[i] = idx + 1;
      ++refs[i];
    }
  }
  for (BlockId b = 0; b < pool_.num_blocks(); ++b) {
    KVASIR_CHECK_MSG(pool_.ref_cnt(b) == refs[static_cast<size_t>(b)],
                     "ref count != number of block tables holding the block");
  }
}

}  // namespace kvasir
