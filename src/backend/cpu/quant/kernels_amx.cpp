// AMX-INT8 tiles for batched matmuls with 32-element block weights: one call computes up to 16
// weight rows against activation rows in groups of 16, the integer block dot products on the tile
// unit (TDPBSUD: signed activations x unsigned weight values), the float scaling on AVX-512. Two
// weight sources: GGUF rows (Q4_0, Q4_1, Q8_0), repacked into the tile layout on every call, and
// packed panels (packed_q32.h, all five types), whose blocks already are that layout (nibble
// types: split into their two nibble planes), which makes the tile cheap enough for small
// batches. Built with AMX flags for this file only; called only after cpu_isa.cpp has
// checked cpuid and obtained the kernel's permission to use tile data (amx_available()).
// Must reproduce q32_tile_cols_z's float arithmetic exactly (see "The shared float order" in
// kern_q32_z.inc): a row's result may not depend on which kernel the batch size picked.
#include "backend/cpu/quant/kernels.h"
#include "backend/cpu/quant/packed_q32.h"

#ifdef KVASIR_NO_AMX
namespace kvasir::cpu::amx {
TileFn amx_tile_fn(DType) { return nullptr; }
TileFn packed_q32_tile(bool) { return nullptr; }
void release_tiles() {}
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

// tmm0..3: int32 results (two blocks x hi/lo plane), tmm4/5: activation hi/lo (`inputs` rows x
// 32 bytes), tmm6/7: weights of the two blocks (8 rows of 4-byte groups x 16 weight rows).
// kKeep: the panel tile leaves its configuration loaded between calls (release_tiles ends it), so
// a call whose shape is loaded already skips the reload: ldtilecfg and tilerelease cost ~54 ns a
// call on the AMX Xeon, reading the loaded configuration back ~7 ns, where a whole 16-row panel
// of 1536x576 at 2 rows took ~400 ns.
template <bool kKeep>
void load_config(int inputs) {
  TileConfig c;
  for (int t = 0; t < 4; ++t) {
    c.rows[t] = static_cast<unsigned char>(inputs);
    c.colsb[t] = 64;
  }
  for (int t = 4; t < 6; ++t) {
    c.rows[t] = static_cast<unsigned char>(inputs);
    c.colsb[t] = 32;
  }
  for (int t = 6; t < 8; ++t) {
    c.rows[t] = 8;
    c.colsb[t] = 64;
  }
  // GCC's _tile_loadconfig tells the compiler it reads only 8 bytes of the config: without this
  // barrier the stores to colsb/rows are dropped as dead and the tile instructions fault.
  __asm__ __volatile__("" : : "r"(&c) : "memory");
  if constexpr (kKeep) {
    TileConfig loaded;
    _tile_storeconfig(&loaded);
    __asm__ __volatile__("" : : "r"(&loaded) : "memory");
    const __m512i want = _mm512_load_si512(&c), have = _mm512_load_si512(&loaded);
    if (_mm512_cmpneq_epi32_mask(want, have) == 0) return;
  }
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

// How activation rows sit in the tiles and in the staged int32 results. Whole groups (the GGUF
// tile): 16 inputs per group, the hi and lo planes in tiles of their own (tmm4/5 -> tmm0/1), the
// buffer padded to whole groups. Exact plane rows (the panel tile): a group's plane rows in one
// tile as they lie in memory (hi, lo, hi, lo, ...: 16 / planes inputs), and only the rows that
// exist, so a small batch pays the tile unit for its own rows and needs no padding.
template <bool kPairs, bool kExact>
struct Layout {
  static constexpr long kP = kPairs ? 2 : 1;
  static constexpr long kGroupInputs = kExact ? kCols / kP : kCols;
  static constexpr long kBlockInts = kExact ? kCols * 16 : kP * kCols * 16;  // one block's results
  static constexpr long kInputInts = kExact ? kP * 16 : 16;                  // from one input to the next
  static constexpr long kLoInts = kExact ? 16 : kCols * 16;                  // from hi plane to lo plane
};

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

// The same for exact plane rows (Layout<., true>): one activation tile per block holds both
// planes, so a pair needs two result tiles, and alternate pairs (kSet) use tmm0/2 and tmm1/3, so
// that a pair's tiles are zeroed while the previous pair's are still being computed and stored
// (matmul_bench --packed, one thread, q4_1 / q8_0 1536x576, 2 planes, 4 input rows: one set
// 58.8 / 52.2 us, two sets 53.7 / 48.0; the planes in tiles of their own, as the GGUF tile has
// them, 80.3 / 70.3).
template <int kSet>
KVASIR_INLINE void exact_pair_compute(const unsigned char* x, long as, const unsigned char* bbuf, long b0, long nbk,
                                      long i) {
  const long b = b0 + i;
  _tile_loadd(6, bbuf + b * kBBytes, 64);
  _tile_loadd(4, x + 32 * b, as);
  if constexpr (kSet == 0) {
    _tile_zero(0);
    _tile_dpbsud(0, 4, 6);
  } else {
    _tile_zero(1);
    _tile_dpbsud(1, 4, 6);
  }
  if (i + 1 < nbk) {
    _tile_loadd(7, bbuf + (b + 1) * kBBytes, 64);
    _tile_loadd(5, x + 32 * (b + 1), as);
    if constexpr (kSet == 0) {
      _tile_zero(2);
      _tile_dpbsud(2, 5, 7);
    } else {
      _tile_zero(3);
      _tile_dpbsud(3, 5, 7);
    }
  }
}

template <int kSet>
KVASIR_INLINE void exact_pair_store(long nbk, long i, int* stage) {
  constexpr long kBlockInts = kCols * 16;
  int* st = stage + i * kBlockInts;
  if constexpr (kSet == 0) {
    _tile_stored(0, st, 64);
    if (i + 1 < nbk) _tile_stored(2, st + kBlockInts, 64);
  } else {
    _tile_stored(1, st, 64);
    if (i + 1 < nbk) _tile_stored(3, st + kBlockInts, 64);
  }
}

template <bool kPairs, bool kExact>
KVASIR_INLINE void pair_compute(int q, const unsigned char* x, long in_stride, long as, const unsigned char* bbuf,
                                long b0, long nbk, long i) {
  if constexpr (!kExact) {
    tile_pair_compute<kPairs>(x, in_stride, as, bbuf, b0, nbk, i);
  } else if (q & 1) {
    exact_pair_compute<1>(x, as, bbuf, b0, nbk, i);
  } else {
    exact_pair_compute<0>(x, as, bbuf, b0, nbk, i);
  }
}

template <bool kPairs, bool kExact>
KVASIR_INLINE void pair_store(int q, long nbk, long i, int* stage) {
  if constexpr (!kExact) {
    tile_pair_store<kPairs>(nbk, i, stage);
  } else if (q & 1) {
    exact_pair_store<1>(nbk, i, stage);
  } else {
    exact_pair_store<0>(nbk, i, stage);
  }
}

// The float epilogue of U <= 4 inputs (rows u0..u0+U-1 of the group at x) for `nbk` staged blocks
// from block b0 (a multiple of 4): P[u][j] accumulates the blocks b with b % 4 == j, exactly as
// q32_tile_cols_z; carried across stages in pacc; y written for inputs below `cols` at the end.
template <bool kPairs, bool kExact, int U>
KVASIR_INLINE void epilogue(const int* stage, long nbk, long b0, long nb, const float* dw, const float* mw,
                             const unsigned char* x, long in_stride, long as, long k, int u0, int cols,
                             float* pacc, float* y, long ldy, int nr) {
  using L = Layout<kPairs, kExact>;
  const float* dsh[U];
  const float* dsl[U];
  __m512 P[U][4];
  KVASIR_UNROLL for (int u = 0; u < U; ++u) {
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
      const int* c = stage + (i + j) * L::kBlockInts;
      const __m512 dwv = _mm512_load_ps(dw + 16 * b), mwv = _mm512_load_ps(mw + 16 * b);
      KVASIR_UNROLL for (int u = 0; u < U; ++u) {
        const int* cu = c + (u0 + u) * L::kInputInts;
        __m512i isum = _mm512_load_si512(cu);
        if constexpr (kPairs) isum = _mm512_add_epi32(_mm512_slli_epi32(isum, 8), _mm512_load_si512(cu + L::kLoInts));
        __m512 p = P[u][j];
        p = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dwv, _mm512_set1_ps(dsl[u][2 * b])), p);
        p = _mm512_fmadd_ps(mwv, _mm512_set1_ps(dsh[u][2 * b + 1]), p);
        if constexpr (kPairs) p = _mm512_fmadd_ps(mwv, _mm512_set1_ps(dsl[u][2 * b + 1]), p);
        P[u][j] = p;
      }
    }
  }
  KVASIR_UNROLL for (int u = 0; u < U; ++u) {
    if (b0 + nbk < nb) {
      KVASIR_UNROLL for (int j = 0; j < 4; ++j) _mm512_store_ps(pacc + (u0 + u) * 64 + 16 * j, P[u][j]);
    } else if (u0 + u < cols) {
      const __m512 s = _mm512_add_ps(_mm512_add_ps(P[u][0], P[u][2]), _mm512_add_ps(P[u][1], P[u][3]));
      _mm512_mask_storeu_ps(y + (u0 + u) * ldy, static_cast<__mmask16>((1u << nr) - 1), s);
    }
  }
}

// Where a call's weights are, once prepared: block b's B tile at b_tiles + b * kBBytes (rows 64
// bytes apart), and per block the 16 rows' float d and m (dw[16 b + r], mw[16 b + r]).
struct PreparedWeights {
  const unsigned char* b_tiles;
  const float* dw;
  const float* mw;
  // Panels: the next panel (the caller's next call, where the weight has one), prefetched a
  // slice per block pair of the first group: each call reads its panel's scales and values up
  // front, in a pattern the hardware prefetcher does not run ahead of (--model smollm2, 7 input
  // rows, one thread: 17.9 -> 15.2 ms a step; 1536x576 q4_1 from L3 111 -> 84 us, from L2 61.6 ->
  // 66.8 us).
  const unsigned char* prefetch = nullptr;
  long prefetch_bytes_per_pair = 0;
};

// The scratch of one call (amx_scratch_bytes): B blocks | dw[nb][16] | mw[nb][16] | 2 stages |
// accumulators.
template <bool kPairs>
struct Scratch {
  // Both planes' results of 8 blocks, whether or not the call has planes (amx_scratch_bytes).
  static constexpr long kStageInts = kStageBlocks * 2 * kCols * 16;
  unsigned char* bbuf;
  float* dw;
  float* mw;
  int* stages[2];
  float* pacc;
  Scratch(float* scratch, long nb) {
    bbuf = reinterpret_cast<unsigned char*>(scratch);
    dw = reinterpret_cast<float*>(bbuf + nb * kBBytes);
    mw = dw + 16 * nb;
    stages[0] = reinterpret_cast<int*>(mw + 16 * nb);
    stages[1] = stages[0] + kStageInts;
    pacc = reinterpret_cast<float*>(stages[1] + kStageInts);
  }
  // Exact plane rows use at most half of each stage (8 blocks x 1 KiB); the second stage then
  // starts 512 bytes off a 4 KiB multiple from the first, so that the epilogue's loads from one
  // stage do not falsely wait (4K aliasing) on the tile stores into the other while a group has
  // up to 8 plane rows (512 bytes per block; q4_1 1536x576, 8 input rows x 2 planes: 78 -> 74 us).
  void offset_second_stage() {
    static_assert(2 * kStageInts * 4 >= 8 * 1024 + 512 + 8 * 1024, "both stages before pacc");
    static_assert(Layout<kPairs, true>::kBlockInts == 256, "8 blocks of exact rows: 8 KiB");
    stages[1] = stages[0] + 8 * 256 + 128;
  }
};

// GGUF rows: values repacked into the B layout, (dw, mw) gathered, on every call.
template <typename T>
PreparedWeights prepare_gguf(const TileArgs& a, long nb, unsigned char* bbuf, float* dw, float* mw) {
  const auto* w = static_cast<const unsigned char*>(a.w);
  const long ws = static_cast<long>(a.w_stride);
  for (long b = 0; b < nb; ++b) repack_block<T>(w, ws, a.nr, b, bbuf + b * kBBytes);
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
  return {bbuf, dw, mw};
}

// A packed panel (packed_q32.h): its 8-bit blocks already are B tiles (8 groups of [16 rows x 4
// bytes]); nibble blocks split into their two nibble planes (4 groups each) with 3 ops per 64
// bytes. The fp16 d (and m) widen as the AVX-512 panel tile widens them (mw = m_from_d * dw where
// the format stores no m).
template <bool kNibbles>
PreparedWeights prepare_panel(const TileArgs& a, long nb, unsigned char* bbuf, float* dw, float* mw) {
  const auto* panel = static_cast<const unsigned char*>(a.w);
  const unsigned char* d16 = panel + a.d_offset;
  const unsigned char* m16 = a.m_offset != 0 ? panel + a.m_offset : nullptr;
  const __m512 mfd = _mm512_set1_ps(a.m_from_d);
  for (long b = 0; b < nb; ++b) {
    const __m512 d = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(d16 + 32 * b)));
    const __m512 m = m16 != nullptr ? _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(m16 + 32 * b)))
                                    : _mm512_mul_ps(d, mfd);
    _mm512_store_ps(dw + 16 * b, d);
    _mm512_store_ps(mw + 16 * b, m);
  }
  PreparedWeights pw{panel, dw, mw};
  const long panel_bytes = ((a.m_offset != 0 ? a.m_offset : a.d_offset) + nb * 32 + 63) / 64 * 64;
  pw.prefetch = panel + panel_bytes;
  pw.prefetch_bytes_per_pair = (panel_bytes / ((nb + 1) / 2) + 63) / 64 * 64;
  if constexpr (!kNibbles) {
    static_assert(kPackedValueBytes == kBBytes, "an 8-bit panel block is one B tile");
    return pw;
  } else {
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    for (long b = 0; b < nb; ++b) {
      const unsigned char* v = panel + b * static_cast<long>(kPackedNibbleValueBytes);
      unsigned char* out = bbuf + b * kBBytes;
      KVASIR_UNROLL for (int h = 0; h < 4; ++h) {
        const __m512i q = _mm512_load_si512(v + 64 * h);
        _mm512_store_si512(out + 64 * h, _mm512_and_si512(q, low4));
        _mm512_store_si512(out + 64 * (h + 4), _mm512_and_si512(_mm512_srli_epi16(q, 4), low4));
      }
    }
    pw.b_tiles = bbuf;
    return pw;
  }
}

// The epilogue of inputs u0.. of a group with `cols` inputs. kExact: only inputs below cols exist
// (their scales are read; the buffer is not padded); otherwise 4 inputs are read, the padding
// rows included.
template <bool kPairs, bool kExact>
KVASIR_INLINE void epilogue_part(const int* stage, long nbk, long b0, long nb, const PreparedWeights& pw,
                                 const unsigned char* x, long in_stride, long as, long k, int u0, int cols,
                                 float* pacc, float* y, long ldy, int nr) {
  const int u = kExact ? cols - u0 : 4;
  if (u >= 4) {
    epilogue<kPairs, kExact, 4>(stage, nbk, b0, nb, pw.dw, pw.mw, x, in_stride, as, k, u0, cols, pacc, y, ldy, nr);
  } else if (u == 3) {
    epilogue<kPairs, kExact, 3>(stage, nbk, b0, nb, pw.dw, pw.mw, x, in_stride, as, k, u0, cols, pacc, y, ldy, nr);
  } else if (u == 2) {
    epilogue<kPairs, kExact, 2>(stage, nbk, b0, nb, pw.dw, pw.mw, x, in_stride, as, k, u0, cols, pacc, y, ldy, nr);
  } else {
    epilogue<kPairs, kExact, 1>(stage, nbk, b0, nb, pw.dw, pw.mw, x, in_stride, as, k, u0, cols, pacc, y, ldy, nr);
  }
}

// All inputs of a call against its prepared weights, in groups (Layout; kExact: the tile shape
// follows the group's plane rows, reconfigured for a last partial group).
template <bool kPairs, bool kExact>
void run_stages(const TileArgs& a, const PreparedWeights& pw, const Scratch<kPairs>& sc) {
  const long k = a.k, nb = k / 32;
  const long as = static_cast<long>(a.act_stride);
  constexpr long kP = kPairs ? 2 : 1;
  const long in_stride = kP * as;  // bytes between input rows (both planes)
  const long n = a.nc / kP;        // input rows
  using L = Layout<kPairs, kExact>;
  // Stages: (group, 8-block chunk) in order, results double-buffered. The epilogue of
  // stage s runs in four parts of 4 inputs; before each part the tile unit starts one block pair
  // of stage s + 1, whose results are stored after the part.
  const auto* act = static_cast<const unsigned char*>(a.act);
  const long nchunks = (nb + kStageBlocks - 1) / kStageBlocks;
  const long num_stages = (n + L::kGroupInputs - 1) / L::kGroupInputs * nchunks;
  static_assert(kStageBlocks == 8 && L::kGroupInputs <= 16, "up to four epilogue parts of 4 inputs, four block pairs");
  auto stage_x = [&](long s) { return act + (s / nchunks) * L::kGroupInputs * in_stride; };
  auto stage_b0 = [&](long s) { return (s % nchunks) * kStageBlocks; };
  auto stage_nbk = [&](long s) { return nb - stage_b0(s) < kStageBlocks ? nb - stage_b0(s) : kStageBlocks; };
  auto stage_rows = [&](long s) {  // tile rows
    const long left = n - s / nchunks * L::kGroupInputs;
    return static_cast<int>(kExact ? (left < L::kGroupInputs ? left : L::kGroupInputs) * L::kP : kCols);
  };
  // Block pair q of stage s. kExact: pairs alternate between two sets of result tiles, so each
  // pair's store is issued after the next pair's dot products (one set: at once).
  auto compute = [&](long s, int q) KVASIR_INLINE_LAMBDA {
    if (pw.prefetch != nullptr && s < nchunks) {  // a prefetch past the weight's end does no harm
      const unsigned char* p = pw.prefetch + (stage_b0(s) / 2 + q) * pw.prefetch_bytes_per_pair;
      for (long l = 0; l < pw.prefetch_bytes_per_pair; l += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(p + l), _MM_HINT_T0);
      }
    }
    pair_compute<kPairs, kExact>(q, stage_x(s), in_stride, as, pw.b_tiles, stage_b0(s), stage_nbk(s), 2 * q);
  };
  auto store = [&](long s, int q) KVASIR_INLINE_LAMBDA {
    pair_store<kPairs, kExact>(q, stage_nbk(s), 2 * q, sc.stages[s & 1]);
  };
  auto num_pairs = [&](long s) { return static_cast<int>((stage_nbk(s) + 1) / 2); };
  load_config<kExact>(stage_rows(0));
  KVASIR_UNROLL for (int q = 0; q < 4; ++q) {
    if (q >= num_pairs(0)) break;
    compute(0, q);
    if (!kExact) store(0, q);
    if (kExact && q > 0) store(0, q - 1);
  }
  if (kExact) store(0, num_pairs(0) - 1);
  for (long s = 0; s < num_stages; ++s) {
    const long n0 = s / nchunks * L::kGroupInputs, b0 = stage_b0(s), nbk = stage_nbk(s);
    const unsigned char* x = stage_x(s);
    const int cols = static_cast<int>(n - n0 < L::kGroupInputs ? n - n0 : L::kGroupInputs);
    const bool next = s + 1 < num_stages;
    // Stage s's results are all stored: a new tile shape for the next group may zero the tiles.
    if (kExact && next && stage_rows(s + 1) != stage_rows(s)) load_config<kExact>(stage_rows(s + 1));
    const int pairs_next = next ? num_pairs(s + 1) : 0;
    KVASIR_UNROLL for (int q = 0; q < 4; ++q) {
      if (q < pairs_next) compute(s + 1, q);
      if (kExact && q > 0 && q - 1 < pairs_next) store(s + 1, q - 1);
      if (4 * q < cols) {
        epilogue_part<kPairs, kExact>(sc.stages[s & 1], nbk, b0, nb, pw, x, in_stride, as, k, 4 * q, cols,
                                      sc.pacc, a.y + n0 * a.ldy, a.ldy, a.nr);
      }
      if (!kExact && q < pairs_next) store(s + 1, q);
    }
    if (kExact && pairs_next == 4) store(s + 1, 3);
  }
  if constexpr (!kExact) _tile_release();
}

template <typename T>
void gguf_tile(const TileArgs& a) {
  const long nb = a.k / 32;
  if (a.planes == 2) {
    const Scratch<true> sc(a.scratch, nb);
    run_stages<true, false>(a, prepare_gguf<T>(a, nb, sc.bbuf, sc.dw, sc.mw), sc);
  } else {
    const Scratch<false> sc(a.scratch, nb);
    run_stages<false, false>(a, prepare_gguf<T>(a, nb, sc.bbuf, sc.dw, sc.mw), sc);
  }
}

template <bool kNibbles>
void panel_tile(const TileArgs& a) {
  const long nb = a.k / 32;
  if (a.planes == 2) {
    Scratch<true> sc(a.scratch, nb);
    sc.offset_second_stage();
    run_stages<true, true>(a, prepare_panel<kNibbles>(a, nb, sc.bbuf, sc.dw, sc.mw), sc);
  } else {
    Scratch<false> sc(a.scratch, nb);
    sc.offset_second_stage();
    run_stages<false, true>(a, prepare_panel<kNibbles>(a, nb, sc.bbuf, sc.dw, sc.mw), sc);
  }
}

}  // namespace

TileFn amx_tile_fn(DType t) {
  switch (t) {
    case DType::kQ4_0: return gguf_tile<FmtQ4_0>;
    case DType::kQ4_1: return gguf_tile<FmtQ4_1>;
    case DType::kQ8_0: return gguf_tile<FmtQ8_0>;
    default: return nullptr;
  }
}

TileFn packed_q32_tile(bool nibbles) { return nibbles ? panel_tile<true> : panel_tile<false>; }

void release_tiles() { _tile_release(); }

}  // namespace kvasir::cpu::amx
#endif  // KVASIR_NO_AMX
