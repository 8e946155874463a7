// The FlashInfer decode plan on the CPU: read back the way FlashInfer's decode kernel reads it
// (the paged view's 32-bit length, chunk_start = tile * chunk, clipped to the length), every key
// of every sequence lies in exactly one valid row's chunk; the chunk is the smallest that fits the
// rows; the plan's size never depends on the lengths (a captured graph's staging stays put).
#include "backend/cuda/attention_decode_flashinfer_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace kvasir::cuda {
namespace {

using F = FlashInferDecodeField;

// The plan's input over `lens` (which must outlive it: the input points into it).
FlashInferDecodePlanInput input_of(const std::vector<int32_t>& lens, int max_blocks, int bs, int works,
                                   int min_chunk = kFlashInferDecodeMinChunkTokens) {
  FlashInferDecodePlanInput in;
  in.seq_lens = lens.data();
  in.num_seqs = static_cast<int>(lens.size());
  in.max_blocks_per_seq = max_blocks;
  in.block_size = bs;
  in.num_works = works;
  in.min_chunk_tokens = min_chunk;
  return in;
}

FlashInferDecodePlan plan_of(const std::vector<int32_t>& lens, int max_blocks, int bs, int works, int min_chunk = kFlashInferDecodeMinChunkTokens) {
  FlashInferDecodePlan p;
  plan_flashinfer_decode(input_of(lens, max_blocks, bs, works, min_chunk), p);
  return p;
}

// FlashInfer's paged_kv_t::get_length, in its unsigned 32-bit arithmetic.
uint32_t kernel_length(const FlashInferDecodePlan& p, int s, int bs) {
  const int32_t* indptr = p.field(F::kPageIndptr);
  const int32_t* last = p.field(F::kLastPageLen);
  if (indptr[s + 1] == indptr[s]) return 0;
  return static_cast<uint32_t>(indptr[s + 1] - indptr[s] - 1) * static_cast<uint32_t>(bs) +
         static_cast<uint32_t>(last[s]);
}

// Checks the plan as the kernel and the merge read it; returns the rows in use.
int check_covers(const FlashInferDecodePlan& p, const std::vector<int32_t>& lens, int max_blocks, int bs) {
  const int S = static_cast<int>(lens.size());
  const int chunk = p.field(F::kChunkTokens)[0];
  EXPECT_EQ(chunk, p.chunk_tokens);
  EXPECT_GT(chunk, 0);
  EXPECT_EQ(chunk % bs, 0);
  const int32_t* req = p.field(F::kRequestIndices);
  const int32_t* tile = p.field(F::kKvTileIndices);
  const int32_t* o_indptr = p.field(F::kOIndptr);
  const auto* valid = reinterpret_cast<const uint8_t*>(p.field(F::kValidMask));
  std::vector<std::vector<int>> seen(static_cast<size_t>(S));
  for (int s = 0; s < S; ++s) {
    EXPECT_EQ(kernel_length(p, s, bs), static_cast<uint32_t>(lens[static_cast<size_t>(s)])) << "sequence " << s;
    EXPECT_EQ(p.field(F::kPageIndptr)[s], s * max_blocks);
    seen[static_cast<size_t>(s)].assign(static_cast<size_t>(lens[static_cast<size_t>(s)]), 0);
  }
  EXPECT_EQ(o_indptr[0], 0);
  int rows = 0;
  for (int w = 0; w < p.num_works; ++w) {
    if (!valid[w]) {
      EXPECT_EQ(req[w], 0);
      EXPECT_EQ(tile[w], 0);
      continue;
    }
    EXPECT_EQ(w, rows) << "valid rows come first";
    ++rows;
    const int s = req[w];
    EXPECT_GE(w, o_indptr[s]);
    EXPECT_LT(w, o_indptr[s + 1]);
    EXPECT_EQ(tile[w], w - o_indptr[s]) << "a sequence's chunks are its rows, in order";
    const int len = lens[static_cast<size_t>(s)];
    const int begin = tile[w] * chunk, end = std::min((tile[w] + 1) * chunk, len);
    EXPECT_LT(begin, end) << "a valid row with no keys";
    for (int k = begin; k < end; ++k) ++seen[static_cast<size_t>(s)][static_cast<size_t>(k)];
  }
  EXPECT_EQ(rows, p.chunks);
  EXPECT_EQ(o_indptr[S], rows);
  EXPECT_LE(rows, p.num_works);
  for (int s = 0; s < S; ++s) {
    for (int k = 0; k < lens[static_cast<size_t>(s)]; ++k) {
      EXPECT_EQ(seen[static_cast<size_t>(s)][static_cast<size_t>(k)], 1) << "sequence " << s << " key " << k;
    }
  }
  return rows;
}

int64_t rows_for(const std::vector<int32_t>& lens, int bs, int chunk_tokens) {
  int64_t rows = 0;
  for (int l : lens) rows += ((l + bs - 1) / bs * bs + chunk_tokens - 1) / chunk_tokens;
  return rows;
}

TEST(FlashInferDecodePlan, Batch1LongContextsFillTheRows) {
  // 132 rows (an H200's SMs x 8 CTAs over 8 kv heads): 32,000 keys in 16-token blocks.
  for (int len : {8192, 32000, 131072}) {
    const std::vector<int32_t> lens = {len};
    const int max_blocks = 131072 / 16;
    const auto p = plan_of(lens, max_blocks, 16, 132);
    const int rows = check_covers(p, lens, max_blocks, 16);
    EXPECT_LE(rows, 132);
    EXPECT_GE(rows, 100) << "a long context should use most rows (len " << len << ")";
    // The smallest chunk that fits: one block less would need more rows than the launch has.
    EXPECT_GT(rows_for(lens, 16, p.chunk_tokens - 16), 132);
  }
}

TEST(FlashInferDecodePlan, ShortContextsKeepTheMinimumChunk) {
  const std::vector<int32_t> lens = {1, 17, 128, 33};
  const auto p = plan_of(lens, 64, 16, 132, 32);
  check_covers(p, lens, 64, 16);
  EXPECT_EQ(p.chunk_tokens, 32);
  // A minimum below a block rounds up to the block.
  const auto q = plan_of(lens, 64, 16, 132, 1);
  EXPECT_EQ(q.chunk_tokens, 16);
  check_covers(q, lens, 64, 16);
  // The whole table when the context is shorter than the minimum chunk.
  const std::vector<int32_t> one = {5};
  const auto r = plan_of(one, 1, 16, 4, 64);
  EXPECT_EQ(r.chunk_tokens, 16);
  check_covers(r, one, 1, 16);
}

TEST(FlashInferDecodePlan, MixedBatchesBlockSizesAndTightRows) {
  std::mt19937 rng(7);
  for (int bs : {1, 8, 16, 32, 64, 128}) {
    for (int S : {1, 2, 3, 5, 8}) {
      for (int works : {S, S + 1, 33, 66, 132, 264}) {
        std::vector<int32_t> lens(static_cast<size_t>(S));
        const int max_blocks = (20000 + bs - 1) / bs + 3;
        for (auto& l : lens) l = 1 + static_cast<int>(rng() % 20000);
        const auto p = plan_of(lens, max_blocks, bs, works);
        check_covers(p, lens, max_blocks, bs);
        if (p.chunk_tokens > std::max(bs, (kFlashInferDecodeMinChunkTokens + bs - 1) / bs * bs)) {
          EXPECT_GT(rows_for(lens, bs, p.chunk_tokens - bs), works) << "chunk not minimal: bs " << bs << " S " << S;
        }
      }
    }
  }
}

TEST(FlashInferDecodePlan, SizeDependsOnlyOnCounts) {
  const auto a = plan_of({100, 5000, 31}, 800, 16, 132);
  const auto b = plan_of({12000, 1, 2}, 800, 16, 132);
  EXPECT_EQ(a.data.size(), b.data.size());
  EXPECT_NE(a.chunk_tokens, b.chunk_tokens);
  for (int f = 0; f < static_cast<int>(F::kNumFields); ++f) {
    EXPECT_EQ(a.field_offset(static_cast<F>(f)) % 4, 0) << "field " << f << " not 16-byte aligned";
    EXPECT_EQ(a.field_offset(static_cast<F>(f)), flashinfer_decode_field_offset(static_cast<F>(f), 3, 132));
  }
}

TEST(FlashInferDecodePlan, CacheReplansOnlyForNewInputs) {
  FlashInferDecodePlanCache cache;
  std::vector<int32_t> lens = {300, 40};
  const FlashInferDecodePlanInput in = input_of(lens, 64, 16, 66);
  const FlashInferDecodePlan* first = &cache.get(in);
  EXPECT_EQ(&cache.get(in), first);  // every layer of a step: one plan
  EXPECT_EQ(cache.plans_made(), 1);
  lens[1] = 41;
  const FlashInferDecodePlan& next = cache.get(in);
  EXPECT_NE(&next, first);
  EXPECT_EQ(cache.plans_made(), 2);
  check_covers(next, lens, 64, 16);
  lens[1] = 40;
  EXPECT_EQ(&cache.get(in), first);  // still cached
  EXPECT_EQ(cache.plans_made(), 2);
}

// A re-planned entry keeps its storage (same address, same size for the same counts) but takes a
// new version: what keeps the step queue from serving it from the copy staged for its old plan.
TEST(FlashInferDecodePlan, ReplannedEntryTakesANewVersion) {
  FlashInferDecodePlanCache cache;
  std::vector<int32_t> lens = {10, 17};
  const FlashInferDecodePlanInput in = input_of(lens, 8, 16, 1056);
  const FlashInferDecodePlan* oldest = &cache.get(in);
  const int32_t* storage = oldest->data.data();
  const uint64_t version = oldest->version;
  EXPECT_NE(version, 0u);
  EXPECT_EQ(cache.get(in).version, version);  // a hit keeps it
  for (int i = 1; i <= FlashInferDecodePlanCache::kEntries; ++i) {
    lens[0] = 10 + i;
    const FlashInferDecodePlan& p = cache.get(in);
    EXPECT_NE(p.version, version);
  }
  // The last get re-planned the oldest entry in place.
  EXPECT_EQ(cache.plans_made(), FlashInferDecodePlanCache::kEntries + 1);
  EXPECT_EQ(&cache.get(in), oldest);
  EXPECT_EQ(oldest->data.data(), storage);
  EXPECT_NE(oldest->version, version);
  check_covers(*oldest, lens, 8, 16);
}

TEST(FlashInferDecodePlanDeathTest, BrokenInputsAbort) {
  EXPECT_DEATH(plan_of({0}, 4, 16, 8), "no keys");
  EXPECT_DEATH(plan_of({65}, 4, 16, 8), "more keys than its block table");
  EXPECT_DEATH(plan_of({10, 10, 10}, 4, 16, 2), "fewer CTA rows than sequences");
}

}  // namespace
}  // namespace kvasir::cuda
