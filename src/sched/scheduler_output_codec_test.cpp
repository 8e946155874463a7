// The step message codec: every field of a SchedulerOutput and GrammarBitmask survives the round
// trip, equal outputs encode to equal bytes, and truncated, corrupted or hostile bytes are refused
// with a Status (never a crash or an allocation sized by the message).
#include "sched/scheduler_output_codec.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include <cstring>

namespace kvasir {
namespace {

// Field-by-field equality, written here so the plain-data headers stay free of operators.
bool same(const StructuredOutputSpec& a, const StructuredOutputSpec& b) {
  return a.kind == b.kind && a.text == b.text && a.choices == b.choices;
}
bool same(const SamplingParams& a, const SamplingParams& b) {
  return a.n == b.n && a.temperature == b.temperature && a.top_p == b.top_p && a.top_k == b.top_k &&
         a.min_p == b.min_p && a.repetition_penalty == b.repetition_penalty &&
         a.presence_penalty == b.presence_penalty && a.frequency_penalty == b.frequency_penalty &&
         a.logit_bias == b.logit_bias && a.seed == b.seed && a.max_tokens == b.max_tokens &&
         a.min_tokens == b.min_tokens && a.ignore_eos == b.ignore_eos && a.stop == b.stop &&
         a.stop_token_ids == b.stop_token_ids && a.include_stop_str_in_output == b.include_stop_str_in_output &&
         a.skip_special_tokens == b.skip_special_tokens && a.logprobs == b.logprobs &&
         a.prompt_logprobs == b.prompt_logprobs &&
         a.structured_outputs.has_value() == b.structured_outputs.has_value() &&
         (!a.structured_outputs || same(*a.structured_outputs, *b.structured_outputs));
}
bool same(const NewRequestData& a, const NewRequestData& b) {
  return a.req_id == b.req_id && a.prompt_token_ids == b.prompt_token_ids && same(a.sampling_params, b.sampling_params) &&
         a.eos_token_id == b.eos_token_id && a.adapter_id == b.adapter_id && a.block_ids == b.block_ids &&
         a.num_computed_tokens == b.num_computed_tokens;
}
bool same(const CachedRequestData& a, const CachedRequestData& b) {
  return a.req_id == b.req_id && a.resumed_from_preemption == b.resumed_from_preemption &&
         a.resumed_token_ids == b.resumed_token_ids && a.new_block_ids == b.new_block_ids &&
         a.num_computed_tokens == b.num_computed_tokens;
}
template <typename T>
bool same_list(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!same(a[i], b[i])) return false;
  return true;
}
bool same(const SchedulerOutput& a, const SchedulerOutput& b) {
  return same_list(a.scheduled_new_reqs, b.scheduled_new_reqs) &&
         same_list(a.scheduled_cached_reqs, b.scheduled_cached_reqs) &&
         a.num_scheduled_tokens == b.num_scheduled_tokens && a.scheduled_spec_decode_tokens == b.scheduled_spec_decode_tokens &&
         a.num_drafts_to_propose == b.num_drafts_to_propose &&
         a.total_num_scheduled_tokens == b.total_num_scheduled_tokens && a.finished_req_ids == b.finished_req_ids &&
         a.preempted_req_ids == b.preempted_req_ids && a.structured_output_req_ids == b.structured_output_req_ids;
}

SchedulerOutput full_output() {
  SchedulerOutput so;
  NewRequestData n;
  n.req_id = "req-1";
  n.prompt_token_ids = {1, 2, 3, 40000};
  n.sampling_params.n = 2;
  n.sampling_params.temperature = 0.7f;
  n.sampling_params.top_p = 0.9f;
  n.sampling_params.top_k = 40;
  n.sampling_params.min_p = 0.05f;
  n.sampling_params.repetition_penalty = 1.1f;
  n.sampling_params.presence_penalty = -0.5f;
  n.sampling_params.frequency_penalty = 0.25f;
  n.sampling_params.logit_bias = {{7, -100.0f}, {9, 3.5f}};
  n.sampling_params.seed = 1234567890123ull;
  n.sampling_params.max_tokens = 99;
  n.sampling_params.min_tokens = 3;
  n.sampling_params.ignore_eos = true;
  n.sampling_params.stop = {"\n\n", "END"};
  n.sampling_params.stop_token_ids = {2, 5};
  n.sampling_params.include_stop_str_in_output = true;
  n.sampling_params.skip_special_tokens = false;
  n.sampling_params.logprobs = 5;
  n.sampling_params.prompt_logprobs = 0;
  n.sampling_params.structured_outputs = StructuredOutputSpec{StructuredOutputSpec::Kind::kChoice, "", {"yes", "no"}};
  n.eos_token_id = 2;
  n.adapter_id = -3;
  n.block_ids = {4, 5, 6};
  n.num_computed_tokens = 16;
  so.scheduled_new_reqs.push_back(n);
  NewRequestData plain;
  plain.req_id = "req-2";
  plain.prompt_token_ids = {8};
  so.scheduled_new_reqs.push_back(plain);
  CachedRequestData c;
  c.req_id = "req-0";
  c.resumed_from_preemption = true;
  c.resumed_token_ids = {11, 12, 13};
  c.new_block_ids = {1, 2};
  c.num_computed_tokens = 0;
  so.scheduled_cached_reqs.push_back(c);
  so.num_scheduled_tokens = {{"req-1", 4}, {"req-2", 1}, {"req-0", 3}};
  so.total_num_scheduled_tokens = 8;
  so.scheduled_spec_decode_tokens = {{"req-1", {17, 18, 19}}, {"req-0", {5}}};
  so.num_drafts_to_propose = {{"req-2", 0}, {"req-0", 0}};
  so.finished_req_ids = {"old-1", "old-2"};
  so.preempted_req_ids = {"req-9"};
  so.structured_output_req_ids = {"req-1"};
  return so;
}

TEST(SchedulerOutputCodecTest, EveryFieldSurvivesTheRoundTrip) {
  const SchedulerOutput so = full_output();
  GrammarBitmask mask{{"req-1", "req-1"}, 1, {0x7fffffff, -1}, {0, 1}};
  std::vector<uint8_t> bytes;
  encode_step(so, &mask, bytes);
  // The fuzz seed fuzz/seeds/step_message_fuzz/full_step.bin is these bytes, written again when
  // the format changes: $KVASIR_STEP_SEED_OUT names where.
  if (const char* seed = std::getenv("KVASIR_STEP_SEED_OUT")) {
    std::ofstream(seed, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                static_cast<std::streamsize>(bytes.size()));
  }
  auto m = decode_step(bytes.data(), bytes.size());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE(same(m->scheduler_output, so));
  ASSERT_TRUE(m->grammar_bitmask.has_value());
  EXPECT_EQ(m->grammar_bitmask->req_ids, mask.req_ids);
  EXPECT_EQ(m->grammar_bitmask->words_per_row, mask.words_per_row);
  EXPECT_EQ(m->grammar_bitmask->words, mask.words);
  EXPECT_EQ(m->grammar_bitmask->positions, mask.positions);

  encode_step(SchedulerOutput{}, nullptr, bytes);
  auto empty = decode_step(bytes.data(), bytes.size());
  ASSERT_TRUE(empty.ok()) << empty.status().to_string();
  EXPECT_TRUE(same(empty->scheduler_output, SchedulerOutput{}));
  EXPECT_FALSE(empty->grammar_bitmask.has_value());
}

TEST(SchedulerOutputCodecTest, EqualOutputsEncodeToEqualBytesWhateverTheMapOrder) {
  SchedulerOutput a = full_output(), b = full_output();
  b.num_scheduled_tokens.clear();
  b.num_scheduled_tokens.rehash(64);
  for (const char* id : {"req-0", "req-2", "req-1"}) b.num_scheduled_tokens[id] = a.num_scheduled_tokens[id];
  std::vector<uint8_t> ea, eb;
  encode_step(a, nullptr, ea);
  encode_step(b, nullptr, eb);
  EXPECT_EQ(ea, eb);
}

TEST(SchedulerOutputCodecTest, EveryTruncationIsRefused) {
  std::vector<uint8_t> bytes;
  GrammarBitmask mask{{"req-1"}, 1, {5}};
  encode_step(full_output(), &mask, bytes);
  for (size_t len = 0; len < bytes.size(); ++len) {
    auto m = decode_step(bytes.data(), len);
    EXPECT_FALSE(m.ok()) << "prefix of " << len << " bytes decoded";
  }
  bytes.push_back(0);
  EXPECT_NE(decode_step(bytes.data(), bytes.size()).status().message().find("past its end"), std::string::npos);
}

TEST(SchedulerOutputCodecTest, CorruptBytesAreRefusedOrDecodeWithoutCrashing) {
  std::vector<uint8_t> good;
  encode_step(full_output(), nullptr, good);
  // Every single-byte corruption: a Status or some decoded value, never a crash (ASan runs this).
  for (size_t i = 0; i < good.size(); ++i)
    for (uint8_t v : {uint8_t{0}, uint8_t{0x7f}, uint8_t{0xff}}) {
      std::vector<uint8_t> bad = good;
      bad[i] = v;
      (void)decode_step(bad.data(), bad.size());
    }
  std::vector<uint8_t> wrong_version = good;
  wrong_version[4] = 9;
  EXPECT_NE(decode_step(wrong_version.data(), wrong_version.size()).status().message().find("version"),
            std::string::npos);
  // A count of 4 billion requests in a 20-byte message is refused before anything is allocated.
  std::vector<uint8_t> hostile(good.begin(), good.begin() + 8);
  for (int i = 0; i < 4; ++i) hostile.push_back(0xff);
  hostile.resize(20, 0);
  EXPECT_FALSE(decode_step(hostile.data(), hostile.size()).ok());
}

}  // namespace
}  // namespace kvasir
