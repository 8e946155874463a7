// The chunk size is the smallest that fits the rows, found by bisection over whole pages as
// FlashInfer's PartitionPagedKVCacheBinarySearchMinNumPagePerBatch does: the fewer and longer the
// chunks, the less the merge reads, and the bisection keeps as many rows busy as the longest
// sequences allow.
#include "backend/cuda/attention_decode_flashinfer_plan.h"

#include <algorithm>
#include <cstring>

#include "backend/cuda/staging_version.h"
#include "common/check.h"

namespace kvasir::cuda {
namespace {

constexpr int64_t kAlignInts = 4;  // 16 bytes

int64_t align_up(int64_t n) { return (n + kAlignInts - 1) / kAlignInts * kAlignInts; }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// int32 elements each field takes (the mask's bytes rounded up to whole ints).
int64_t field_ints(FlashInferDecodeField f, int num_seqs, int num_works) {
  switch (f) {
    case FlashInferDecodeField::kPageIndptr:
    case FlashInferDecodeField::kOIndptr: return num_seqs + 1;
    case FlashInferDecodeField::kLastPageLen: return num_seqs;
    case FlashInferDecodeField::kChunkTokens: return 1;
    case FlashInferDecodeField::kRequestIndices:
    case FlashInferDecodeField::kKvTileIndices: return num_works;
    case FlashInferDecodeField::kValidMask: return ceil_div(num_works, 4);
    case FlashInferDecodeField::kNumFields: break;
  }
  return 0;
}

}  // namespace

int64_t flashinfer_decode_field_offset(FlashInferDecodeField f, int num_seqs, int num_works) {
  int64_t off = 0;
  for (int i = 0; i < static_cast<int>(f); ++i) {
    off += align_up(field_ints(static_cast<FlashInferDecodeField>(i), num_seqs, num_works));
  }
  return off;
}

int64_t FlashInferDecodePlan::field_offset(FlashInferDecodeField f) const {
  return flashinfer_decode_field_offset(f, num_seqs, num_works);
}

void plan_flashinfer_decode(const FlashInferDecodePlanInput& in, FlashInferDecodePlan& out) {
  KVASIR_CHECK_MSG(in.num_seqs > 0 && in.block_size > 0 && in.max_blocks_per_seq > 0,
                   "FlashInfer decode plan: needs sequences, a block size and a block table");
  KVASIR_CHECK_MSG(in.num_works >= in.num_seqs, "FlashInfer decode plan: fewer CTA rows than sequences");
  const int bs = in.block_size, nb = in.max_blocks_per_seq;
  int64_t max_pages = 1;
  for (int s = 0; s < in.num_seqs; ++s) {
    const int len = in.seq_lens[s];
    KVASIR_CHECK_MSG(len >= 1 && static_cast<int64_t>(len) <= static_cast<int64_t>(nb) * bs,
                     "FlashInfer decode plan: a sequence has no keys or more keys than its block table holds");
    max_pages = std::max<int64_t>(max_pages, ceil_div(len, bs));
  }
  auto rows_for = [&](int64_t chunk_pages) {
    int64_t rows = 0;
    for (int s = 0; s < in.num_seqs; ++s) rows += ceil_div(ceil_div(in.seq_lens[s], bs), chunk_pages);
    return rows;
  };
  // Smallest chunk (in pages, at least min_chunk_tokens) whose chunks fit the rows; one chunk per
  // sequence (max_pages) always fits since num_works >= num_seqs.
  int64_t lo = std::min<int64_t>(max_pages, std::max<int64_t>(1, ceil_div(in.min_chunk_tokens, bs))), hi = max_pages;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (rows_for(mid) > in.num_works) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  const int64_t chunk_pages = lo;

  out.num_seqs = in.num_seqs;
  out.num_works = in.num_works;
  out.chunk_tokens = static_cast<int>(chunk_pages * bs);
  out.data.assign(static_cast<size_t>(out.field_offset(FlashInferDecodeField::kNumFields)), 0);
  auto field = [&](FlashInferDecodeField f) { return out.data.data() + out.field_offset(f); };
  int32_t* page_indptr = field(FlashInferDecodeField::kPageIndptr);
  int32_t* last_page_len = field(FlashInferDecodeField::kLastPageLen);
  int32_t* o_indptr = field(FlashInferDecodeField::kOIndptr);
  int32_t* request = field(FlashInferDecodeField::kRequestIndices);
  int32_t* tile = field(FlashInferDecodeField::kKvTileIndices);
  auto* valid = reinterpret_cast<uint8_t*>(field(FlashInferDecodeField::kValidMask));
  field(FlashInferDecodeField::kChunkTokens)[0] = out.chunk_tokens;
  int row = 0;
  for (int s = 0; s < in.num_seqs; ++s) {
    page_indptr[s] = s * nb;
    last_page_len[s] = in.seq_lens[s] - (nb - 1) * bs;
    o_indptr[s] = row;
    const int64_t chunks = ceil_div(ceil_div(in.seq_lens[s], bs), chunk_pages);
    for (int64_t c = 0; c < chunks; ++c, ++row) {
      request[row] = s;
      tile[row] = static_cast<int32_t>(c);
      valid[row] = 1;
    }
  }
  page_indptr[in.num_seqs] = in.num_seqs * nb;
  o_indptr[in.num_seqs] = row;
  out.chunks = row;
  // Masked rows keep sequence 0, chunk 0 (read before the mask is): valid indices, no work.
}

void FlashInferDecodePlanCache::key_of(const FlashInferDecodePlanInput& in, std::vector<int32_t>& key) {
  key.clear();
  key.insert(key.end(), {in.num_seqs, in.max_blocks_per_seq, in.block_size, in.num_works, in.min_chunk_tokens});
  key.insert(key.end(), in.seq_lens, in.seq_lens + in.num_seqs);
}

const FlashInferDecodePlan& FlashInferDecodePlanCache::get(const FlashInferDecodePlanInput& in) {
  key_of(in, key_);
  for (Entry& e : entries_) {
    if (e.key == key_) return e.plan;
  }
  Entry& e = entries_[next_];
  next_ = (next_ + 1) % kEntries;
  e.key.swap(key_);
  plan_flashinfer_decode(in, e.plan);
  e.plan.version = next_staging_version();
  ++plans_made_;
  return e.plan;
}

}  // namespace kvasir::cuda
