#include "quant/fp8_activations.h"

#include <cmath>

#include "common/check.h"
#include "quant/fp8.h"

namespace kvasir::quant {
namespace {

void round_span(const float* x, int64_t n, float scale, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = scale == 0.0f ? 0.0f : fp8_e4m3_to_f32(f32_to_fp8_e4m3(x[i] / scale)) * scale;
  }
}

float amax_over_448(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::fmax(m, std::fabs(x[i]));
  return m / kFp8E4m3Max;
}

}  // namespace

void fake_quantize_fp8_rows(const float* x, int64_t rows, int64_t cols, const InputQuant& q, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* orow = out + r * cols;
    switch (q.kind) {
      case InputQuant::Kind::kNone:
        if (orow != xr) for (int64_t c = 0; c < cols; ++c) orow[c] = xr[c];
        break;
      case InputQuant::Kind::kStaticTensor:
        round_span(xr, cols, q.scale, orow);
        break;
      case InputQuant::Kind::kDynamicToken:
        round_span(xr, cols, amax_over_448(xr, cols), orow);
        break;
      case InputQuant::Kind::kDynamicGroup: {
        KVASIR_CHECK(q.group_size > 0 && cols % q.group_size == 0);
        for (int64_t g = 0; g < cols; g += q.group_size) {
          round_span(xr + g, q.group_size, amax_over_448(xr + g, q.group_size), orow + g);
        }
        break;
      }
    }
  }
}

}  // namespace kvasir::quant
