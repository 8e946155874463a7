// FP8 W8A8 linears on the CUDA backend. At load, a weight the quantization library marks as an FP8
// linear (Tensor::input_quant static per tensor or dynamic per token, plus per-row scales that make
// its float32 values exactly codes x scales; or no values at all for dummy weights) is kept as
// e4m3 codes with a float32 scale per output row: half the bytes of bf16. Other schemes (block
// scales, per-token-group inputs, weight-only FP8) stay on the bf16 path, dequantized at load.
// At run time linear() records an Fp8LinearOp (projections of one input merge, as the bf16 q/k/v
// GEMV does, and gate/up then take the gated activation); it runs as the FP8 GEMV up to
// kFp8GemvMaxRows tokens (bf16 activations), else as activation quantization + cuBLASLt FP8 GEMM
// with its outer-vector scaling (or, where that is unavailable, a scaling epilogue): W8A8, as the
// CPU reference computes it.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/fp8_kernels.h"

namespace kvasir {
namespace {

constexpr int64_t kConvertRows = int64_t{1} << 25;  // float32 elements per staging chunk at load

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

// The scale of a static per-tensor input, or 0 for dynamic per-token inputs.
float static_input_scale(const InputQuant& q) { return q.kind == InputQuant::Kind::kStaticTensor ? q.scale : 0.0f; }

bool writes(const cuda::Fp8LinearOp& op, const void* p) {
  for (int i = 0; i < op.num_proj; ++i) {
    if (op.proj[i].y == p) return true;
  }
  return false;
}

}  // namespace

bool CudaBackend::keeps_fp8(const Tensor& host) {
  const InputQuant::Kind kind = host.input_quant.kind;
  if (host.ndim != 2 || (kind != InputQuant::Kind::kStaticTensor && kind != InputQuant::Kind::kDynamicToken)) {
    return false;
  }
  // The GEMV's 16-code loads need rows of whole 16 bytes; cuBLASLt's FP8 GEMM wants every
  // dimension it strides over in multiples of 16 bytes (the bf16 output's rows too).
  if (host.cols() % 16 != 0 || host.rows() % 16 != 0) return false;
  return host.data == nullptr || (host.dtype == DType::kF32 && host.weight_scales != nullptr);
}

StatusOr<Tensor> CudaBackend::upload_fp8_weight(const Tensor& host, std::unique_ptr<Buffer>* owner) {
  const int64_t rows = host.rows(), cols = host.cols();
  const size_t codes_bytes = align256(static_cast<size_t>(rows * cols));
  // One allocation: the codes, then the row scales.
  KVASIR_ASSIGN_OR_RETURN(auto buf, allocate_weight(codes_bytes + static_cast<size_t>(rows) * sizeof(float)));
  auto* codes = static_cast<uint8_t*>(buf->data());
  auto* scales = reinterpret_cast<float*>(codes + codes_bytes);
  if (host.data == nullptr) {
    // Dummy weights: values uniform in [-1/sqrt(cols), 1/sqrt(cols)] as the bf16 dummies.
    const float scale = 1.0f / (std::sqrt(static_cast<float>(cols)) * 448.0f);
    cuda::launch_fill_random_fp8(codes, scales, rows, cols, dummy_seed_++, scale, stream_);
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      const float s = host.weight_scales[r];
      if (!std::isfinite(s) || s < 0.0f) {
        return invalid_argument("FP8 row scale " + std::to_string(r) + " is " + std::to_string(s) +
                                "; scales must be finite and not negative");
      }
    }
    KVASIR_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(scales, host.weight_scales, static_cast<size_t>(rows) * sizeof(float), cudaMemcpyHostToDevice, stream_));
    const int64_t chunk_rows = std::max<int64_t>(1, kConvertRows / cols);
    float* stage = nullptr;
    KVASIR_CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void**>(&stage), static_cast<size_t>(std::min(rows, chunk_rows) * cols) * sizeof(float)));
    Status st;
    for (int64_t r0 = 0; r0 < rows && st.ok(); r0 += chunk_rows) {
      const int64_t nr = std::min(chunk_rows, rows - r0);
      const float* src = static_cast<const float*>(host.data) + r0 * cols;
      const cudaError_t err = cudaMemcpyAsync(stage, src, static_cast<size_t>(nr * cols) * sizeof(float),
                                              cudaMemcpyHostToDevice, stream_);
      if (err != cudaSuccess) {
        st = internal_error(std::string("FP8 weight upload: ") + cudaGetErrorString(err));
        break;
      }
      cuda::launch_f32_to_fp8_rows(stage, scales + r0, codes + r0 * cols, nr, cols, stream_);
      const cudaError_t sync = cudaStreamSynchronize(stream_);  // the stage is reused next chunk
      if (sync != cudaSuccess) st = internal_error(std::string("FP8 weight upload: ") + cudaGetErrorString(sync));
    }
    cudaFree(stage);
    KVASIR_RETURN_IF_ERROR(st);
  }
  KVASIR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  Tensor t = host;
  t.data = codes;
  t.dtype = DType::kF8E4M3;
  t.device = Device::kCuda;
  t.weight_scales = scales;
  ++fp8_weights_;
  fp8_weight_bytes_ += static_cast<size_t>(rows * cols);
  *owner = std::move(buf);
  return t;
}

void CudaBackend::linear_fp8(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) {
  const int64_t n = x.rows(), k = x.cols(), m = w.rows();
  KVASIR_CHECK_MSG(x.device == Device::kCuda && out.device == Device::kCuda && x.dtype == DType::kBF16,
                   "FP8 linear: input must be bf16 on the device");
  KVASIR_CHECK_MSG(w.weight_scales != nullptr && w.cols() == k && out.cols() == m && out.rows() == n,
                   "FP8 linear: weight [out, in] with row scales must match input [rows, in] and output [rows, out]");
  KVASIR_CHECK_MSG(cuda::aligned16(x.data) && cuda::aligned16(w.data) && out.data != x.data,
                   "FP8 linear: input and weight must be 16-byte aligned, the output another tensor");
  if (bias != nullptr) KVASIR_CHECK(bias->dtype == DType::kF32 && bias->numel() == m && bias->device == Device::kCuda);
  const bool gemv = cuda::fp8_gemv_supported(n, k);
  KVASIR_CHECK_MSG(gemv || (out.dtype == DType::kBF16 && cuda::aligned16(out.data)),
                   "FP8 GEMM: the output must be bf16 and 16-byte aligned");
  const int32_t elem = static_cast<int32_t>(elem_of(out.dtype));
  const float static_scale = static_input_scale(w.input_quant);
  cuda::Fp8Projection pr{};
  pr.w = w.data;
  pr.w_scales = w.weight_scales;
  pr.bias = bias != nullptr ? static_cast<const float*>(bias->data) : nullptr;
  pr.y = out.data;
  pr.out_features = m;
  // Another projection of the same input (q/k/v, gate/up) joins the previous record: one GEMV
  // launch, or one activation quantization for several GEMMs.
  OpRecord* last = queue_->last();
  if (fuse_ && last != nullptr && last->kind == OpKind::kFp8Linear && last->elem == elem) {
    cuda::Fp8LinearOp& r = last->fp8_linear;
    if (r.x == x.data && r.rows == n && r.in_features == k && r.static_scale == static_scale &&
        r.gated == cuda::kGateNone && r.num_proj < cuda::kFp8MaxProjections && !writes(r, out.data)) {
      cuda::Fp8Projection& slot = r.proj[r.num_proj++];
      slot.w = pr.w;
      slot.w_scales = pr.w_scales;
      slot.bias = pr.bias;
      slot.y = pr.y;
      slot.out_features = pr.out_features;
      return;
    }
  }
  OpRecord& rec = queue_->add(OpKind::kFp8Linear, true);
  rec.elem = elem;
  cuda::Fp8LinearOp& r = rec.fp8_linear;
  r.x = x.data;
  if (!gemv) {
    const size_t codes = align256(static_cast<size_t>(n * k));
    auto* scratch = static_cast<uint8_t*>(device_scratch(fp8_act_, fp8_act_cap_, codes + static_cast<size_t>(n) * 4));
    r.x_fp8 = scratch;
    r.x_scales = reinterpret_cast<float*>(scratch + codes);
  }
  cuda::Fp8Projection& slot = r.proj[0];
  slot.w = pr.w;
  slot.w_scales = pr.w_scales;
  slot.bias = pr.bias;
  slot.y = pr.y;
  slot.out_features = pr.out_features;
  r.rows = n;
  r.in_features = k;
  r.num_proj = 1;
  r.static_scale = static_scale;
}

bool CudaBackend::fold_fp8_gated_activation(const Tensor& gate, const Tensor& up, GateActivation act, Tensor& out) {
  OpRecord* last = gated_fold_target(OpKind::kFp8Linear, gate, act, out);
  if (last == nullptr) return false;
  cuda::Fp8LinearOp& r = last->fp8_linear;
  // On the GEMV path.
  if (r.x_fp8 != nullptr || r.gated != cuda::kGateNone ||
      !cuda::is_gate_up_pair(r, last->elem, gate.data, up.data, gate.numel())) {
    return false;
  }
  r.gated = act == GateActivation::kGeluTanh ? cuda::kGateGeluTanh : cuda::kGateSilu;
  return true;
}

void CudaBackend::exec_fp8_linear(const cuda::Fp8LinearOp& op, Elem elem, cudaStream_t s) {
  const int64_t n = op.rows, k = op.in_features;
  if (op.x_fp8 == nullptr) {
    cuda::launch_fp8_gemv(op.x, op.proj, static_cast<int>(op.num_proj), static_cast<int>(n), k, elem, op.gated, s);
    return;
  }
  cuda::launch_quantize_fp8_rows(op.x, n, k, op.static_scale, op.x_fp8, op.x_scales, s);
  for (int i = 0; i < op.num_proj; ++i) {
    const cuda::Fp8Projection& p = op.proj[i];
    // The scales inside the GEMM where cuBLASLt can (no extra pass over the output), else after it.
    if (fp8_gemm_.run_scaled(op.x_fp8, p.w, op.x_scales, p.w_scales, p.y, n, p.out_features, k, s)) {
      if (p.bias != nullptr) cuda::launch_add_bias(p.y, p.bias, n, p.out_features, Elem::kBf16, s);
      continue;
    }
    fp8_gemm_.run(op.x_fp8, p.w, p.y, n, p.out_features, k, s);
    cuda::launch_fp8_scale_rows_cols(p.y, op.x_scales, p.w_scales, p.bias, n, p.out_features, s);
  }
}

}  // namespace kvasir
