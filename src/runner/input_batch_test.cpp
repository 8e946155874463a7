// InputBatch: the runner's half of the diff protocol: new requests arrive once in full, cached ones
// as appended blocks, preempted ones keep their tokens but lose their blocks, resumed ones replace
// both; a SchedulerOutput that breaks the protocol is an error, not a silent repair.
#include "runner/input_batch.h"

#include <gtest/gtest.h>

namespace kvasir {
namespace {

NewRequestData new_req(const std::string& id, std::vector<TokenId> prompt, std::vector<BlockId> blocks,
                       int32_t num_computed = 0) {
  NewRequestData d;
  d.req_id = id;
  d.prompt_token_ids = std::move(prompt);
  d.block_ids = std::move(blocks);
  d.num_computed_tokens = num_computed;
  return d;
}

CachedRequestData cached(const std::string& id, int32_t num_computed, std::vector<BlockId> new_blocks = {}) {
  CachedRequestData d;
  d.req_id = id;
  d.num_computed_tokens = num_computed;
  d.new_block_ids = std::move(new_blocks);
  return d;
}

void schedule(SchedulerOutput& so, const std::string& id, int32_t n) {
  so.num_scheduled_tokens[id] = n;
  so.total_num_scheduled_tokens += n;
}

TEST(InputBatchTest, NewRequestPrefillThenDecodeAppendsBlocksAndAdvances) {
  InputBatch b(4);
  std::vector<ScheduledRequest> s;
  SchedulerOutput so1;
  so1.scheduled_new_reqs.push_back(new_req("a", {1, 2, 3, 4, 5}, {7, 8}));
  schedule(so1, "a", 5);
  ASSERT_TRUE(b.apply(so1, &s).ok());
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].start, 0);
  EXPECT_EQ(s[0].num_tokens, 5);
  EXPECT_TRUE(s[0].samples);
  InputBatch::append_sampled(*s[0].state, 42);

  SchedulerOutput so2;
  so2.scheduled_cached_reqs.push_back(cached("a", 5));
  schedule(so2, "a", 1);
  ASSERT_TRUE(b.apply(so2, &s).ok());
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].start, 5);
  EXPECT_TRUE(s[0].samples);
  EXPECT_EQ(s[0].state->tokens.back(), 42);
  EXPECT_EQ(b.find("a")->num_computed_tokens, 6);
  EXPECT_EQ(b.find("a")->num_output_tokens(), 1);
}

TEST(InputBatchTest, PrefillChunkShortOfThePromptDoesNotSample) {
  InputBatch b(4);
  std::vector<ScheduledRequest> s;
  SchedulerOutput so;
  so.scheduled_new_reqs.push_back(new_req("a", {1, 2, 3, 4, 5, 6}, {1, 2}));
  schedule(so, "a", 4);
  ASSERT_TRUE(b.apply(so, &s).ok());
  EXPECT_FALSE(s[0].samples);
  SchedulerOutput so2;
  so2.scheduled_cached_reqs.push_back(cached("a", 4));
  schedule(so2, "a", 2);
  ASSERT_TRUE(b.apply(so2, &s).ok());
  EXPECT_EQ(s[0].start, 4);
  EXPECT_TRUE(s[0].samples);
}

TEST(InputBatchTest, PreemptionKeepsTokensAndResumeReplacesTheTable) {
  InputBatch b(4);
  std::vector<ScheduledRequest> s;
  SchedulerOutput so1;
  so1.scheduled_new_reqs.push_back(new_req("a", {1, 2, 3}, {5}));
  schedule(so1, "a", 3);
  ASSERT_TRUE(b.apply(so1, &s).ok());
  InputBatch::append_sampled(*s[0].state, 9);
  const uint64_t arrival = b.find("a")->arrival_index;

  SchedulerOutput so2;
  so2.preempted_req_ids.push_back("a");
  ASSERT_TRUE(b.apply(so2, &s).ok());
  EXPECT_TRUE(s.empty());
  const CachedRequestState* a = b.find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(a->preempted);
  EXPECT_TRUE(a->block_ids.empty());
  EXPECT_EQ(a->num_computed_tokens, 0);
  EXPECT_EQ(a->tokens, (std::vector<TokenId>{1, 2, 3, 9}));

  SchedulerOutput so3;
  CachedRequestData r = cached("a", 0, {11, 12});
  r.resumed_from_preemption = true;
  r.resumed_token_ids = {1, 2, 3, 9};
  so3.scheduled_cached_reqs.push_back(r);
  schedule(so3, "a", 4);
  ASSERT_TRUE(b.apply(so3, &s).ok());
  EXPECT_FALSE(a->preempted);
  EXPECT_EQ(a->block_ids, (std::vector<BlockId>{11, 12}));
  EXPECT_EQ(a->arrival_index, arrival);  // the unseeded RNG key survives preemption
  EXPECT_TRUE(s[0].samples);
}

TEST(InputBatchTest, ResumeThatLosesTokensIsAnError) {
  InputBatch b(4);
  std::vector<ScheduledRequest> s;
  SchedulerOutput so1;
  so1.scheduled_new_reqs.push_back(new_req("a", {1, 2, 3}, {5}));
  schedule(so1, "a", 3);
  ASSERT_TRUE(b.apply(so1, &s).ok());
  InputBatch::append_sampled(*s[0].state, 9);
  SchedulerOutput so2;
  so2.preempted_req_ids.push_back("a");
  ASSERT_TRUE(b.apply(so2, &s).ok());
  SchedulerOutput so3;
  CachedRequestData r = cached("a", 0, {11});
  r.resumed_from_preemption = true;
  r.resumed_token_ids = {1, 2, 4, 9};  // disagrees at position 2
  so3.scheduled_cached_reqs.push_back(r);
  schedule(so3, "a", 4);
  EXPECT_FALSE(b.apply(so3, &s).ok());
}

TEST(InputBatchTest, ProtocolBreachesAreErrors) {
  std::vector<ScheduledRequest> s;
  {
    InputBatch b(4);
    SchedulerOutput so;
    so.scheduled_cached_reqs.push_back(cached("ghost", 0));
    EXPECT_FALSE(b.apply(so, &s).ok()) << "cached request never seen";
  }
  {
    InputBatch b(4);
    SchedulerOutput so;
    so.scheduled_new_reqs.push_back(new_req("a", {1}, {1}));
    schedule(so, "a", 1);
    ASSERT_TRUE(b.apply(so, &s).ok());
    SchedulerOutput again;
    again.scheduled_new_reqs.push_back(new_req("a", {1}, {1}));
    EXPECT_FALSE(b.apply(again, &s).ok()) << "new request already held";
  }
  {
    InputBatch b(4);
    SchedulerOutput so;
    so.scheduled_new_reqs.push_back(new_req("a", {1, 2}, {1}));
    schedule(so, "a", 3);
    EXPECT_FALSE(b.apply(so, &s).ok()) << "past the known tokens";
  }
  {
    InputBatch b(2);
    SchedulerOutput so;
    so.scheduled_new_reqs.push_back(new_req("a", {1, 2, 3}, {1}));
    schedule(so, "a", 3);
    EXPECT_FALSE(b.apply(so, &s).ok()) << "block table too short";
  }
  {
    InputBatch b(4);
    SchedulerOutput so;
    so.scheduled_new_reqs.push_back(new_req("a", {1, 2}, {1}));
    schedule(so, "a", 1);
    ASSERT_TRUE(b.apply(so, &s).ok());
    SchedulerOutput so2;
    so2.scheduled_cached_reqs.push_back(cached("a", 0));  // the runner computed 1
    schedule(so2, "a", 1);
    EXPECT_FALSE(b.apply(so2, &s).ok()) << "computed counts disagree";
  }
  {
    InputBatch b(4);
    SchedulerOutput so;
    so.preempted_req_ids.push_back("ghost");
    EXPECT_FALSE(b.apply(so, &s).ok()) << "preempted request never seen";
  }
  {
    InputBatch b(4);
    SchedulerOutput so;
    so.scheduled_new_reqs.push_back(new_req("a", {1, 2}, {1}));
    schedule(so, "a", 2);
    schedule(so, "b", 1);  // carried by neither list
    EXPECT_FALSE(b.apply(so, &s).ok()) << "scheduled id the output does not carry";
  }
}

TEST(InputBatchTest, FinishedIdsDropStateAndUnknownOnesAreIgnored) {
  InputBatch b(4);
  std::vector<ScheduledRequest> s;
  SchedulerOutput so;
  so.scheduled_new_reqs.push_back(new_req("a", {1}, {1}));
  schedule(so, "a", 1);
  ASSERT_TRUE(b.apply(so, &s).ok());
  SchedulerOutput fin;
  fin.finished_req_ids = {"a", "never-seen"};
  ASSERT_TRUE(b.apply(fin, &s).ok());
  EXPECT_EQ(b.size(), 0u);
  // The id may come back as a new request in the same output that finishes the old one.
  SchedulerOutput reuse;
  reuse.finished_req_ids = {"a"};
  reuse.scheduled_new_reqs.push_back(new_req("a", {1}, {1}));
  EXPECT_TRUE(b.apply(reuse, &s).ok());
}

TEST(InputBatchTest, AsyncStepComputesTheTokenTheStepBeforeSampled) {
  // With async scheduling the scheduler schedules a decode before it knows the token; the runner
  // applies steps in order and has appended it by then. Without it the step is refused.
  SchedulerOutput so1;
  so1.scheduled_new_reqs.push_back(new_req("a", {1, 2}, {1}));
  schedule(so1, "a", 2);
  SchedulerOutput so2;
  so2.scheduled_cached_reqs.push_back(cached("a", 2));
  schedule(so2, "a", 1);
  std::vector<ScheduledRequest> s;
  {
    InputBatch b(4);
    ASSERT_TRUE(b.apply(so1, &s).ok());
    EXPECT_FALSE(b.apply(so2, &s).ok()) << "position 2 is not known until step 1 sampled it";
  }
  InputBatch b(4);
  ASSERT_TRUE(b.apply(so1, &s).ok());
  InputBatch::append_sampled(*s[0].state, 77);
  ASSERT_TRUE(b.apply(so2, &s).ok());
  EXPECT_EQ(s[0].start, 2);
  EXPECT_EQ(s[0].state->tokens[2], 77);
  EXPECT_TRUE(s[0].samples);
}

}  // namespace
}  // namespace kvasir
