// CudaBackend's MLA ops (backend.h: write_latent_kv, mla_attention): each checks its tensors,
// stages its host inputs and plans the latent attention's tiles and key splits at record time;
// exec_* turn the records into launches (kernels in mla_attention.cu, per-head GEMMs in
// head_gemm.cpp). The absorbed form on the device:
//   q_latent[t, h] = [W_UK^T[h] q_nope[t, h] | rope(q_pe[t, h])]    float32 scratch
//   o_latent[t, h] = softmax(q_latent[t, h] . rows * scale) . c_kv   bf16 scratch
//   out[t, h]      = W_UV[h] o_latent[t, h]
// The per-head products run on head_gemv for decode-sized batches (a warp per weight row reads
// it once for every token) and on one cuBLASLt strided-batched GEMM above that;
// KVASIR_MLA_GEMM=kernel|cublas forces one of them (cuda_tuning.h; the op tests run both); a shape cuBLASLt
// has no algorithm for (odd strides) runs on head_gemv.
// A pure decode step is graphable: its tiles are one per sequence and its split plan depends on
// counts only (sequences, heads, max_blocks_per_seq); a prefill's tile list depends on lengths.
#include <algorithm>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/mla_kernels.h"
#include "backend/cuda/staging_version.h"

namespace kvasir {
namespace {

bool is_dev(const Tensor& t) { return t.device == Device::kCuda; }

constexpr size_t kHeadGemmWorkspace = size_t{4} << 20;
constexpr int kMaxSplits = 64;
constexpr int kMinKeysPerSplit = 64;

// Where q_latent, o_latent and the split partials lie in the op's scratch (256-byte aligned).
struct MlaScratchLayout {
  size_t q_latent = 0, o_latent = 0, partial = 0, total = 0;
};

size_t align256(size_t v) { return (v + 255) / 256 * 256; }

MlaScratchLayout mla_scratch_layout(int64_t n, int64_t H, int64_t L, int64_t R, int64_t num_work, int64_t splits) {
  MlaScratchLayout s;
  s.q_latent = 0;
  s.o_latent = align256(static_cast<size_t>(n * H * (L + R)) * 4);
  s.partial = s.o_latent + align256(static_cast<size_t>(n * H * L) * 2);
  s.total = s.partial + (splits > 1 ? static_cast<size_t>(num_work * H * splits * (L + 2)) * 4 : 0);
  return s;
}

}  // namespace

void CudaBackend::write_latent_kv(const Tensor& c_kv, const Tensor& k_pe, const int32_t* positions,
                                  const RopeParams& rope, Tensor& cache, const AttentionMetadata& m) {
  const int64_t L = c_kv.cols(), R = k_pe.cols();
  const int64_t num_slots = cache.dim(0) * cache.dim(1);
  KVASIR_CHECK(is_dev(c_kv) && is_dev(k_pe) && is_dev(cache));
  KVASIR_CHECK(c_kv.dtype == DType::kBF16 && k_pe.dtype == DType::kBF16 && cache.dtype == DType::kBF16);
  KVASIR_CHECK(cache.cols() == L + R && c_kv.rows() >= m.num_tokens && k_pe.rows() >= m.num_tokens);
  KVASIR_CHECK(rope.rotary_dim == R && R % 2 == 0 && R > 0);
  for (int t = 0; t < m.num_tokens; ++t) KVASIR_CHECK(m.slot_mapping[t] < num_slots);
  if (m.num_tokens == 0) return;
  cuda::WriteLatentKvOp& r = queue_->add(OpKind::kWriteLatentKv, true).write_latent_kv;
  r.c_kv = c_kv.data;
  r.k_pe = k_pe.data;
  r.cache = cache.data;
  r.positions = queue_->stage(positions, static_cast<size_t>(m.num_tokens) * sizeof(int32_t));
  r.inv_freq = queue_->stage(rope.inv_freq, static_cast<size_t>(R / 2) * sizeof(float));
  r.slot_mapping = queue_->stage(m.slot_mapping, static_cast<size_t>(m.num_tokens) * sizeof(int64_t));
  r.num_tokens = m.num_tokens;
  r.num_slots = num_slots;
  r.kv_lora_rank = static_cast<int32_t>(L);
  r.rope_dim = static_cast<int32_t>(R);
  r.neox = rope.neox ? 1 : 0;
  r.attention_factor = rope.attention_factor;
}

void CudaBackend::mla_attention(const Tensor& q, const int32_t* positions, const Tensor& cache,
                                const AttentionMetadata& m, const MlaParams& p, Tensor& out) {
  const int64_t n = m.num_tokens, H = q.dim(1), qk = q.dim(2);
  const int64_t L = p.w_uk_t.dim(1), nope = p.w_uk_t.dim(2), R = qk - nope, V = p.w_uv.dim(1);
  KVASIR_CHECK(q.ndim == 3 && q.dim(0) >= n && q.dtype == DType::kBF16 && is_dev(q));
  KVASIR_CHECK(p.w_uk_t.ndim == 3 && p.w_uk_t.dim(0) == H && p.w_uk_t.dtype == DType::kBF16 && is_dev(p.w_uk_t));
  KVASIR_CHECK(p.w_uv.ndim == 3 && p.w_uv.dim(0) == H && p.w_uv.dim(2) == L && p.w_uv.dtype == DType::kBF16 &&
               is_dev(p.w_uv));
  KVASIR_CHECK(R > 0 && R % 2 == 0 && p.rope.rotary_dim == R && cache.cols() == L + R && cache.dim(1) == m.block_size);
  KVASIR_CHECK(cache.dtype == DType::kBF16 && is_dev(cache) && is_dev(out));
  KVASIR_CHECK(out.dtype == DType::kBF16 && out.numel() >= n * H * V);
  KVASIR_CHECK_MSG(cuda::mla_attention_smem_bytes(static_cast<int>(L), static_cast<int>(R)) > 0,
                   "CUDA MLA: kv_lora_rank + qk_rope_head_dim too wide for one CTA's shared memory");
  if (n == 0) return;
  if (!head_gemm_.ready()) {
    // Once, while recording (never under graph capture).
    const Status st = head_gemm_.init(kHeadGemmWorkspace);
    KVASIR_CHECK_MSG(st.ok(), st.message().c_str());
    cuda::init_mla_kernels();
  }

  // Rows per CTA: as many (token, head) pairs as the accumulators hold (kMlaMaxItems groups of 8
  // latent columns per thread); heads first, then tokens of the same sequence (prefill tiles).
  const int S = m.num_seqs;
  const int CG = static_cast<int>((L + 7) / 8);
  const int rows_max = std::min(cuda::kMlaRows, cuda::kMlaThreads * cuda::kMlaMaxItems / CG);
  KVASIR_CHECK_MSG(rows_max >= 1, "CUDA MLA: kv_lora_rank too large");
  const int HG = static_cast<int>(std::min<int64_t>(H, rows_max));
  const int groups = static_cast<int>((H + HG - 1) / HG);
  bool pure_decode = n == S;
  for (int s = 0; s < S; ++s) {
    const int len = m.query_start_loc[s + 1] - m.query_start_loc[s];
    KVASIR_CHECK(len >= 0 && m.seq_lens[s] >= len);
    pure_decode &= len == 1;
  }
  const int TQ = pure_decode ? 1 : std::max(1, rows_max / HG);
  mla_work_.clear();
  for (int s = 0; s < S; ++s) {
    const int q0 = m.query_start_loc[s], len = m.query_start_loc[s + 1] - q0;
    // Later tiles see more keys: launch them first so the tail of the grid is short.
    for (int b = q0 + ((len - 1) / TQ) * TQ; len > 0 && b >= q0; b -= TQ) mla_work_.push_back({s, b});
  }
  int splits = 1, partition = 0;
  if (pure_decode) {
    // Enough CTAs for two waves, each split at least kMinKeysPerSplit keys of the longest context
    // the block tables allow (a count, so replays of a captured graph keep the plan).
    const int64_t max_ctx = int64_t{m.max_blocks_per_seq} * m.block_size;
    const int base = S * groups;
    int want = std::clamp((2 * num_sms_ + base - 1) / base, 1, kMaxSplits);
    want = static_cast<int>(std::min<int64_t>(want, std::max<int64_t>(1, (max_ctx + kMinKeysPerSplit - 1) / kMinKeysPerSplit)));
    if (want > 1) {
      partition = static_cast<int>((max_ctx + want - 1) / want);
      partition = (partition + cuda::kMlaKeys - 1) / cuda::kMlaKeys * cuda::kMlaKeys;
      splits = static_cast<int>((max_ctx + partition - 1) / partition);
    }
    if (splits <= 1) {
      splits = 1;
      partition = 0;
    }
  }
  const int64_t num_work = static_cast<int64_t>(mla_work_.size());
  const MlaScratchLayout layout = mla_scratch_layout(n, H, L, R, num_work, splits);
  void* scratch = device_scratch(mla_scratch_.ptr, mla_scratch_.cap, layout.total);

  cuda::MlaAttentionOp& r = queue_->add(OpKind::kMlaAttention, pure_decode).mla_attention;
  r.q = q.data;
  r.cache = cache.data;
  r.w_uk_t = p.w_uk_t.data;
  r.w_uv = p.w_uv.data;
  r.out = out.data;
  r.scratch = scratch;
  r.positions = queue_->stage(positions, static_cast<size_t>(n) * sizeof(int32_t));
  r.inv_freq = queue_->stage(p.rope.inv_freq, static_cast<size_t>(R / 2) * sizeof(float));
  r.query_start_loc = queue_->stage(m.query_start_loc, static_cast<size_t>(S + 1) * sizeof(int32_t));
  r.seq_lens = queue_->stage(m.seq_lens, static_cast<size_t>(S) * sizeof(int32_t));
  r.block_tables = queue_->stage(m.block_tables, static_cast<size_t>(S) * m.max_blocks_per_seq * sizeof(int32_t));
  // Refilled by every call: a new version, so no later call of the step reuses this copy.
  r.work = queue_->stage(mla_work_.data(), mla_work_.size() * sizeof(cuda::PrefillWork), cuda::next_staging_version());
  r.num_tokens = static_cast<int32_t>(n);
  r.num_seqs = S;
  r.max_blocks_per_seq = m.max_blocks_per_seq;
  r.block_size = m.block_size;
  r.num_heads = static_cast<int32_t>(H);
  r.kv_lora_rank = static_cast<int32_t>(L);
  r.rope_dim = static_cast<int32_t>(R);
  r.nope_dim = static_cast<int32_t>(nope);
  r.v_head_dim = static_cast<int32_t>(V);
  r.neox = p.rope.neox ? 1 : 0;
  r.num_work = static_cast<int32_t>(num_work);
  r.tokens_per_tile = TQ;
  r.heads_per_group = HG;
  r.num_splits = splits;
  r.partition_tokens = partition;
  const cuda::MlaHeadGemm path = tuning_.recording.mla_head_gemm;
  r.head_gemv =
      path == cuda::MlaHeadGemm::kKernel || (path == cuda::MlaHeadGemm::kAuto && n <= cuda::kMlaGemvTokens) ? 1 : 0;
  r.scale = p.scale;
  r.attention_factor = p.rope.attention_factor;
}

void CudaBackend::exec_write_latent_kv(const cuda::WriteLatentKvOp& op, const uint8_t* arena, cudaStream_t s) {
  cuda::launch_write_latent_kv(op.c_kv, op.k_pe, op.cache, reinterpret_cast<const int32_t*>(arena + op.positions),
                               reinterpret_cast<const float*>(arena + op.inv_freq),
                               reinterpret_cast<const int64_t*>(arena + op.slot_mapping),
                               static_cast<int>(op.num_tokens), op.kv_lora_rank, op.rope_dim, op.neox != 0,
                               op.attention_factor, op.num_slots, s);
}

void CudaBackend::exec_mla_attention(const cuda::MlaAttentionOp& op, const uint8_t* arena, cudaStream_t s) {
  const int n = op.num_tokens, H = op.num_heads, L = op.kv_lora_rank, R = op.rope_dim, nope = op.nope_dim;
  const int V = op.v_head_dim, D = L + R;
  const MlaScratchLayout layout = mla_scratch_layout(n, H, L, R, op.num_work, op.num_splits);
  auto* base = static_cast<uint8_t*>(op.scratch);
  float* q_latent = reinterpret_cast<float*>(base + layout.q_latent);
  void* o_latent = base + layout.o_latent;
  const int32_t* positions = reinterpret_cast<const int32_t*>(arena + op.positions);
  const float* inv_freq = reinterpret_cast<const float*>(arena + op.inv_freq);
  const int64_t q_ts = int64_t{H} * (nope + R), q_hs = nope + R;

  // q_latent[:, :, :L] = W_UK^T q_nope, then its rope part.
  if (op.head_gemv != 0 ||
      !head_gemm_.run(op.q, op.w_uk_t, q_latent,
                      cuda::HeadGemmShape{n, H, L, nope, q_ts, q_hs, int64_t{H} * D, D, Elem::kF32}, s)) {
    cuda::launch_head_gemv(op.q, false, q_ts, q_hs, op.w_uk_t, q_latent, true, int64_t{H} * D, D, n, H, L, nope, s);
  }
  cuda::launch_mla_q_rope(op.q, q_latent, positions, inv_freq, n, H, nope, R, L, op.neox != 0, op.attention_factor, s);

  cuda::MlaAttentionArgs a;
  a.q_latent = q_latent;
  a.cache = op.cache;
  a.query_start_loc = reinterpret_cast<const int32_t*>(arena + op.query_start_loc);
  a.seq_lens = reinterpret_cast<const int32_t*>(arena + op.seq_lens);
  a.block_tables = reinterpret_cast<const int32_t*>(arena + op.block_tables);
  a.work = reinterpret_cast<const cuda::PrefillWork*>(arena + op.work);
  a.o_latent = o_latent;
  a.partial = op.num_splits > 1 ? reinterpret_cast<float*>(base + layout.partial) : nullptr;
  a.num_work = op.num_work;
  a.max_blocks_per_seq = op.max_blocks_per_seq;
  a.block_size = op.block_size;
  a.H = H;
  a.L = L;
  a.R = R;
  a.tokens_per_tile = op.tokens_per_tile;
  a.heads_per_group = op.heads_per_group;
  a.num_splits = op.num_splits;
  a.partition_tokens = op.partition_tokens;
  a.scale = op.scale;
  cuda::launch_mla_attention(a, s);

  // out = W_UV o_latent.
  if (op.head_gemv != 0 ||
      !head_gemm_.run(o_latent, op.w_uv, op.out,
                      cuda::HeadGemmShape{n, H, V, L, int64_t{H} * L, L, int64_t{H} * V, V, Elem::kBf16}, s)) {
    cuda::launch_head_gemv(o_latent, false, int64_t{H} * L, L, op.w_uv, op.out, false, int64_t{H} * V, V, n, H, V, L, s);
  }
}

}  // namespace kvasir
