// Work balancing for FlashInfer's SM90 prefill: every (query head, sequence, query tile) is one
// work item; items are dealt, most expensive sequences first and each sequence's last (longest
// causal) tile first, to whichever CTA has the least estimated work so far. The cost model is
// FlashInfer's: 2 * tile rows + keys the tile sees (causal: up to its last query's position).
#include "backend/cuda/attention_prefill_flashinfer_plan.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <utility>

#include "backend/cuda/staging_version.h"
#include "common/check.h"

namespace kvasir::cuda {
namespace {

constexpr int64_t kAlignInts = 4;  // 16 bytes

int64_t align_up(int64_t n) { return (n + kAlignInts - 1) / kAlignInts * kAlignInts; }

int ceil_div(int a, int b) { return (a + b - 1) / b; }

}  // namespace

int flashinfer_prefill_cta_tile_q(int head_dim) { return head_dim == 64 ? 192 : 128; }

int64_t flashinfer_plan_field_offset(FlashInferPlanField f, int num_ctas, int64_t num_works) {
  const int i = static_cast<int>(f);
  if (i == 0) return 0;
  return align_up(num_ctas + 1) + static_cast<int64_t>(i - 1) * align_up(num_works);
}

int64_t FlashInferPrefillPlan::field_offset(FlashInferPlanField f) const {
  return flashinfer_plan_field_offset(f, num_ctas, num_works);
}

void plan_flashinfer_prefill(const FlashInferPrefillPlanInput& in, FlashInferPrefillPlan& out) {
  KVASIR_CHECK_MSG(in.num_ctas > 0 && in.num_heads > 0 && in.num_seqs >= 0,
                   "FlashInfer prefill plan: needs CTAs, heads and a sequence count");
  const int tile_q = flashinfer_prefill_cta_tile_q(in.head_dim);
  using Seq = FlashInferPrefillPlan::Scratch::Seq;
  using Work = FlashInferPrefillPlan::Scratch::Work;
  std::vector<Seq>& seqs = out.scratch.seqs;
  seqs.clear();
  for (int s = 0; s < in.num_seqs; ++s) {
    const int qo_len = in.query_start_loc[s + 1] - in.query_start_loc[s], kv_len = in.seq_lens[s];
    KVASIR_CHECK_MSG(qo_len >= 0 && kv_len >= qo_len,
                     "FlashInfer prefill plan: a sequence has fewer keys than queries or a negative query count");
    if (qo_len >= in.min_query_len) seqs.push_back({s, qo_len, kv_len});
  }
  // Longest contexts first; equal lengths in step order, so the plan is deterministic.
  std::sort(seqs.begin(), seqs.end(),
            [](const Seq& a, const Seq& b) { return a.kv_len != b.kv_len ? a.kv_len > b.kv_len : a.index < b.index; });

  int64_t works_per_head = 0;
  for (const Seq& q : seqs) works_per_head += ceil_div(q.qo_len, tile_q);
  const int64_t num_works = works_per_head * in.num_heads;
  const int num_ctas = in.num_ctas;

  // Deal every item to the least-loaded CTA (a min-heap on (cost, CTA): ties go to the lower CTA).
  std::vector<Work>& works = out.scratch.works;
  works.clear();
  auto& heap = out.scratch.heap;
  heap.clear();
  for (int c = 0; c < num_ctas; ++c) heap.push_back({0.0, c});
  const auto later = std::greater<std::pair<double, int32_t>>();
  std::make_heap(heap.begin(), heap.end(), later);
  for (int h = 0; h < in.num_heads; ++h) {
    for (size_t i = 0; i < seqs.size(); ++i) {
      const Seq& q = seqs[i];
      const int tiles = ceil_div(q.qo_len, tile_q);
      for (int t = tiles - 1; t >= 0; --t) {
        // Keys seen by the tile's last query (queries sit at the end of the keys, causal).
        const int kv_end = t + 1 == tiles ? q.kv_len : std::min(q.kv_len - q.qo_len + (t + 1) * tile_q, q.kv_len);
        std::pop_heap(heap.begin(), heap.end(), later);
        auto& least = heap.back();
        least.first += 2.0 * tile_q + kv_end;
        works.push_back({t, h, static_cast<int32_t>(i), least.second});
        std::push_heap(heap.begin(), heap.end(), later);
      }
    }
  }

  // Group by CTA, keeping each CTA's dealing order (a counting sort).
  out.num_ctas = num_ctas;
  out.num_works = num_works;
  out.data.assign(static_cast<size_t>(out.field_offset(FlashInferPlanField::kNumFields)), 0);
  int32_t* indptr = out.data.data();
  for (const Work& w : works) ++indptr[w.cta + 1];
  std::partial_sum(indptr, indptr + num_ctas + 1, indptr);
  std::vector<int32_t>& next = out.scratch.next;
  next.assign(indptr, indptr + num_ctas);
  auto field = [&](FlashInferPlanField f) { return out.data.data() + out.field_offset(f); };
  int32_t* tiles = field(FlashInferPlanField::kQoTileIndices);
  int32_t* qo_indptr = field(FlashInferPlanField::kQoIndptr);
  int32_t* kv_indptr = field(FlashInferPlanField::kKvIndptr);
  int32_t* qo_lens = field(FlashInferPlanField::kQoLens);
  int32_t* kv_lens = field(FlashInferPlanField::kKvLens);
  int32_t* heads = field(FlashInferPlanField::kHeadIndices);
  int32_t* batch = field(FlashInferPlanField::kBatchIndices);
  for (const Work& w : works) {
    const Seq& q = seqs[static_cast<size_t>(w.seq)];
    const int32_t j = next[static_cast<size_t>(w.cta)]++;
    tiles[j] = w.tile;
    qo_indptr[j] = in.query_start_loc[q.index];
    kv_indptr[j] = q.index * in.max_blocks_per_seq;
    qo_lens[j] = q.qo_len;
    kv_lens[j] = q.kv_len;
    heads[j] = w.head;
    batch[j] = q.index;
  }
}

void FlashInferPlanCache::key_of(const FlashInferPrefillPlanInput& in, std::vector<int32_t>& key) {
  key.clear();
  key.insert(key.end(), {in.num_seqs, in.max_blocks_per_seq, in.num_heads, in.head_dim, in.num_ctas, in.min_query_len});
  key.insert(key.end(), in.query_start_loc, in.query_start_loc + in.num_seqs + 1);
  key.insert(key.end(), in.seq_lens, in.seq_lens + in.num_seqs);
}

const FlashInferPrefillPlan& FlashInferPlanCache::get(const FlashInferPrefillPlanInput& in) {
  key_of(in, key_);
  for (Entry& e : entries_) {
    if (e.key == key_) return e.plan;
  }
  Entry& e = entries_[next_];
  next_ = (next_ + 1) % kEntries;
  e.key.swap(key_);
  plan_flashinfer_prefill(in, e.plan);
  e.plan.version = next_staging_version();
  ++plans_made_;
  return e.plan;
}

}  // namespace kvasir::cuda
