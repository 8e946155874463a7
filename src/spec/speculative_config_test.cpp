#include "spec/speculative_config.h"

#include <gtest/gtest.h>

namespace kvasir {
namespace {

std::string error_of(const std::string& json) {
  auto c = parse_speculative_config(json);
  EXPECT_FALSE(c.ok()) << json;
  return c.ok() ? "" : c.status().message();
}

TEST(SpeculativeConfig, ReadsVllmNgramKeys) {
  auto c = parse_speculative_config(
      R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 6})");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->enabled());
  EXPECT_EQ(c->method, "ngram");
  EXPECT_EQ(c->num_speculative_tokens, 4);
  EXPECT_EQ(c->prompt_lookup_min, 2);
  EXPECT_EQ(c->prompt_lookup_max, 6);
}

TEST(SpeculativeConfig, LookupBoundsDefaultAsVllm) {
  auto both = parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 3})");
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(both->prompt_lookup_min, 5);
  EXPECT_EQ(both->prompt_lookup_max, 5);
  auto only_max = parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4})");
  ASSERT_TRUE(only_max.ok());
  EXPECT_EQ(only_max->prompt_lookup_min, 4);
  auto legacy = parse_speculative_config(R"({"model": "[ngram]", "num_speculative_tokens": 3})");
  ASSERT_TRUE(legacy.ok());
  EXPECT_EQ(legacy->method, "ngram");
}

TEST(SpeculativeConfig, UnbuiltMethodsAreRefusedByName) {
  for (const char* m : {"mtp", "medusa"}) {
    const std::string e = error_of(std::string(R"({"method": ")") + m + R"(", "num_speculative_tokens": 3})");
    EXPECT_NE(e.find(std::string("\"") + m + "\" is not supported yet"), std::string::npos) << e;
  }
  EXPECT_NE(error_of(R"({"method": "warp", "num_speculative_tokens": 3})").find("unknown method \"warp\""),
            std::string::npos);
}

TEST(SpeculativeConfig, DraftModelMethodAndVllmShorthand) {
  auto full = parse_speculative_config(
      R"({"method": "draft_model", "model": "d.gguf", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 1})");
  ASSERT_TRUE(full.ok()) << full.status().to_string();
  EXPECT_EQ(full->method, "draft_model");
  EXPECT_EQ(full->draft_model, "d.gguf");
  EXPECT_EQ(full->num_speculative_tokens, 3);
  // vLLM infers draft_model from a model that is not "[ngram]".
  auto shorthand = parse_speculative_config(R"({"model": "some/draft", "num_speculative_tokens": 2})");
  ASSERT_TRUE(shorthand.ok());
  EXPECT_EQ(shorthand->method, "draft_model");
  EXPECT_EQ(shorthand->draft_model, "some/draft");
  EXPECT_NE(error_of(R"({"method": "draft_model", "num_speculative_tokens": 3})").find("needs 'model'"), std::string::npos);
  EXPECT_NE(error_of(R"({"model": "d", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 2})")
                .find("'draft_tensor_parallel_size' 2 is not supported"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model": "d"})").find("'num_speculative_tokens' is required"), std::string::npos);
  EXPECT_NE(error_of(R"({"method": "ngram", "model": "d", "num_speculative_tokens": 3})").find("names a draft model"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model": "d", "num_speculative_tokens": 3, "prompt_lookup_max": 3})").find("ngram"),
            std::string::npos);
}

TEST(SpeculativeConfig, EveryBadFieldIsNamed) {
  EXPECT_NE(error_of("[1]").find("JSON object"), std::string::npos);
  EXPECT_NE(error_of("{").find("JSON object"), std::string::npos);
  EXPECT_NE(error_of(R"({"num_speculative_tokens": 3})").find("'method' is required"), std::string::npos);
  EXPECT_NE(error_of(R"({"method": "ngram"})").find("'num_speculative_tokens' is required"), std::string::npos);
  EXPECT_NE(error_of(R"({"method": 1, "num_speculative_tokens": 3})").find("'method' must be a string"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"method": "ngram", "num_speculative_tokens": 0})").find("'num_speculative_tokens' must be in"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"method": "ngram", "num_speculative_tokens": 65})").find("must be in [1, 64]"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"method": "ngram", "num_speculative_tokens": 2.5})").find("must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"method": "ngram", "num_speculative_tokens": "3"})").find("must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": -1})")
                .find("'prompt_lookup_min' must be in"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 4, "prompt_lookup_max": 2})")
                .find("prompt_lookup_min (4) must be <= prompt_lookup_max (2)"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"method": "ngram", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 1})")
                .find("'draft_tensor_parallel_size' belongs to the \"draft_model\", \"eagle\" and \"eagle3\" methods"),
            std::string::npos);
}

}  // namespace
}  // namespace kvasir

namespace kvasir {
namespace {

TEST(SpeculativeConfig, Eagle3TakesTheHeadAsModel) {
  auto c = parse_speculative_config(R"({"method": "eagle3", "model": "heads/e3", "num_speculative_tokens": 4})");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->method, "eagle3");
  EXPECT_EQ(c->draft_model, "heads/e3");
  EXPECT_EQ(c->num_speculative_tokens, 4);
  EXPECT_NE(error_of(R"({"method": "eagle3", "num_speculative_tokens": 3})").find("EAGLE-3 head"), std::string::npos);
  EXPECT_NE(error_of(R"({"method": "eagle3", "model": "h"})").find("'num_speculative_tokens' is required"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"method": "eagle3", "model": "h", "num_speculative_tokens": 2, "prompt_lookup_max": 3})")
                .find("not \"eagle3\""),
            std::string::npos);
}

TEST(SpeculativeConfig, EagleTakesTheHeadAsModel) {
  auto c = parse_speculative_config(
      R"({"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3-Instruct-8B", "num_speculative_tokens": 5})");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->method, "eagle");
  EXPECT_EQ(c->draft_model, "yuhuili/EAGLE-LLaMA3-Instruct-8B");
  EXPECT_EQ(c->num_speculative_tokens, 5);
  EXPECT_NE(error_of(R"({"method": "eagle", "num_speculative_tokens": 3})").find("EAGLE-1/2 head"), std::string::npos);
  EXPECT_NE(error_of(R"({"method": "eagle", "model": "h", "num_speculative_tokens": 2, "suffix_decoding_max_tree_depth": 3})")
                .find("not \"eagle\""),
            std::string::npos);
}

TEST(SpeculativeConfig, TreeDraftingAndOtherUnbuiltOptionsAreRefusedByName) {
  // vLLM's tree drafting for EAGLE and its other drafter options change what is proposed.
  for (const char* key : {"speculative_token_tree", "disable_padded_drafter_batch", "draft_model_revision"}) {
    const std::string e =
        error_of(std::string(R"({"method": "eagle", "model": "h", "num_speculative_tokens": 2, ")") + key + R"(": "x"})");
    EXPECT_NE(e.find(std::string("'") + key + "' is not supported"), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace kvasir
