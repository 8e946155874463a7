// W4A16 linears on the CUDA backend. At load, a weight that comes with its packed 4-bit checkpoint
// tensors (Tensor::packed_int: GPTQ with or without act-order, AWQ GEMM, compressed-tensors
// pack-quantized; or no values at all for dummy weights of such a scheme) is reordered on the host
// into the tile layout of quant/w4a16_layout.h and kept as 4-bit codes with its group scales (as
// stored), zero points and act-order permutation: a quarter of the bf16 bytes. 8-bit integer
// weights are refused by name (no kernel here reads them); 4-bit shapes the layout cannot tile stay
// on the bf16 path, said once in the log.
// At run time linear() records a W4a16LinearOp (projections of one input merge, as the bf16 and
// FP8 GEMVs do, and gate/up then take the gated activation); it runs as the W4A16 GEMV up to
// kW4a16GemvMaxRows tokens, as the W4A16 GEMM (w4a16_kernels.h) up to KVASIR_W4A16_DEQUANT_ROWS,
// and from there, where the product is bound by tensor-core time, by cuBLASLt on the weight
// dequantized to bf16 (in slices of 128-row multiples when larger than the scratch, as the GGUF
// path does): one read of the codes and one write of bf16, small beside a long prefill's GEMM, but
// the weight is rounded to bf16 there (vLLM's GPTQ path does the same above its kernels' batch).
#include <cmath>
#include <cstring>
#include <mutex>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/w4a16_kernels.h"
#include "common/log.h"
#include "quant/w4a16_layout.h"

namespace kvasir {
namespace {

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

// The scratch of the dequantizing path: the slice, then (sliced weights only) the slice's product.
size_t dequant_scratch_bytes(int64_t n, int64_t m, int64_t k, Elem out) {
  const int64_t slice = cuda::dequant_slice_rows(m, k);
  const size_t es = out == Elem::kF32 ? 4 : 2;
  return align256(static_cast<size_t>(slice * k) * 2) + (slice < m ? static_cast<size_t>(n * slice) * es : 0);
}

size_t scale_size(DType t) { return t == DType::kF32 ? 4 : 2; }

int32_t scale_type_of(DType t) {
  return t == DType::kF32 ? cuda::kW4a16ScaleF32 : t == DType::kBF16 ? cuda::kW4a16ScaleBf16 : cuda::kW4a16ScaleF16;
}

// The device memory of one kept weight and its description (Tensor::int4 points here).
class Int4WeightBuffer final : public Buffer {
 public:
  Int4WeightBuffer(std::unique_ptr<Buffer> mem, const Int4Weight& desc) : mem_(std::move(mem)), desc_(desc) {}
  void* data() override { return mem_->data(); }
  size_t size() const override { return mem_->size(); }
  const Int4Weight* desc() const { return &desc_; }

 private:
  std::unique_ptr<Buffer> mem_;
  Int4Weight desc_;
};

bool writes(const cuda::W4a16LinearOp& op, const void* p) {
  for (int i = 0; i < op.num_proj; ++i) {
    if (op.proj[i].y == p) return true;
  }
  return false;
}

cuda::W4a16Projection projection(const cuda::W4a16LinearOp& op, int i) {
  const cuda::W4a16RecordProjection& r = op.proj[i];
  cuda::W4a16Projection p{};
  p.codes = r.codes;
  p.scales = r.scales;
  p.zeros = r.zeros;
  p.bias = r.bias;
  p.y = r.y;
  p.out_features = r.out_features;
  p.group_size = op.group_size;
  p.scale_type = op.scale_type;
  return p;
}

}  // namespace

StatusOr<bool> CudaBackend::keeps_int4(const Tensor& host) const {
  if (host.packed_int == nullptr || host.ndim != 2) return false;
  const quant::PackedIntWeight& p = *host.packed_int;
  if (p.bits != 4) {
    return unimplemented(std::to_string(p.bits) + "-bit integer weight-only weights (W" + std::to_string(p.bits) +
                         "A16, " + int_weight_layout_name(p.layout) +
                         ") have no CUDA kernel; the CUDA backend runs 4-bit ones (W4A16); use --device cpu for these");
  }
  const Status st = quant::w4a16_supported(p);
  if (!st.ok()) {
    static std::once_flag said;
    std::call_once(said, [&] {
      KVASIR_LOG_WARN("%s: this weight (and any other like it) runs dequantized in bf16 on CUDA", st.message().c_str());
    });
    return false;
  }
  return true;
}

StatusOr<Tensor> CudaBackend::upload_int4_weight(const Tensor& host, std::unique_ptr<Buffer>* owner) {
  const quant::PackedIntWeight& p = *host.packed_int;
  const int64_t n = p.out_features, k = p.in_features;
  if (host.rows() != n || host.cols() != k) {
    return internal_error("int4 weight: tensor [" + std::to_string(host.rows()) + ", " + std::to_string(host.cols()) +
                          "] does not match its packed form");
  }
  const bool dummy = p.qweight == nullptr;
  quant::W4a16Weight w;
  if (dummy) {
    // Dummy weights of the scheme: f16 scales, symmetric, no act-order; codes filled below.
    w.out_features = n;
    w.in_features = k;
    w.group_size = p.group_size;
    w.num_groups = p.num_groups;
    w.scale_dtype = DType::kF16;
  } else {
    KVASIR_ASSIGN_OR_RETURN(w, quant::make_w4a16_weight(p));
  }
  const size_t codes_bytes = static_cast<size_t>(n * k / 2);
  const size_t scales_bytes = static_cast<size_t>(w.num_groups * n) * scale_size(w.scale_dtype);
  const size_t scales_at = align256(codes_bytes), zeros_at = scales_at + align256(scales_bytes);
  const size_t perm_at = zeros_at + align256(w.zeros.size());
  KVASIR_ASSIGN_OR_RETURN(auto mem, allocate_weight(perm_at + w.perm.size() * sizeof(int32_t)));
  auto* base = static_cast<uint8_t*>(mem->data());
  Int4Weight desc;
  desc.out_features = n;
  desc.in_features = k;
  desc.group_size = w.group_size;
  desc.num_groups = w.num_groups;
  desc.scale_dtype = w.scale_dtype;
  desc.scales = base + scales_at;
  desc.zeros = w.zeros.empty() ? nullptr : base + zeros_at;
  desc.perm = w.perm.empty() ? nullptr : reinterpret_cast<const int32_t*>(base + perm_at);
  if (dummy) {
    // Values (code - 8) * scale uniform-ish in [-1/sqrt(k), 1/sqrt(k)], as the bf16 dummies.
    const float scale = 1.0f / (8.0f * std::sqrt(static_cast<float>(k)));
    cuda::launch_fill_random_w4a16(base, base + scales_at, static_cast<int64_t>(codes_bytes / 4), w.num_groups * n,
                                   dummy_seed_++, scale, stream_);
  } else {
    KVASIR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(base, w.codes.data(), codes_bytes, cudaMemcpyHostToDevice, stream_));
    KVASIR_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(base + scales_at, w.scales.data(), scales_bytes, cudaMemcpyHostToDevice, stream_));
    if (!w.zeros.empty()) {
      KVASIR_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(base + zeros_at, w.zeros.data(), w.zeros.size(), cudaMemcpyHostToDevice, stream_));
    }
    if (!w.perm.empty()) {
      KVASIR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(base + perm_at, w.perm.data(), w.perm.size() * sizeof(int32_t),
                                                  cudaMemcpyHostToDevice, stream_));
    }
  }
  // The host vectors are freed on return: the copies must be done first.
  KVASIR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  auto buf = std::make_unique<Int4WeightBuffer>(std::move(mem), desc);
  Tensor t = Tensor::make(base, DType::kI32, {n, k / 8}, Device::kCuda);
  t.input_quant = host.input_quant;
  t.int4 = buf->desc();
  ++int4_weights_;
  int4_weight_bytes_ += codes_bytes + scales_bytes + w.zeros.size();
  *owner = std::move(buf);
  return t;
}

namespace {

// Whether a W4A16 linear of n tokens runs the GEMV (else a GEMM): recording and execution ask the
// same question.
bool on_gemv(const cuda::RecordingTuning& t, int64_t n) { return n <= t.w4a16_gemv_rows; }

}  // namespace

void CudaBackend::linear_w4a16(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) {
  const Int4Weight& q = *w.int4;
  const int64_t n = x.rows(), k = x.cols(), m = q.out_features;
  KVASIR_CHECK_MSG(x.device == Device::kCuda && out.device == Device::kCuda && x.dtype == DType::kBF16,
                   "W4A16 linear: input must be bf16 on the device");
  KVASIR_CHECK_MSG(q.in_features == k && out.cols() == m && out.rows() == n,
                   "W4A16 linear: weight [out, in] must match input [rows, in] and output [rows, out]");
  KVASIR_CHECK_MSG(cuda::aligned16(x.data) && cuda::aligned16(out.data) && out.data != x.data,
                   "W4A16 linear: input and output must be 16-byte aligned, the output another tensor");
  if (bias != nullptr) KVASIR_CHECK(bias->dtype == DType::kF32 && bias->numel() == m && bias->device == Device::kCuda);
  const int32_t elem = static_cast<int32_t>(elem_of(out.dtype));
  const bool gemm = !on_gemv(tuning_.recording, n);
  const bool dequant = n >= tuning_.recording.w4a16_dequant_rows && gemm;
  const size_t ws_bytes = dequant ? dequant_scratch_bytes(n, m, k, elem_of(out.dtype)) : 0;
  const int stream_rows = cuda::kernel_tuning().w4a16_wgmma_stream_rows;
  if (!dequant && gemm && stream_rows > 0 && n >= stream_rows && w4a16_stream_.base == nullptr) {
    // Once, for the first GEMM that may run stream-K, outside any capture (ops are recorded before
    // they run): the tickets start at zero and every launch leaves them so.
    const size_t bytes = cuda::w4a16_stream_workspace_bytes(num_sms_);
    void* base = device_scratch(w4a16_stream_mem_.ptr, w4a16_stream_mem_.cap, bytes);
    KVASIR_CUDA_CHECK(cudaMemset(base, 0, bytes));
    KVASIR_CUDA_CHECK(cudaDeviceSynchronize());
    w4a16_stream_ = {base, num_sms_};
  }
  cuda::W4a16RecordProjection pr{};
  pr.codes = w.data;
  pr.scales = q.scales;
  pr.zeros = q.zeros;
  pr.bias = bias != nullptr ? static_cast<const float*>(bias->data) : nullptr;
  pr.y = out.data;
  pr.out_features = m;
  const int32_t scale_type = scale_type_of(q.scale_dtype);
  static_assert(cuda::kW4a16MaxProjections < 128, "num_proj is an int16");
  // Another projection of the same input (q/k/v, gate/up) joins the previous record: one GEMV
  // launch for all of them. Act-order weights have their own column order and stay alone.
  OpRecord* last = queue_->last();
  if (fuse_ && q.perm == nullptr && last != nullptr && last->kind == OpKind::kW4a16Linear && last->elem == elem) {
    cuda::W4a16LinearOp& r = last->w4a16_linear;
    if (r.x == x.data && r.perm == nullptr && r.rows == n && r.in_features == k && r.group_size == q.group_size &&
        r.scale_type == scale_type && r.gated == cuda::kGateNone && r.num_proj < cuda::kW4a16MaxProjections &&
        !writes(r, out.data)) {
      cuda::W4a16RecordProjection& slot = r.proj[r.num_proj++];
      slot.codes = pr.codes;
      slot.scales = pr.scales;
      slot.zeros = pr.zeros;
      slot.bias = pr.bias;
      slot.y = pr.y;
      slot.out_features = pr.out_features;
      if (dequant) {  // one scratch for the projections, dequantized one after the other
        size_t need = 0;
        for (int i = 0; i < r.num_proj; ++i) {
          need = std::max(need, dequant_scratch_bytes(n, r.proj[i].out_features, k, elem_of(out.dtype)));
        }
        r.workspace = device_scratch(w4a16_ws_, w4a16_ws_cap_, need);
      }
      return;
    }
  }
  OpRecord& rec = queue_->add(OpKind::kW4a16Linear, true);
  rec.elem = elem;
  cuda::W4a16LinearOp& r = rec.w4a16_linear;
  r.x = x.data;
  r.perm = q.perm;
  if (q.perm != nullptr) r.x_perm = device_scratch(w4a16_perm_, w4a16_perm_cap_, static_cast<size_t>(n * k) * 2);
  if (dequant) r.workspace = device_scratch(w4a16_ws_, w4a16_ws_cap_, ws_bytes);
  cuda::W4a16RecordProjection& slot = r.proj[0];
  slot.codes = pr.codes;
  slot.scales = pr.scales;
  slot.zeros = pr.zeros;
  slot.bias = pr.bias;
  slot.y = pr.y;
  slot.out_features = pr.out_features;
  r.rows = n;
  r.in_features = static_cast<int32_t>(k);
  r.group_size = static_cast<int32_t>(q.group_size);
  r.num_proj = 1;
  r.gated = cuda::kGateNone;
  r.scale_type = static_cast<int16_t>(scale_type);
}

bool CudaBackend::fold_w4a16_gated_activation(const Tensor& gate, const Tensor& up, GateActivation act, Tensor& out) {
  OpRecord* last = gated_fold_target(OpKind::kW4a16Linear, gate, act, out);
  if (last == nullptr) return false;
  cuda::W4a16LinearOp& r = last->w4a16_linear;
  // On the GEMV path.
  if (!on_gemv(tuning_.recording, r.rows) || r.gated != cuda::kGateNone ||
      !cuda::is_gate_up_pair(r, last->elem, gate.data, up.data, gate.numel())) {
    return false;
  }
  r.gated = static_cast<int16_t>(act == GateActivation::kGeluTanh ? cuda::kGateGeluTanh : cuda::kGateSilu);
  return true;
}

void CudaBackend::exec_w4a16_linear(const cuda::W4a16LinearOp& op, Elem elem, cudaStream_t s) {
  const int64_t n = op.rows, k = op.in_features;
  const void* x = op.x;
  if (op.perm != nullptr) {
    cuda::launch_w4a16_permute_columns(op.x, op.perm, op.x_perm, n, k, s);
    x = op.x_perm;
  }
  cuda::W4a16Projection proj[cuda::kW4a16MaxProjections];
  for (int i = 0; i < op.num_proj; ++i) proj[i] = projection(op, i);
  if (on_gemv(tuning_.recording, n)) {
    cuda::launch_w4a16_gemv(x, proj, op.num_proj, static_cast<int>(n), k, elem, op.gated, s);
    return;
  }
  if (op.workspace == nullptr) {
    cuda::launch_w4a16_gemm(x, proj, op.num_proj, n, k, elem, num_sms_,
                            w4a16_stream_.base != nullptr ? &w4a16_stream_ : nullptr, s);
    return;
  }
  for (int i = 0; i < op.num_proj; ++i) {
    const cuda::W4a16Projection& p = proj[i];
    const int64_t m = p.out_features, slice = cuda::dequant_slice_rows(m, k);
    void* w = op.workspace;
    void* tmp = static_cast<uint8_t*>(op.workspace) + align256(static_cast<size_t>(slice * k) * 2);
    gemm_.run_sliced(x, w, tmp, p.y, n, m, k, slice, elem, s,
                     [&](int64_t r0, int64_t rows) { cuda::launch_w4a16_dequantize(p, r0, rows, k, w, s); });
    if (p.bias != nullptr) cuda::launch_add_bias(p.y, p.bias, n, m, elem, s);
  }
}

}  // namespace kvasir
