// Weight block formats: the GGML block layouts (byte-exact with GGUF files) and the scalar
// fp16/bf16 conversions every backend, loader and reference shares. Field order and sizes are the
// file format: never reorder. This is where further formats (FP8 E4M3/E5M2 with per-tensor or
// per-block scales, INT4 GPTQ/AWQ groups with zero points) get their layouts. The id, name, block
// size and bytes per block of each format are core/dtype.h's DTypeInfo (the loaders size tensors
// with it); quant_formats_test pins the structs here to that table.
// Must not hold kernels or run-time dispatch; blocks are only 2-byte aligned inside a row, so read
// them through unaligned loads (memcpy or loadu), never by casting to wider types.
#pragma once

#include <cstdint>
#include <cstring>

namespace kvasir::quant {

constexpr int kQK32 = 32;   // elements per block of the legacy formats (Q4_0 ... Q8_1)
constexpr int kQKK = 256;   // elements per super-block of the K-quants
constexpr int kKScaleBytes = 12;

using fp16_t = uint16_t;

struct BlockQ4_0 { fp16_t d; uint8_t qs[16]; };                 // (nib - 8) * d
struct BlockQ4_1 { fp16_t d, m; uint8_t qs[16]; };              // nib * d + m
struct BlockQ5_0 { fp16_t d; uint8_t qh[4]; uint8_t qs[16]; };  // (nib | hbit << 4) - 16) * d
struct BlockQ5_1 { fp16_t d, m; uint8_t qh[4]; uint8_t qs[16]; };
struct BlockQ8_0 { fp16_t d; int8_t qs[32]; };
struct BlockQ8_1 { fp16_t d, s; int8_t qs[32]; };               // s = d * sum(qs)

struct BlockQ2_K { uint8_t scales[16]; uint8_t qs[64]; fp16_t d, dmin; };
struct BlockQ3_K { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; fp16_t d; };
struct BlockQ4_K { fp16_t d, dmin; uint8_t scales[kKScaleBytes]; uint8_t qs[128]; };
struct BlockQ5_K { fp16_t d, dmin; uint8_t scales[kKScaleBytes]; uint8_t qh[32]; uint8_t qs[128]; };
struct BlockQ6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; fp16_t d; };
struct BlockQ8_K { float d; int8_t qs[256]; int16_t bsums[16]; };  // bsums: sums of 16 qs

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292);

inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t bits_from_f32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// IEEE binary16 -> binary32, exact for every input (subnormals, inf, nan included).
inline float fp16_to_f32(fp16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (man << 13));
  if (exp != 0) return f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
  // Subnormal or zero: man * 2^-24, exact in float.
  const float v = static_cast<float>(man) * (1.0f / 16777216.0f);
  return sign ? -v : v;
}

// binary32 -> binary16, round to nearest even (what F16C's vcvtps2ph with imm 0 does).
inline fp16_t f32_to_fp16(float f) {
  const uint32_t x = bits_from_f32(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return static_cast<fp16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
  if (ax >= 0x477ff000u) return static_cast<fp16_t>(sign | 0x7c00u);  // rounds past 65504
  if (ax < 0x38800000u) {
    // Result is subnormal (or zero): scale by 2^24 and round to an integer mantissa.
    const float v = f32_from_bits(ax) * 16777216.0f;
    // nearbyint under the default rounding mode is round-half-even.
    const float r = __builtin_nearbyintf(v);
    return static_cast<fp16_t>(sign | static_cast<uint32_t>(r));
  }
  const uint32_t rounded = ax + 0xfffu + ((ax >> 13) & 1u);  // round half to even at bit 13
  return static_cast<fp16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

inline float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

inline fp16_t load_fp16(const void* p) {
  fp16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

// Unpacks the 6-bit (scale, min) pair j (0..7) of a Q4_K/Q5_K super-block.
inline void kquant_scale_min(const uint8_t* s, int j, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

}  // namespace kvasir::quant
