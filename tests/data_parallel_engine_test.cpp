// Data parallelism through the real engines (engine/engine_group.h, api/llm.cpp): the tiny Llama 3
// GGUF behind two in-process replicas. Greedy tokens equal one engine's; a prompt whose prefix a
// replica caches goes to that replica (asked exactly through its prefix cache), distinct prompts
// on idle replicas alternate, an abort reaches the replica holding the request, and one replica's
// fault fails every request of the other too.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine_group.h"
#include "kv/block_hash.h"
#include "kvasir/llm.h"

namespace kvasir {
namespace {

const std::string kTinyLlama = std::string(KVASIR_SOURCE_DIR) + "/tests/data/tiny/llama3/model.gguf";

EngineArgs args(int dp) {
  EngineArgs a;
  a.model = kTinyLlama;
  a.device = "cpu";
  a.num_threads = 2;
  a.kv_cache_memory = 16 << 20;
  a.max_model_len = 256;
  a.data_parallel_size = dp;
  return a;
}

// Token ids below the tiny vocabulary (256); `seed` makes the whole sequence distinct.
std::vector<int32_t> tokens(int n, int seed) {
  std::vector<int32_t> ids;
  for (int k = 0; k < n; ++k) ids.push_back(10 + (k * 37 + seed * 101) % 240);
  return ids;
}

SamplingParams greedy(int max_tokens) {
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = max_tokens;
  sp.ignore_eos = true;
  return sp;
}

// Runs the request to its end; returns the finish reason ("" if the stream broke).
std::string drain(std::shared_ptr<RequestStream> s, std::string* error = nullptr) {
  RequestOutput d;
  std::string reason;
  while (s->next(&d)) {
    if (d.finished) reason = d.finish_reason;
    if (d.finished && error) *error = d.error_message;
  }
  return reason;
}

TEST(DataParallelEngine, GreedyTokensEqualOneEngine) {
  std::vector<PromptInput> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(PromptInput{"", tokens(5 + 9 * i, i), std::nullopt});
  auto one = LLM::create(args(1));
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  auto want = (*one)->generate(prompts, greedy(10));
  ASSERT_TRUE(want.ok());
  auto two = LLM::create(args(2));
  ASSERT_TRUE(two.ok()) << two.status().to_string();
  ASSERT_EQ((*two)->engines().size(), 2u);
  auto got = (*two)->generate(prompts, greedy(10));
  ASSERT_TRUE(got.ok());
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ((*got)[i].outputs[0].token_ids, (*want)[i].outputs[0].token_ids) << "prompt " << i;
  }
  // Both replicas served some of them.
  EXPECT_GT((*two)->engines().replica(0).metrics().prompt_tokens.load(), 0);
  EXPECT_GT((*two)->engines().replica(1).metrics().prompt_tokens.load(), 0);
}

TEST(DataParallelEngine, CachedPrefixDecidesTheReplicaElseTheyAlternate) {
  auto llm = LLM::create(args(2));
  ASSERT_TRUE(llm.ok()) << llm.status().to_string();
  EngineGroup& g = (*llm)->engines();
  const std::vector<int32_t> prefix = tokens(96, 7);  // 6 full blocks of 16
  auto with_suffix = [&](int s) {
    std::vector<int32_t> p = prefix;
    for (int32_t t : tokens(5, 50 + s)) p.push_back(t);
    return p;
  };
  auto first = g.add_request("first", with_suffix(0), greedy(2));
  ASSERT_TRUE(first.ok());
  const int home = g.replica_of("first");
  ASSERT_TRUE(home == 0 || home == 1);
  ASSERT_EQ(drain(*first), "length");

  std::vector<BlockHash> chain;
  append_block_hashes(chain, prefix, 16, {});
  EXPECT_EQ(g.replica(static_cast<size_t>(home)).cached_prefix_blocks(chain), 6);
  EXPECT_EQ(g.replica(static_cast<size_t>(1 - home)).cached_prefix_blocks(chain), 0);

  for (int i = 1; i <= 4; ++i) {
    const std::string id = "again" + std::to_string(i);
    auto s = g.add_request(id, with_suffix(i), greedy(2));
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(g.replica_of(id), home) << id;
    ASSERT_EQ(drain(*s), "length");
  }
  EXPECT_GE(g.replica(static_cast<size_t>(home)).metrics().prefix_cache_hits.load(), 4 * 96);
  EXPECT_EQ(g.replica(static_cast<size_t>(1 - home)).metrics().prefix_cache_hits.load(), 0);

  // A cache salt makes another chain: nothing cached, so it goes by load like any new prompt.
  AddRequestOptions salted;
  salted.cache_salt = "tenant-b";
  std::vector<BlockHash> salted_chain;
  append_block_hashes(salted_chain, prefix, 16, BlockHashExtraKeys{std::string_view("tenant-b"), std::nullopt});
  EXPECT_EQ(g.replica(static_cast<size_t>(home)).cached_prefix_blocks(salted_chain), 0);

  // Distinct prompts on idle replicas alternate.
  std::vector<int> where;
  for (int i = 0; i < 4; ++i) {
    const std::string id = "distinct" + std::to_string(i);
    auto s = g.add_request(id, tokens(8, 200 + i), greedy(2), i == 0 ? salted : AddRequestOptions{});
    ASSERT_TRUE(s.ok());
    where.push_back(g.replica_of(id));
    ASSERT_EQ(drain(*s), "length");
  }
  EXPECT_NE(where[0], where[1]);
  EXPECT_NE(where[1], where[2]);
  EXPECT_NE(where[2], where[3]);
}

// The tiny model finishes a request within milliseconds, so whether an abort or a fault still
// finds it running is a race; these tests pin what holds either way (no hang, the right replica,
// the group's state). tests/server/test_data_parallel.py checks in-flight requests on SmolLM2.
TEST(DataParallelEngine, DuplicateIdsAndAbortsReachTheRightReplica) {
  auto llm = LLM::create(args(2));
  ASSERT_TRUE(llm.ok()) << llm.status().to_string();
  EngineGroup& g = (*llm)->engines();
  auto a = g.add_request("long", tokens(20, 1), greedy(200));
  ASSERT_TRUE(a.ok());
  auto dup = g.add_request("long", tokens(20, 2), greedy(2));  // microseconds later: still live
  EXPECT_FALSE(dup.ok());
  const int home = g.replica_of("long");
  ASSERT_TRUE(home == 0 || home == 1);
  g.abort("long");
  EXPECT_EQ(g.replica_of("long"), -1);  // forgotten by the group once aborted
  const std::string reason = drain(*a);
  EXPECT_TRUE(reason == "abort" || reason == "length") << reason;
  EXPECT_EQ(g.num_unfinished(), 0);  // counted off before the stream ends (OutputProcessor)
  g.abort("never-added");            // a no-op
  auto again = g.add_request("long", tokens(20, 3), greedy(2));  // the id is free again
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(drain(*again), "length");
}

TEST(DataParallelEngine, OneReplicaFailingFailsTheOther) {
  auto llm = LLM::create(args(2));
  ASSERT_TRUE(llm.ok()) << llm.status().to_string();
  EngineGroup& g = (*llm)->engines();
  auto a = g.add_request("a", tokens(10, 1), greedy(200));
  auto b = g.add_request("b", tokens(10, 2), greedy(200));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_NE(g.replica_of("a"), g.replica_of("b"));
  g.replica(0).fail("injected by the test");
  for (auto* s : {&*a, &*b}) {
    std::string err;
    const std::string reason = drain(*s, &err);
    EXPECT_TRUE(reason == "error" || reason == "length") << reason;
    if (reason == "error") {
      EXPECT_NE(err.find("injected by the test"), std::string::npos) << err;
    }
  }
  // The fault reaches replica 1 through its command queue.
  for (int i = 0; i < 500 && !g.replica(1).dead(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(g.replica(0).dead());
  EXPECT_TRUE(g.replica(1).dead());
  EXPECT_EQ(g.replica(1).fault(), "data-parallel replica 0 failed: injected by the test");
  EXPECT_TRUE(g.dead());
  EXPECT_EQ(g.fault(), "data-parallel replica 0 failed: injected by the test");
  auto late = g.add_request("late", tokens(10, 3), greedy(2));
  ASSERT_FALSE(late.ok());
  EXPECT_NE(late.status().message().find("data-parallel replica 0 failed"), std::string::npos);
}

}  // namespace
}  // namespace kvasir
