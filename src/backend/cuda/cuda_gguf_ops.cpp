// GGUF block weights on the CUDA backend. At load, a 2-D weight of a type the GGUF kernels read
// (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K: gguf_kernels.h) is copied byte for byte, its
// blocks as the file stores them (a Q4_K_M 8B: 4.6 GiB instead of 15 GiB of bf16); every other
// type, and 3-D tensors (stacked MoE experts, which the MoE kernels read as bf16), are still
// dequantized to bf16 at load. At run time linear() records a GgufLinearOp: up to
// kGgufMmaGemvMaxRows tokens the tensor-core GEMV (gguf_mma_gemv.cu: weights decoded in registers
// into MMA fragments, one pass over the weight bytes per 16 tokens, up to three projections of one
// input and type in one launch; Q4_K and Q6_K on gguf_kquant_gemv.cu up to 16 tokens and on the
// K-quant GEMM, gguf_kquant_gemm.cu, from 17 to 64; or with KVASIR_GGUF_GEMV=exact the float32 GEMV
// up to kGgufGemvMaxRows, gguf_gemv.cu); above that the weight is dequantized into a bf16 scratch
// (in output-feature slices of at most cuda::kDequantSliceElems when larger, as an untied lm_head)
// and multiplied by cuBLASLt: a dequantization costs one read of the blocks and one write of bf16,
// small beside a prefill GEMM's tensor-core time. embedding() reads quantized token tables (and so
// a tied lm_head's table serves both) through the same decoders. The knobs are cuda_tuning.h's.
#include <algorithm>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gguf_kernels.h"

namespace kvasir {
namespace {

bool is_dev(const Tensor& t) { return t.device == Device::kCuda; }

// Decode-sized batches on the tensor-core GEMV (bf16-rounded weights, gguf_mma_gemv.cu) unless
// KVASIR_GGUF_GEMV=exact puts them on the float32 GEMV with the reference's exact weights (A/B
// runs, accuracy checks; cuda_tuning.h).
bool on_tensor_cores(DType t, const cuda::RecordingTuning& r) { return !r.gguf_exact_gemv && cuda::gguf_kernel_type(t); }

bool writes(const cuda::GgufLinearOp& op, const void* p) {
  for (int i = 0; i < op.num_proj; ++i) {
    if (op.proj[i].y == p) return true;
  }
  return false;
}

// Up to how many tokens a weight of type t goes through a GEMV (else the K-quant GEMM or
// dequantize + cuBLASLt).
int gemv_max_rows(DType t, const cuda::RecordingTuning& r) {
  return on_tensor_cores(t, r) ? r.gguf_gemv_rows : cuda::kGgufGemvMaxRows;
}

enum class GgufPath { kGemv, kKquantGemm, kDequantGemm };

// Q4_K / Q6_K past the GEMV's kGgufKquantGemvMaxRows go through the K-quant GEMM up to
// KVASIR_GGUF_KQUANT_GEMM_ROWS tokens (0: off, the GEMV then takes them up to gemv_max_rows, as
// before it); the rest, and everything larger, dequantize + cuBLASLt.
GgufPath gguf_path(DType t, int64_t n, int64_t k, const void* x, const cuda::RecordingTuning& r) {
  if (!cuda::aligned16(x)) return GgufPath::kDequantGemm;
  if (on_tensor_cores(t, r) && cuda::gguf_kquant_gemm_supported(t, k) && r.gguf_kquant_gemm_rows > 0) {
    if (n <= std::min(gemv_max_rows(t, r), cuda::kGgufKquantGemvMaxRows)) return GgufPath::kGemv;
    return n <= r.gguf_kquant_gemm_rows ? GgufPath::kKquantGemm : GgufPath::kDequantGemm;
  }
  return n <= gemv_max_rows(t, r) ? GgufPath::kGemv : GgufPath::kDequantGemm;
}

}  // namespace

bool CudaBackend::keeps_gguf(const Tensor& host) {
  return host.ndim == 2 && host.data != nullptr && cuda::gguf_kernel_type(host.dtype) && host.cols() % 8 == 0;
}

StatusOr<Tensor> CudaBackend::upload_gguf_weight(const Tensor& host, std::unique_ptr<Buffer>* owner) {
  const size_t bytes = host.nbytes();
  // allocate_weight's memory is 256-byte aligned and rows are whole blocks: the kernels' aligned loads hold.
  KVASIR_ASSIGN_OR_RETURN(auto buf, allocate_weight(bytes));
  KVASIR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(buf->data(), host.data, bytes, cudaMemcpyHostToDevice, stream_));
  // The source may be a temporary of the caller's: the copy must be done before we return.
  KVASIR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  Tensor t = host;
  t.data = buf->data();
  t.device = Device::kCuda;
  ++gguf_weights_;
  gguf_weight_bytes_ += bytes;
  *owner = std::move(buf);
  return t;
}

void CudaBackend::linear_gguf(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) {
  const int64_t n = x.rows(), k = x.cols(), m = w.rows();
  KVASIR_CHECK_MSG(is_dev(x) && is_dev(w) && is_dev(out) && x.dtype == DType::kBF16,
                   "GGUF linear: input must be bf16 on the device");
  KVASIR_CHECK_MSG(w.cols() == k && out.cols() == m && out.rows() == n && out.data != x.data,
                   "GGUF linear: weight [out, in] must match input [rows, in] and output [rows, out], another tensor");
  // Uploaded weights are; a view starting at another row of a format whose rows are not whole 16
  // bytes (Q6_K of 256 columns: 210 bytes) would not be, and the kernels' wide loads need it.
  KVASIR_CHECK_MSG(cuda::aligned16(w.data), "GGUF linear: the weight must start 16-byte aligned");
  if (bias != nullptr) KVASIR_CHECK(bias->dtype == DType::kF32 && bias->numel() == m && is_dev(*bias));
  const Elem elem = elem_of(out.dtype);
  if (n == 0 || m == 0) return;
  const GgufPath path = gguf_path(w.dtype, n, k, x.data, tuning_.recording);
  const bool gemv = path == GgufPath::kGemv, kquant_gemm = path == GgufPath::kKquantGemm;
  const auto* b = bias != nullptr ? static_cast<const float*>(bias->data) : nullptr;
  // Another projection of the same input (q/k/v, gate/up) joins the previous tensor-core GEMV or
  // K-quant GEMM: one launch for all of them (the float32 GEMV and the dequantize path take one
  // projection each).
  OpRecord* last = queue_->last();
  if (fuse_ && (kquant_gemm || (gemv && on_tensor_cores(w.dtype, tuning_.recording))) && last != nullptr &&
      last->kind == OpKind::kGgufLinear && last->elem == static_cast<int32_t>(elem)) {
    cuda::GgufLinearOp& r = last->gguf_linear;
    if (r.w_bf16 == nullptr && (r.kquant_gemm != 0) == kquant_gemm && r.gated == cuda::kGateNone && r.x == x.data && r.rows == n &&
        r.in_features == k && r.dtype == static_cast<int32_t>(w.dtype) && r.num_proj < cuda::kGgufMaxProjections &&
        !writes(r, out.data)) {
      cuda::GgufProjection& slot = r.proj[r.num_proj++];
      slot.w = w.data;
      slot.bias = b;
      slot.y = out.data;
      slot.out_features = m;
      if (kquant_gemm) plan_kquant_gemm_scratch(r);
      return;
    }
  }
  OpRecord& rec = queue_->add(OpKind::kGgufLinear, true);
  rec.elem = static_cast<int32_t>(elem);
  cuda::GgufLinearOp& r = rec.gguf_linear;
  r.x = x.data;
  cuda::GgufProjection& slot = r.proj[0];
  slot.w = w.data;
  slot.bias = b;
  slot.y = out.data;
  slot.out_features = m;
  r.num_proj = 1;
  r.rows = n;
  r.in_features = k;
  r.dtype = static_cast<int32_t>(w.dtype);
  if (gemv) return;
  if (kquant_gemm) {
    r.kquant_gemm = 1;
    plan_kquant_gemm_scratch(r);
    return;
  }
  r.chunk_rows = cuda::dequant_slice_rows(m, k);
  r.w_bf16 = device_scratch(gguf_w_bf16_, gguf_w_bf16_cap_, static_cast<size_t>(r.chunk_rows * k) * 2);
  if (r.chunk_rows < m) {
    const size_t es = elem == Elem::kF32 ? 4 : 2;
    r.out_tmp = device_scratch(gguf_out_tmp_, gguf_out_tmp_cap_, static_cast<size_t>(n * r.chunk_rows) * es);
  }
}

// gate = act(gate) * up in place after one token's gate/up on the K-quant GEMV: the GEMV's
// epilogue applies it (one launch less a layer; up is still written), as the W4A16 and FP8 GEMVs
// do. One token only: a CTA then takes gate's and up's tile, half the CTAs, which measured slower
// from a few tokens up (H100, Q4_K_M 8B decode step: batch 1 3.43 against 3.48 ms, batch 8 5.71
// against 4.94, batch 16 6.79 against 6.40; BENCHMARKS.md 2026-12-06).
bool CudaBackend::fold_gguf_gated_activation(const Tensor& gate, const Tensor& up, GateActivation act, Tensor& out) {
  OpRecord* last = gated_fold_target(OpKind::kGgufLinear, gate, act, out);
  if (last == nullptr) return false;
  cuda::GgufLinearOp& r = last->gguf_linear;
  const auto dt = static_cast<DType>(r.dtype);
  // On the K-quant GEMV.
  if (r.rows != 1 || r.w_bf16 != nullptr || r.kquant_gemm != 0 || r.gated != cuda::kGateNone ||
      !on_tensor_cores(dt, tuning_.recording) || !cuda::gguf_mma_gemv_uses_kquant(dt, r.in_features) ||
      !cuda::is_gate_up_pair(r, last->elem, gate.data, up.data, gate.numel())) {
    return false;
  }
  r.gated = static_cast<int16_t>(act == GateActivation::kGeluTanh ? cuda::kGateGeluTanh : cuda::kGateSilu);
  return true;
}

// The K-quant GEMM's split-K workspace for the projections recorded so far (grown as one joins).
void CudaBackend::plan_kquant_gemm_scratch(cuda::GgufLinearOp& r) {
  const cuda::KquantGemmPlan plan = cuda::plan_gguf_kquant_gemm(r.proj, static_cast<int>(r.num_proj),
                                                                static_cast<int>(r.rows), r.in_features, num_sms_);
  r.partial = plan.partial_floats == 0 ? nullptr
                                       : static_cast<float*>(device_scratch(gguf_partial_, gguf_partial_cap_,
                                                                            plan.partial_floats * 4));
}

void CudaBackend::exec_gguf_linear(const cuda::GgufLinearOp& op, Elem elem, cudaStream_t s) {
  const int64_t n = op.rows, k = op.in_features;
  const auto dt = static_cast<DType>(op.dtype);
  const cuda::GgufProjection& p0 = op.proj[0];
  if (op.kquant_gemm != 0) {
    cuda::launch_gguf_kquant_gemm(op.x, op.proj, static_cast<int>(op.num_proj), dt, static_cast<int>(n), k, elem,
                                  op.partial, num_sms_, s);
    return;
  }
  if (op.gated != cuda::kGateNone) {
    cuda::launch_gguf_kquant_gemv(op.x, op.proj, static_cast<int>(op.num_proj), dt, static_cast<int>(n), k, elem, s,
                                  static_cast<cuda::GateAct>(op.gated));
    return;
  }
  if (op.w_bf16 == nullptr) {
    if (on_tensor_cores(dt, tuning_.recording)) {
      cuda::launch_gguf_mma_gemv(op.x, op.proj, static_cast<int>(op.num_proj), dt, static_cast<int>(n), k, elem, s);
    } else {
      cuda::launch_gguf_gemv(op.x, p0.w, dt, p0.bias, p0.y, static_cast<int>(n), p0.out_features, k, elem, s);
    }
    return;
  }
  const int64_t m = p0.out_features;
  gemm_.run_sliced(op.x, op.w_bf16, op.out_tmp, p0.y, n, m, k, op.chunk_rows, elem, s, [&](int64_t r0, int64_t rows) {
    cuda::launch_gguf_dequantize(p0.w, dt, r0, rows, k, op.w_bf16, Elem::kBf16, s);
  });
  if (p0.bias != nullptr) cuda::launch_add_bias(p0.y, p0.bias, n, m, elem, s);
}

}  // namespace kvasir
