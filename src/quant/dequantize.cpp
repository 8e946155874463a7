// Scalar references: GGML block formats -> f32, and f32 -> GGML's Q8 formats. The fast paths
// must reproduce these results bit for bit (same operation order, no fused multiply-add: the
// library builds with -ffp-contract=off).
#include "quant/dequantize.h"

#include <cmath>
#include <cstring>

#include "common/check.h"
#include "quant/block_formats.h"
#include "quant/fp8.h"

namespace kvasir::quant {
namespace {

template <typename B>
const B* blocks(const void* src) {
  return static_cast<const B*>(src);
}

void deq_q4_0(const BlockQ4_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = fp16_to_f32(b[i].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>((b[i].qs[j] & 0x0f) - 8) * d;
      y[j + 16] = static_cast<float>((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void deq_q4_1(const BlockQ4_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = fp16_to_f32(b[i].d), m = fp16_to_f32(b[i].m);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(b[i].qs[j] & 0x0f) * d + m;
      y[j + 16] = static_cast<float>(b[i].qs[j] >> 4) * d + m;
    }
  }
}

template <typename B>
uint32_t qh_bits(const B& b) {
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  return qh;
}

void deq_q5_0(const BlockQ5_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = fp16_to_f32(b[i].d);
    const uint32_t qh = qh_bits(b[i]);
    for (int j = 0; j < 16; ++j) {
      const int lo = (b[i].qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (b[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      y[j] = static_cast<float>(lo - 16) * d;
      y[j + 16] = static_cast<float>(hi - 16) * d;
    }
  }
}

void deq_q5_1(const BlockQ5_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = fp16_to_f32(b[i].d), m = fp16_to_f32(b[i].m);
    const uint32_t qh = qh_bits(b[i]);
    for (int j = 0; j < 16; ++j) {
      const int lo = (b[i].qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (b[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      y[j] = static_cast<float>(lo) * d + m;
      y[j + 16] = static_cast<float>(hi) * d + m;
    }
  }
}

void deq_q8_0(const BlockQ8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = fp16_to_f32(b[i].d);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(b[i].qs[j]) * d;
  }
}

void deq_q8_1(const BlockQ8_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = fp16_to_f32(b[i].d);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(b[i].qs[j]) * d;
  }
}

void deq_q2_k(const BlockQ2_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(b[i].d), dmin = fp16_to_f32(b[i].dmin);
    const uint8_t* q = b[i].qs;
    int is = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part) {  // two 16-element groups per shift
          const uint8_t sc = b[i].scales[is++];
          const float dl = d * static_cast<float>(sc & 0x0f), ml = dmin * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l + 16 * part] >> shift) & 3) - ml;
        }
      }
    }
  }
}

// The 16 6-bit scales of a Q3_K super-block, minus their bias of 32.
void q3k_scales(const uint8_t* s, int* out) {
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? (s[j] & 0x0f) : (s[j - 8] >> 4);
    const int high = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
    out[j] = (low | (high << 4)) - 32;
  }
}

void deq_q3_k(const BlockQ3_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(b[i].d);
    int sc[16];
    q3k_scales(b[i].scales, sc);
    const uint8_t* q = b[i].qs;
    int is = 0;
    int bit = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, ++bit) {
        for (int part = 0; part < 2; ++part) {
          const float dl = d * static_cast<float>(sc[is++]);
          for (int l = 0; l < 16; ++l) {
            const int idx = l + 16 * part;
            const int lowbits = (q[idx] >> shift) & 3;
            const int sub = (b[i].hmask[idx] >> bit) & 1 ? 0 : 4;
            *y++ = dl * static_cast<float>(lowbits - sub);
          }
        }
      }
    }
  }
}

void deq_q4_k(const BlockQ4_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(b[i].d), dmin = fp16_to_f32(b[i].dmin);
    const uint8_t* q = b[i].qs;
    for (int j = 0; j < 8; j += 2, q += 32) {
      int sc0, m0, sc1, m1;
      kquant_scale_min(b[i].scales, j, &sc0, &m0);
      kquant_scale_min(b[i].scales, j + 1, &sc1, &m1);
      const float d0 = d * static_cast<float>(sc0), n0 = dmin * static_cast<float>(m0);
      const float d1 = d * static_cast<float>(sc1), n1 = dmin * static_cast<float>(m1);
      for (int l = 0; l < 32; ++l) *y++ = d0 * static_cast<float>(q[l] & 0x0f) - n0;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] >> 4) - n1;
    }
  }
}

void deq_q5_k(const BlockQ5_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_f32(b[i].d), dmin = fp16_to_f32(b[i].dmin);
    const uint8_t* q = b[i].qs;
    for (int j = 0; j < 8; j += 2, q += 32) {
      int sc0, m0, sc1, m1;
      kquant_scale_min(b[i].scales, j, &sc0, &m0);
      kquant_scale_min(b[i].scales, j + 1, &sc1, &m1);
      const float d0 = d * static_cast<float>(sc0), n0 = dmin * static_cast<float>(m0);
      const float d1 = d * static_cast<float>(sc1), n1 = dmin * static_cast<float>(m1);
      for (int l = 0; l < 32; ++l) {
        const int v = (q[l] & 0x0f) | (((b[i].qh[l] >> j) & 1) << 4);
        *y++ = d0 * static_cast<float>(v) - n0;
      }
      for (int l = 0; l < 32; ++l) {
        const int v = (q[l] >> 4) | (((b[i].qh[l] >> (j + 1)) & 1) << 4);
        *y++ = d1 * static_cast<float>(v) - n1;
      }
    }
  }
}

void deq_q6_k(const BlockQ6_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 256) {
    const float d = fp16_to_f32(b[i].d);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = b[i].ql + 64 * half;
      const uint8_t* qh = b[i].qh + 32 * half;
      const int8_t* sc = b[i].scales + 8 * half;
      float* out = y + 128 * half;
      for (int l = 0; l < 32; ++l) {
        const int g = l / 16;
        const int q0 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q1 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        out[l] = d * static_cast<float>(sc[g]) * static_cast<float>(q0);
        out[l + 32] = d * static_cast<float>(sc[g + 2]) * static_cast<float>(q1);
        out[l + 64] = d * static_cast<float>(sc[g + 4]) * static_cast<float>(q2);
        out[l + 96] = d * static_cast<float>(sc[g + 6]) * static_cast<float>(q3);
      }
    }
  }
}

void deq_q8_k(const BlockQ8_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 256) {
    for (int j = 0; j < 256; ++j) y[j] = b[i].d * static_cast<float>(b[i].qs[j]);
  }
}

}  // namespace

float quantize_block_q8(const float* x, int n, int8_t* q) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < n; ++j) q[j] = static_cast<int8_t>(round_half_even(x[j] * id));
  return d;
}

bool dequantize_supported(DType t) {
  switch (t) {
    case DType::kF32: case DType::kF16: case DType::kBF16:
    case DType::kQ4_0: case DType::kQ4_1: case DType::kQ5_0: case DType::kQ5_1:
    case DType::kQ8_0: case DType::kQ8_1: case DType::kQ2_K: case DType::kQ3_K:
    case DType::kQ4_K: case DType::kQ5_K: case DType::kQ6_K: case DType::kQ8_K:
    case DType::kF8E4M3: case DType::kF8E5M2:
      return true;
    default:
      return false;
  }
}

void dequantize_row(DType t, const void* src, float* y, int64_t k) {
  const int64_t nb32 = k / 32, nbk = k / 256;
  switch (t) {
    case DType::kF32: std::memcpy(y, src, static_cast<size_t>(k) * 4); return;
    case DType::kF16: {
      const auto* h = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < k; ++i) y[i] = fp16_to_f32(load_fp16(h + 2 * i));
      return;
    }
    case DType::kBF16: {
      const auto* h = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < k; ++i) y[i] = bf16_to_f32(load_fp16(h + 2 * i));
      return;
    }
    case DType::kF8E4M3: {
      const auto* c = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < k; ++i) y[i] = fp8_e4m3_to_f32(c[i]);
      return;
    }
    case DType::kF8E5M2: {
      const auto* c = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < k; ++i) y[i] = fp8_e5m2_to_f32(c[i]);
      return;
    }
    case DType::kQ4_0: deq_q4_0(blocks<BlockQ4_0>(src), y, nb32); return;
    case DType::kQ4_1: deq_q4_1(blocks<BlockQ4_1>(src), y, nb32); return;
    case DType::kQ5_0: deq_q5_0(blocks<BlockQ5_0>(src), y, nb32); return;
    case DType::kQ5_1: deq_q5_1(blocks<BlockQ5_1>(src), y, nb32); return;
    case DType::kQ8_0: deq_q8_0(blocks<BlockQ8_0>(src), y, nb32); return;
    case DType::kQ8_1: deq_q8_1(blocks<BlockQ8_1>(src), y, nb32); return;
    case DType::kQ2_K: deq_q2_k(blocks<BlockQ2_K>(src), y, nbk); return;
    case DType::kQ3_K: deq_q3_k(blocks<BlockQ3_K>(src), y, nbk); return;
    case DType::kQ4_K: deq_q4_k(blocks<BlockQ4_K>(src), y, nbk); return;
    case DType::kQ5_K: deq_q5_k(blocks<BlockQ5_K>(src), y, nbk); return;
    case DType::kQ6_K: deq_q6_k(blocks<BlockQ6_K>(src), y, nbk); return;
    case DType::kQ8_K: deq_q8_k(blocks<BlockQ8_K>(src), y, nbk); return;
    default: break;
  }
  KVASIR_CHECK_MSG(false, "dequantize_row: unsupported dtype (check dequantize_supported first)");
}

void quantize_row_q8_0(const float* x, void* dst, int64_t k) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < k / 32; ++b) y[b].d = f32_to_fp16(quantize_block_q8(x + 32 * b, 32, y[b].qs));
}

void quantize_row_q8_1(const float* x, void* dst, int64_t k) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t b = 0; b < k / 32; ++b) {
    const float d = quantize_block_q8(x + 32 * b, 32, y[b].qs);
    int sum = 0;
    for (int j = 0; j < 32; ++j) sum += y[b].qs[j];
    y[b].d = f32_to_fp16(d);
    y[b].s = f32_to_fp16(d * static_cast<float>(sum));
  }
}

void quantize_row_q8_K(const float* x, void* dst, int64_t k) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t b = 0; b < k / 256; ++b) {
    y[b].d = quantize_block_q8(x + 256 * b, 256, y[b].qs);
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += y[b].qs[16 * g + j];
      y[b].bsums[g] = static_cast<int16_t>(sum);
    }
  }
}

}  // namespace kvasir::quant
