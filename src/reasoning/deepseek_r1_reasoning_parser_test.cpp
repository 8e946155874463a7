// deepseek_r1 on outputs written the way DeepSeek-R1 (old and new templates) writes them.
#include "reasoning/reasoning_parser_test_util.h"

namespace kvasir::reasoning_test {
namespace {

TEST(DeepSeekR1ReasoningParser, OutputStartsInsideTheReasoning) {
  expect_split("deepseek_r1",
               "Okay, the user asks for 2+2.\nThat's basic arithmetic: 4.\n</think>\n\nThe answer is **4**.",
               {"Okay, the user asks for 2+2.\nThat's basic arithmetic: 4.", "The answer is **4**."});
}

TEST(DeepSeekR1ReasoningParser, AnOpeningThinkWrittenByTheModelIsDropped) {
  expect_split("deepseek_r1",
               "<think>\nLet me think about \xE2\x88\xAB x dx\xE2\x80\xA6 it is x\xC2\xB2/2.\n</think>\n\n"
               "\xE2\x88\xAB x dx = x\xC2\xB2/2 + C",
               {"Let me think about \xE2\x88\xAB x dx\xE2\x80\xA6 it is x\xC2\xB2/2.", "\xE2\x88\xAB x dx = x\xC2\xB2/2 + C"});
}

TEST(DeepSeekR1ReasoningParser, NoClosingTagMeansEverythingIsReasoning) {
  expect_split("deepseek_r1", "Hmm, so the integral of x is\n", {"Hmm, so the integral of x is", ""});
  expect_split("deepseek_r1", "", {"", ""});
  expect_split("deepseek_r1", "</think>", {"", ""});
}

TEST(DeepSeekR1ReasoningParser, ALaterThinkTagIsJustText) {
  expect_split("deepseek_r1", "a <think> b </think> c </think> d", {"a <think> b", "c </think> d"});
  // Found by reasoning_parser_fuzz: leading whitespace, then text that is followed by <think>.
  expect_split("deepseek_r1", "\r\r\x03\x05<think>x</think>y", {"\x03\x05<think>x", "y"});
}

TEST(DeepSeekR1ReasoningParser, APromptThatClosedTheThinkBlockMeansAllContent) {
  ReasoningParserOptions options;
  options.prompt = "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C></think>";
  expect_split("deepseek_r1", "Hello! </think> is a tag.", {"", "Hello! </think> is a tag."}, options);
  EXPECT_TRUE(make("deepseek_r1", options)->is_reasoning_end(""));
}

TEST(DeepSeekR1ReasoningParser, ReasoningEndsAtTheClosingTag) {
  auto p = make("deepseek_r1");
  EXPECT_FALSE(p->is_reasoning_end(""));
  EXPECT_FALSE(p->is_reasoning_end("thinking </thi"));
  EXPECT_TRUE(p->is_reasoning_end("thinking </think>"));
  EXPECT_FALSE(p->reasoning_ended());
  ReasoningDelta d = p->feed("step 1\n</th");
  EXPECT_EQ(d.reasoning, "step 1");
  EXPECT_FALSE(p->reasoning_ended());
  d = p->feed("ink>\n\n");
  EXPECT_TRUE(d.empty());
  EXPECT_TRUE(p->reasoning_ended());
  d = p->feed("Answer");
  EXPECT_EQ(d.content, "Answer");
}

}  // namespace
}  // namespace kvasir::reasoning_test
