// The two 8-bit float formats of FP8 checkpoints and KV caches: float8_e4m3fn (4 exponent bits,
// bias 7, 3 mantissa bits, no infinities, 0x7f / 0xff NaN, largest finite 448) and float8_e5m2
// (IEEE-like: bias 15, 2 mantissa bits, infinities, largest finite 57344), exactly as PyTorch's
// torch.float8_e4m3fn / torch.float8_e5m2 and the OCP FP8 spec define them. Scalar references
// only: every fast path (and the device kernels) must match these bit for bit.
// Must not know about scales or checkpoints: those are the weight formats' business.
#pragma once

#include <cstdint>

namespace kvasir::quant {

inline constexpr float kFp8E4m3Max = 448.0f;
inline constexpr float kFp8E5m2Max = 57344.0f;

// Exact: every FP8 value is a float32.
float fp8_e4m3_to_f32(uint8_t code);
float fp8_e5m2_to_f32(uint8_t code);

// Round to nearest, ties to even (PyTorch's cast). Where PyTorch's cast overflows (to NaN for
// e4m3fn at |x| >= 480, to infinity for e5m2 at |x| >= 61440) these saturate to the largest
// finite value instead, which is what every FP8 quantizer does after clamping; NaN stays NaN.
uint8_t f32_to_fp8_e4m3(float x);
uint8_t f32_to_fp8_e5m2(float x);

}  // namespace kvasir::quant
