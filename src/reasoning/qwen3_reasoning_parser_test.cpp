// qwen3 on outputs written the way Qwen3 writes them, with each kind of chat template.
#include "reasoning/reasoning_parser_test_util.h"

namespace kvasir::reasoning_test {
namespace {

TEST(Qwen3ReasoningParser, ThinkBlockThenAnswer) {
  expect_split("qwen3",
               "<think>\nOkay, the user greets me in Fran\xC3\xA7" "ais. I should answer politely.\n</think>\n\n"
               "Bonjour ! Comment puis-je vous aider ? \xF0\x9F\x98\x8A",
               {"Okay, the user greets me in Fran\xC3\xA7" "ais. I should answer politely.",
                "Bonjour ! Comment puis-je vous aider ? \xF0\x9F\x98\x8A"});
}

TEST(Qwen3ReasoningParser, OutputWithoutThinkIsContentVerbatim) {
  for (const char* text : {"Hello there", "\n\nHello", "Use <think> tags like this.", "<thinking>no</thinking>", "<",
                           "", "  "}) {
    expect_split("qwen3", text, {"", text});
  }
}

TEST(Qwen3ReasoningParser, LeadingWhitespaceEmptyAndUnclosedBlocks) {
  expect_split("qwen3", "\n<think>x</think>y", {"x", "y"});
  expect_split("qwen3", "<think>\n\n</think>\n\nHi", {"", "Hi"});
  expect_split("qwen3", "<think>\nstill thinking when max_tokens hit", {"still thinking when max_tokens hit", ""});
}

TEST(Qwen3ReasoningParser, EnableThinkingFalseMeansNoReasoning) {
  ReasoningParserOptions options;
  options.enable_thinking = false;
  expect_split("qwen3", "<think>\nx\n</think>\n\nHi", {"", "<think>\nx\n</think>\n\nHi"}, options);
  // The template renders an empty think block into the prompt: same result without the flag.
  ReasoningParserOptions prompt_closed;
  prompt_closed.prompt = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
  expect_split("qwen3", "Hi", {"", "Hi"}, prompt_closed);
  EXPECT_TRUE(make("qwen3", options)->is_reasoning_end(""));
}

TEST(Qwen3ReasoningParser, APromptEndingInThinkStartsInsideTheReasoning) {
  ReasoningParserOptions options;
  options.prompt = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n";
  expect_split("qwen3", "The user says hi.\n</think>\n\nHello!", {"The user says hi.", "Hello!"}, options);
}

TEST(Qwen3ReasoningParser, ReasoningEndedOnlyOnceDecided) {
  auto p = make("qwen3");
  EXPECT_FALSE(p->is_reasoning_end(""));
  EXPECT_FALSE(p->is_reasoning_end("  <thi"));
  EXPECT_TRUE(p->is_reasoning_end("Hi"));
  EXPECT_FALSE(p->is_reasoning_end("<think>abc"));
  EXPECT_TRUE(p->is_reasoning_end("<think>abc</think>"));
}

TEST(ReasoningParserRegistry, NamesEachParserAndRefusesOthers) {
  EXPECT_EQ(reasoning_parser_names(), (std::vector<std::string>{"deepseek_r1", "qwen3"}));
  EXPECT_EQ(make("qwen3")->name(), "qwen3");
  auto bad = make_reasoning_parser("granite");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("supported: deepseek_r1, qwen3"), std::string::npos);
}

TEST(ReasoningParserDeathTest, FeedAfterFinishIsABug) {
  auto p = make("qwen3");
  (void)p->finish();
  EXPECT_DEATH((void)p->feed("x"), "feed after finish");
}

}  // namespace
}  // namespace kvasir::reasoning_test
