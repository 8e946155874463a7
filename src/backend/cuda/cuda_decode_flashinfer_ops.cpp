// CudaBackend's FlashInfer decode path (attention_decode_flashinfer.h): whether an attention call
// goes to it, its plan, and its launch from the recorded op. CudaBackend::attention (cuda_ops.cpp)
// asks flashinfer_decode_plan() for every pure decode call and records the plan when there is one.
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#if KVASIR_HAVE_FLASHINFER
#include "backend/cuda/attention_decode_flashinfer.h"
#endif

namespace kvasir {

// FlashInfer's decode takes a pure decode call (one query per sequence, query row s of sequence s)
// of at most KVASIR_CUDA_DECODE_FI_MAX_SEQS sequences, with a block table of at least
// KVASIR_CUDA_DECODE_FI_MIN_TOKENS tokens (cuda_tuning.h says why the table), that computes plain attention: a bf16
// cache or an e4m3 one whose value scale is 1, no window, soft-cap or sinks (its variant here has none of them), a head dim and GQA group its
// kernels are built for, 16-byte aligned rows. Its launch shape is (rows, kv heads) with rows =
// the kernel's resident CTAs over the kv heads, fixed for the shape, so the call is graphable.
const cuda::FlashInferDecodePlan* CudaBackend::flashinfer_decode_plan(const Tensor& q, const Tensor& k_cache,
                                                                      const Tensor& v_cache, const Tensor& out,
                                                                      const AttentionMetadata& m,
                                                                      const AttentionParams& p) {
#if KVASIR_HAVE_FLASHINFER
  // A kernel forced by KVASIR_CUDA_ATTN runs every decode batch (the A/B runs and the forced-kernel
  // op tests rely on it), so FlashInfer steps aside.
  if (!flashinfer_decode_ || tuning_.kernels.decode_attention != cuda::DecodeAttentionKernel::kAuto) return nullptr;
  const int S = m.num_seqs;
  if (S <= 0 || S > tuning_.recording.flashinfer_decode_max_seqs || m.num_tokens != S) return nullptr;
  if (static_cast<int64_t>(m.max_blocks_per_seq) * m.block_size < tuning_.recording.flashinfer_decode_min_table) {
    return nullptr;
  }
  for (int s = 0; s <= S; ++s) {
    if (m.query_start_loc[s] != s) return nullptr;
  }
  if (p.sinks.data != nullptr || p.sliding_window > 0 || p.softcap > 0.0f) return nullptr;
  // A bf16 cache; an e4m3 one only under KVASIR_CUDA_DECODE_FI_FP8 (cuda_tuning.h: our mma_bulk
  // was faster) and with a value scale of 1 (the kernel has no output scale; the key scale is
  // folded into the score scale like every kernel's).
  const cuda::KvCacheType codes = kv_cache_type_of(k_cache.dtype);
  if (v_cache.dtype != k_cache.dtype) return nullptr;
  if (codes != cuda::KvCacheType::kBf16 && (!tuning_.recording.flashinfer_decode_fp8 || v_cache.cache_scale != 1.0f)) {
    return nullptr;
  }
  if (!cuda::aligned16(q.data) || !cuda::aligned16(out.data)) return nullptr;
  const int heads = static_cast<int>(q.dim(1)), kv_heads = static_cast<int>(k_cache.dim(2)), hd = static_cast<int>(q.dim(2));
  const int per_sm = cuda::flashinfer_decode_ctas_per_sm(heads, kv_heads, hd, codes);
  if (per_sm <= 0) return nullptr;
  const int works = per_sm * num_sms_ / kv_heads;
  if (works < S) return nullptr;
  cuda::FlashInferDecodePlanInput in;
  in.seq_lens = m.seq_lens;
  in.num_seqs = S;
  in.max_blocks_per_seq = m.max_blocks_per_seq;
  in.block_size = m.block_size;
  in.num_works = works;
  in.min_chunk_tokens = tuning_.recording.flashinfer_decode_min_chunk;
  return &flashinfer_decode_plans_.get(in);
#else
  (void)q, (void)k_cache, (void)v_cache, (void)out, (void)m, (void)p;
  return nullptr;
#endif
}

void CudaBackend::exec_flashinfer_decode(const cuda::AttentionOp& op, const uint8_t* arena, cudaStream_t s) {
#if KVASIR_HAVE_FLASHINFER
  using F = cuda::FlashInferDecodeField;
  const auto* plan = reinterpret_cast<const int32_t*>(arena + op.decode_plan);
  const int S = static_cast<int>(op.num_seqs), works = op.flashinfer_decode_works;
  auto field = [&](F f) { return plan + cuda::flashinfer_decode_field_offset(f, S, works); };
  cuda::FlashInferDecodeArgs a;
  a.q = op.q;
  a.k_cache = op.k_cache;
  a.v_cache = op.v_cache;
  a.kv_cache = static_cast<cuda::KvCacheType>(op.kv_cache);
  a.out = op.out;
  a.block_tables = reinterpret_cast<const int32_t*>(arena + op.block_tables);
  a.page_indptr = field(F::kPageIndptr);
  a.last_page_len = field(F::kLastPageLen);
  a.o_indptr = field(F::kOIndptr);
  a.chunk_tokens = field(F::kChunkTokens);
  a.request_indices = field(F::kRequestIndices);
  a.kv_tile_indices = field(F::kKvTileIndices);
  a.valid_mask = field(F::kValidMask);
  const int64_t rows = static_cast<int64_t>(works) * op.num_heads;
  a.partial_o = op.partial;
  a.partial_lse = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(op.partial) + rows * op.head_dim * 2);
  a.num_seqs = S;
  a.num_heads = static_cast<int>(op.num_heads);
  a.num_kv_heads = static_cast<int>(op.num_kv_heads);
  a.head_dim = static_cast<int>(op.head_dim);
  a.block_size = static_cast<int>(op.block_size);
  a.num_works = works;
  a.scale = op.scale;
  a.pdl = tuning_.kernels.pdl;
  cuda::launch_flashinfer_decode(a, s);
#else
  (void)op, (void)arena, (void)s;
  KVASIR_CHECK_MSG(false, "a FlashInfer decode was recorded in a build without FlashInfer");
#endif
}

}  // namespace kvasir
