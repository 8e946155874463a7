// The CUDA backend's ops: each Backend call checks its tensors, stages its host inputs and
// appends one OpRecord to the step (cuda_backend_impl.h); execute() turns a record into launches
// when the step is flushed, eagerly or while a CUDA graph is being captured.
#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"

namespace kvasir {
namespace {

bool is_dev(const Tensor& t) { return t.device == Device::kCuda; }

}  // namespace

void CudaBackend::embedding(const Tensor& table, const int32_t* ids, int n, float scale, Tensor& out) {
  KVASIR_CHECK(is_dev(table) && is_dev(out) && table.dtype == DType::kBF16 && out.dtype == DType::kBF16);
  KVASIR_CHECK(out.cols() == table.cols() && out.rows() >= n);
  OpRecord& r = queue_->add(OpKind::kEmbedding, true);
  r.p[0] = table.data;
  r.p[1] = out.data;
  r.s[0] = queue_->stage(ids, static_cast<size_t>(n) * sizeof(int32_t));
  r.n[0] = n;
  r.n[1] = table.cols();
  r.n[2] = table.rows();
  r.f[0] = scale;
}

void CudaBackend::attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionMetadata& m,
                            const AttentionParams& p, Tensor& out) {
  const int heads = static_cast<int>(q.dim(1)), hd = static_cast<int>(q.dim(2));
  const int kv_heads = static_cast<int>(k_cache.dim(2));
  KVASIR_CHECK(heads % kv_heads == 0 && k_cache.dim(3) == hd && k_cache.dim(1) == m.block_size);
  KVASIR_CHECK_MSG(cuda::attention_head_dim_supported(hd), "CUDA attention supports head_dim 64, 128, 256");
  KVASIR_CHECK(q.dtype == DType::kBF16 && out.dtype == DType::kBF16 && k_cache.dtype == DType::kBF16);
  const int S = m.num_seqs;
  const bool pure_decode = m.num_tokens == S;
  decode_seqs_.clear();
  work_.clear();
  if (!pure_decode) {
    const int tq = cuda::prefill_tokens_per_tile(heads, kv_heads);
    for (int s = 0; s < S; ++s) {
      const int q0 = m.query_start_loc[s], len = m.query_start_loc[s + 1] - q0;
      KVASIR_CHECK(len >= 0 && m.seq_lens[s] >= len);
      if (len == 1) decode_seqs_.push_back(s);
      // Later tiles see more keys: launch them first so the tail of the grid is short.
      for (int b = q0 + ((len - 1) / tq) * tq; len > 1 && b >= q0; b -= tq) work_.push_back({s, b});
    }
  }
  const int nd = pure_decode ? S : static_cast<int>(decode_seqs_.size());
  const cuda::DecodeSplit split = cuda::plan_decode_split(nd, heads, kv_heads, hd, m.max_blocks_per_seq, m.block_size, num_sms_);
  const int64_t partial_floats = cuda::decode_scratch_floats(nd, heads, hd, split);
  void* partial = partial_floats > 0 ? device_scratch(partial_, partial_cap_, static_cast<size_t>(partial_floats) * 4) : nullptr;

  OpRecord& r = queue_->add(work_.empty() ? OpKind::kDecodeAttention : OpKind::kPrefillAttention, work_.empty());
  r.p[0] = q.data;
  r.p[1] = k_cache.data;
  r.p[2] = v_cache.data;
  r.p[3] = out.data;
  r.p[4] = partial;
  r.s[0] = queue_->stage(m.query_start_loc, static_cast<size_t>(S + 1) * sizeof(int32_t));
  r.s[1] = queue_->stage(m.seq_lens, static_cast<size_t>(S) * sizeof(int32_t));
  r.s[2] = queue_->stage(m.block_tables, static_cast<size_t>(S) * m.max_blocks_per_seq * sizeof(int32_t));
  if (!decode_seqs_.empty()) r.s[3] = queue_->stage(decode_seqs_.data(), decode_seqs_.size() * sizeof(int32_t));
  if (!work_.empty()) r.s[4] = queue_->stage(work_.data(), work_.size() * sizeof(cuda::PrefillWork));
  r.n[0] = S;
  r.n[1] = m.max_blocks_per_seq;
  r.n[2] = m.block_size;
  r.n[3] = heads;
  r.n[4] = kv_heads;
  r.n[5] = hd;
  r.n[6] = p.sliding_window;
  r.n[7] = nd;
  r.n[8] = static_cast<int64_t>(work_.size());
  r.n[9] = split.num_splits;
  r.n[10] = split.partition_tokens;
  r.n[11] = split.v3 ? 1 : 0;
  r.f[0] = p.scale;
  r.f[1] = p.softcap;
}

void CudaBackend::softcap(Tensor& x, float cap) {
  OpRecord& r = queue_->add(OpKind::kSoftcap, true);
  r.elem = static_cast<int32_t>(elem_of(x.dtype));
  r.p[0] = x.data;
  r.n[0] = x.numel();
  r.f[0] = cap;
}

void CudaBackend::gather_rows(const Tensor& src, const int32_t* rows, int k, Tensor& out) {
  const size_t rb = src.row_bytes();
  KVASIR_CHECK(out.row_bytes() == rb && out.rows() >= k);
  for (int i = 0; i < k; ++i) KVASIR_CHECK(rows[i] >= 0 && rows[i] < src.rows());
  OpRecord& r = queue_->add(OpKind::kGather, true);
  r.p[0] = src.data;
  r.p[1] = out.data;
  r.s[0] = queue_->stage(rows, static_cast<size_t>(k) * sizeof(int32_t));
  r.n[0] = k;
  r.n[1] = static_cast<int64_t>(rb);
  r.n[2] = src.rows();
}

Status CudaBackend::sample(const Tensor& logits, const DeviceSamplingRow* rows, int num_rows, int32_t* out_tokens) {
  static_assert(sizeof(DeviceSamplingRow) == sizeof(cuda::SamplingRowParams), "sampling row layouts must match");
  if (logits.dtype != DType::kF32 || !is_dev(logits) || logits.rows() < num_rows) {
    return invalid_argument("device sampling needs float32 device logits with a row per request");
  }
  if (num_rows < 0 || num_rows > 65536) return invalid_argument("device sampling: too many rows");
  if (num_rows == 0) return Status();
  void* tokens = device_scratch(tokens_dev_, tokens_cap_, static_cast<size_t>(num_rows) * sizeof(int32_t));
  OpRecord& r = queue_->add(OpKind::kSample, true);
  r.p[0] = logits.data;
  r.p[1] = tokens;
  r.s[0] = queue_->stage(rows, static_cast<size_t>(num_rows) * sizeof(DeviceSamplingRow));
  r.n[0] = num_rows;
  r.n[1] = logits.cols();
  queue_->flush();
  KVASIR_CUDA_CHECK(cudaMemcpyAsync(tokens_host_, tokens, static_cast<size_t>(num_rows) * sizeof(int32_t),
                                    cudaMemcpyDeviceToHost, stream_));
  queue_->finish();
  for (void* p : retired_) cudaFree(p);
  retired_.clear();
  std::memcpy(out_tokens, tokens_host_, static_cast<size_t>(num_rows) * sizeof(int32_t));
  return Status();
}

void CudaBackend::exec_attention(const OpRecord& op, const uint8_t* arena, cudaStream_t s) {
  cuda::AttentionArgs a;
  a.q = op.p[0];
  a.k_cache = op.p[1];
  a.v_cache = op.p[2];
  a.out = const_cast<void*>(op.p[3]);
  a.query_start_loc = reinterpret_cast<const int32_t*>(arena + op.s[0]);
  a.seq_lens = reinterpret_cast<const int32_t*>(arena + op.s[1]);
  a.block_tables = reinterpret_cast<const int32_t*>(arena + op.s[2]);
  a.num_seqs = static_cast<int>(op.n[0]);
  a.max_blocks_per_seq = static_cast<int>(op.n[1]);
  a.block_size = static_cast<int>(op.n[2]);
  a.num_heads = static_cast<int>(op.n[3]);
  a.num_kv_heads = static_cast<int>(op.n[4]);
  a.head_dim = static_cast<int>(op.n[5]);
  a.sliding_window = static_cast<int>(op.n[6]);
  a.scale = op.f[0];
  a.softcap = op.f[1];
  const int nd = static_cast<int>(op.n[7]), nw = static_cast<int>(op.n[8]);
  if (nd > 0) {
    const int32_t* seqs = op.s[3] >= 0 ? reinterpret_cast<const int32_t*>(arena + op.s[3]) : nullptr;
    cuda::DecodeSplit split{static_cast<int>(op.n[9]), static_cast<int>(op.n[10]), op.n[11] != 0};
    cuda::launch_decode_attention(a, seqs, nd, split, static_cast<float*>(const_cast<void*>(op.p[4])), s);
  }
  if (nw > 0) {
    cuda::launch_prefill_attention(a, reinterpret_cast<const cuda::PrefillWork*>(arena + op.s[4]), nw, s);
  }
}

void CudaBackend::execute(const OpRecord& op, const uint8_t* arena, cudaStream_t s) {
  auto staged_i32 = [&](int i) { return reinterpret_cast<const int32_t*>(arena + op.s[i]); };
  auto mut = [](const void* p) { return const_cast<void*>(p); };
  const Elem elem = static_cast<Elem>(op.elem);
  switch (op.kind) {
    case OpKind::kEmbedding:
      cuda::launch_embedding(op.p[0], staged_i32(0), static_cast<int>(op.n[0]), op.n[1], op.n[2], op.f[0], mut(op.p[1]), s);
      break;
    case OpKind::kLinear: {
      const int64_t n = op.n[0], m = op.n[1], k = op.n[2];
      const auto* bias = static_cast<const float*>(op.p[2]);
      const bool aligned = cuda::aligned16(op.p[0]) && cuda::aligned16(op.p[1]);
      if (aligned && cuda::gemv_supported(n, k)) {
        cuda::launch_gemv(op.p[0], op.p[1], bias, static_cast<int>(n), m, k, mut(op.p[3]), elem, s);
      } else {
        gemm_.run(op.p[0], op.p[1], mut(op.p[3]), n, m, k, elem, s);
        if (bias != nullptr) cuda::launch_add_bias(mut(op.p[3]), bias, n, m, elem, s);
      }
      break;
    }
    case OpKind::kMultiGemv:
    case OpKind::kGemvGated:
      exec_gemv(op, s);
      break;
    case OpKind::kRmsNorm:
      cuda::launch_rms_norm(op.p[0], static_cast<const float*>(op.p[1]), op.f[0], op.n[0], op.n[1], mut(op.p[2]), s);
      break;
    case OpKind::kAddRmsNorm:
      cuda::launch_add_rms_norm(mut(op.p[0]), op.p[1], static_cast<const float*>(op.p[2]), op.f[0], op.n[0], op.n[1],
                                mut(op.p[3]), s);
      break;
    case OpKind::kAdd:
      cuda::launch_add(mut(op.p[0]), op.p[1], op.n[0], elem, s);
      break;
    case OpKind::kRopeWriteKv:
      cuda::launch_rope_write_kv(mut(op.p[0]), mut(op.p[1]), op.p[2], mut(op.p[3]), mut(op.p[4]), staged_i32(0),
                                 reinterpret_cast<const float*>(arena + op.s[1]),
                                 reinterpret_cast<const int64_t*>(arena + op.s[2]), static_cast<int>(op.n[0]),
                                 static_cast<int>(op.n[1]), static_cast<int>(op.n[2]), static_cast<int>(op.n[3]),
                                 static_cast<int>(op.n[4]), op.n[5] != 0, op.f[0], op.n[7], s);
      break;
    case OpKind::kRope:
      cuda::launch_rope(mut(op.p[0]), mut(op.p[1]), staged_i32(0), reinterpret_cast<const float*>(arena + op.s[1]),
                        static_cast<int>(op.n[0]), static_cast<int>(op.n[1]), static_cast<int>(op.n[2]),
                        static_cast<int>(op.n[3]), static_cast<int>(op.n[4]), op.n[5] != 0, op.f[0], s);
      break;
    case OpKind::kWriteKv:
      cuda::launch_write_kv(op.p[0], op.p[1], mut(op.p[2]), mut(op.p[3]), reinterpret_cast<const int64_t*>(arena + op.s[0]),
                            static_cast<int>(op.n[0]), op.n[1], op.n[2], s);
      break;
    case OpKind::kDecodeAttention:
    case OpKind::kPrefillAttention:
      exec_attention(op, arena, s);
      break;
    case OpKind::kGatedAct:
      cuda::launch_gated_activation(op.p[0], op.p[1], op.n[1] != 0, op.n[0], mut(op.p[2]), s);
      break;
    case OpKind::kSoftcap:
      cuda::launch_softcap(mut(op.p[0]), op.f[0], op.n[0], elem, s);
      break;
    case OpKind::kGather:
      cuda::launch_gather_rows(op.p[0], staged_i32(0), static_cast<int>(op.n[0]), op.n[1], op.n[2], mut(op.p[1]), s);
      break;
    case OpKind::kNumKinds:
      KVASIR_CHECK_MSG(false, "not an op");
      break;
    case OpKind::kSample:
      cuda::launch_sample(static_cast<const float*>(op.p[0]), static_cast<int>(op.n[0]), op.n[1],
                          reinterpret_cast<const cuda::SamplingRowParams*>(arena + op.s[0]),
                          static_cast<int32_t*>(mut(op.p[1])), s);
      break;
  }
}

}  // namespace kvasir
