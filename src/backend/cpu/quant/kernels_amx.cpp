// AMX-INT8 tiles for batched matmuls with 32-element block weights (Q4_0, Q4_1, Q8_0): one call
// computes up to 16 weight rows against activation rows in groups of 16, the integer block dot
// products on the tile unit (TDPBSUD: signed activations x unsigned weight values), the float
// scaling on AVX-512. Built with AMX flags for this file only; called only after cpu_isa.cpp has
// checked cpuid and obtained the kernel's permission to use tile data (amx_available()).
// Must reproduce q32_tile_cols_z's float arithmetic exactly (see "The shared float order" in
// kern_q32_z.inc): a row's result may not depend on which kernel the batch size picked.
#include "backend/cpu/quant/kernels.h"

#ifdef KVASIR_NO_AMX
namespace kvasir::cpu::amx {
TileFn amx_tile_fn(DType) { return nullptr; }
}  // namespace kvasir::cpu::amx
#else
#include <immintrin.h>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace kvasir::cpu::amx {

#define KVASIR_AVX512 1
// This file is an AVX-512 compilation too: it takes the weight-format helpers (gather_dm16, the
// format constants) from the same sources, in its own namespace.
// NOLINTBEGIN(bugprone-suspicious-include)
#include "backend/cpu/quant/simd.inc"
#include "backend/cpu/quant/kern_q32.inc"
// NOLINTEND(bugprone-suspicious-include)

namespace {

constexpr int kRows = static_cast<int>(kAmxTileRows);  // weight rows per call (tile N)
constexpr int kCols = static_cast<int>(kAmxTileCols);  // activation rows per tile (tile M)
static_assert(kRows == 16 && kCols == 16, "one tile: 16 x 16 int32 results");
constexpr long kStageBlocks = 8;  // blocks whose tile results are staged before the float epilogue
constexpr size_t kBBytes = 512;   // one block of 16 weight rows in the VNNI layout (8 x 64 bytes)

struct alignas(64) TileConfig {
  unsigned char palette = 1;
  unsigned char start_row = 0;
  unsigned char reserved[14] = {};
  unsigned short colsb[16] = {};
  unsigned char rows[16] = {};
};

// tmm0..3: int32 results (two blocks x hi/lo plane), tmm4/5: activation hi/lo (16 rows x 32
// bytes), tmm6/7: weights of the two blocks (8 rows of 4-byte groups x 16 weight rows).
void load_config() {
  TileConfig c;
  for (int t = 0; t < 4; ++t) {
    c.rows[t] = 16;
    c.colsb[t] = 64;
  }
  for (int t = 4; t < 6; ++t) {
    c.rows[t] = 16;
    c.colsb[t] = 32;
  }
  for (int t = 6; t < 8; ++t) {
    c.rows[t] = 8;
    c.colsb[t] = 64;
  }
  // GCC's _tile_loadconfig tells the compiler it reads only 8 bytes of the config: without this
  // barrier the stores to colsb/rows are dropped as dead and the tile instructions fault.
  __asm__ __volatile__("" : : "r"(&c) : "memory");
  _tile_loadconfig(&c);
}

// 16 rows x 4 dwords (rows 4q..4q+3 in z[q], each row's 16 bytes in order) -> 4 x 16 dwords:
// out[kk] lane r = dword kk of row r.
KVASIR_INLINE void transpose_16x4(const __m512i z[4], __m512i out[4]) {
  // Stage 1: h[p][s], p = pair of inputs (z0,z1) or (z2,z3), s = dword pair (0,1) or (2,3):
  // lane 8 * (kk - 2s) + i = dword kk of the pair's row i (0..7).
  alignas(64) static constexpr int kI1[2][16] = {
      {0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29},
      {2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31}};
  alignas(64) static constexpr int kI2[2][16] = {
      {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
      {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}};
  const __m512i i10 = _mm512_load_si512(kI1[0]), i11 = _mm512_load_si512(kI1[1]);
  const __m512i i20 = _mm512_load_si512(kI2[0]), i21 = _mm512_load_si512(kI2[1]);
  const __m512i a0 = _mm512_permutex2var_epi32(z[0], i10, z[1]);  // dwords 0,1 of rows 0..7
  const __m512i a1 = _mm512_permutex2var_epi32(z[0], i11, z[1]);  // dwords 2,3 of rows 0..7
  const __m512i b0 = _mm512_permutex2var_epi32(z[2], i10, z[3]);  // rows 8..15
  const __m512i b1 = _mm512_permutex2var_epi32(z[2], i11, z[3]);
  out[0] = _mm512_permutex2var_epi32(a0, i20, b0);
  out[1] = _mm512_permutex2var_epi32(a0, i21, b0);
  out[2] = _mm512_permutex2var_epi32(a1, i20, b1);
  out[3] = _mm512_permutex2var_epi32(a1, i21, b1);
}

// 16 bytes at p + r * stride for rows r = 4q .. 4q+3, rows >= nr read as row nr - 1.
KVASIR_INLINE void load_16x16(const unsigned char* p, long stride, int nr, __m512i z[4]) {
  KVASIR_UNROLL for (int q = 0; q < 4; ++q) {
    const int r0 = 4 * q;
    auto row = [&](int r) { return p + (r < nr ? r : nr - 1) * stride; };
    __m512i v = _mm512_castsi128_si512(load128(row(r0)));
    v = _mm512_inserti32x4(v, load128(row(r0 + 1)), 1);
    v = _mm512_inserti32x4(v, load128(row(r0 + 2)), 2);
    v = _mm512_inserti32x4(v, load128(row(r0 + 3)), 3);
    z[q] = v;
  }
}

// Block b of the (up to) 16 weight rows in the VNNI B layout: row kk (64 bytes) holds, per weight
// row r, the unsigned values of elements 4kk..4kk+3 (the same values the VNNI kernel multiplies:
// nibbles 0..15, or int8 + 128 for Q8_0).
template <typename T>
KVASIR_INLINE void repack_block(const unsigned char* w, long stride, int nr, long b, unsigned char* out) {
  const unsigned char* p = w + b * T::kBytes + T::kQs;
  __m512i z[4], t[4];
  if constexpr (T::kNibbleMask) {
    load_16x16(p, stride, nr, z);
    transpose_16x4(z, t);
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    KVASIR_UNROLL for (int kk = 0; kk < 4; ++kk) {
      _mm512_store_si512(out + 64 * kk, _mm512_and_si512(t[kk], low4));
      _mm512_store_si512(out + 64 * (kk + 4), _mm512_and_si512(_mm512_srli_epi16(t[kk], 4), low4));
    }
  } else {
    static_assert(T::kBytes == 34, "AMX repack: only Q8_0 among the byte formats");
    const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
    KVASIR_UNROLL for (int h = 0; h < 2; ++h) {
      load_16x16(p + 16 * h, stride, nr, z);
      transpose_16x4(z, t);
      KVASIR_UNROLL for (int kk = 0; kk < 4; ++kk) {
        _mm512_store_si512(out + 64 * (4 * h + kk), _mm512_xor_si512(t[kk], bias));
      }
    }
  }
}

// Tile ops for blocks b, b+1 (b = b0 + i; b+1 only if i + 1 < nbk) of one 16-input group at x:
// the int32 block sums of 16 inputs x 16 weight rows, left in tmm0..3 (block b hi, lo; b+1 hi, lo)
// until tile_pair_store. Split in two so the vector epilogue can run while the tile unit works:
// stores wait for their dot products, and younger loads wait for those stores.
template <bool kPairs>
KVASIR_INLINE void tile_pair_compute(const unsigned char* x, long in_stride, long as, const unsigned char* bbuf,
                                     long b0, long nbk, long i) {
  const long b = b0 + i;
  _tile_loadd(6, bbuf + b * kBBytes, 64);
  _tile_zero(0);
  _tile_loadd(4, x + 32 * b, in_stride);
  _tile_dpbsud(0, 4, 6);
  if constexpr (kPairs) {
    _tile_zero(1);
    _tile_loadd(5, x + as + 32 * b, in_stride);
    _tile_dpbsud(1, 5, 6);
  }
  if (i + 1 < nbk) {
    _tile_loadd(7, bbuf + (b + 1) * kBBytes, 64);
    _tile_zero(2);
    _tile_loadd(4, x + 32 * (b + 1), in_stride);
    _tile_dpbsud(2, 4, 7);
    if constexpr (kPairs) {
      _tile_zero(3);
      _tile_loadd(5, x + as + 32 * (b + 1), in_stride);
      _tile_dpbsud(3, 5, 7);
    }
  }
}

// Stores tile_pair_compute's results to stage[i][plane], stage[i+1][plane].
template <bool kPairs>
KVASIR_INLINE void tile_pair_store(long nbk, long i, int* stage) {
  constexpr long kP = kPairs ? 2 : 1;
  int* st = stage + i * kP * kCols * 16;
  _tile_stored(0, st, 64);
  if constexpr (kPairs) _tile_stored(1, st + kCols * 16, 64);
  if (i + 1 < nbk) {
    _tile_stored(2, st + kP * kCols * 16, 64);
    if constexpr (kPairs) _tile_stored(3, st + kP * kCols * 16 + kCols * 16, 64);
  }
}

// The float epilogue of 4 inputs (rows u0..u0+3 of the group at x) for `nbk` staged blocks from
// block b0 (a multiple of 4): P[u][j] accumulates the blocks b with b % 4 == j, exactly as
// q32_tile_cols_z; carried across stages in pacc; y written for inputs below `cols` at the end.
template <bool kPairs>
KVASIR_INLINE void epilogue4(const int* stage, long nbk, long b0, long nb, const float* dw, const float* mw,
                             const unsigned char* x, long in_stride, long as, long k, int u0, int cols,
                             float* pacc, float* y, long ldy, int nr) {
  constexpr long kP = kPairs ? 2 : 1;
  const float* dsh[4];
  const float* dsl[4];
  __m512 P[4][4];
  KVASIR_UNROLL for (int u = 0; u < 4; ++u) {
    const unsigned char* xr = x + (u0 + u) * in_stride;
    dsh[u] = reinterpret_cast<const float*>(xr + k);
    dsl[u] = kPairs ? reinterpret_cast<const float*>(xr + as + k) : dsh[u];
    KVASIR_UNROLL for (int j = 0; j < 4; ++j) {
      P[u][j] = b0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(pacc + (u0 + u) * 64 + 16 * j);
    }
  }
  for (long i = 0; i < nbk; i += 4) {
    // Block b0 + i + j goes to P[.][j]: constant indices keep the accumulators in registers.
    KVASIR_UNROLL for (int j = 0; j < 4; ++j) {
      if (i + j >= nbk) break;
      const long b = b0 + i + j;
      const int* c = stage + (i + j) * kP * kCols * 16;
      const __m512 dwv = _mm512_load_ps(dw + 16 * b), mwv = _mm512_load_ps(mw + 16 * b);
      KVASIR_UNROLL for (int u = 0; u < 4; ++u) {
        const int* cu = c + (u0 + u) * 16;
        __m512i isum = _mm512_load_si512(cu);
        if constexpr (kPairs) isum = _mm512_add_epi32(_mm512_slli_epi32(isum, 8), _mm512_load_si512(cu + kCols * 16));
        __m512 p = P[u][j];
        p = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dwv, _mm512_set1_ps(dsl[u][2 * b])), p);
        p = _mm512_fmadd_ps(mwv, _mm512_set1_ps(dsh[u][2 * b + 1]), p);
        if constexpr (kPairs) p = _mm512_fmadd_ps(mwv, _mm512_set1_ps(dsl[u][2 * b + 1]), p);
        P[u][j] = p;
      }
    }
  }
  KVASIR_UNROLL for (int u = 0; u < 4; ++u) {
    if (b0 + nbk < nb) {
      KVASIR_UNROLL for (int j = 0; j < 4; ++j) _mm512_store_ps(pacc + (u0 + u) * 64 + 16 * j, P[u][j]);
    } else if (u0 + u < cols) {
      const __m512 s = _mm512_add_ps(_mm512_add_ps(P[u][0], P[u][2]), _mm512_add_ps(P[u][1], P[u][3]));
      _mm512_mask_storeu_ps(y + (u0 + u) * ldy, static_cast<__mmask16>((1u << nr) - 1), s);
    }
  }
}

template <typename T, bool kPairs>
void tile_impl(const TileArgs& a) {
  const auto* w = static_cast<const unsigned char*>(a.w);
  const long k = a.k, nb = k / 32;
  const long ws = static_cast<long>(a.w_stride);
  const long as = static_cast<long>(a.act_stride);
  constexpr long kP = kPairs ? 2 : 1;
  const long in_stride = kP * as;  // bytes between input rows (both planes)
  const long n = a.nc / kP;        // input rows
  constexpr long kStageInts = kStageBlocks * kP * kCols * 16;
  // Scratch: B blocks | dw[nb][16] | mw[nb][16] | 2 stages | accumulators (amx_scratch_bytes).
  auto* bbuf = reinterpret_cast<unsigned char*>(a.scratch);
  float* dw = reinterpret_cast<float*>(bbuf + nb * kBBytes);
  float* mw = dw + 16 * nb;
  int* stages[2] = {reinterpret_cast<int*>(mw + 16 * nb), reinterpret_cast<int*>(mw + 16 * nb) + kStageInts};
  float* pacc = reinterpret_cast<float*>(stages[1] + kStageInts);

  // Weights: values in the B layout, and (dw, mw) per block as 16-lane vectors over the rows.
  for (long b = 0; b < nb; ++b) repack_block<T>(w, ws, a.nr, b, bbuf + b * kBBytes);
  {
    // One dword gather per block: the fp16 d (and m) of the 16 rows (rows >= nr repeat the last),
    // converted like gather_dm16 (m = kMFromD * d where the format stores no m).
    alignas(64) int offs[16];
    for (int r = 0; r < kRows; ++r) offs[r] = static_cast<int>((r < a.nr ? r : a.nr - 1) * ws);
    const __m512i idx = _mm512_load_si512(offs);
    for (long b = 0; b < nb; ++b) {
      const __m512i g = _mm512_i32gather_epi32(idx, w + b * T::kBytes, 1);
      const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
      __m512 m;
      if constexpr (T::kM == 2) {
        m = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(g, 16)));
      } else {
        static_assert(T::kM < 0, "AMX: (d, m) must be adjacent or m implied");
        m = _mm512_mul_ps(d, _mm512_set1_ps(T::kMFromD));
      }
      _mm512_store_ps(dw + 16 * b, d);
      _mm512_store_ps(mw + 16 * b, m);
    }
  }

  // Stages: (16-input group, 8-block chunk) in order, results double-buffered. The epilogue of
  // stage s runs in four parts of 4 inputs; before each part the tile unit starts one block pair
  // of stage s + 1, whose results are stored after the part.
  const auto* act = static_cast<const unsigned char*>(a.act);
  const long nchunks = (nb + kStageBlocks - 1) / kStageBlocks;
  const long num_stages = (n + kCols - 1) / kCols * nchunks;
  static_assert(kStageBlocks == 8 && kCols == 16, "four epilogue parts of 4 inputs, four block pairs");
  auto stage_x = [&](long s) { return act + (s / nchunks) * kCols * in_stride; };
  auto stage_b0 = [&](long s) { return (s % nchunks) * kStageBlocks; };
  auto stage_nbk = [&](long s) { return nb - stage_b0(s) < kStageBlocks ? nb - stage_b0(s) : kStageBlocks; };
  load_config();
  for (long i = 0; i < stage_nbk(0); i += 2) {
    tile_pair_compute<kPairs>(stage_x(0), in_stride, as, bbuf, 0, stage_nbk(0), i);
    tile_pair_store<kPairs>(stage_nbk(0), i, stages[0]);
  }
  for (long s = 0; s < num_stages; ++s) {
    const long n0 = s / nchunks * kCols, b0 = stage_b0(s), nbk = stage_nbk(s);
    const unsigned char* x = stage_x(s);
    const int cols = static_cast<int>(n - n0 < kCols ? n - n0 : kCols);
    const bool next = s + 1 < num_stages;
    const unsigned char* xn = next ? stage_x(s + 1) : x;
    const long b0n = next ? stage_b0(s + 1) : 0, nbkn = next ? stage_nbk(s + 1) : 0;
    for (int q = 0; q < 4; ++q) {
      const bool pair = 2 * q < nbkn;
      if (pair) tile_pair_compute<kPairs>(xn, in_stride, as, bbuf, b0n, nbkn, 2 * q);
      if (4 * q < cols) {
        epilogue4<kPairs>(stages[s & 1], nbk, b0, nb, dw, mw, x, in_stride, as, k, 4 * q, cols, pacc,
                          a.y + n0 * a.ldy, a.ldy, a.nr);
      }
      if (pair) tile_pair_store<kPairs>(nbkn, 2 * q, stages[(s + 1) & 1]);
    }
  }
  _tile_release();
}

template <typename T>
void tile(const TileArgs& a) {
  if (a.planes == 2) {
    tile_impl<T, true>(a);
  } else {
    tile_impl<T, false>(a);
  }
}

}  // namespace

TileFn amx_tile_fn(DType t) {
  switch (t) {
    case DType::kQ4_0: return tile<FmtQ4_0>;
    case DType::kQ4_1: return tile<FmtQ4_1>;
    case DType::kQ8_0: return tile<FmtQ8_0>;
    default: return nullptr;
  }
}

}  // namespace kvasir::cpu::amx
#endif  // KVASIR_NO_AMX
