// The ops the CUDA backend fuses while recording a step. A decode layer arrives as
//   rms_norm, linear q, linear k, linear v, rope, write_kv, attention, linear o, add_rms_norm,
//   linear gate, linear up, gated_activation, linear down, add
// and leaves as: [norm] [q/k/v GEMV] [rope + KV write] [attention] [o GEMV] [add + norm]
// [gate/up GEMV + activation] [down GEMV] (+ the add, fused with the next layer's norm). Each
// rewrite looks only at the step's last record, and every intermediate tensor is still written
// (h, up, o), so the ops keep their meaning for any caller. GEMV fusions apply to decode-sized
// batches (<= kGemvMaxRows rows); larger batches go to cuBLASLt. KVASIR_CUDA_FUSE=0 records one
// op per call. KVASIR_CUDA_FUSE_NORM=1 also folds the norms into the GEMVs' input and the
// residual adds into their epilogues (fewer kernels, but measured slower on the H200: per-warp
// norms lost bandwidth to the extra loads; the per-CTA shared-memory norm, 4.93 vs 4.89 ms per
// batch-1 step, to its prologue and registers).
#include <cstring>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"

namespace kvasir {
namespace {

// kMultiGemv layout: p[0] input, p[1] norm weights, p[2] normed-input output, p[3] the input
// tensor the caller named (h when the norm was folded in); per projection i: p[4 + 4i] w,
// p[5 + 4i] bias, p[6 + 4i] y, p[7 + 4i] residual. n[0] rows, n[1] k, n[2 + i] m_i, n[5] count.
constexpr int kSeg = 4;

bool is_dev(const Tensor& t) { return t.device == Device::kCuda; }

bool writes(const OpRecord& r, const void* y) {
  for (int i = 0; i < r.n[5]; ++i) {
    if (r.p[6 + kSeg * i] == y || r.p[7 + kSeg * i] == y) return true;
  }
  return r.p[2] == y;
}

void reset(OpRecord& r, OpKind kind) {
  std::memset(&r, 0, sizeof(r));
  for (int64_t& s : r.s) s = -1;
  r.kind = kind;
}

}  // namespace

void CudaBackend::linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) {
  const int64_t n = x.rows(), k = x.cols(), m = w.rows();
  KVASIR_CHECK(is_dev(x) && is_dev(w) && is_dev(out) && x.dtype == DType::kBF16 && w.dtype == DType::kBF16);
  KVASIR_CHECK(w.cols() == k && out.cols() == m && out.rows() == n);
  if (bias != nullptr) KVASIR_CHECK(bias->dtype == DType::kF32 && bias->numel() == m && is_dev(*bias));
  const int32_t elem = static_cast<int32_t>(elem_of(out.dtype));
  if (!(fuse_ && cuda::gemv_supported(n, k) && cuda::aligned16(x.data) && cuda::aligned16(w.data) &&
        out.data != x.data)) {
    OpRecord& r = queue_->add(OpKind::kLinear, true);
    r.elem = elem;
    r.p[0] = x.data;
    r.p[1] = w.data;
    r.p[2] = bias != nullptr ? bias->data : nullptr;
    r.p[3] = out.data;
    r.n[0] = n;
    r.n[1] = m;
    r.n[2] = k;
    return;
  }
  OpRecord* last = queue_->last();
  // Another projection of the same input joins the previous GEMV (q/k/v, gate/up).
  if (last != nullptr && last->kind == OpKind::kMultiGemv && last->p[3] == x.data && last->n[0] == n &&
      last->n[1] == k && last->elem == elem && last->n[5] < cuda::kGemvMaxOutputs && !writes(*last, out.data)) {
    const int i = static_cast<int>(last->n[5]);
    last->p[4 + kSeg * i] = w.data;
    last->p[5 + kSeg * i] = bias != nullptr ? bias->data : nullptr;
    last->p[6 + kSeg * i] = out.data;
    last->n[2 + i] = m;
    last->n[5] = i + 1;
    return;
  }
  // A norm whose output is this input is folded in: the GEMV reads the un-normed rows and
  // still writes the normed ones.
  if (fuse_norm_ && last != nullptr && last->kind == OpKind::kRmsNorm && last->p[2] == x.data && last->n[0] == n &&
      last->n[1] == k && last->p[0] != x.data && cuda::aligned16(last->p[0]) &&
      n * k * 2 <= cuda::kGemvNormSmemMax) {
    const void* src = last->p[0];
    const void* g = last->p[1];
    const float eps = last->f[0];
    OpRecord& r = *last;
    reset(r, OpKind::kMultiGemv);
    r.p[0] = src;
    r.p[1] = g;
    r.p[2] = x.data;
    r.f[0] = eps;
  } else {
    OpRecord& r = queue_->add(OpKind::kMultiGemv, true);
    r.p[0] = x.data;
  }
  OpRecord& r = *queue_->last();
  r.elem = elem;
  r.p[3] = x.data;
  r.p[4] = w.data;
  r.p[5] = bias != nullptr ? bias->data : nullptr;
  r.p[6] = out.data;
  r.n[0] = n;
  r.n[1] = k;
  r.n[2] = m;
  r.n[5] = 1;
}

void CudaBackend::rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  KVASIR_CHECK(x.dtype == DType::kBF16 && out.dtype == DType::kBF16 && w.dtype == DType::kF32);
  KVASIR_CHECK(w.numel() == x.cols() && out.numel() == x.numel() && is_dev(x) && is_dev(w));
  OpRecord* last = queue_->last();
  if (fuse_ && last != nullptr && last->kind == OpKind::kAdd && last->p[0] == x.data &&
      last->elem == static_cast<int32_t>(Elem::kBf16) && last->n[0] == x.numel()) {
    // add(x, o) then rms_norm(x): the residual add of one block and the next block's norm.
    const void* o = last->p[1];
    OpRecord& r = *last;
    reset(r, OpKind::kAddRmsNorm);
    r.p[0] = x.data;
    r.p[1] = o;
    r.p[2] = w.data;
    r.p[3] = out.data;
    r.n[0] = x.rows();
    r.n[1] = x.cols();
    r.f[0] = eps;
    return;
  }
  OpRecord& r = queue_->add(OpKind::kRmsNorm, true);
  r.p[0] = x.data;
  r.p[1] = w.data;
  r.p[2] = out.data;
  r.n[0] = x.rows();
  r.n[1] = x.cols();
  r.f[0] = eps;
}

// A single-projection GEMV that wrote `y` can add it into `residual` itself.
static bool fold_residual(OpRecord* last, const void* y, void* residual, int64_t numel) {
  if (last == nullptr || last->kind != OpKind::kMultiGemv || last->n[5] != 1 || last->p[6] != y ||
      last->p[7] != nullptr || last->elem != static_cast<int32_t>(Elem::kBf16) || last->n[0] * last->n[2] != numel ||
      last->p[0] == residual || last->p[3] == residual) {
    return false;
  }
  last->p[7] = residual;
  return true;
}

void CudaBackend::add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  KVASIR_CHECK(residual.dtype == DType::kBF16 && x.dtype == DType::kBF16 && out.dtype == DType::kBF16);
  KVASIR_CHECK(w.dtype == DType::kF32 && w.numel() == residual.cols() && x.numel() == residual.numel());
  if (fuse_norm_ && fold_residual(queue_->last(), x.data, residual.data, residual.numel())) {
    rms_norm(residual, w, eps, out);  // a plain norm record the next GEMV can fold in
    return;
  }
  OpRecord& r = queue_->add(OpKind::kAddRmsNorm, true);
  r.p[0] = residual.data;
  r.p[1] = x.data;
  r.p[2] = w.data;
  r.p[3] = out.data;
  r.n[0] = residual.rows();
  r.n[1] = residual.cols();
  r.f[0] = eps;
}

void CudaBackend::add(Tensor& a, const Tensor& b) {
  KVASIR_CHECK(a.numel() == b.numel() && a.dtype == b.dtype);
  if (fuse_norm_ && a.dtype == DType::kBF16 && fold_residual(queue_->last(), b.data, a.data, a.numel())) return;
  OpRecord& r = queue_->add(OpKind::kAdd, true);
  r.elem = static_cast<int32_t>(elem_of(a.dtype));
  r.p[0] = a.data;
  r.p[1] = b.data;
  r.n[0] = a.numel();
}

void CudaBackend::gated_activation(const Tensor& gate, const Tensor& up, GateActivation act, Tensor& out) {
  KVASIR_CHECK(gate.numel() == up.numel() && out.numel() == gate.numel());
  KVASIR_CHECK(gate.dtype == DType::kBF16 && up.dtype == DType::kBF16 && out.dtype == DType::kBF16);
  OpRecord* last = queue_->last();
  // In place only: the unfused op leaves gate = x·wg otherwise.
  if (fuse_ && out.data == gate.data && last != nullptr && last->kind == OpKind::kMultiGemv && last->n[5] == 2 &&
      last->p[6] == gate.data && last->p[6 + kSeg] == up.data && last->p[5] == nullptr &&
      last->p[5 + kSeg] == nullptr && last->p[7] == nullptr && last->p[7 + kSeg] == nullptr &&
      last->n[2] == last->n[3] && last->elem == static_cast<int32_t>(Elem::kBf16) &&
      gate.numel() == last->n[0] * last->n[2]) {
    // gate = x·wg, up = x·wu, gate = act(gate) * up in one kernel (up is still written).
    const OpRecord g = *last;
    OpRecord& r = *last;
    reset(r, OpKind::kGemvGated);
    r.p[0] = g.p[0];
    r.p[1] = g.p[1];
    r.p[2] = g.p[2];
    r.p[3] = g.p[4];
    r.p[4] = g.p[4 + kSeg];
    r.p[5] = out.data;
    r.p[6] = up.data;
    r.n[0] = g.n[0];
    r.n[1] = g.n[2];
    r.n[2] = g.n[1];
    r.n[3] = act == GateActivation::kGeluTanh ? 1 : 0;
    r.f[0] = g.f[0];
    return;
  }
  OpRecord& r = queue_->add(OpKind::kGatedAct, true);
  r.p[0] = gate.data;
  r.p[1] = up.data;
  r.p[2] = out.data;
  r.n[0] = gate.numel();
  r.n[1] = act == GateActivation::kGeluTanh ? 1 : 0;
}

void CudaBackend::rope(Tensor& q, Tensor& k, const int32_t* positions, const RopeParams& p) {
  const int64_t n = q.dim(0), hd = q.dim(2);
  KVASIR_CHECK(k.dim(0) == n && k.dim(2) == hd && p.rotary_dim <= hd && p.rotary_dim % 2 == 0);
  KVASIR_CHECK(q.dtype == DType::kBF16 && k.dtype == DType::kBF16);
  OpRecord& r = queue_->add(OpKind::kRope, true);
  r.p[0] = q.data;
  r.p[1] = k.data;
  r.s[0] = queue_->stage(positions, static_cast<size_t>(n) * sizeof(int32_t));
  r.s[1] = queue_->stage(p.inv_freq, static_cast<size_t>(p.rotary_dim / 2) * sizeof(float));
  r.n[0] = n;
  r.n[1] = q.dim(1);
  r.n[2] = k.dim(1);
  r.n[3] = hd;
  r.n[4] = p.rotary_dim;
  r.n[5] = p.neox ? 1 : 0;
  r.f[0] = p.attention_factor;
}

void CudaBackend::write_kv(const Tensor& k, const Tensor& v, Tensor& k_cache, Tensor& v_cache,
                           const AttentionMetadata& m) {
  const int64_t row = k.dim(1) * k.dim(2);
  const int64_t num_slots = k_cache.dim(0) * k_cache.dim(1);
  KVASIR_CHECK(k_cache.dim(2) * k_cache.dim(3) == row && v.numel() == k.numel());
  KVASIR_CHECK(k.dtype == DType::kBF16 && k_cache.dtype == DType::kBF16 && v_cache.dtype == DType::kBF16);
  for (int t = 0; t < m.num_tokens; ++t) KVASIR_CHECK(m.slot_mapping[t] < num_slots);
  const int64_t slots = queue_->stage(m.slot_mapping, static_cast<size_t>(m.num_tokens) * sizeof(int64_t));
  OpRecord* last = queue_->last();
  if (fuse_ && last != nullptr && last->kind == OpKind::kRope && last->p[1] == k.data && last->n[0] == m.num_tokens &&
      last->n[2] * last->n[3] == row && cuda::aligned16(k.data) && cuda::aligned16(v.data) && row % 8 == 0) {
    // The rotated k goes straight to the cache with v (the k tensor is rotated in place as before).
    last->kind = OpKind::kRopeWriteKv;
    last->p[2] = v.data;
    last->p[3] = k_cache.data;
    last->p[4] = v_cache.data;
    last->s[2] = slots;
    last->n[6] = row;
    last->n[7] = num_slots;
    return;
  }
  OpRecord& r = queue_->add(OpKind::kWriteKv, true);
  r.p[0] = k.data;
  r.p[1] = v.data;
  r.p[2] = k_cache.data;
  r.p[3] = v_cache.data;
  r.s[0] = slots;
  r.n[0] = m.num_tokens;
  r.n[1] = row;
  r.n[2] = num_slots;
}

void CudaBackend::exec_gemv(const OpRecord& op, cudaStream_t s) {
  auto mut = [](const void* p) { return const_cast<void*>(p); };
  const cuda::GemvInput in{op.p[0], static_cast<const float*>(op.p[1]), op.f[0], mut(op.p[2])};
  if (op.kind == OpKind::kGemvGated) {
    cuda::launch_gemv_gated(in, op.p[3], op.p[4], static_cast<int>(op.n[0]), op.n[1], op.n[2], op.n[3] != 0,
                            mut(op.p[5]), mut(op.p[6]), s);
    return;
  }
  cuda::GemvOut outs[cuda::kGemvMaxOutputs];
  const int num = static_cast<int>(op.n[5]);
  for (int i = 0; i < num; ++i) {
    outs[i] = {op.p[4 + kSeg * i], static_cast<const float*>(op.p[5 + kSeg * i]), mut(op.p[6 + kSeg * i]), op.n[2 + i],
               mut(op.p[7 + kSeg * i])};
  }
  cuda::launch_gemv_multi(in, outs, num, static_cast<int>(op.n[0]), op.n[1], static_cast<Elem>(op.elem), s);
}

}  // namespace kvasir
