#include "kv/block_hash.h"

#include "common/check.h"
#include "core/request.h"
#include "kv/sha256.h"

namespace kvasir {
namespace {

// Versioned so a change of encoding can never match hashes made by an older one.
constexpr std::string_view kDomain = "kvasir.kv_block.v1";

void put_u8(Sha256& h, uint8_t v) { h.update(&v, 1); }

void put_u64(Sha256& h, uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
  h.update(b, sizeof(b));
}

}  // namespace

BlockHash hash_block_tokens(const BlockHash* parent, std::span<const TokenId> tokens,
                            const BlockHashExtraKeys& extra) {
  // Every field is tagged or length-prefixed, so no two different inputs encode alike.
  Sha256 h;
  h.update(kDomain.data(), kDomain.size() + 1);  // with its NUL terminator
  put_u8(h, parent != nullptr ? 1 : 0);
  if (parent != nullptr) h.update(parent->bytes.data(), parent->bytes.size());
  put_u64(h, tokens.size());
  uint8_t buf[256];
  size_t used = 0;
  for (TokenId t : tokens) {
    const auto u = static_cast<uint32_t>(t);
    for (int i = 0; i < 4; ++i) buf[used++] = static_cast<uint8_t>(u >> (8 * i));
    if (used == sizeof(buf)) {
      h.update(buf, used);
      used = 0;
    }
  }
  h.update(buf, used);
  // The salt only on the first block: a later block's parent hash already depends on it.
  const bool salt = parent == nullptr && extra.cache_salt.has_value();
  put_u8(h, salt ? 1 : 0);
  if (salt) {
    put_u64(h, extra.cache_salt->size());
    h.update(extra.cache_salt->data(), extra.cache_salt->size());
  }
  put_u8(h, extra.adapter_id.has_value() ? 1 : 0);
  if (extra.adapter_id) put_u64(h, static_cast<uint64_t>(*extra.adapter_id));
  BlockHash out;
  out.bytes = h.finish();
  return out;
}

void append_block_hashes(std::vector<BlockHash>& hashes, std::span<const TokenId> tokens, int block_size,
                         const BlockHashExtraKeys& extra) {
  KVASIR_CHECK(block_size > 0);
  const size_t num_full = tokens.size() / static_cast<size_t>(block_size);
  if (hashes.size() >= num_full) return;
  hashes.reserve(num_full);
  for (size_t i = hashes.size(); i < num_full; ++i) {
    const BlockHash* parent = i == 0 ? nullptr : &hashes[i - 1];
    hashes.push_back(hash_block_tokens(parent, tokens.subspan(i * block_size, block_size), extra));
  }
}

void update_block_hashes(Request& request, int block_size) {
  BlockHashExtraKeys extra;
  if (request.cache_salt()) extra.cache_salt = std::string_view(*request.cache_salt());
  extra.adapter_id = request.adapter_id();
  append_block_hashes(request.mutable_block_hashes(), request.all_token_ids(), block_size, extra);
}

}  // namespace kvasir
