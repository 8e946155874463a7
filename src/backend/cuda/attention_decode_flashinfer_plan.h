// The host-side plan of FlashInfer's split-KV paged decode (attention_decode_flashinfer.h), for a
// pure decode step (one query per sequence): which (sequence, KV chunk) each of a FIXED number of
// CTA rows (the grid's x; y is the kv head) takes, and the page arrays FlashInfer reads our block
// table through. Sized like FlashInfer's DecodePlan in its CUDA-graph mode: the grid is always
// num_works rows (the device's resident CTAs over the kv heads), every sequence's keys are cut
// into chunks of one common size (the smallest multiple of a page, from min_chunk_tokens up, that
// leaves at most num_works chunks in all), rows past the last chunk are masked off, and the
// chunks' partial results always go through the merge. So the launch shape depends only on the
// sequence count and the kv heads, never on lengths: a captured decode graph replays with the
// plan the step staged. Plain C++: tested on the CPU. Must not touch the device or know about
// requests.
#pragma once

#include <cstdint>
#include <vector>

namespace kvasir::cuda {

// The arrays of the plan, in the order they sit in FlashInferDecodePlan::data (each 16-byte aligned).
enum class FlashInferDecodeField {
  kPageIndptr,      // [num_seqs + 1]: s * max_blocks_per_seq: sequence s's pages are its block-table row
  kLastPageLen,     // [num_seqs]: seq_len - (max_blocks_per_seq - 1) * block_size (see below)
  kOIndptr,         // [num_seqs + 1]: sequence s's chunks are rows [o_indptr[s], o_indptr[s + 1])
  kChunkTokens,     // [1]: keys per chunk (a multiple of block_size)
  kRequestIndices,  // [num_works]: the row's sequence
  kKvTileIndices,   // [num_works]: the row's chunk of that sequence
  kValidMask,       // [num_works] bytes (bool): whether the row has a chunk
  kNumFields,
};

// FlashInfer's paged KV view reads a sequence's length as (indptr[s + 1] - indptr[s] - 1) *
// page_size + last_page_len[s] in 32-bit unsigned arithmetic and its pages as
// indices[indptr[s] ...]. With indptr[s] = s * max_blocks_per_seq the block table itself serves
// as the page list (no copy); last_page_len then holds seq_len - (max_blocks_per_seq - 1) *
// block_size, negative for a short sequence, and the unsigned sum wraps back to seq_len exactly.

// The default shortest chunk, in tokens (the backend's KVASIR_CUDA_DECODE_FI_MIN_CHUNK, cuda_tuning.h).
inline constexpr int kFlashInferDecodeMinChunkTokens = 16;

struct FlashInferDecodePlanInput {
  const int32_t* seq_lens = nullptr;  // [num_seqs] keys of each sequence (its new token included)
  int num_seqs = 0;
  int max_blocks_per_seq = 0;
  int block_size = 0;
  int num_works = 0;          // CTA rows of the launch (the grid's x)
  int min_chunk_tokens = kFlashInferDecodeMinChunkTokens;  // chunks are never shorter (rounded up to a block)
};

struct FlashInferDecodePlan {
  int num_seqs = 0;
  int num_works = 0;
  int chunks = 0;        // rows that hold a chunk (the rest are masked)
  int chunk_tokens = 0;  // keys per chunk
  std::vector<int32_t> data;  // the fields above, each starting at field_offset()
  // Set anew each time the cache re-plans this storage (staging_version.h): a step that staged the
  // entry's earlier plan must not be handed that copy for the new one.
  uint64_t version = 0;
  int64_t field_offset(FlashInferDecodeField f) const;
  const int32_t* field(FlashInferDecodeField f) const { return data.data() + field_offset(f); }
};

// int32 elements from the plan's start to the field, for these counts (the device side uses the same).
int64_t flashinfer_decode_field_offset(FlashInferDecodeField f, int num_seqs, int num_works);

// Bytes of the kernel's partial results for num_works rows: bf16 outputs [num_works, num_heads,
// head_dim], then float log-sum-exps [num_works, num_heads] (16-byte aligned: head_dim % 8 == 0).
inline int64_t flashinfer_decode_partial_bytes(int num_works, int num_heads, int head_dim) {
  const int64_t rows = static_cast<int64_t>(num_works) * num_heads;
  return rows * head_dim * 2 + rows * 4;
}

// Builds the plan in place (storage reused). A sequence with no keys, more keys than its table
// holds, or more sequences than rows is a broken invariant: it aborts (the backend checks the
// sequence count before it asks).
void plan_flashinfer_decode(const FlashInferDecodePlanInput& in, FlashInferDecodePlan& out);

// The plans of the last few distinct inputs (as FlashInferPlanCache: every layer of a step asks
// with the same input, and a staged host array must not change within a step).
class FlashInferDecodePlanCache {
 public:
  static constexpr int kEntries = 4;
  const FlashInferDecodePlan& get(const FlashInferDecodePlanInput& in);
  int64_t plans_made() const { return plans_made_; }

 private:
  struct Entry {
    std::vector<int32_t> key;  // the input, flattened (empty: unused)
    FlashInferDecodePlan plan;
  };
  static void key_of(const FlashInferDecodePlanInput& in, std::vector<int32_t>& key);
  Entry entries_[kEntries];
  int next_ = 0;
  int64_t plans_made_ = 0;
  std::vector<int32_t> key_;
};

}  // namespace kvasir::cuda
