#include "backend/cpu/cpu_backend.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "backend/cpu/dense_weight_dtype.h"
#include "backend/cpu/quant/dequantize.h"
#include "backend/cpu/vec_exp.h"
#include "backend/host_buffer.h"
#include "common/log.h"
#include "quant/fp8_activations.h"

namespace kvasir {
namespace {

float gelu_tanh(float x) {
  const float kAlpha = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + std::tanh(kAlpha * (x + 0.044715f * x * x * x)));
}

// Rows below this many elements in total are not worth waking the pool for.
constexpr int64_t kParallelMinElements = 1 << 14;

}  // namespace

CpuBackend::CpuBackend(const CpuBackendOptions& opts)
    : precision_(opts.precision),
      kv_dtype_(opts.kv_cache_dtype),
      calculate_kv_scales_(opts.calculate_kv_scales),
      dense_weight_dtype_(opts.dense_weight_dtype) {
  KVASIR_CHECK_MSG(kv_dtype_ == DType::kF32 || kv_dtype_ == DType::kF16 || is_fp8(kv_dtype_),
                   "CPU KV cache: float32, float16, float8_e4m3fn or float8_e5m2");
  int n = opts.num_threads > 0 ? opts.num_threads : static_cast<int>(std::thread::hardware_concurrency());
  pool_ = std::make_unique<ThreadPool>(n < 1 ? 1 : n);
  // Batches of 2 or more rows run faster on packed panels (AMX machines too, below 32 rows: the
  // AMX tile repacks its weights on every call); decode keeps reading the GGUF blocks.
  pack_weights_ = cpu::active_isa() == cpu::CpuIsa::kAvx512 || cpu::active_isa() == cpu::CpuIsa::kAmx;
  KVASIR_LOG_INFO("CPU kernels: %s%s", std::string(cpu::isa_name(cpu::active_isa())).c_str(),
                  pack_weights_ ? " (batched matmuls on panels repacked at load, 4-bit types kept 4-bit)" : "");
}

CpuBackend::~CpuBackend() = default;

std::string CpuBackend::name() const { return "cpu(" + std::to_string(pool_->num_threads()) + " threads)"; }

StatusOr<std::unique_ptr<Buffer>> CpuBackend::allocate(size_t bytes) { return allocate_host_buffer(bytes); }

StatusOr<Tensor> CpuBackend::upload_weight(const Tensor& host_weight, std::unique_ptr<Buffer>* owner) {
  owner->reset();  // read in place from the mapped file, unless --dtype converts it or panels are made
  if (dense_weight_dtype_ && dense_weight_converts(host_weight, *dense_weight_dtype_)) {
    return convert_dense_weight(host_weight, *dense_weight_dtype_, owner);
  }
  return upload_vocab_table(host_weight, owner);
}

StatusOr<Tensor> CpuBackend::upload_vocab_table(const Tensor& host_weight, std::unique_ptr<Buffer>* owner) {
  owner->reset();
  // Every weight is read by the matmul kernels (linear) or their row dequantizers (embedding,
  // the same block formats): a type they lack is refused here, at load, not by a failed check
  // in the first step.
  KVASIR_RETURN_IF_ERROR(cpu::matmul_supported(host_weight.dtype, std::max<int64_t>(host_weight.cols(), 1)));
  if (pack_weights_ && host_weight.ndim == 2 && cpu::PackedQ32::supports(host_weight.dtype) &&
      host_weight.data != nullptr) {
    *owner = cpu::PackedWeights::add(
        packed_, host_weight.data,
        cpu::PackedQ32::pack(host_weight.data, host_weight.dtype, host_weight.rows(), host_weight.cols()));
  }
  return host_weight;
}

void CpuBackend::copy_to_host(const Tensor& src, void* dst) { std::memcpy(dst, src.data, src.nbytes()); }

void CpuBackend::embedding(const Tensor& table, const int32_t* ids, int n, float scale, Tensor& out) {
  const int64_t d = table.cols();
  KVASIR_CHECK(out.cols() == d && out.rows() >= n);
  const size_t rb = table.row_bytes();
  for (int i = 0; i < n; ++i) {
    KVASIR_CHECK(ids[i] >= 0 && ids[i] < table.rows());
    float* dst = out.ptr<float>() + static_cast<size_t>(i) * d;
    cpu::dequantize_row(table.dtype, static_cast<const uint8_t*>(table.data) + rb * ids[i], dst, d);
    if (scale != 1.0f) {
      for (int64_t j = 0; j < d; ++j) dst[j] *= scale;
    }
  }
}

void CpuBackend::linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) {
  const int64_t n = x.rows(), k = x.cols(), m = w.rows();
  KVASIR_CHECK(w.cols() == k && out.cols() == m && out.rows() == n);
  // Fast mode: 16-bit activations. 8-bit ones (ActQuant::kQ8, like llama.cpp's Q8_0/Q8_K) were
  // ~1.3x faster in prefill but flipped greedy continuations against the float32 reference on
  // 15 of 20 golden prompts (SmolLM2 Q4_1); 16-bit ones agree on 20 of 20 at the same decode speed.
  // FP8 W8A8 weights: the input rounded to float8_e4m3fn on its scale first, as the FP8 GEMM
  // would see it (the weights were dequantized at load).
  const float* xin = x.ptr<float>();
  if (w.input_quant.kind != InputQuant::Kind::kNone) {
    if (input_fp8_.size() < static_cast<size_t>(n * k)) input_fp8_.resize(static_cast<size_t>(n * k));
    float* q = input_fp8_.data();
    pool_->parallel_for(n, [&](int64_t b, int64_t e) {
      quant::fake_quantize_fp8_rows(xin + b * k, e - b, k, w.input_quant, q + b * k);
    });
    xin = q;
  }
  cpu::matmul(w.data, w.dtype, m, k, xin, n, out.ptr<float>(), *pool_, act_quant(), scratch_, panels_of(w, n));
  if (bias != nullptr) add_bias(*bias, out);
}

void CpuBackend::linears(const Tensor& x, const LinearTarget* targets, int count) {
  const int64_t n = x.rows(), k = x.cols();
  bool grouped = count > 1;
  for (int i = 0; i < count && grouped; ++i) {
    const Tensor& w = *targets[i].w;
    grouped = w.dtype == targets[0].w->dtype && w.cols() == k && w.input_quant.kind == InputQuant::Kind::kNone;
  }
  if (!grouped) {
    Backend::linears(x, targets, count);
    return;
  }
  // One parallel region over every product, the activations quantized once (matmul_grouped
  // shares them between problems reading the same rows).
  constexpr int kMaxTargets = 8;
  KVASIR_CHECK(count <= kMaxTargets);
  cpu::MatmulProblem problems[kMaxTargets];
  for (int i = 0; i < count; ++i) {
    const Tensor& w = *targets[i].w;
    Tensor& out = *targets[i].out;
    KVASIR_CHECK(out.cols() == w.rows() && out.rows() == n);
    problems[i] = {w.data, w.rows(), x.ptr<float>(), n, out.ptr<float>(), panels_of(w, n)};
  }
  cpu::matmul_grouped(problems, count, targets[0].w->dtype, k, *pool_, act_quant(), scratch_);
  for (int i = 0; i < count; ++i) {
    if (targets[i].bias != nullptr) add_bias(*targets[i].bias, *targets[i].out);
  }
}

cpu::ActQuant CpuBackend::act_quant() const {
  return precision_ == MatmulPrecision::kExact ? cpu::ActQuant::kF32 : cpu::ActQuant::kQ16;
}

const cpu::PackedQ32* CpuBackend::panels_of(const Tensor& w, int64_t n) const {
  if (n <= 1 || !pack_weights_) return nullptr;
  const cpu::PackedQ32* p = packed_->find(w.data);
  // A view of part of a packed weight (same first byte, fewer rows) reads the GGUF bytes.
  return p != nullptr && p->type() == w.dtype && p->m() == w.rows() && p->k() == w.cols() ? p : nullptr;
}

void CpuBackend::add_bias(const Tensor& bias, Tensor& out) {
  const int64_t n = out.rows(), m = out.cols();
  KVASIR_CHECK(bias.dtype == DType::kF32 && bias.numel() == m);
  const float* b = bias.ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    float* row = out.ptr<float>() + i * m;
    for (int64_t j = 0; j < m; ++j) row[j] += b[j];
  }
}

// x / rms(x) * w for one row. The sum of squares runs in double (the reference sums in float32 in
// another order; double keeps our error small), eight lanes then their fixed tree, so it is
// vectorized without depending on anything but the row.
static void rms_norm_row(const float* x, const float* w, float eps, int64_t d, float* out) {
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  int64_t j = 0;
  for (; j + 8 <= d; j += 8) {
    const __m256d lo = _mm256_cvtps_pd(_mm_loadu_ps(x + j)), hi = _mm256_cvtps_pd(_mm_loadu_ps(x + j + 4));
    acc0 = _mm256_fmadd_pd(lo, lo, acc0);
    acc1 = _mm256_fmadd_pd(hi, hi, acc1);
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(acc0, acc1));
  double ss = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; j < d; ++j) ss += static_cast<double>(x[j]) * x[j];
  const float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(d)) + eps);
  const __m256 vi = _mm256_set1_ps(inv);
  j = 0;
  for (; j + 8 <= d; j += 8) {
    _mm256_storeu_ps(out + j, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + j), vi), _mm256_loadu_ps(w + j)));
  }
  for (; j < d; ++j) out[j] = x[j] * inv * w[j];
}

void CpuBackend::rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  const int64_t rows = x.rows(), d = x.cols();
  KVASIR_CHECK(w.dtype == DType::kF32 && w.numel() == d && out.numel() == x.numel());
  const float* xp = x.ptr<float>();
  const float* wp = w.ptr<float>();
  float* op = out.ptr<float>();
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) rms_norm_row(xp + r * d, wp, eps, d, op + r * d);
  };
  if (rows * d < kParallelMinElements) body(0, rows);
  else pool_->parallel_for(rows, body);
}

static void add_row(float* a, const float* b, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(a + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  for (; i < n; ++i) a[i] += b[i];
}

// One parallel region: each row's residual add, then its norm.
void CpuBackend::add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  const int64_t rows = residual.rows(), d = residual.cols();
  KVASIR_CHECK(x.numel() == residual.numel() && w.dtype == DType::kF32 && w.numel() == d &&
               out.numel() == residual.numel());
  float* rp = residual.ptr<float>();
  const float* xp = x.ptr<float>();
  const float* wp = w.ptr<float>();
  float* op = out.ptr<float>();
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      add_row(rp + r * d, xp + r * d, d);
      rms_norm_row(rp + r * d, wp, eps, d, op + r * d);
    }
  };
  if (rows * d < kParallelMinElements) body(0, rows);
  else pool_->parallel_for(rows, body);
}

void CpuBackend::add(Tensor& a, const Tensor& b) {
  KVASIR_CHECK(a.numel() == b.numel());
  float* ap = a.ptr<float>();
  const float* bp = b.ptr<float>();
  const int64_t n = a.numel();
  if (n < kParallelMinElements) {
    add_row(ap, bp, n);
  } else {
    pool_->parallel_for(n, [&](int64_t b, int64_t e) { add_row(ap + b, bp + b, e - b); });
  }
}

// cos and sin (times the attention factor) of position pos for each of the rotary pairs: every
// head of the token rotates by the same angles.
static void rope_angles(int32_t pos, const RopeParams& p, float* cs) {
  const int half = p.rotary_dim / 2;
  for (int i = 0; i < half; ++i) {
    const float theta = static_cast<float>(pos) * p.inv_freq[i];
    cs[2 * i] = std::cos(theta) * p.attention_factor;
    cs[2 * i + 1] = std::sin(theta) * p.attention_factor;
  }
}

static void rope_heads(float* x, int64_t heads, int64_t hd, const float* cs, const RopeParams& p) {
  const int half = p.rotary_dim / 2;
  for (int64_t h = 0; h < heads; ++h) {
    float* v = x + h * hd;
    for (int i = 0; i < half; ++i) {
      const float c = cs[2 * i], s = cs[2 * i + 1];
      const int i0 = p.neox ? i : 2 * i;
      const int i1 = p.neox ? i + half : 2 * i + 1;
      const float a = v[i0], b = v[i1];
      v[i0] = a * c - b * s;
      v[i1] = b * c + a * s;
    }
  }
}

void CpuBackend::rope(Tensor& q, Tensor& k, const int32_t* positions, const RopeParams& p) {
  const int64_t n = q.dim(0), hd = q.dim(2);
  KVASIR_CHECK(k.dim(0) == n && k.dim(2) == hd && p.rotary_dim <= hd && p.rotary_dim % 2 == 0);
  auto body = [&](int64_t b, int64_t e) {
    thread_local std::vector<float> cs;
    cs.resize(static_cast<size_t>(p.rotary_dim));
    for (int64_t t = b; t < e; ++t) {
      rope_angles(positions[t], p, cs.data());
      rope_heads(q.ptr<float>() + t * q.dim(1) * hd, q.dim(1), hd, cs.data(), p);
      rope_heads(k.ptr<float>() + t * k.dim(1) * hd, k.dim(1), hd, cs.data(), p);
    }
  };
  if (n < 4) body(0, n);
  else pool_->parallel_for(n, body);
}

void CpuBackend::gated_activation(const Tensor& gate, const Tensor& up, GateActivation act, Tensor& out) {
  KVASIR_CHECK(gate.numel() == up.numel() && out.numel() == gate.numel());
  KVASIR_CHECK_MSG(act != GateActivation::kSwigluOai, "gated_activation: SwiGLU-OAI takes its alpha and limit "
                                                      "through moe_experts only");
  const float* g = gate.ptr<float>();
  const float* u = up.ptr<float>();
  float* o = out.ptr<float>();
  auto body = [&](int64_t b, int64_t e) {
    if (act == GateActivation::kSilu) {
      int64_t i = b;
      const __m256 one = _mm256_set1_ps(1.0f);
      for (; i + 8 <= e; i += 8) {
        const __m256 gv = _mm256_loadu_ps(g + i);
        const __m256 den = _mm256_add_ps(one, cpu::exp8(_mm256_sub_ps(_mm256_setzero_ps(), gv)));
        _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_div_ps(gv, den), _mm256_loadu_ps(u + i)));
      }
      for (; i < e; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    } else {
      for (int64_t i = b; i < e; ++i) o[i] = gelu_tanh(g[i]) * u[i];
    }
  };
  const int64_t n = gate.numel();
  if (n < kParallelMinElements) body(0, n);
  else pool_->parallel_for(n, body);
}

void CpuBackend::softcap(Tensor& x, float cap) {
  float* p = x.ptr<float>();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) p[i] = cap * std::tanh(p[i] / cap);
}

void CpuBackend::gather_rows(const Tensor& src, const int32_t* rows, int k, Tensor& out) {
  const size_t rb = src.row_bytes();
  KVASIR_CHECK(out.row_bytes() == rb && out.rows() >= k);
  for (int i = 0; i < k; ++i) {
    KVASIR_CHECK(rows[i] >= 0 && rows[i] < src.rows());
    std::memcpy(static_cast<uint8_t*>(out.data) + rb * i, static_cast<const uint8_t*>(src.data) + rb * rows[i], rb);
  }
}

}  // namespace kvasir
