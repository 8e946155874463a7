// StructuredOutputManager with speculative drafts: a request verifying d drafts gets a mask row per
// position, each the grammar's state after the drafts before it; a draft the grammar refuses ends
// the constrained rows (those after it are all-allowed: verification never reaches them); the
// matcher is rolled back after the walk, so only the tokens the step accepts advance it; after an
// accepted stop token only stop tokens are allowed; a request still reasoning is constrained from
// the position after the drafts end its reasoning.
#include "engine/structured_output_manager.h"

#include <gtest/gtest.h>

#include "structured/structured_test_util.h"

namespace kvasir {
namespace {

using structured::testing::make_compiler;
using structured::testing::spec_of;
using structured::testing::tiny_tokenizer;
using Kind = StructuredOutputSpec::Kind;

class StructuredOutputManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    compiler_ = make_compiler(tiny_tokenizer());
    ASSERT_NE(compiler_, nullptr);
    auto g = compiler_->compile(spec_of(Kind::kChoice, "", {"ab12"}));
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    grammar_ = *g;
    manager_ = std::make_unique<StructuredOutputManager>(static_cast<int32_t>(tiny_tokenizer().vocab_size()));
  }
  static int32_t id(const char* piece) {
    auto t = tiny_tokenizer().token_to_id(piece);
    EXPECT_TRUE(t.has_value()) << piece;
    return t.value_or(-1);
  }
  void add(const std::string& req_id, std::vector<TokenId> starts_after = {}) {
    RequestOptions o;
    o.grammar = grammar_;
    o.grammar_starts_after = std::move(starts_after);
    manager_->add_request(Request(req_id, {5, 6, 7}, SamplingParams{}, o));
  }
  std::shared_ptr<const GrammarBitmask> fill(const std::string& req_id, std::vector<TokenId> drafts) {
    SchedulerOutput so;
    so.structured_output_req_ids = {req_id};
    if (!drafts.empty()) so.scheduled_spec_decode_tokens[req_id] = std::move(drafts);
    GrammarBitmaskFuture f = manager_->fill_async(so, {});
    if (!f.valid()) return nullptr;
    return f.get();
  }
  void fold(const std::string& req_id, std::vector<TokenId> tokens) {
    EngineCoreOutputs outs;
    EngineCoreOutput o;
    o.req_id = req_id;
    o.new_token_ids = std::move(tokens);
    outs.outputs.push_back(std::move(o));
    manager_->accept_outputs(outs);
  }
  static std::span<const int32_t> row(const GrammarBitmask& m, size_t r) {
    const size_t w = static_cast<size_t>(m.words_per_row);
    return std::span<const int32_t>(m.words.data() + r * w, w);
  }
  static bool allows(const GrammarBitmask& m, size_t r, int32_t token) { return structured::bitmask_allows(row(m, r), token); }
  static bool all_allowed(const GrammarBitmask& m, size_t r) {
    for (int32_t w : row(m, r)) {
      if (w != -1) return false;
    }
    return true;
  }

  std::unique_ptr<structured::GrammarCompiler> compiler_;
  structured::CompiledGrammarPtr grammar_;
  std::unique_ptr<StructuredOutputManager> manager_;
};

TEST_F(StructuredOutputManagerTest, EachDraftPositionGetsTheGrammarAfterTheDraftsBeforeIt) {
  add("r");
  auto m = fill("r", {id("ab"), id("12")});
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(m->req_ids, (std::vector<std::string>{"r", "r", "r"}));
  EXPECT_EQ(m->positions, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_TRUE(allows(*m, 0, id("ab")));
  EXPECT_FALSE(allows(*m, 0, id("12")));
  EXPECT_TRUE(allows(*m, 1, id("12")));
  EXPECT_FALSE(allows(*m, 1, id("ab")));
  EXPECT_FALSE(allows(*m, 2, id("12")));
  EXPECT_TRUE(allows(*m, 2, tiny_tokenizer().eos_id()));  // "ab12" is complete
  // The walk was rolled back: a step that accepted only "ab" continues from there.
  fold("r", {id("ab")});
  auto next = fill("r", {});
  ASSERT_NE(next, nullptr);
  ASSERT_EQ(next->req_ids.size(), 1u);
  EXPECT_EQ(next->position(0), 0);
  EXPECT_TRUE(allows(*next, 0, id("12")));
  EXPECT_FALSE(allows(*next, 0, id("ab")));
  EXPECT_EQ(manager_->num_rejected_tokens(), 0);
}

TEST_F(StructuredOutputManagerTest, RowsAfterARefusedDraftAreNeverConstrained) {
  add("r");
  auto m = fill("r", {id("ab"), id("}]"), id("12")});
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(m->req_ids.size(), 4u);
  EXPECT_FALSE(allows(*m, 1, id("}]")));  // its own row refuses the draft: verification stops there
  EXPECT_FALSE(all_allowed(*m, 1));
  EXPECT_TRUE(all_allowed(*m, 2));
  EXPECT_TRUE(all_allowed(*m, 3));
  // Nothing of the walk stays: the next fill (nothing accepted) is the grammar's start again.
  auto next = fill("r", {});
  ASSERT_NE(next, nullptr);
  EXPECT_TRUE(allows(*next, 0, id("ab")));
}

// ignore_eos: the output goes on after the grammar's stop token, which the matcher accepted and so
// terminated; every later position allows only the stop tokens (as plain decoding's masks do).
TEST_F(StructuredOutputManagerTest, PositionsAfterAnAcceptedStopTokenAllowOnlyStopTokens) {
  add("r");
  const int32_t eos = tiny_tokenizer().eos_id();
  auto m = fill("r", {id("ab"), id("12"), eos, eos, id("x")});
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(m->req_ids.size(), 6u);
  for (size_t r = 2; r < 6; ++r) {
    EXPECT_TRUE(allows(*m, r, eos)) << r;
    EXPECT_FALSE(allows(*m, r, id("x"))) << r;
    EXPECT_FALSE(allows(*m, r, id("ab"))) << r;
  }
}

TEST_F(StructuredOutputManagerTest, AReasoningRequestIsConstrainedFromThePositionAfterItsReasoningEnds) {
  add("r", {id("}]")});
  EXPECT_EQ(fill("r", {id("x"), id("y")}), nullptr);  // still reasoning through every position
  auto m = fill("r", {id("x"), id("}]"), id("ab")});
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->positions, (std::vector<int32_t>{2, 3}));
  EXPECT_TRUE(allows(*m, 0, id("ab")));
  EXPECT_FALSE(allows(*m, 0, id("x")));
  EXPECT_TRUE(allows(*m, 1, id("12")));
  // The step accepted only "x": still reasoning, so the next step's rows wait for "}]" again.
  fold("r", {id("x")});
  EXPECT_EQ(fill("r", {}), nullptr);
  fold("r", {id("}]"), id("ab")});
  auto after = fill("r", {});
  ASSERT_NE(after, nullptr);
  EXPECT_TRUE(allows(*after, 0, id("12")));
}

}  // namespace
}  // namespace kvasir
