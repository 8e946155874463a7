// The host-side plan of FlashInfer's SM90 paged prefill (attention_prefill_flashinfer.h): which
// (query tile, query head, sequence) work items each persistent CTA walks, balanced by estimated
// cost (longest-processing-time first over a min-heap of CTA loads, as FlashInfer's
// PrefillSM90Plan does), computed from the step's query lengths and sequence lengths the
// backend already holds on the host, into one int32 array the step stages with its other inputs
// (no workspace of its own, no extra copy or device sync). Plain C++: tested on the CPU.
// Must not touch the device or know about requests.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace kvasir::cuda {

// The arrays of the plan, in the order they sit in FlashInferPrefillPlan::data.
enum class FlashInferPlanField {
  kWorkIndptr,     // [num_ctas + 1]: CTA c walks works [work_indptr[c], work_indptr[c + 1])
  kQoTileIndices,  // [num_works]: query tile of the sequence (tile t: queries t*cta_tile_q ...)
  kQoIndptr,       // [num_works]: the sequence's first query row in q / out
  kKvIndptr,       // [num_works]: the sequence's first page in kv_indices (s * max_blocks_per_seq)
  kQoLens,         // [num_works]: the sequence's query count
  kKvLens,         // [num_works]: the sequence's key count (context + queries)
  kHeadIndices,    // [num_works]: query head
  kBatchIndices,   // [num_works]: sequence index in the step
  kNumFields,
};

// The backend gives a call to FlashInfer's prefill only when some sequence has this many queries
// (cuda_ops.cpp says why); shorter multi-token rows stay on our kernel.
inline constexpr int kFlashInferMinQueryLen = 64;

// Query rows per CTA tile of FlashInfer's SM90 paged prefill for this head size (its kernel traits:
// 192 at 64, else 128); the plan's tiles must match the kernel's.
int flashinfer_prefill_cta_tile_q(int head_dim);

struct FlashInferPrefillPlanInput {
  const int32_t* query_start_loc = nullptr;  // [num_seqs + 1] query rows of each sequence
  const int32_t* seq_lens = nullptr;         // [num_seqs] keys of each sequence (context + queries)
  int num_seqs = 0;
  int max_blocks_per_seq = 0;
  int num_heads = 0;
  int head_dim = 0;
  int num_ctas = 0;  // persistent CTAs: the device's SM count
  // Sequences with at most this many queries are left out (the decode kernel takes them).
  int min_query_len = 2;
};

struct FlashInferPrefillPlan {
  int num_ctas = 0;
  int64_t num_works = 0;
  std::vector<int32_t> data;  // the fields above, each starting at field_offset()
  uint64_t version = 0;       // set anew at each re-plan (staging_version.h), as the decode plan's
  // plan_flashinfer_prefill's working storage, kept so that replanning allocates nothing once grown.
  struct Scratch {
    struct Seq {
      int32_t index, qo_len, kv_len;
    };
    struct Work {
      int32_t tile, head, seq, cta;  // seq: index into seqs
    };
    std::vector<Seq> seqs;
    std::vector<Work> works;
    std::vector<std::pair<double, int32_t>> heap;  // (estimated cost so far, CTA)
    std::vector<int32_t> next;
  } scratch;
  // int32 elements from data's start to the field (every field 16-byte aligned).
  int64_t field_offset(FlashInferPlanField f) const;
  const int32_t* field(FlashInferPlanField f) const { return data.data() + field_offset(f); }
};

// Builds the plan in place (out's storage is reused: no allocation once it has grown). A bad input
// (negative lengths, a sequence with more queries than keys) is a broken invariant: it aborts.
void plan_flashinfer_prefill(const FlashInferPrefillPlanInput& in, FlashInferPrefillPlan& out);

// The plans of the last few distinct inputs. Every layer of a step asks with the same input, so a
// step plans once; the step's staging copies a host array once per (address, size), so a plan's
// array is never rewritten while another input is in use: a step may use up to kEntries distinct
// inputs (layers that differ in heads or head size) before the oldest entry is reused.
class FlashInferPlanCache {
 public:
  static constexpr int kEntries = 4;
  // The plan for this input, made now unless one of the entries was made from an equal input.
  const FlashInferPrefillPlan& get(const FlashInferPrefillPlanInput& in);
  int64_t plans_made() const { return plans_made_; }

 private:
  struct Entry {
    std::vector<int32_t> key;  // the input, flattened (empty: unused)
    FlashInferPrefillPlan plan;
  };
  static void key_of(const FlashInferPrefillPlanInput& in, std::vector<int32_t>& key);
  Entry entries_[kEntries];
  int next_ = 0;  // the entry replaced next
  int64_t plans_made_ = 0;
  std::vector<int32_t> key_;  // reused while looking up
};

// Offsets of the fields for these counts (the device side computes the same from num_ctas, num_works).
int64_t flashinfer_plan_field_offset(FlashInferPlanField f, int num_ctas, int64_t num_works);

}  // namespace kvasir::cuda
