// The FlashInfer prefill plan on the CPU: every (head, sequence, query tile) is dealt exactly once
// with the right sequence fields, decode rows are left to the decode kernel, the CTA slices are
// contiguous, and the dealing keeps CTA loads within one work item of each other.
#include "backend/cuda/attention_prefill_flashinfer_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

namespace kvasir::cuda {
namespace {

using F = FlashInferPlanField;

struct Step {
  std::vector<int32_t> query_start_loc, seq_lens;
  int max_blocks_per_seq = 64;
};

Step make_step(const std::vector<int>& query_lens, const std::vector<int>& seq_lens, int max_blocks = 64) {
  Step s;
  s.query_start_loc.push_back(0);
  for (int q : query_lens) s.query_start_loc.push_back(s.query_start_loc.back() + q);
  s.seq_lens.assign(seq_lens.begin(), seq_lens.end());
  s.max_blocks_per_seq = max_blocks;
  return s;
}

FlashInferPrefillPlan plan_of(const Step& s, int heads, int head_dim, int ctas) {
  FlashInferPrefillPlanInput in;
  in.query_start_loc = s.query_start_loc.data();
  in.seq_lens = s.seq_lens.data();
  in.num_seqs = static_cast<int>(s.seq_lens.size());
  in.max_blocks_per_seq = s.max_blocks_per_seq;
  in.num_heads = heads;
  in.head_dim = head_dim;
  in.num_ctas = ctas;
  FlashInferPrefillPlan p;
  plan_flashinfer_prefill(in, p);
  return p;
}

double cost_of(const FlashInferPrefillPlan& p, int64_t j, int tile_q) {
  const int t = p.field(F::kQoTileIndices)[j], qo = p.field(F::kQoLens)[j], kv = p.field(F::kKvLens)[j];
  const int tiles = (qo + tile_q - 1) / tile_q;
  const int end = t + 1 == tiles ? kv : std::min(kv - qo + (t + 1) * tile_q, kv);
  return 2.0 * tile_q + end;
}

// Checks the plan against the step: each (head, prefill sequence, tile) once, fields right.
void expect_covers(const FlashInferPrefillPlan& p, const Step& s, int heads, int head_dim) {
  const int tile_q = flashinfer_prefill_cta_tile_q(head_dim);
  const int32_t* indptr = p.field(F::kWorkIndptr);
  ASSERT_EQ(indptr[0], 0);
  for (int c = 0; c < p.num_ctas; ++c) ASSERT_LE(indptr[c], indptr[c + 1]);
  ASSERT_EQ(indptr[p.num_ctas], p.num_works);
  std::map<std::tuple<int, int, int>, int> seen;  // (head, seq, tile) -> count
  for (int64_t j = 0; j < p.num_works; ++j) {
    const int seq = p.field(F::kBatchIndices)[j];
    ASSERT_GE(seq, 0);
    ASSERT_LT(seq, static_cast<int>(s.seq_lens.size()));
    const int qo_len = s.query_start_loc[seq + 1] - s.query_start_loc[seq];
    EXPECT_EQ(p.field(F::kQoIndptr)[j], s.query_start_loc[seq]);
    EXPECT_EQ(p.field(F::kKvIndptr)[j], seq * s.max_blocks_per_seq);
    EXPECT_EQ(p.field(F::kQoLens)[j], qo_len);
    EXPECT_EQ(p.field(F::kKvLens)[j], s.seq_lens[seq]);
    const int tile = p.field(F::kQoTileIndices)[j], head = p.field(F::kHeadIndices)[j];
    EXPECT_GE(tile, 0);
    EXPECT_LT(tile * tile_q, qo_len);
    EXPECT_GE(head, 0);
    EXPECT_LT(head, heads);
    ++seen[{head, seq, tile}];
  }
  int64_t expected = 0;
  for (size_t seq = 0; seq < s.seq_lens.size(); ++seq) {
    const int qo_len = s.query_start_loc[seq + 1] - s.query_start_loc[seq];
    if (qo_len < 2) continue;
    for (int h = 0; h < heads; ++h) {
      for (int t = 0; t * tile_q < qo_len; ++t) {
        EXPECT_EQ((seen[{h, static_cast<int>(seq), t}]), 1) << "head " << h << " seq " << seq << " tile " << t;
        ++expected;
      }
    }
  }
  EXPECT_EQ(p.num_works, expected);
}

TEST(FlashInferPrefillPlan, OneLongPromptCoversEveryHeadAndTile) {
  const Step s = make_step({32000}, {32000}, 2000);
  const FlashInferPrefillPlan p = plan_of(s, 32, 128, 132);
  EXPECT_EQ(p.num_works, 32 * 250);
  expect_covers(p, s, 32, 128);
}

TEST(FlashInferPrefillPlan, HeadDim64UsesTilesOf192Rows) {
  EXPECT_EQ(flashinfer_prefill_cta_tile_q(64), 192);
  EXPECT_EQ(flashinfer_prefill_cta_tile_q(128), 128);
  EXPECT_EQ(flashinfer_prefill_cta_tile_q(256), 128);
  const Step s = make_step({193}, {193});
  const FlashInferPrefillPlan p = plan_of(s, 4, 64, 8);
  EXPECT_EQ(p.num_works, 4 * 2);
  expect_covers(p, s, 4, 64);
}

TEST(FlashInferPrefillPlan, DecodeRowsAreLeftToTheDecodeKernel) {
  // A mixed step: two decodes, a chunk late in a long context, a fresh prompt, an empty row.
  const Step s = make_step({1, 300, 1, 7, 0}, {50, 9000, 4000, 7, 12}, 600);
  const FlashInferPrefillPlan p = plan_of(s, 8, 128, 16);
  expect_covers(p, s, 8, 128);
  for (int64_t j = 0; j < p.num_works; ++j) {
    const int seq = p.field(F::kBatchIndices)[j];
    EXPECT_TRUE(seq == 1 || seq == 3) << "sequence " << seq << " is not a prefill";
  }
}

TEST(FlashInferPrefillPlan, NoPrefillGivesAnEmptyPlan) {
  const Step s = make_step({1, 1}, {10, 20});
  const FlashInferPrefillPlan p = plan_of(s, 8, 128, 132);
  EXPECT_EQ(p.num_works, 0);
  for (int c = 0; c <= p.num_ctas; ++c) EXPECT_EQ(p.field(F::kWorkIndptr)[c], 0);
}

TEST(FlashInferPrefillPlan, CtaLoadsStayWithinOneWorkItemOfEachOther) {
  const Step s = make_step({4096, 1000, 37, 2500}, {4096, 17000, 37, 2600}, 1100);
  const int ctas = 132, heads = 32, tile_q = 128;
  const FlashInferPrefillPlan p = plan_of(s, heads, 128, ctas);
  expect_covers(p, s, heads, 128);
  std::vector<double> load(ctas, 0.0);
  double max_item = 0.0;
  const int32_t* indptr = p.field(F::kWorkIndptr);
  for (int c = 0; c < ctas; ++c) {
    for (int j = indptr[c]; j < indptr[c + 1]; ++j) {
      const double w = cost_of(p, j, tile_q);
      load[c] += w;
      max_item = std::max(max_item, w);
    }
  }
  const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
  EXPECT_LE(*hi - *lo, max_item) << "greedy dealing lets no CTA fall a whole item behind";
}

TEST(FlashInferPrefillPlan, FieldsAre16ByteAlignedAndSized) {
  const Step s = make_step({5, 130}, {5, 400});
  const FlashInferPrefillPlan p = plan_of(s, 3, 256, 7);
  for (int f = 0; f < static_cast<int>(F::kNumFields); ++f) {
    EXPECT_EQ(p.field_offset(static_cast<F>(f)) % 4, 0) << "field " << f;
  }
  EXPECT_EQ(static_cast<int64_t>(p.data.size()), p.field_offset(F::kNumFields));
  EXPECT_GE(p.field_offset(F::kQoTileIndices), p.num_ctas + 1);
  expect_covers(p, s, 3, 256);
}

TEST(FlashInferPrefillPlan, IsDeterministic) {
  const Step s = make_step({700, 700, 3}, {900, 700, 800});
  EXPECT_EQ(plan_of(s, 16, 128, 132).data, plan_of(s, 16, 128, 132).data);
}

// Every layer of a step asks with the same input: one plan, the same array (so the step stages
// it once); a second input gets its own entry and the first one's array is left alone.
TEST(FlashInferPrefillPlan, CacheReusesAPlanAndKeepsOtherInputsApart) {
  const Step a = make_step({300, 1}, {300, 40}), b = make_step({300, 1}, {301, 40});
  FlashInferPrefillPlanInput ia, ib;
  for (auto [in, s] : {std::pair{&ia, &a}, std::pair{&ib, &b}}) {
    in->query_start_loc = s->query_start_loc.data();
    in->seq_lens = s->seq_lens.data();
    in->num_seqs = 2;
    in->max_blocks_per_seq = s->max_blocks_per_seq;
    in->num_heads = 8;
    in->head_dim = 128;
    in->num_ctas = 16;
  }
  FlashInferPlanCache cache;
  const FlashInferPrefillPlan& pa = cache.get(ia);
  const std::vector<int32_t> pa_data = pa.data;
  const int32_t* pa_ptr = pa.data.data();
  EXPECT_EQ(&cache.get(ia), &pa);
  EXPECT_EQ(cache.plans_made(), 1);
  const FlashInferPrefillPlan& pb = cache.get(ib);
  EXPECT_NE(&pb, &pa);
  EXPECT_EQ(cache.plans_made(), 2);
  EXPECT_EQ(pa.data.data(), pa_ptr);
  EXPECT_EQ(pa.data, pa_data);
  EXPECT_EQ(pb.field(F::kKvLens)[0], 301);
  EXPECT_EQ(&cache.get(ia), &pa);
  EXPECT_EQ(cache.plans_made(), 2);
}

TEST(FlashInferPrefillPlanDeathTest, MoreQueriesThanKeysAborts) {
  const Step s = make_step({10}, {5});
  EXPECT_DEATH(plan_of(s, 4, 128, 8), "fewer keys than queries");
}

}  // namespace
}  // namespace kvasir::cuda
