// The draft model's setup on the committed tiny models: a draft with the target's vocabulary loads
// with its own KV cache; one whose tokenizer encodes differently (tiny Gemma 3 vs tiny Llama, both
// 256 ids) is refused naming the string and both id lists; the draft pool's size.
#include "setup/draft_model.h"

#include <gtest/gtest.h>

namespace kvasir {
namespace {

const std::string kDir = std::string(KVASIR_SOURCE_DIR) + "/tests/data/tiny/";

EngineArgs draft_args(const std::string& draft) {
  EngineArgs a;
  a.model = kDir + "llama3/model.gguf";
  a.max_num_seqs = 4;
  a.max_num_batched_tokens = 64;
  a.block_size = 16;
  a.speculative.method = "draft_model";
  a.speculative.draft_model = draft;
  a.speculative.num_speculative_tokens = 3;
  return a;
}

TEST(DraftModelSetup, SameVocabularyLoadsWithItsOwnCache) {
  const EngineArgs a = draft_args(kDir + "llama3/model.gguf");
  auto target = load_model(a.model, LoadOptions::from(a));
  ASSERT_TRUE(target.ok()) << target.status().to_string();
  auto d = load_draft_model(a, **target, 10);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->cache->num_blocks, num_draft_kv_blocks(10, 16, 4, 3));
  EXPECT_EQ(d->cache->block_size, 16);
}

TEST(DraftModelSetup, AnotherVocabularyIsRefusedNamingWhatDiffers) {
  const EngineArgs a = draft_args(kDir + "gemma3/model.gguf");
  auto target = load_model(a.model, LoadOptions::from(a));
  ASSERT_TRUE(target.ok());
  auto d = load_draft_model(a, **target, 10);
  ASSERT_FALSE(d.ok());
  const std::string m = d.status().message();
  EXPECT_NE(m.find("does not share the target's vocabulary"), std::string::npos) << m;
  EXPECT_NE(m.find("(draft) vs ["), std::string::npos) << m;
  auto missing = load_draft_model(draft_args(kDir + "no-such-draft.gguf"), **target, 10);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("loading the draft model"), std::string::npos);
}

TEST(DraftModelSetup, PoolHoldsTheTargetsTokensPlusUnverifiedDraftsPerSequence) {
  EXPECT_EQ(num_draft_kv_blocks(100, 16, 8, 3), 100 + 8 * 2);
  EXPECT_EQ(num_draft_kv_blocks(100, 16, 8, 17), 100 + 8 * 3);
  EXPECT_EQ(num_draft_kv_blocks(1 << 24, 16, 8, 3), 1 << 24);
}

}  // namespace
}  // namespace kvasir
