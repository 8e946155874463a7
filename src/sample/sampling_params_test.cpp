// SamplingParams::validate: defaults pass; each bad field gives invalid_argument naming it.
#include "core/sampling_params.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

namespace kvasir {
namespace {

constexpr int32_t kVocab = 1000;

void expect_rejected(const std::function<void(SamplingParams&)>& edit, const std::string& field,
                     int max_logprobs = 20) {
  SamplingParams p;
  edit(p);
  const Status st = p.validate(kVocab, max_logprobs);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << field;
  EXPECT_NE(st.message().find(field), std::string::npos) << st.message();
}

void expect_accepted(const std::function<void(SamplingParams&)>& edit, int max_logprobs = 20) {
  SamplingParams p;
  edit(p);
  const Status st = p.validate(kVocab, max_logprobs);
  EXPECT_TRUE(st.ok()) << st.to_string();
}

const float kNan = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

TEST(SamplingParamsValidate, DefaultsAndEdgesAreAccepted) {
  expect_accepted([](SamplingParams&) {});
  expect_accepted([](SamplingParams& p) {
    p.n = 128;
    p.temperature = 0.0f;
    p.top_p = 1.0f;
    p.top_k = -1;
    p.min_p = 1.0f;
    p.repetition_penalty = 0.01f;
    p.presence_penalty = -2.0f;
    p.frequency_penalty = 2.0f;
    p.logit_bias = {{0, -100.0f}, {kVocab - 1, 100.0f}};
    p.max_tokens = 1;
    p.min_tokens = 1;
    p.stop_token_ids = {0, kVocab - 1};
    p.stop = {"\n\n", "###"};
    p.logprobs = 20;
    p.prompt_logprobs = 0;
  });
  expect_accepted([](SamplingParams& p) { p.logprobs = 500; }, /*max_logprobs=*/-1);
}

TEST(SamplingParamsValidate, SamplingKnobsOutOfRange) {
  expect_rejected([](SamplingParams& p) { p.n = 0; }, "n must");
  expect_rejected([](SamplingParams& p) { p.n = 129; }, "n must");
  expect_rejected([](SamplingParams& p) { p.temperature = -0.1f; }, "temperature");
  expect_rejected([](SamplingParams& p) { p.temperature = kNan; }, "temperature");
  expect_rejected([](SamplingParams& p) { p.temperature = kInf; }, "temperature");
  expect_rejected([](SamplingParams& p) { p.top_p = 0.0f; }, "top_p");
  expect_rejected([](SamplingParams& p) { p.top_p = 1.01f; }, "top_p");
  expect_rejected([](SamplingParams& p) { p.top_p = kNan; }, "top_p");
  expect_rejected([](SamplingParams& p) { p.top_k = -2; }, "top_k");
  expect_rejected([](SamplingParams& p) { p.min_p = -0.01f; }, "min_p");
  expect_rejected([](SamplingParams& p) { p.min_p = 1.5f; }, "min_p");
  expect_rejected([](SamplingParams& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty");
  expect_rejected([](SamplingParams& p) { p.repetition_penalty = kInf; }, "repetition_penalty");
  expect_rejected([](SamplingParams& p) { p.presence_penalty = 2.5f; }, "presence_penalty");
  expect_rejected([](SamplingParams& p) { p.presence_penalty = kNan; }, "presence_penalty");
  expect_rejected([](SamplingParams& p) { p.frequency_penalty = -2.01f; }, "frequency_penalty");
}

TEST(SamplingParamsValidate, TokenIdsMustBeInVocab) {
  expect_rejected([](SamplingParams& p) { p.logit_bias = {{kVocab, 1.0f}}; }, "logit_bias");
  expect_rejected([](SamplingParams& p) { p.logit_bias = {{-1, 1.0f}}; }, "logit_bias");
  expect_rejected([](SamplingParams& p) { p.logit_bias = {{3, 100.5f}}; }, "logit_bias");
  expect_rejected([](SamplingParams& p) { p.logit_bias = {{3, kNan}}; }, "logit_bias");
  expect_rejected([](SamplingParams& p) { p.stop_token_ids = {5, kVocab}; }, "stop_token_ids");
  expect_rejected([](SamplingParams& p) { p.stop_token_ids = {-3}; }, "stop_token_ids");
}

TEST(SamplingParamsValidate, LengthsAndStops) {
  expect_rejected([](SamplingParams& p) { p.max_tokens = 0; }, "max_tokens");
  expect_rejected([](SamplingParams& p) { p.min_tokens = -1; }, "min_tokens");
  expect_rejected([](SamplingParams& p) { p.min_tokens = 17; }, "min_tokens");
  expect_rejected([](SamplingParams& p) { p.stop = {"ok", ""}; }, "stop");
  expect_rejected([](SamplingParams& p) { p.stop.assign(129, "x"); }, "stop");
}

TEST(SamplingParamsValidate, LogprobsCappedByMaxLogprobs) {
  expect_rejected([](SamplingParams& p) { p.logprobs = -1; }, "logprobs");
  expect_rejected([](SamplingParams& p) { p.logprobs = 21; }, "logprobs");
  expect_rejected([](SamplingParams& p) { p.prompt_logprobs = 21; }, "prompt_logprobs");
  expect_rejected([](SamplingParams& p) { p.prompt_logprobs = -5; }, "prompt_logprobs");
  expect_rejected([](SamplingParams& p) { p.logprobs = kVocab + 1; }, "logprobs", -1);
}

}  // namespace
}  // namespace kvasir
