// The step result codec: every field of a ModelRunnerOutput (sampled tokens, logprobs, prompt
// logprobs, speculative drafts) survives the round trip, and truncated, corrupted or hostile bytes
// are refused with a Status (never a crash or an allocation sized by the message).
#include "sched/runner_output_codec.h"

#include <gtest/gtest.h>

#include <cstring>

namespace kvasir {
namespace {

bool same(const std::optional<LogprobsLists>& a, const std::optional<LogprobsLists>& b) {
  if (a.has_value() != b.has_value()) return false;
  if (!a) return true;
  return a->num_rows == b->num_rows && a->num_per_row == b->num_per_row && a->token_ids == b->token_ids &&
         a->logprobs == b->logprobs && a->ranks == b->ranks;
}
bool same(const ModelRunnerOutput& a, const ModelRunnerOutput& b) {
  if (a.outputs.size() != b.outputs.size()) return false;
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    const RunnerRequestOutput& x = a.outputs[i];
    const RunnerRequestOutput& y = b.outputs[i];
    if (x.req_id != y.req_id || x.sampled_token_ids != y.sampled_token_ids || !same(x.logprobs, y.logprobs) ||
        !same(x.prompt_logprobs, y.prompt_logprobs) || x.spec_token_ids != y.spec_token_ids)
      return false;
  }
  return true;
}

LogprobsLists table(int rows, int per_row, float base) {
  LogprobsLists l;
  l.num_rows = rows;
  l.num_per_row = per_row;
  for (int i = 0; i < rows * per_row; ++i) {
    l.token_ids.push_back(1000 + i);
    l.logprobs.push_back(base - 0.25f * static_cast<float>(i));
  }
  for (int i = 0; i < rows; ++i) l.ranks.push_back(i + 1);
  return l;
}

ModelRunnerOutput full_output() {
  ModelRunnerOutput m;
  RunnerRequestOutput decode{"req-a", {17}, table(1, 3, -0.5f), std::nullopt, {}};
  RunnerRequestOutput prefill{"req-b", {}, std::nullopt, table(4, 2, -1.0f), {}};  // a chunk: no token yet
  RunnerRequestOutput spec{"req-c_1", {5, 6, 7}, table(3, 1, -0.125f), table(2, 1, -2.0f), {8, 9}};
  RunnerRequestOutput empty_id{"", {0}, std::nullopt, std::nullopt, {}};
  m.outputs = {decode, prefill, spec, empty_id};
  return m;
}

TEST(RunnerOutputCodec, RoundTripsEveryField) {
  const ModelRunnerOutput m = full_output();
  std::vector<uint8_t> bytes;
  encode_runner_output(m, bytes);
  auto back = decode_runner_output(bytes.data(), bytes.size());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_TRUE(same(m, *back));
  // Re-encoding gives the same bytes.
  std::vector<uint8_t> again;
  encode_runner_output(*back, again);
  EXPECT_EQ(bytes, again);
}

TEST(RunnerOutputCodec, RoundTripsAnEmptyStep) {
  std::vector<uint8_t> bytes;
  encode_runner_output(ModelRunnerOutput{}, bytes);
  auto back = decode_runner_output(bytes.data(), bytes.size());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_TRUE(back->outputs.empty());
}

TEST(RunnerOutputCodec, EveryTruncationIsAStatus) {
  std::vector<uint8_t> bytes;
  encode_runner_output(full_output(), bytes);
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto back = decode_runner_output(bytes.data(), n);
    EXPECT_FALSE(back.ok()) << "decoded from the first " << n << " of " << bytes.size() << " bytes";
  }
}

TEST(RunnerOutputCodec, RefusesTrailingBytesWrongMagicAndVersion) {
  std::vector<uint8_t> bytes;
  encode_runner_output(full_output(), bytes);
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  EXPECT_NE(decode_runner_output(longer.data(), longer.size()).status().message().find("past its end"), std::string::npos);
  std::vector<uint8_t> bad = bytes;
  bad[0] ^= 0xff;
  EXPECT_NE(decode_runner_output(bad.data(), bad.size()).status().message().find("magic"), std::string::npos);
  bad = bytes;
  bad[4] = 99;
  EXPECT_NE(decode_runner_output(bad.data(), bad.size()).status().message().find("version 99"), std::string::npos);
}

TEST(RunnerOutputCodec, RefusesHugeCountsWithoutAllocating) {
  std::vector<uint8_t> bytes;
  encode_runner_output(ModelRunnerOutput{}, bytes);
  const uint32_t huge = 0xffffffffu;
  std::memcpy(bytes.data() + 8, &huge, sizeof(huge));  // the request count
  EXPECT_FALSE(decode_runner_output(bytes.data(), bytes.size()).ok());
}

TEST(RunnerOutputCodec, RefusesALogprobsTableWhoseSizesDisagreeWithItsRows) {
  ModelRunnerOutput m;
  LogprobsLists l = table(2, 3, -1.0f);
  l.num_rows = 3;  // the arrays hold 2 rows
  m.outputs.push_back({"r", {1}, l, std::nullopt, {}});
  std::vector<uint8_t> bytes;
  encode_runner_output(m, bytes);
  auto back = decode_runner_output(bytes.data(), bytes.size());
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("sizes do not match"), std::string::npos);
  m.outputs[0].logprobs->num_rows = -1;
  encode_runner_output(m, bytes);
  EXPECT_FALSE(decode_runner_output(bytes.data(), bytes.size()).ok());
}

TEST(RunnerOutputCodec, RefusesABadFlagByte) {
  ModelRunnerOutput m;
  m.outputs.push_back({"r", {1}, std::nullopt, std::nullopt, {}});
  std::vector<uint8_t> bytes;
  encode_runner_output(m, bytes);
  // magic, version, count, id length + "r", token count + one token, then the logprobs flag.
  const size_t flag_at = 4 + 4 + 4 + 4 + 1 + 4 + 4;
  ASSERT_EQ(bytes[flag_at], 0);
  bytes[flag_at] = 2;
  EXPECT_FALSE(decode_runner_output(bytes.data(), bytes.size()).ok());
}

}  // namespace
}  // namespace kvasir
