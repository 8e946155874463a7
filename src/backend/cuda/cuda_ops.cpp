// The CUDA backend's ops: each Backend call checks its tensors, stages its host inputs and
// appends one OpRecord to the step (cuda_backend_impl.h); execute() turns a record into launches
// when the step is flushed, eagerly or while a CUDA graph is being captured.
#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gguf_kernels.h"
#include "backend/cuda/staging_version.h"
#if KVASIR_HAVE_FLASHINFER
#include "backend/cuda/attention_prefill_flashinfer.h"
#endif
#include "backend/cuda/moe_kernels.h"

namespace kvasir {
namespace {

bool is_dev(const Tensor& t) { return t.device == Device::kCuda; }

}  // namespace

void CudaBackend::embedding(const Tensor& table, const int32_t* ids, int n, float scale, Tensor& out) {
  const bool gguf = cuda::gguf_kernel_type(table.dtype);
  KVASIR_CHECK(is_dev(table) && is_dev(out) && (table.dtype == DType::kBF16 || gguf) && out.dtype == DType::kBF16);
  KVASIR_CHECK(out.cols() == table.cols() && out.rows() >= n);
  if (gguf) {
    // As the CPU: an id outside the table is a caller's bug, caught here rather than read as row 0.
    for (int i = 0; i < n; ++i) KVASIR_CHECK_MSG(ids[i] >= 0 && ids[i] < table.rows(), "embedding: token id out of range");
  }
  cuda::EmbeddingOp& r = queue_->add(OpKind::kEmbedding, true).embedding;
  r.table = table.data;
  r.out = out.data;
  r.ids = queue_->stage(ids, static_cast<size_t>(n) * sizeof(int32_t));
  r.sources = cuda::kNotStaged;
  r.num_tokens = n;
  r.hidden = table.cols();
  r.vocab = table.rows();
  r.scale = scale;
  r.table_dtype = static_cast<int32_t>(table.dtype);
}

void CudaBackend::embedding_fed(const Tensor& table, const int32_t* ids, const int32_t* sources, int n, float scale,
                                Tensor& out) {
  KVASIR_CHECK_MSG(async_.num_issued > 0, "embedding_fed before any sample_async");
  for (int i = 0; i < n; ++i) KVASIR_CHECK_MSG(sources[i] < async_.last_rows, "fed from a row the last step did not sample");
  // Stand-ins of fed tokens are 0, in range: the GGUF table's host check stays as it is.
  embedding(table, ids, n, scale, out);
  cuda::EmbeddingOp& r = queue_->last()->embedding;
  r.sources = queue_->stage(sources, static_cast<size_t>(n) * sizeof(int32_t));
  r.fed = async_.tokens_dev;
}

void CudaBackend::attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionMetadata& m,
                            const AttentionParams& p, Tensor& out) {
  const int heads = static_cast<int>(q.dim(1)), hd = static_cast<int>(q.dim(2));
  const int kv_heads = static_cast<int>(k_cache.dim(2));
  KVASIR_CHECK(heads % kv_heads == 0 && k_cache.dim(3) == hd && k_cache.dim(1) == m.block_size);
  KVASIR_CHECK_MSG(cuda::attention_head_dim_supported(hd), "CUDA attention supports head_dim 64, 128, 256");
  KVASIR_CHECK(q.dtype == DType::kBF16 && out.dtype == DType::kBF16 && v_cache.dtype == k_cache.dtype);
  const cuda::KvCacheType codes = kv_cache_type_of(k_cache.dtype);
  const bool bf16_cache = codes == cuda::KvCacheType::kBf16;
  const bool sinks = p.sinks.data != nullptr;
  KVASIR_CHECK(!sinks || (is_dev(p.sinks) && p.sinks.dtype == DType::kF32 && p.sinks.numel() == heads));
  const int S = m.num_seqs;
  const bool pure_decode = m.num_tokens == S;
  decode_seqs_.clear();
  work_.clear();
  // Prefill rows: FlashInfer's SM90 kernel where it computes exactly this attention (causal, no
  // window, no soft-cap, no sinks; bf16 and the head sizes were checked above; TMA loads of Q need
  // 16-byte aligned rows) and where some sequence has at least kFlashInferMinQueryLen queries, else
  // ours. Decided per call: a model's sliding-window layers keep ours. The length rule keeps short
  // multi-token rows (speculative verification, short prompts) on ours: FlashInfer's tiles are 128
  // or 192 queries of one head, so a few queries would fill a few percent of a tile and every head
  // of a GQA group would read the group's keys again, where our tiles pack the group's heads.
  int max_query_len = 0;
  for (int s = 0; !pure_decode && s < S; ++s) {
    max_query_len = std::max(max_query_len, m.query_start_loc[s + 1] - m.query_start_loc[s]);
  }
  // FP8 caches: ours (FlashInfer's SM90 prefill takes FP8 K/V only with FP8 queries).
  const bool flashinfer = !pure_decode && bf16_cache && flashinfer_prefill_ && max_query_len >= cuda::kFlashInferMinQueryLen &&
                          p.sliding_window <= 0 && p.softcap <= 0.0f && !sinks && cuda::aligned16(q.data) &&
                          cuda::aligned16(out.data);
  const cuda::FlashInferPrefillPlan* fi_plan = nullptr;
  if (!pure_decode) {
    const int tq = cuda::prefill_tokens_per_tile(heads, kv_heads, hd);
    for (int s = 0; s < S; ++s) {
      const int q0 = m.query_start_loc[s], len = m.query_start_loc[s + 1] - q0;
      KVASIR_CHECK(len >= 0 && m.seq_lens[s] >= len);
      if (len == 1) decode_seqs_.push_back(s);
      // Later tiles see more keys: launch them first so the tail of the grid is short.
      for (int b = q0 + ((len - 1) / tq) * tq; !flashinfer && len > 1 && b >= q0; b -= tq) work_.push_back({s, b});
    }
    if (flashinfer) {
      cuda::FlashInferPrefillPlanInput in;
      in.query_start_loc = m.query_start_loc;
      in.seq_lens = m.seq_lens;
      in.num_seqs = S;
      in.max_blocks_per_seq = m.max_blocks_per_seq;
      in.num_heads = heads;
      in.head_dim = hd;
      in.num_ctas = num_sms_;
      fi_plan = &flashinfer_plans_.get(in);
      if (fi_plan->num_works == 0) fi_plan = nullptr;  // every row decodes
    }
    if (fi_plan != nullptr) ++prefill_calls_flashinfer_;
    else if (!work_.empty()) ++prefill_calls_own_;
  }
  const bool has_prefill = fi_plan != nullptr || !work_.empty();
  const int nd = pure_decode ? S : static_cast<int>(decode_seqs_.size());
  // Pure decode steps of a few sequences: FlashInfer's split-KV decode where it takes the call
  // (cuda_decode_flashinfer_ops.cpp), else the plan of attention.cu.
  const cuda::FlashInferDecodePlan* fi_decode =
      pure_decode ? flashinfer_decode_plan(q, k_cache, v_cache, out, m, p) : nullptr;
  const cuda::DecodeSplit split =
      fi_decode != nullptr ? cuda::DecodeSplit{}
                           : cuda::plan_decode_split(nd, heads, kv_heads, hd, m.max_blocks_per_seq, m.block_size, num_sms_, sinks);
  const int64_t partial_bytes = fi_decode != nullptr
                                    ? cuda::flashinfer_decode_partial_bytes(fi_decode->num_works, heads, hd)
                                    : cuda::decode_scratch_floats(nd, heads, hd, split) * 4;
  void* partial = partial_bytes > 0 ? device_scratch(partial_, partial_cap_, static_cast<size_t>(partial_bytes)) : nullptr;
  if (fi_decode != nullptr) ++decode_calls_flashinfer_;
  else if (nd > 0) ++decode_calls_own_;

  // A prefill's launch shape depends on its lengths: such a step is never captured in a graph.
  cuda::AttentionOp& r =
      queue_->add(has_prefill ? OpKind::kPrefillAttention : OpKind::kDecodeAttention, !has_prefill).attention;
  r.q = q.data;
  r.k_cache = k_cache.data;
  r.v_cache = v_cache.data;
  r.out = out.data;
  r.partial = static_cast<float*>(partial);
  r.sinks = sinks ? static_cast<const float*>(p.sinks.data) : nullptr;
  r.query_start_loc = queue_->stage(m.query_start_loc, static_cast<size_t>(S + 1) * sizeof(int32_t));
  r.seq_lens = queue_->stage(m.seq_lens, static_cast<size_t>(S) * sizeof(int32_t));
  r.block_tables = queue_->stage(m.block_tables, static_cast<size_t>(S) * m.max_blocks_per_seq * sizeof(int32_t));
  // decode_seqs_ and work_ are refilled by every call: a new version each, so no later call of the
  // step reuses these copies (StepQueue::stage compares only small arrays).
  r.decode_seqs = decode_seqs_.empty() ? cuda::kNotStaged
                                       : queue_->stage(decode_seqs_.data(), decode_seqs_.size() * sizeof(int32_t),
                                                       cuda::next_staging_version());
  if (fi_plan != nullptr) {
    r.prefill_work = queue_->stage(fi_plan->data.data(), fi_plan->data.size() * sizeof(int32_t), fi_plan->version);
    r.flashinfer_ctas = fi_plan->num_ctas;
    r.num_tokens = m.num_tokens;
  } else {
    r.prefill_work = work_.empty() ? cuda::kNotStaged
                                   : queue_->stage(work_.data(), work_.size() * sizeof(cuda::PrefillWork),
                                                   cuda::next_staging_version());
  }
  r.num_seqs = S;
  r.max_blocks_per_seq = m.max_blocks_per_seq;
  r.block_size = m.block_size;
  r.num_heads = heads;
  r.num_kv_heads = kv_heads;
  r.head_dim = hd;
  r.sliding_window = p.sliding_window;
  r.num_decode = nd;
  r.num_work = fi_plan != nullptr ? fi_plan->num_works : static_cast<int64_t>(work_.size());
  r.num_splits = split.num_splits;
  r.partition_tokens = split.partition_tokens;
  r.all_heads = split.all_heads ? 1 : 0;
  r.decode_plan = cuda::kNotStaged;
  if (fi_decode != nullptr) {
    r.flashinfer_decode_works = fi_decode->num_works;
    r.decode_plan = queue_->stage(fi_decode->data.data(), fi_decode->data.size() * sizeof(int32_t), fi_decode->version);
  }
  // An FP8 cache's key scale multiplies every score (scale x q . (k_scale x code)): folded in here.
  r.scale = bf16_cache ? p.scale : p.scale * k_cache.cache_scale;
  r.softcap = p.softcap;
  r.kv_cache = static_cast<int16_t>(codes);
  r.v_scale = bf16_cache ? 1.0f : v_cache.cache_scale;
}

void CudaBackend::softcap(Tensor& x, float cap) {
  OpRecord& rec = queue_->add(OpKind::kSoftcap, true);
  rec.elem = static_cast<int32_t>(elem_of(x.dtype));
  rec.softcap.x = x.data;
  rec.softcap.numel = x.numel();
  rec.softcap.cap = cap;
}

void CudaBackend::gather_rows(const Tensor& src, const int32_t* rows, int k, Tensor& out) {
  const size_t rb = src.row_bytes();
  KVASIR_CHECK(out.row_bytes() == rb && out.rows() >= k);
  for (int i = 0; i < k; ++i) KVASIR_CHECK(rows[i] >= 0 && rows[i] < src.rows());
  cuda::GatherOp& r = queue_->add(OpKind::kGather, true).gather;
  r.src = src.data;
  r.out = out.data;
  r.rows = queue_->stage(rows, static_cast<size_t>(k) * sizeof(int32_t));
  r.num_rows = k;
  r.row_bytes = static_cast<int64_t>(rb);
  r.src_rows = src.rows();
}

Status CudaBackend::sample(const Tensor& logits, const DeviceSamplingRow* rows, int num_rows, int32_t* out_tokens) {
  bind_device();
  static_assert(sizeof(DeviceSamplingRow) == sizeof(cuda::SamplingRowParams), "sampling row layouts must match");
  if (logits.dtype != DType::kF32 || !is_dev(logits) || logits.rows() < num_rows) {
    return invalid_argument("device sampling needs float32 device logits with a row per request");
  }
  if (num_rows < 0 || num_rows > 65536) return invalid_argument("device sampling: too many rows");
  if (num_rows == 0) return Status();
  void* tokens = device_scratch(tokens_dev_, tokens_cap_, static_cast<size_t>(num_rows) * sizeof(int32_t));
  cuda::SampleOp& r = queue_->add(OpKind::kSample, true).sample;
  r.logits = static_cast<const float*>(logits.data);
  r.tokens = static_cast<int32_t*>(tokens);
  r.params = queue_->stage(rows, static_cast<size_t>(num_rows) * sizeof(DeviceSamplingRow));
  r.num_rows = num_rows;
  r.vocab = logits.cols();
  queue_->flush();
  KVASIR_CUDA_CHECK(cudaMemcpyAsync(tokens_host_, tokens, static_cast<size_t>(num_rows) * sizeof(int32_t),
                                    cudaMemcpyDeviceToHost, stream_));
  queue_->finish();
  for (void* p : retired_) cudaFree(p);
  retired_.clear();
  std::memcpy(out_tokens, tokens_host_, static_cast<size_t>(num_rows) * sizeof(int32_t));
  return Status();
}

Status CudaBackend::sample_async(const Tensor& logits, const DeviceSamplingRow* rows, int num_rows) {
  bind_device();
  if (logits.dtype != DType::kF32 || !is_dev(logits) || logits.rows() < num_rows) {
    return invalid_argument("device sampling needs float32 device logits with a row per request");
  }
  if (num_rows <= 0 || num_rows > kMaxSampleRows) return invalid_argument("device sampling: 1 to 65536 rows");
  if (async_.pending.size() >= 2) return internal_error("a third step left its tokens on the device");
  cuda::SampleOp& r = queue_->add(OpKind::kSample, true).sample;
  r.logits = static_cast<const float*>(logits.data);
  r.tokens = async_.tokens_dev;
  r.params = queue_->stage(rows, static_cast<size_t>(num_rows) * sizeof(DeviceSamplingRow));
  r.num_rows = num_rows;
  r.vocab = logits.cols();
  queue_->flush();
  const int slot = async_.pending.empty() ? 0 : 1 - async_.pending.back().slot;
  KVASIR_CUDA_CHECK(cudaMemcpyAsync(async_.host[slot], async_.tokens_dev, static_cast<size_t>(num_rows) * sizeof(int32_t),
                                    cudaMemcpyDeviceToHost, stream_));
  // The step ends here without a wait: the host goes on to record the next one.
  async_.pending.push_back({queue_->end_step(), slot, num_rows});
  ++async_.num_issued;
  async_.last_rows = num_rows;
  return Status();
}

Status CudaBackend::collect_sampled(int32_t* out_tokens) {
  bind_device();
  if (async_.pending.empty()) return internal_error("collect_sampled without an uncollected sample_async");
  const AsyncSamples::Pending p = async_.pending.front();
  async_.pending.pop_front();
  queue_->complete(p.ticket);
  std::memcpy(out_tokens, async_.host[p.slot], static_cast<size_t>(p.rows) * sizeof(int32_t));
  return Status();
}

Status CudaBackend::sample_and_verify(const Tensor& logits, const DeviceSamplingRow* rows, int num_rows,
                                      const DraftVerifyRow* requests, int num_requests, const int32_t* drafts,
                                      int num_draft_tokens, int32_t* out_tokens, int32_t* out_num_emitted) {
  bind_device();
  static_assert(sizeof(DraftVerifyRow) == sizeof(cuda::DraftVerifyRowParams), "verify row layouts must match");
  if (logits.dtype != DType::kF32 || !is_dev(logits) || logits.rows() < num_rows) {
    return invalid_argument("device verify needs float32 device logits with a row per sampled position");
  }
  // The read-back (counts, then up to one token per row) lands in the 65536-entry pinned buffer.
  if (num_rows < 0 || num_requests < 0 || num_rows + num_requests > 65536) {
    return invalid_argument("device verify: too many rows");
  }
  KVASIR_RETURN_IF_ERROR(validate_draft_verify_rows(requests, num_requests, num_rows, num_draft_tokens));
  if (num_rows == 0) return Status();
  // Device scratch: the samples [num_rows], then the counts [num_requests] and packed tokens [num_rows].
  const size_t out_ints = static_cast<size_t>(num_requests) + static_cast<size_t>(num_rows);
  auto* scratch = static_cast<int32_t*>(
      device_scratch(tokens_dev_, tokens_cap_, (static_cast<size_t>(num_rows) + out_ints) * sizeof(int32_t)));
  cuda::SampleOp& r = queue_->add(OpKind::kSample, true).sample;
  r.logits = static_cast<const float*>(logits.data);
  r.tokens = scratch;
  r.params = queue_->stage(rows, static_cast<size_t>(num_rows) * sizeof(DeviceSamplingRow));
  r.num_rows = num_rows;
  r.vocab = logits.cols();
  if (num_requests > 0) {
    cuda::VerifyDraftsOp& v = queue_->add(OpKind::kVerifyDrafts, true).verify_drafts;
    v.samples = scratch;
    v.out = scratch + num_rows;
    v.requests = queue_->stage(requests, static_cast<size_t>(num_requests) * sizeof(DraftVerifyRow));
    v.drafts = num_draft_tokens > 0 ? queue_->stage(drafts, static_cast<size_t>(num_draft_tokens) * sizeof(int32_t))
                                    : cuda::kNotStaged;
    v.num_requests = num_requests;
  }
  queue_->flush();
  KVASIR_CUDA_CHECK(cudaMemcpyAsync(tokens_host_, scratch + num_rows, out_ints * sizeof(int32_t),
                                    cudaMemcpyDeviceToHost, stream_));
  queue_->finish();
  for (void* p : retired_) cudaFree(p);
  retired_.clear();
  int64_t packed = 0;
  for (int i = 0; i < num_requests; ++i) packed += out_num_emitted[i] = tokens_host_[i];
  std::memcpy(out_tokens, tokens_host_ + num_requests, static_cast<size_t>(packed) * sizeof(int32_t));
  return Status();
}

Status CudaBackend::apply_token_bitmask(Tensor& logits, const int32_t* words, int words_per_row,
                                       const int32_t* logits_rows, int num_rows) {
  if (logits.dtype != DType::kF32 || !is_dev(logits)) return invalid_argument("token bitmask needs float32 device logits");
  if (num_rows < 0 || num_rows > 65535 || words_per_row <= 0) return invalid_argument("token bitmask: bad shape");
  if (num_rows == 0) return Status();
  for (int i = 0; i < num_rows; ++i) {
    if (logits_rows[i] >= logits.rows()) return invalid_argument("token bitmask: row out of range");
  }
  cuda::TokenBitmaskOp& r = queue_->add(OpKind::kTokenBitmask, true).token_bitmask;
  r.logits = static_cast<float*>(logits.data);
  r.words = queue_->stage(words, static_cast<size_t>(num_rows) * static_cast<size_t>(words_per_row) * sizeof(int32_t));
  r.logits_rows = queue_->stage(logits_rows, static_cast<size_t>(num_rows) * sizeof(int32_t));
  r.num_rows = num_rows;
  r.words_per_row = words_per_row;
  r.vocab = logits.cols();
  return Status();
}

void CudaBackend::exec_attention(const cuda::AttentionOp& op, const uint8_t* arena, cudaStream_t s) {
  cuda::AttentionArgs a;
  a.q = op.q;
  a.k_cache = op.k_cache;
  a.v_cache = op.v_cache;
  a.out = op.out;
  a.query_start_loc = reinterpret_cast<const int32_t*>(arena + op.query_start_loc);
  a.seq_lens = reinterpret_cast<const int32_t*>(arena + op.seq_lens);
  a.block_tables = reinterpret_cast<const int32_t*>(arena + op.block_tables);
  a.num_seqs = static_cast<int>(op.num_seqs);
  a.max_blocks_per_seq = static_cast<int>(op.max_blocks_per_seq);
  a.block_size = static_cast<int>(op.block_size);
  a.num_heads = static_cast<int>(op.num_heads);
  a.num_kv_heads = static_cast<int>(op.num_kv_heads);
  a.head_dim = static_cast<int>(op.head_dim);
  a.sliding_window = static_cast<int>(op.sliding_window);
  a.scale = op.scale;
  a.softcap = op.softcap;
  a.sinks = op.sinks;
  a.kv_cache = static_cast<cuda::KvCacheType>(op.kv_cache);
  a.v_scale = op.v_scale;
  const int nd = static_cast<int>(op.num_decode), nw = static_cast<int>(op.num_work);
  if (nd > 0 && op.flashinfer_decode_works > 0) {
    exec_flashinfer_decode(op, arena, s);
  } else if (nd > 0) {
    const int32_t* seqs =
        op.decode_seqs != cuda::kNotStaged ? reinterpret_cast<const int32_t*>(arena + op.decode_seqs) : nullptr;
    cuda::DecodeSplit split{static_cast<int>(op.num_splits), static_cast<int>(op.partition_tokens), op.all_heads != 0};
    cuda::launch_decode_attention(a, seqs, nd, split, op.partial, s);
  }
  if (nw > 0 && op.flashinfer_ctas > 0) {
    exec_flashinfer_prefill(op, arena, s);
  } else if (nw > 0) {
    cuda::launch_prefill_attention(a, reinterpret_cast<const cuda::PrefillWork*>(arena + op.prefill_work), nw, s);
  }
}

void CudaBackend::exec_flashinfer_prefill(const cuda::AttentionOp& op, const uint8_t* arena, cudaStream_t s) {
#if KVASIR_HAVE_FLASHINFER
  const auto* plan = reinterpret_cast<const int32_t*>(arena + op.prefill_work);
  const int ctas = static_cast<int>(op.flashinfer_ctas);
  auto field = [&](cuda::FlashInferPlanField f) {
    return plan + cuda::flashinfer_plan_field_offset(f, ctas, op.num_work);
  };
  cuda::FlashInferPrefillArgs a;
  a.q = op.q;
  a.k_cache = op.k_cache;
  a.v_cache = op.v_cache;
  a.out = op.out;
  a.block_tables = reinterpret_cast<const int32_t*>(arena + op.block_tables);
  a.work_indptr = field(cuda::FlashInferPlanField::kWorkIndptr);
  a.qo_tile_indices = field(cuda::FlashInferPlanField::kQoTileIndices);
  a.qo_indptr = field(cuda::FlashInferPlanField::kQoIndptr);
  a.kv_indptr = field(cuda::FlashInferPlanField::kKvIndptr);
  a.qo_lens = field(cuda::FlashInferPlanField::kQoLens);
  a.kv_lens = field(cuda::FlashInferPlanField::kKvLens);
  a.head_indices = field(cuda::FlashInferPlanField::kHeadIndices);
  a.batch_indices = field(cuda::FlashInferPlanField::kBatchIndices);
  a.num_tokens = op.num_tokens;
  a.num_heads = static_cast<int>(op.num_heads);
  a.num_kv_heads = static_cast<int>(op.num_kv_heads);
  a.head_dim = static_cast<int>(op.head_dim);
  a.block_size = static_cast<int>(op.block_size);
  a.scale = op.scale;
  a.num_ctas = ctas;
  cuda::launch_flashinfer_prefill(a, s);
#else
  KVASIR_CHECK_MSG(false, "a FlashInfer prefill was recorded in a build without FlashInfer");
#endif
}

void CudaBackend::execute(const OpRecord& op, const uint8_t* arena, cudaStream_t s) {
  auto at = [arena](cuda::ArenaOffset off) { return arena + off; };
  auto i32 = [&](cuda::ArenaOffset off) { return reinterpret_cast<const int32_t*>(at(off)); };
  const Elem elem = static_cast<Elem>(op.elem);
  switch (op.kind) {
    case OpKind::kEmbedding: {
      const cuda::EmbeddingOp& r = op.embedding;
      const auto table_dtype = static_cast<DType>(r.table_dtype);
      const int32_t* sources = r.sources == cuda::kNotStaged ? nullptr : i32(r.sources);
      if (table_dtype == DType::kBF16) {
        cuda::launch_embedding(r.table, i32(r.ids), sources, r.fed, static_cast<int>(r.num_tokens), r.hidden, r.vocab,
                               r.scale, r.out, s);
      } else {
        cuda::launch_gguf_embedding(r.table, table_dtype, i32(r.ids), sources, r.fed, static_cast<int>(r.num_tokens),
                                    r.hidden, r.vocab, r.scale, r.out, s);
      }
      break;
    }
    case OpKind::kLinear: {
      const cuda::LinearOp& r = op.linear;
      const int64_t n = r.rows, m = r.out_features, k = r.in_features;
      const bool aligned = cuda::aligned16(r.x) && cuda::aligned16(r.w);
      if (aligned && cuda::gemv_supported(n, k)) {
        cuda::launch_gemv(r.x, r.w, r.bias, static_cast<int>(n), m, k, r.out, elem, s);
      } else {
        gemm_.run(r.x, r.w, r.out, n, m, k, elem, s);
        if (r.bias != nullptr) cuda::launch_add_bias(r.out, r.bias, n, m, elem, s);
      }
      break;
    }
    case OpKind::kMultiGemv:
      exec_multi_gemv(op.gemv, elem, s);
      break;
    case OpKind::kGemvGated:
      exec_gemv_gated(op.gemv_gated, s);
      break;
    case OpKind::kRmsNorm: {
      const cuda::RmsNormOp& r = op.rms_norm;
      cuda::launch_rms_norm(r.x, r.weight, r.eps, r.rows, r.cols, r.out, s);
      break;
    }
    case OpKind::kAddRmsNorm: {
      const cuda::AddRmsNormOp& r = op.add_rms_norm;
      cuda::launch_add_rms_norm(r.residual, r.x, r.weight, r.eps, r.rows, r.cols, r.out, s);
      break;
    }
    case OpKind::kAdd:
      cuda::launch_add(op.add.a, op.add.b, op.add.numel, elem, s);
      break;
    case OpKind::kRopeWriteKv: {
      const cuda::RopeOp& r = op.rope;
      cuda::launch_rope_write_kv(r.q, r.k, r.v, r.k_cache, r.v_cache, i32(r.positions),
                                 reinterpret_cast<const float*>(at(r.inv_freq)),
                                 reinterpret_cast<const int64_t*>(at(r.slot_mapping)), static_cast<int>(r.num_tokens),
                                 static_cast<int>(r.num_heads), static_cast<int>(r.num_kv_heads),
                                 static_cast<int>(r.head_dim), static_cast<int>(r.rotary_dim), r.neox != 0,
                                 r.attention_factor, r.num_slots, {r.q_norm, r.k_norm, r.norm_eps}, s);
      break;
    }
    case OpKind::kRope: {
      const cuda::RopeOp& r = op.rope;
      cuda::launch_rope(r.q, r.k, i32(r.positions), reinterpret_cast<const float*>(at(r.inv_freq)),
                        static_cast<int>(r.num_tokens), static_cast<int>(r.num_heads), static_cast<int>(r.num_kv_heads),
                        static_cast<int>(r.head_dim), static_cast<int>(r.rotary_dim), r.neox != 0, r.attention_factor,
                        {r.q_norm, r.k_norm, r.norm_eps}, s);
      break;
    }
    case OpKind::kWriteKv: {
      const cuda::WriteKvOp& r = op.write_kv;
      cuda::launch_write_kv(r.k, r.v, r.k_cache, r.v_cache, reinterpret_cast<const int64_t*>(at(r.slot_mapping)),
                            static_cast<int>(r.num_tokens), r.row, r.num_slots,
                            static_cast<cuda::KvCacheType>(r.kv_cache), r.k_scale, r.v_scale, s);
      break;
    }
    case OpKind::kDecodeAttention:
    case OpKind::kPrefillAttention:
      exec_attention(op.attention, arena, s);
      break;
    case OpKind::kGatedAct: {
      const cuda::GatedActOp& r = op.gated_act;
      cuda::launch_gated_activation(r.gate, r.up, r.gelu_tanh != 0, r.numel, r.out, s);
      break;
    }
    case OpKind::kSoftcap:
      cuda::launch_softcap(op.softcap.x, op.softcap.cap, op.softcap.numel, elem, s);
      break;
    case OpKind::kGather: {
      const cuda::GatherOp& r = op.gather;
      cuda::launch_gather_rows(r.src, i32(r.rows), static_cast<int>(r.num_rows), r.row_bytes, r.src_rows, r.out, s);
      break;
    }
    case OpKind::kWriteLatentKv:
      exec_write_latent_kv(op.write_latent_kv, arena, s);
      break;
    case OpKind::kMlaAttention:
      exec_mla_attention(op.mla_attention, arena, s);
      break;
    case OpKind::kAllReduce:
      exec_all_reduce(op.all_reduce, elem, s);
      break;
    case OpKind::kAllGatherColumns:
      exec_all_gather_columns(op.all_gather_columns, s);
      break;
    case OpKind::kFp8Linear:
      exec_fp8_linear(op.fp8_linear, elem, s);
      break;
    case OpKind::kGgufLinear:
      exec_gguf_linear(op.gguf_linear, elem, s);
      break;
    case OpKind::kW4a16Linear:
      exec_w4a16_linear(op.w4a16_linear, elem, s);
      break;
    case OpKind::kL2Prefetch:
      cuda::launch_l2_prefetch(op.l2_prefetch, s);
      break;
    case OpKind::kNumKinds:
      KVASIR_CHECK_MSG(false, "not an op");
      break;
    case OpKind::kTokenBitmask: {
      const cuda::TokenBitmaskOp& r = op.token_bitmask;
      cuda::launch_token_bitmask(r.logits, r.vocab, i32(r.words), static_cast<int>(r.words_per_row), i32(r.logits_rows),
                                 static_cast<int>(r.num_rows), s);
      break;
    }
    case OpKind::kMoeRoute: {
      const cuda::MoeRouteOp& r = op.moe_route;
      cuda::MoeRouteArgs a;
      a.logits = r.logits;
      a.bias = r.bias;
      a.ids = r.ids;
      a.weights = r.weights;
      a.num_tokens = static_cast<int>(r.num_tokens);
      a.num_experts = static_cast<int>(r.num_experts);
      a.top_k = static_cast<int>(r.top_k);
      a.sigmoid = r.sigmoid != 0;
      a.renormalize = r.renormalize != 0;
      a.num_groups = static_cast<int>(r.num_groups);
      a.topk_groups = static_cast<int>(r.topk_groups);
      a.group_top2 = r.group_top2 != 0;
      a.scale = r.scale;
      cuda::launch_moe_route(a, s);
      break;
    }
    case OpKind::kMoeExperts:
      exec_moe_experts(op.moe_experts, s);
      break;
    case OpKind::kVerifyDrafts: {
      const cuda::VerifyDraftsOp& r = op.verify_drafts;
      const int n = static_cast<int>(r.num_requests);
      cuda::launch_verify_drafts(r.samples, reinterpret_cast<const cuda::DraftVerifyRowParams*>(at(r.requests)), n,
                                 r.drafts == cuda::kNotStaged ? nullptr : i32(r.drafts), r.out, r.out + n, s);
      break;
    }
    case OpKind::kSample: {
      const cuda::SampleOp& r = op.sample;
      cuda::launch_sample(r.logits, static_cast<int>(r.num_rows), r.vocab,
                          reinterpret_cast<const cuda::SamplingRowParams*>(at(r.params)), r.tokens, s);
      break;
    }
  }
}

}  // namespace kvasir
