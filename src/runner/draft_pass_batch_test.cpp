// DraftPassBatch on plain arrays: the multi-token layout without bucket padding; on a backend that
// pads, short runs become one-query rows padded to the decode bucket (ids 0, slot -1, the null
// block, the first token's tag, samples of row 0) with a power-of-two block table, capped by the
// workspace; a run longer than kMaxOneQueryRun keeps the whole pass multi-token.
#include "runner/draft_pass_batch.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvasir {
namespace {

BackendCapabilities padding_caps() {
  BackendCapabilities c;
  c.decode_batch_buckets = true;
  c.exact_decode_buckets_up_to = 2;
  return c;
}

std::vector<int32_t> ints(const int32_t* p, int n) { return std::vector<int32_t>(p, p + n); }

// Sequence a: blocks {7, 3, 9}, tokens at indices 8..10 (positions 20..22); b: blocks {5}, tokens
// at indices 0..1 (positions 40..41). Both sample their last token.
void add_two(DraftPassBatch& b, const std::vector<int32_t>& blocks_a, const std::vector<int32_t>& blocks_b) {
  b.begin_sequence(blocks_a);
  for (int j = 0; j < 3; ++j) b.add_token(100 + j, 20 + j, 8 + j, 50 + j);
  b.end_sequence();
  EXPECT_EQ(b.sample_last_token(), 0);
  b.begin_sequence(blocks_b);
  for (int j = 0; j < 2; ++j) b.add_token(200 + j, 40 + j, j, 60 + j);
  b.end_sequence();
  EXPECT_EQ(b.sample_last_token(), 1);
}

TEST(DraftPassBatch, WithoutBucketsSequencesStayMultiTokenQueries) {
  DraftPassBatch b(BackendCapabilities{}, 4, 64, 8);
  const std::vector<int32_t> blocks_a = {7, 3, 9}, blocks_b = {5};
  add_two(b, blocks_a, blocks_b);
  const ForwardBatch& f = b.build();
  EXPECT_FALSE(b.one_query_rows());
  ASSERT_EQ(f.num_tokens, 5);
  EXPECT_EQ(ints(f.input_ids, 5), (std::vector<int32_t>{100, 101, 102, 200, 201}));
  EXPECT_EQ(ints(f.positions, 5), (std::vector<int32_t>{20, 21, 22, 40, 41}));
  EXPECT_EQ(std::vector<int64_t>(f.attn.slot_mapping, f.attn.slot_mapping + 5),
            (std::vector<int64_t>{9 * 4 + 0, 9 * 4 + 1, 9 * 4 + 2, 5 * 4 + 0, 5 * 4 + 1}));
  ASSERT_EQ(f.attn.num_seqs, 2);
  EXPECT_EQ(ints(f.attn.query_start_loc, 3), (std::vector<int32_t>{0, 3, 5}));
  EXPECT_EQ(ints(f.attn.seq_lens, 2), (std::vector<int32_t>{11, 2}));
  EXPECT_EQ(f.attn.max_blocks_per_seq, 3);
  EXPECT_EQ(ints(f.attn.block_tables, 6), (std::vector<int32_t>{7, 3, 9, 5, 0, 0}));
  EXPECT_EQ(ints(b.tags(), 5), (std::vector<int32_t>{50, 51, 52, 60, 61}));
  EXPECT_EQ(b.num_padded_samples(), 2);
  EXPECT_EQ(ints(b.sample_rows(), 2), (std::vector<int32_t>{2, 4}));
}

TEST(DraftPassBatch, ShortRunsBecomePaddedOneQueryRows) {
  DraftPassBatch b(padding_caps(), 4, 64, 8);
  const std::vector<int32_t> blocks_a = {7, 3, 9}, blocks_b = {5};
  add_two(b, blocks_a, blocks_b);
  // A third sequence so three rows sample (a bucket of 4).
  const std::vector<int32_t> blocks_c = {2};
  b.begin_sequence(blocks_c);
  b.add_token(300, 0, 0, 70);
  b.end_sequence();
  EXPECT_EQ(b.sample_last_token(), 2);
  const ForwardBatch& f = b.build();
  EXPECT_TRUE(b.one_query_rows());
  EXPECT_EQ(b.num_tokens(), 6);
  ASSERT_EQ(f.num_tokens, 8);  // 6 tokens padded to the bucket of 8
  ASSERT_EQ(f.attn.num_seqs, 8);
  EXPECT_EQ(f.attn.num_tokens, 8);
  EXPECT_EQ(ints(f.input_ids, 8), (std::vector<int32_t>{100, 101, 102, 200, 201, 300, 0, 0}));
  EXPECT_EQ(ints(f.positions, 8), (std::vector<int32_t>{20, 21, 22, 40, 41, 0, 0, 0}));
  EXPECT_EQ(std::vector<int64_t>(f.attn.slot_mapping, f.attn.slot_mapping + 8),
            (std::vector<int64_t>{36, 37, 38, 20, 21, 8, -1, -1}));
  EXPECT_EQ(ints(f.attn.query_start_loc, 9), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  // Each token's context ends at itself.
  EXPECT_EQ(ints(f.attn.seq_lens, 8), (std::vector<int32_t>{9, 10, 11, 1, 2, 1, 1, 1}));
  EXPECT_EQ(f.attn.max_blocks_per_seq, 4);  // 3 blocks, a power of two wide
  EXPECT_EQ(ints(f.attn.block_tables, 32), (std::vector<int32_t>{7, 3, 9, 0, 7, 3, 9, 0, 7, 3, 9, 0, 5, 0, 0, 0,
                                                                 5, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(ints(b.tags(), 8), (std::vector<int32_t>{50, 51, 52, 60, 61, 70, 50, 50}));
  EXPECT_EQ(b.num_samples(), 3);
  EXPECT_EQ(b.num_padded_samples(), 4);
  EXPECT_EQ(ints(b.sample_rows(), 4), (std::vector<int32_t>{2, 4, 5, 0}));
}

TEST(DraftPassBatch, PaddingStopsAtTheWorkspace) {
  DraftPassBatch b(padding_caps(), 4, /*max_tokens=*/6, /*max_sample_rows=*/2);
  const std::vector<int32_t> blocks_a = {7, 3, 9}, blocks_b = {5};
  add_two(b, blocks_a, blocks_b);
  const ForwardBatch& f = b.build();
  EXPECT_TRUE(b.one_query_rows());
  EXPECT_EQ(f.num_tokens, 6);  // the bucket of 8 capped by the workspace
  EXPECT_EQ(b.num_padded_samples(), 2);
}

TEST(DraftPassBatch, ALongRunKeepsThePassMultiToken) {
  DraftPassBatch b(padding_caps(), 4, 64, 8);
  const std::vector<int32_t> blocks = {1, 2, 3, 4, 5}, blocks_b = {6};
  b.begin_sequence(blocks);
  for (int j = 0; j <= DraftPassBatch::kMaxOneQueryRun; ++j) b.add_token(j, j, j);
  b.end_sequence();
  b.sample_last_token();
  b.begin_sequence(blocks_b);
  b.add_token(9, 0, 0);
  b.end_sequence();
  b.sample_last_token();
  const ForwardBatch& f = b.build();
  EXPECT_FALSE(b.one_query_rows());
  EXPECT_EQ(f.num_tokens, DraftPassBatch::kMaxOneQueryRun + 2);
  EXPECT_EQ(f.attn.num_seqs, 2);
  EXPECT_EQ(f.attn.max_blocks_per_seq, 5);
  EXPECT_EQ(b.num_padded_samples(), 2);
  // clear() starts a new pass.
  b.clear();
  b.begin_sequence(blocks_b);
  b.add_token(9, 1, 1);
  b.end_sequence();
  b.sample_last_token();
  EXPECT_TRUE((b.build(), b.one_query_rows()));
}

}  // namespace
}  // namespace kvasir
