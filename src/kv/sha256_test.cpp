#include "kv/sha256.h"

#include <gtest/gtest.h>

#include <string>

#include "core/request.h"
#include "kv/block_hash.h"

namespace kvasir {
namespace {

std::string hex(const Sha256::Digest& d) {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (uint8_t b : d) {
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

std::string sha_hex(const std::string& s) { return hex(Sha256::hash(s.data(), s.size())); }

TEST(Sha256, MatchesFipsVectors) {
  EXPECT_EQ(sha_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, PaddingBoundaries) {
  EXPECT_EQ(sha_hex(std::string(55, 'a')),
            "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(sha_hex(std::string(56, 'a')),
            "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(sha_hex(std::string(63, 'a')),
            "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34");
  EXPECT_EQ(sha_hex(std::string(64, 'a')),
            "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
  EXPECT_EQ(sha_hex(std::string(119, 'a')),
            "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb");
  EXPECT_EQ(sha_hex(std::string(120, 'a')),
            "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c");
}

TEST(Sha256, IncrementalEqualsOneShot) {
  std::string msg;
  for (int i = 0; i < 1000; ++i) msg += static_cast<char>(i * 31 + 7);
  for (size_t chunk : {1u, 3u, 63u, 64u, 65u, 200u}) {
    Sha256 h;
    for (size_t i = 0; i < msg.size(); i += chunk)
      h.update(msg.data() + i, std::min(chunk, msg.size() - i));
    EXPECT_EQ(hex(h.finish()), sha_hex(msg)) << "chunk " << chunk;
  }
}

TEST(BlockHash, ChainsParentTokensAndExtraKeys) {
  const std::vector<TokenId> a = {1, 2, 3, 4};
  const std::vector<TokenId> b = {1, 2, 3, 5};
  const BlockHashExtraKeys none;
  const BlockHash h0 = hash_block_tokens(nullptr, a, none);
  EXPECT_EQ(h0, hash_block_tokens(nullptr, a, none));
  EXPECT_NE(h0, hash_block_tokens(nullptr, b, none));
  EXPECT_NE(hash_block_tokens(&h0, a, none), hash_block_tokens(nullptr, a, none));
  BlockHashExtraKeys salted;
  salted.cache_salt = "tenant-1";
  EXPECT_NE(h0, hash_block_tokens(nullptr, a, salted));
  BlockHashExtraKeys empty_salt;
  empty_salt.cache_salt = "";
  EXPECT_NE(h0, hash_block_tokens(nullptr, a, empty_salt)) << "an empty salt is still a salt";
  // The salt enters through the first block only; later blocks inherit it via the parent.
  EXPECT_EQ(hash_block_tokens(&h0, a, none), hash_block_tokens(&h0, a, salted));
  BlockHashExtraKeys adapter;
  adapter.adapter_id = 7;
  EXPECT_NE(hash_block_tokens(&h0, a, none), hash_block_tokens(&h0, a, adapter));
  // Token ids are not confused with their byte patterns.
  EXPECT_NE(hash_block_tokens(nullptr, std::vector<TokenId>{256}, none),
            hash_block_tokens(nullptr, std::vector<TokenId>{1, 0}, none));
}

TEST(BlockHash, UpdateHashesOnlyFullBlocksIncrementally) {
  SamplingParams sp;
  Request r("r", {1, 2, 3, 4, 5, 6, 7}, sp);
  update_block_hashes(r, 4);
  ASSERT_EQ(r.block_hashes().size(), 1u);
  r.append_output_token(8);
  update_block_hashes(r, 4);
  ASSERT_EQ(r.block_hashes().size(), 2u);
  Request whole("w", {1, 2, 3, 4, 5, 6, 7, 8}, sp);
  update_block_hashes(whole, 4);
  EXPECT_EQ(r.block_hashes(), whole.block_hashes());
  RequestOptions salt;
  salt.cache_salt = "x";
  Request salted("s", {1, 2, 3, 4, 5, 6, 7, 8}, sp, salt);
  update_block_hashes(salted, 4);
  EXPECT_NE(salted.block_hashes()[1], whole.block_hashes()[1]);
}

}  // namespace
}  // namespace kvasir
