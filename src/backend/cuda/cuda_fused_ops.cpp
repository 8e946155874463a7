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
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gguf_kernels.h"
#include "backend/cuda/l2_prefetch_slot.h"
#include "backend/kv_cache_scales.h"
#include "quant/block_formats.h"

namespace kvasir {
namespace {

bool is_dev(const Tensor& t) { return t.device == Device::kCuda; }

bool writes(const cuda::MultiGemvOp& g, const void* y) {
  for (int i = 0; i < g.num_proj; ++i) {
    if (g.proj[i].y == y || g.proj[i].residual == y) return true;
  }
  return g.normed_out == y;
}

// The record turned into a zeroed one of another kind, as StepQueue::add() would make it.
void reset(OpRecord& r, OpKind kind) {
  std::memset(&r, 0, sizeof(r));
  r.kind = kind;
}

}  // namespace

void CudaBackend::linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) {
  if (w.int4 != nullptr) {
    linear_w4a16(x, w, bias, out);
  } else if (w.dtype == DType::kF8E4M3) {
    linear_fp8(x, w, bias, out);
  } else if (cuda::gguf_kernel_type(w.dtype)) {
    linear_gguf(x, w, bias, out);
  } else {
    linear_bf16(x, w, bias, out);
  }
  prefetch_linear_weights(w, x.rows());
}

// A decode-sized linear right after a decode attention (the o projection): its weights are pulled
// into L2 from right after the linear before it (before the RoPE / KV write that precedes the
// attention), while DRAM would otherwise idle (KVASIR_CUDA_L2_PREFETCH_MB, up to that many MB of
// each weight; 0: off). With KVASIR_CUDA_L2_PREFETCH_EVERY=1, every decode-sized linear's weights
// the same way, whatever lies between (an A/B: the W4A16 GEMVs leave DRAM 40-70% idle). Codes,
// then their scales, within the budget; the projections of one gap share one record.
void CudaBackend::prefetch_linear_weights(const Tensor& w, int64_t rows) {
  const int64_t budget = int64_t{tuning_.recording.l2_prefetch_mb} << 20;
  if (budget <= 0 || rows > cuda::kL2PrefetchMaxRows) return;
  const auto slot = cuda::l2_prefetch_slot([&](size_t i) { return queue_->record(i).kind; }, queue_->size(),
                                           tuning_.recording.l2_prefetch_every);
  if (!slot) return;
  const size_t existing = slot->existing;
  cuda::L2PrefetchRanges r = existing > 0 ? queue_->record(existing - 1).l2_prefetch : cuda::L2PrefetchRanges{};
  int64_t left = budget;
  auto add = [&](const void* p, int64_t bytes) {
    bytes = std::min(bytes, left) / 16 * 16;
    if (p == nullptr || bytes <= 0 || r.num_ranges == cuda::kL2PrefetchRanges || !cuda::aligned16(p)) return;
    r.ptr[r.num_ranges] = p;
    r.bytes[r.num_ranges++] = bytes;
    left -= bytes;
  };
  add(w.data, static_cast<int64_t>(w.nbytes()));
  if (w.int4 != nullptr) {
    const int64_t groups_x_rows = w.int4->num_groups * w.int4->out_features;
    add(w.int4->scales, static_cast<int64_t>(*row_bytes(w.int4->scale_dtype, groups_x_rows)));
    add(w.int4->zeros, groups_x_rows);
  } else if (w.weight_scales != nullptr) {
    add(w.weight_scales, w.rows() * static_cast<int64_t>(sizeof(float)));
  }
  if (r.num_ranges == 0) return;
  if (existing > 0) {
    queue_->record(existing - 1).l2_prefetch = r;
  } else {
    queue_->insert(slot->insert_at, OpKind::kL2Prefetch, true).l2_prefetch = r;
  }
}

void CudaBackend::linear_bf16(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) {
  const int64_t n = x.rows(), k = x.cols(), m = w.rows();
  KVASIR_CHECK(is_dev(x) && is_dev(w) && is_dev(out) && x.dtype == DType::kBF16 && w.dtype == DType::kBF16);
  KVASIR_CHECK(w.cols() == k && out.cols() == m && out.rows() == n);
  if (bias != nullptr) KVASIR_CHECK(bias->dtype == DType::kF32 && bias->numel() == m && is_dev(*bias));
  const int32_t elem = static_cast<int32_t>(elem_of(out.dtype));
  if (!(fuse_ && cuda::gemv_supported(n, k) && cuda::aligned16(x.data) && cuda::aligned16(w.data) &&
        out.data != x.data)) {
    OpRecord& rec = queue_->add(OpKind::kLinear, true);
    rec.elem = elem;
    cuda::LinearOp& r = rec.linear;
    r.x = x.data;
    r.w = w.data;
    r.bias = bias != nullptr ? static_cast<const float*>(bias->data) : nullptr;
    r.out = out.data;
    r.rows = n;
    r.out_features = m;
    r.in_features = k;
    return;
  }
  OpRecord* last = queue_->last();
  // Another projection of the same input joins the previous GEMV (q/k/v, gate/up).
  if (last != nullptr && last->kind == OpKind::kMultiGemv && last->gemv.named_input == x.data &&
      last->gemv.rows == n && last->gemv.in_features == k && last->elem == elem &&
      last->gemv.num_proj < cuda::kGemvMaxOutputs && !writes(last->gemv, out.data)) {
    cuda::MultiGemvOp& g = last->gemv;
    cuda::GemvProjection& pr = g.proj[g.num_proj];
    pr.w = w.data;
    pr.bias = bias != nullptr ? static_cast<const float*>(bias->data) : nullptr;
    pr.y = out.data;
    pr.out_features = m;
    ++g.num_proj;
    return;
  }
  // A norm whose output is this input is folded in: the GEMV reads the un-normed rows and
  // still writes the normed ones.
  if (fuse_norm_ && last != nullptr && last->kind == OpKind::kRmsNorm && last->rms_norm.out == x.data &&
      last->rms_norm.rows == n && last->rms_norm.cols == k && last->rms_norm.x != x.data &&
      cuda::aligned16(last->rms_norm.x) && n * k * 2 <= cuda::kGemvNormSmemMax) {
    const cuda::RmsNormOp norm = last->rms_norm;
    reset(*last, OpKind::kMultiGemv);
    cuda::MultiGemvOp& g = last->gemv;
    g.input = norm.x;
    g.norm_weight = norm.weight;
    g.normed_out = x.data;
    g.eps = norm.eps;
  } else {
    queue_->add(OpKind::kMultiGemv, true).gemv.input = x.data;
  }
  OpRecord& rec = *queue_->last();
  rec.elem = elem;
  cuda::MultiGemvOp& g = rec.gemv;
  g.named_input = x.data;
  g.proj[0].w = w.data;
  g.proj[0].bias = bias != nullptr ? static_cast<const float*>(bias->data) : nullptr;
  g.proj[0].y = out.data;
  g.proj[0].out_features = m;
  g.rows = n;
  g.in_features = k;
  g.num_proj = 1;
}

void CudaBackend::rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  KVASIR_CHECK(x.dtype == DType::kBF16 && out.dtype == DType::kBF16 && w.dtype == DType::kF32);
  KVASIR_CHECK(w.numel() == x.cols() && out.numel() == x.numel() && is_dev(x) && is_dev(w));
  OpRecord* last = queue_->last();
  if (fuse_ && last != nullptr && last->kind == OpKind::kAdd && last->add.a == x.data &&
      last->elem == static_cast<int32_t>(Elem::kBf16) && last->add.numel == x.numel()) {
    // add(x, o) then rms_norm(x): the residual add of one block and the next block's norm.
    const void* o = last->add.b;
    reset(*last, OpKind::kAddRmsNorm);
    cuda::AddRmsNormOp& r = last->add_rms_norm;
    r.residual = x.data;
    r.x = o;
    r.weight = static_cast<const float*>(w.data);
    r.out = out.data;
    r.rows = x.rows();
    r.cols = x.cols();
    r.eps = eps;
    return;
  }
  cuda::RmsNormOp& r = queue_->add(OpKind::kRmsNorm, true).rms_norm;
  r.x = x.data;
  r.weight = static_cast<const float*>(w.data);
  r.out = out.data;
  r.rows = x.rows();
  r.cols = x.cols();
  r.eps = eps;
}

// A single-projection GEMV that wrote `y` can add it into `residual` itself.
static bool fold_residual(OpRecord* last, const void* y, void* residual, int64_t numel) {
  if (last == nullptr || last->kind != OpKind::kMultiGemv) return false;
  cuda::MultiGemvOp& g = last->gemv;
  if (g.num_proj != 1 || g.proj[0].y != y || g.proj[0].residual != nullptr ||
      last->elem != static_cast<int32_t>(Elem::kBf16) || g.rows * g.proj[0].out_features != numel ||
      g.input == residual || g.named_input == residual) {
    return false;
  }
  g.proj[0].residual = residual;
  return true;
}

void CudaBackend::add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  KVASIR_CHECK(residual.dtype == DType::kBF16 && x.dtype == DType::kBF16 && out.dtype == DType::kBF16);
  KVASIR_CHECK(w.dtype == DType::kF32 && w.numel() == residual.cols() && x.numel() == residual.numel());
  if (fuse_norm_ && fold_residual(queue_->last(), x.data, residual.data, residual.numel())) {
    rms_norm(residual, w, eps, out);  // a plain norm record the next GEMV can fold in
    return;
  }
  cuda::AddRmsNormOp& r = queue_->add(OpKind::kAddRmsNorm, true).add_rms_norm;
  r.residual = residual.data;
  r.x = x.data;
  r.weight = static_cast<const float*>(w.data);
  r.out = out.data;
  r.rows = residual.rows();
  r.cols = residual.cols();
  r.eps = eps;
}

void CudaBackend::add(Tensor& a, const Tensor& b) {
  KVASIR_CHECK(a.numel() == b.numel() && a.dtype == b.dtype);
  if (fuse_norm_ && a.dtype == DType::kBF16 && fold_residual(queue_->last(), b.data, a.data, a.numel())) return;
  OpRecord& rec = queue_->add(OpKind::kAdd, true);
  rec.elem = static_cast<int32_t>(elem_of(a.dtype));
  rec.add.a = a.data;
  rec.add.b = b.data;
  rec.add.numel = a.numel();
}

OpRecord* CudaBackend::gated_fold_target(OpKind kind, const Tensor& gate, GateActivation act, const Tensor& out) {
  OpRecord* last = queue_->last();
  if (!fuse_ || last == nullptr || last->kind != kind || out.data != gate.data ||
      (act != GateActivation::kSilu && act != GateActivation::kGeluTanh)) {
    return nullptr;
  }
  return last;
}

void CudaBackend::gated_activation(const Tensor& gate, const Tensor& up, GateActivation act, Tensor& out) {
  KVASIR_CHECK(gate.numel() == up.numel() && out.numel() == gate.numel());
  KVASIR_CHECK(gate.dtype == DType::kBF16 && up.dtype == DType::kBF16 && out.dtype == DType::kBF16);
  OpRecord* last = queue_->last();
  // In place only: the unfused op leaves gate = x·wg otherwise.
  const cuda::MultiGemvOp* g = last != nullptr && last->kind == OpKind::kMultiGemv ? &last->gemv : nullptr;
  if (fuse_ && out.data == gate.data && g != nullptr && g->num_proj == 2 && g->proj[0].y == gate.data &&
      g->proj[1].y == up.data && g->proj[0].bias == nullptr && g->proj[1].bias == nullptr &&
      g->proj[0].residual == nullptr && g->proj[1].residual == nullptr &&
      g->proj[0].out_features == g->proj[1].out_features && last->elem == static_cast<int32_t>(Elem::kBf16) &&
      gate.numel() == g->rows * g->proj[0].out_features) {
    // gate = x·wg, up = x·wu, gate = act(gate) * up in one kernel (up is still written).
    const cuda::MultiGemvOp pair = *g;
    reset(*last, OpKind::kGemvGated);
    cuda::GemvGatedOp& r = last->gemv_gated;
    r.input = pair.input;
    r.norm_weight = pair.norm_weight;
    r.normed_out = pair.normed_out;
    r.w_gate = pair.proj[0].w;
    r.w_up = pair.proj[1].w;
    r.out = out.data;
    r.up_out = up.data;
    r.rows = pair.rows;
    r.out_features = pair.proj[0].out_features;
    r.in_features = pair.in_features;
    r.gelu_tanh = act == GateActivation::kGeluTanh ? 1 : 0;
    r.eps = pair.eps;
    return;
  }
  if (fold_fp8_gated_activation(gate, up, act, out)) return;
  if (fold_w4a16_gated_activation(gate, up, act, out)) return;
  if (fold_gguf_gated_activation(gate, up, act, out)) return;
  cuda::GatedActOp& r = queue_->add(OpKind::kGatedAct, true).gated_act;
  r.gate = gate.data;
  r.up = up.data;
  r.out = out.data;
  r.numel = gate.numel();
  r.gelu_tanh = act == GateActivation::kGeluTanh ? 1 : 0;
}

void CudaBackend::rope(Tensor& q, Tensor& k, const int32_t* positions, const RopeParams& p) {
  const int64_t n = q.dim(0), hd = q.dim(2);
  KVASIR_CHECK(k.dim(0) == n && k.dim(2) == hd && p.rotary_dim <= hd && p.rotary_dim % 2 == 0);
  KVASIR_CHECK(q.dtype == DType::kBF16 && k.dtype == DType::kBF16);
  // rms_norm(q heads) then rms_norm(k heads), each in place with one weight per head dim (Qwen3):
  // the RoPE kernel normalizes each head's row itself, two kernels fewer per layer.
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  float norm_eps = 0.0f;
  const OpRecord* kn = queue_->last();
  const OpRecord* qn = queue_->before_last();
  auto head_norm = [&](const OpRecord* r, const Tensor& x) {
    return r != nullptr && r->kind == OpKind::kRmsNorm && r->rms_norm.x == x.data && r->rms_norm.out == x.data &&
           r->rms_norm.cols == hd && r->rms_norm.rows == x.dim(0) * x.dim(1);
  };
  if (fuse_ && head_norm(kn, k) && head_norm(qn, q) && kn->rms_norm.eps == qn->rms_norm.eps) {
    q_norm = qn->rms_norm.weight;
    k_norm = kn->rms_norm.weight;
    norm_eps = kn->rms_norm.eps;
    queue_->drop_last();
    queue_->drop_last();
  }
  cuda::RopeOp& r = queue_->add(OpKind::kRope, true).rope;
  r.q_norm = q_norm;
  r.k_norm = k_norm;
  r.norm_eps = norm_eps;
  r.q = q.data;
  r.k = k.data;
  r.positions = queue_->stage(positions, static_cast<size_t>(n) * sizeof(int32_t));
  r.inv_freq = queue_->stage(p.inv_freq, static_cast<size_t>(p.rotary_dim / 2) * sizeof(float));
  r.num_tokens = n;
  r.num_heads = q.dim(1);
  r.num_kv_heads = k.dim(1);
  r.head_dim = hd;
  r.rotary_dim = p.rotary_dim;
  r.neox = p.neox ? 1 : 0;
  r.attention_factor = p.attention_factor;
}

void CudaBackend::write_kv(const Tensor& k, const Tensor& v, Tensor& k_cache, Tensor& v_cache,
                           const AttentionMetadata& m) {
  const int64_t row = k.dim(1) * k.dim(2);
  const int64_t num_slots = k_cache.dim(0) * k_cache.dim(1);
  KVASIR_CHECK(k_cache.dim(2) * k_cache.dim(3) == row && v.numel() == k.numel());
  const cuda::KvCacheType codes = kv_cache_type_of(k_cache.dtype);
  KVASIR_CHECK(k.dtype == DType::kBF16 && v.dtype == DType::kBF16 && v_cache.dtype == k_cache.dtype);
  if (codes != cuda::KvCacheType::kBf16 && (k_cache.cache_scale == 0.0f || v_cache.cache_scale == 0.0f)) {
    // Backend::calculates_kv_scales. The records fold a cache's scales in as constants (the write's
    // divisor, attention's factors), so they must be known here, at recording: the ops recorded so
    // far run and K and V come back (once per layer, at the cache's first write: a prefill, never a
    // captured step). bf16 widens exactly, so the scales are the CPU's for the same K and V.
    std::vector<uint16_t> kh(static_cast<size_t>(k.numel())), vh(kh.size());
    copy_to_host(k, kh.data());
    copy_to_host(v, vh.data());
    set_calculated_kv_scales(kh.data(), vh.data(), m, row, quant::bf16_to_f32, k_cache, v_cache);
  }
  KVASIR_CHECK_MSG(k_cache.cache_scale > 0.0f && v_cache.cache_scale > 0.0f &&
                       (codes != cuda::KvCacheType::kBf16 || (k_cache.cache_scale == 1.0f && v_cache.cache_scale == 1.0f)),
                   "write_kv: only an FP8 cache is scaled, by a positive scale");
  for (int t = 0; t < m.num_tokens; ++t) KVASIR_CHECK(m.slot_mapping[t] < num_slots);
  const int64_t slots = queue_->stage(m.slot_mapping, static_cast<size_t>(m.num_tokens) * sizeof(int64_t));
  OpRecord* last = queue_->last();
  // The fused rope + write stores bf16 rows: an FP8 cache takes the separate write (which encodes).
  if (fuse_ && codes == cuda::KvCacheType::kBf16 && last != nullptr && last->kind == OpKind::kRope && last->rope.k == k.data &&
      last->rope.num_tokens == m.num_tokens && last->rope.num_kv_heads * last->rope.head_dim == row &&
      cuda::aligned16(k.data) && cuda::aligned16(v.data) && row % 8 == 0) {
    // The rotated k goes straight to the cache with v (the k tensor is rotated in place as before).
    last->kind = OpKind::kRopeWriteKv;
    cuda::RopeOp& r = last->rope;
    r.v = v.data;
    r.k_cache = k_cache.data;
    r.v_cache = v_cache.data;
    r.slot_mapping = slots;
    r.kv_row = row;
    r.num_slots = num_slots;
    return;
  }
  cuda::WriteKvOp& r = queue_->add(OpKind::kWriteKv, true).write_kv;
  r.k = k.data;
  r.v = v.data;
  r.k_cache = k_cache.data;
  r.v_cache = v_cache.data;
  r.slot_mapping = slots;
  r.num_tokens = m.num_tokens;
  r.row = row;
  r.num_slots = num_slots;
  r.kv_cache = static_cast<int32_t>(codes);
  r.k_scale = k_cache.cache_scale;
  r.v_scale = v_cache.cache_scale;
}

void CudaBackend::exec_multi_gemv(const cuda::MultiGemvOp& op, Elem elem, cudaStream_t s) {
  const cuda::GemvInput in{op.input, op.norm_weight, op.eps, op.normed_out};
  cuda::GemvOut outs[cuda::kGemvMaxOutputs];
  const int num = static_cast<int>(op.num_proj);
  for (int i = 0; i < num; ++i) {
    const cuda::GemvProjection& p = op.proj[i];
    outs[i] = {p.w, p.bias, p.y, p.out_features, p.residual};
  }
  cuda::launch_gemv_multi(in, outs, num, static_cast<int>(op.rows), op.in_features, elem, s);
}

void CudaBackend::exec_gemv_gated(const cuda::GemvGatedOp& op, cudaStream_t s) {
  const cuda::GemvInput in{op.input, op.norm_weight, op.eps, op.normed_out};
  cuda::launch_gemv_gated(in, op.w_gate, op.w_up, static_cast<int>(op.rows), op.out_features, op.in_features,
                          op.gelu_tanh != 0, op.out, op.up_out, s);
}

}  // namespace kvasir
