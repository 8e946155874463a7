// Content hashes of full KV blocks for the prefix cache: a block's hash chains its parent's hash,
// its token ids and the request's extra keys (cache salt, adapter id), so equal hashes mean an
// equal whole prefix. SHA-256 keeps collisions out of reach. Must not touch the block pool.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "core/ids.h"

namespace kvasir {

class Request;

struct BlockHashExtraKeys {
  // Hashed into the first block only: the chain carries it to every later block.
  std::optional<std::string_view> cache_salt;
  std::optional<int64_t> adapter_id;
};

// parent is nullptr for the first block of a sequence.
BlockHash hash_block_tokens(const BlockHash* parent, std::span<const TokenId> tokens,
                            const BlockHashExtraKeys& extra);

// Appends to `hashes` (the chain of tokens' first hashes.size() full blocks) the hash of every
// further full block of `tokens`. The one chaining loop: the prefix cache and the data-parallel
// router (which asks each replica for a request's cached prefix) hash alike.
void append_block_hashes(std::vector<BlockHash>& hashes, std::span<const TokenId> tokens, int block_size,
                         const BlockHashExtraKeys& extra);

// Appends to request.block_hashes() the hash of every block of all_token_ids() that is full and
// not hashed yet. Cheap when nothing new filled; call it after tokens are appended.
void update_block_hashes(Request& request, int block_size);

}  // namespace kvasir
