// RequestValidator: each rule, its message (the server's 400s carry them), and the order the rules
// are checked in (the first broken one is reported).
#include "engine/request_validator.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvasir {
namespace {

RequestValidator validator(int max_model_len = 32, int max_logprobs = 20) {
  return RequestValidator(RequestLimits{/*vocab_size=*/100, max_model_len, max_logprobs});
}

SamplingParams params(int max_tokens) {
  SamplingParams p;
  p.max_tokens = max_tokens;
  return p;
}

std::string message(const Status& s) { return s.ok() ? "ok" : s.message(); }

TEST(RequestValidator, AcceptsARequestThatFillsTheContextExactly) {
  const std::vector<int32_t> prompt = {0, 1, 99};
  EXPECT_TRUE(validator().check_prompt(prompt).ok());
  EXPECT_TRUE(validator().check(prompt, params(29)).ok());  // 3 + 29 == max_model_len
}

TEST(RequestValidator, PromptIdsMustBeInTheVocabulary) {
  for (int32_t bad : {-1, 100, 1 << 30}) {
    const std::vector<int32_t> prompt = {1, bad};
    const Status s = validator().check(prompt, params(4));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(message(s), "Token id " + std::to_string(bad) + " in the prompt is out of vocabulary [0, 100).");
    EXPECT_EQ(message(validator().check_prompt(prompt)), message(s));
  }
}

TEST(RequestValidator, PromptMustBeNonEmptyAndLeaveRoomForOneToken) {
  EXPECT_EQ(message(validator().check({}, params(4))), "The prompt is empty: it must contain at least one token.");
  const std::vector<int32_t> full(32, 5);
  EXPECT_EQ(message(validator().check_prompt(full)),
            "This model's maximum context length is 32 tokens. However, your request has 32 input tokens. "
            "Please reduce the length of the input messages.");
  const std::vector<int32_t> almost(31, 5);
  EXPECT_TRUE(validator().check_prompt(almost).ok());
}

TEST(RequestValidator, PromptPlusMaxTokensMustFit) {
  const std::vector<int32_t> prompt(10, 5);
  EXPECT_EQ(message(validator().check(prompt, params(23))),
            "This model's maximum context length is 32 tokens. However, you requested 33 tokens (10 in the "
            "messages, 23 in the completion). Please reduce the length of the messages or completion.");
}

TEST(RequestValidator, ParameterRangesAndVocabularyBounds) {
  const std::vector<int32_t> prompt = {1, 2};
  SamplingParams hot = params(4);
  hot.temperature = -1;
  EXPECT_NE(message(validator().check(prompt, hot)).find("temperature"), std::string::npos);
  SamplingParams zero = params(0);
  EXPECT_NE(message(validator().check(prompt, zero)).find("max_tokens"), std::string::npos);
  SamplingParams stop = params(4);
  stop.stop_token_ids = {3, 100};
  EXPECT_EQ(message(validator().check(prompt, stop)),
            "stop_token_ids contains out-of-vocabulary token id 100. Vocabulary size: 100.");
  SamplingParams bias = params(4);
  bias.logit_bias = {{-1, 1.0f}};
  EXPECT_EQ(message(validator().check(prompt, bias)),
            "token_id -1 in logit_bias is out of vocabulary. Vocabulary size: 100.");
  SamplingParams lp = params(4);
  lp.logprobs = 21;
  EXPECT_FALSE(validator().check(prompt, lp).ok());
  EXPECT_TRUE(validator(32, /*max_logprobs=*/-1).check(prompt, lp).ok());  // -1: up to the vocabulary
  lp.logprobs = 101;
  EXPECT_FALSE(validator(32, -1).check(prompt, lp).ok());
}

TEST(RequestValidator, ThePromptIsCheckedBeforeTheParameters) {
  SamplingParams bad = params(0);
  bad.temperature = -1;
  const std::vector<int32_t> oov = {100};
  EXPECT_NE(message(validator().check(oov, bad)).find("in the prompt is out of vocabulary"), std::string::npos);
  // Parameters before the total length: max_tokens = 0 is reported as such, not as a fit.
  const std::vector<int32_t> prompt = {1};
  EXPECT_NE(message(validator().check(prompt, params(0))).find("max_tokens"), std::string::npos);
}

TEST(RequestValidatorDeathTest, LimitsMustBeSet) {
  EXPECT_DEATH(RequestValidator(RequestLimits{0, 32, 20}), "vocab_size");
  EXPECT_DEATH(RequestValidator(RequestLimits{100, 0, 20}), "max_model_len");
}

}  // namespace
}  // namespace kvasir
