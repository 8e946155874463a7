// W4A16 for decode-sized batches (1..kW4a16GemvMaxRows tokens): bandwidth-bound, so the codes are
// streamed once with 16-byte non-caching loads and every other instruction per 16 bytes counts
// (an SM must consume ~16 bytes of codes a cycle; a lane's 16 bytes leave ~120 warp instructions;
// this kernel spends ~70 on the common path, the one it replaced ~800: H200 batch-1 INT4 decode
// 2.42 ms against 5.59, BENCHMARKS.md 2026-12-05).
// One CTA owns 16 output rows (one layout tile row, 512 bytes per 64 input columns); its 8 warps
// take interleaved pairs of neighbouring 64-column chunks, kUnroll chunks per warp in flight, the
// next round issued before the current one is used, the first before the PDL wait (weights are
// never written by an earlier kernel), together with cp.async copies of the tile's group scales
// and zero points into shared memory (a chunk reads them there, not from L2 at a dependent latency).
// The weights are the A operand of mma m16n8k16: a lane's 16 bytes of the layout are exactly its A
// fragments (rows g and g + 8, columns 2t, 2t + 1, 2t + 8, 2t + 9 of 4 k16 steps), dequantized in
// registers to the exact integers code - zero (3 integer/bf16 instructions per two weights); the
// tokens are the 8-wide B operand (one mma per k16 step for up to 8 tokens, two for up to 16), from
// a fragment-ordered copy of x in shared memory while x is at most 64 KB (else from L1). Each warp
// keeps a running group: its float32 sums are scaled once when the group changes (once per 128
// columns for groups of 128); the group of a 32-column half comes from a multiply by a
// host-computed reciprocal (no division in the loop). The warps' partial tiles are summed through
// shared memory, then bias / gated activation.
#include "backend/cuda/cuda_tuning.h"
#include "backend/cuda/w4a16_common.cuh"
#include "backend/cuda/warp_mma.cuh"

namespace kvasir::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;

struct W4a16GemvArgs {
  const bf16* x;
  W4a16Projection proj[kW4a16MaxProjections];
  int64_t tile_end[kW4a16MaxProjections];  // prefix sums of out_features / 16
  int64_t k;
  W4a16Groups groups;  // 32-column half -> its group
  int32_t num_groups, num_proj, rows, f32_out, gated, unused;
};

template <int kScale>
constexpr int scale_bytes() {
  return kScale == kW4a16ScaleF32 ? 4 : 2;
}

extern __shared__ __align__(16) uint8_t w4a16_smem[];

// One projection's view for a CTA: its lane's code stream and where the tile's scales and zeros
// sit in shared memory (byte offsets into w4a16_smem, so reads are plain shared loads).
struct TileView {
  const uint4* codes;     // this lane's 16 bytes of chunk 0; chunk kc is 32 * kc further
  uint32_t scales;        // [groups][16] of the scale type
  uint32_t zeros;         // [groups][16] bytes
  bool has_zeros;         // else every zero point is 8
};

// A warp's running group of one projection: the float32 sums of the current group (tmp, the C
// fragment: [0], [1] row g, tokens 2t, 2t + 1 of each 8-token octet; [2], [3] row g + 8), folded
// into acc times the group's scales when the group changes (a warp's chunks only move forward), and
// the group's zero points as bf16 pairs of 128 + zero.
template <int NT>
struct GroupRun {
  float tmp[NT][4];
  float acc[NT][4];
  uint32_t group;  // ~0u: none yet
  uint32_t z0, z8;
};

template <int NT>
__device__ __forceinline__ void run_init(GroupRun<NT>& r) {
#pragma unroll
  for (int o = 0; o < NT; ++o) {
#pragma unroll
    for (int c = 0; c < 4; ++c) r.tmp[o][c] = 0.0f, r.acc[o][c] = 0.0f;
  }
  r.group = ~0u;
  r.z0 = r.z8 = 0x43084308u;  // zero point 8 (w4a16_zero_pair(8))
}

template <int NT, int kScale>
__device__ __forceinline__ void run_flush(GroupRun<NT>& r, const TileView& tv, int g) {
  const uint8_t* scales = w4a16_smem + tv.scales;
  const float s0 = w4a16_scale_as<kScale>(scales, r.group * 16 + g);
  const float s8 = w4a16_scale_as<kScale>(scales, r.group * 16 + g + 8);
#pragma unroll
  for (int o = 0; o < NT; ++o) {
    r.acc[o][0] = fmaf(r.tmp[o][0], s0, r.acc[o][0]);
    r.acc[o][1] = fmaf(r.tmp[o][1], s0, r.acc[o][1]);
    r.acc[o][2] = fmaf(r.tmp[o][2], s8, r.acc[o][2]);
    r.acc[o][3] = fmaf(r.tmp[o][3], s8, r.acc[o][3]);
#pragma unroll
    for (int c = 0; c < 4; ++c) r.tmp[o][c] = 0.0f;
  }
}

// Moves the run to group grp (uniform over the warp), flushing the previous one.
template <int NT, int kScale>
__device__ __forceinline__ void run_enter(GroupRun<NT>& r, uint32_t grp, const TileView& tv, int g) {
  if (grp == r.group) return;
  if (r.group != ~0u) run_flush<NT, kScale>(r, tv, g);
  r.group = grp;
  if (tv.has_zeros) {
    const uint8_t* zeros = w4a16_smem + tv.zeros;
    r.z0 = w4a16_zero_pair(zeros[grp * 16 + g]);
    r.z8 = w4a16_zero_pair(zeros[grp * 16 + g + 8]);
  }
}

// The lane's B fragments of chunk kc for each octet: b[o][2s] / b[o][2s + 1] are the registers of
// k16 step s (x pairs at columns 16 s + 2t and 16 s + 2t + 8 of the chunk). Staged: from the
// shared-memory copy laid out [chunk][token][t][8 words] (two 16-byte loads); else from L1, the
// lane's x row xw[o] (offset by t; token 8 o + g, or the last token where there are fewer: a B
// column only reaches its own C column, and the columns of missing tokens are never written).
template <int NT, bool kStageX>
__device__ __forceinline__ void x_frags(int64_t kc, const uint32_t* const (&xw)[NT], const int (&xtok)[NT], int rows,
                                        uint32_t x_off, int t, uint32_t (&b)[NT][8]) {
#pragma unroll
  for (int o = 0; o < NT; ++o) {
    if constexpr (kStageX) {
      const uint4* p = reinterpret_cast<const uint4*>(w4a16_smem + x_off) + ((kc * rows + xtok[o]) * 4 + t) * 2;
      const uint4 lo = p[0], hi = p[1];
      b[o][0] = lo.x, b[o][1] = lo.y, b[o][2] = lo.z, b[o][3] = lo.w;
      b[o][4] = hi.x, b[o][5] = hi.y, b[o][6] = hi.z, b[o][7] = hi.w;
    } else {
      const uint32_t* xc = xw[o] + kc * 32;  // immediate offsets below
#pragma unroll
      for (int st = 0; st < 4; ++st) b[o][2 * st] = __ldg(xc + 8 * st), b[o][2 * st + 1] = __ldg(xc + 8 * st + 4);
    }
  }
}

// run += chunk kc of this lane (rows g and g + 8 of the tile, 64 columns), group by group; b: the
// chunk's x fragments (x_frags), shared by gate and up.
template <int NT, int kScale>
__device__ __forceinline__ void chunk(const uint4& v, int64_t kc, const TileView& tv, const uint32_t (&b)[NT][8],
                                      uint32_t magic, bool split_chunks, int g, GroupRun<NT>& run) {
#pragma unroll
  for (int jh = 0; jh < 2; ++jh) {
    if (jh == 0 || split_chunks) {
      run_enter<NT, kScale>(run, w4a16_group_of(2 * static_cast<uint32_t>(kc) + jh, magic), tv, g);
    }
    const uint32_t w0 = word_of(v, jh), w1 = word_of(v, 2 + jh);  // rows g and g + 8
#pragma unroll
    for (int ksub = 0; ksub < 2; ++ksub) {
      const uint32_t a0 = w4a16_pair(w0, 2 * ksub, run.z0), a1 = w4a16_pair(w1, 2 * ksub, run.z8);
      const uint32_t a2 = w4a16_pair(w0, 2 * ksub + 1, run.z0), a3 = w4a16_pair(w1, 2 * ksub + 1, run.z8);
      const int st = 2 * jh + ksub;
#pragma unroll
      for (int o = 0; o < NT; ++o) mma_bf16_unordered(run.tmp[o], a0, a1, a2, a3, b[o][2 * st], b[o][2 * st + 1]);
    }
  }
}

// The chunks of warp w: pairs of neighbours (2u, 2u + 1) for u = w, w + kWarps, ..., so a warp
// holds whole 128-column groups and folds their scales in once; a round is kUnroll chunks.
__device__ __forceinline__ int64_t chunk_of(int64_t unit0, int u) {
  return 2 * (unit0 + static_cast<int64_t>(u >> 1) * kWarps) + (u & 1);
}

template <int kProj, int kUnroll>
__device__ __forceinline__ void load_round(const TileView (&tv)[kProj], int64_t unit0, int64_t chunks,
                                           uint4 (&w)[kProj][kUnroll]) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t kc = chunk_of(unit0, u);
#pragma unroll
    for (int i = 0; i < kProj; ++i) w[i][u] = kc < chunks ? load_stream(tv[i].codes + kc * 32) : make_uint4(0, 0, 0, 0);
  }
}

// Copies projection p's scales (and zeros) of tile nt into shared memory (cp.async, not waited for).
template <int kScale>
__device__ __forceinline__ void stage_group_data(const W4a16Projection& pr, int64_t nt, int groups, uint8_t* s_scales,
                                                 uint8_t* s_zeros) {
  constexpr int kPieces = scale_bytes<kScale>();  // 16-byte pieces per group: 16 scales of 2 or 4 bytes
  const int64_t m = pr.out_features;
  const auto* src = static_cast<const uint8_t*>(pr.scales);
  for (int i = threadIdx.x; i < groups * kPieces; i += kThreads) {
    const int grp = i / kPieces, part = i % kPieces;
    cp_async16(s_scales + i * 16, src + (static_cast<int64_t>(grp) * m + nt * 16) * kPieces + part * 16, true);
  }
  if (pr.zeros != nullptr) {
    for (int i = threadIdx.x; i < groups; i += kThreads) {
      cp_async16(s_zeros + i * 16, pr.zeros + static_cast<int64_t>(i) * m + nt * 16, true);
    }
  }
}

// x [rows, k] into shared memory as [chunk][token][t][8 words], word j of (t) being the bf16 pair
// at chunk column 8 j + 2t: a 16-byte piece of a row (columns 8 q .. 8 q + 7 of a chunk) gives
// word q of t = 0..3.
__device__ __forceinline__ void stage_x(const bf16* __restrict__ x, int rows, int64_t k, uint32_t* xs) {
  const int64_t pieces = k / 8;
  for (int tok = 0; tok < rows; ++tok) {
    for (int64_t c = threadIdx.x; c < pieces; c += kThreads) {
      const uint4 v = *reinterpret_cast<const uint4*>(x + tok * k + c * 8);
      uint32_t* d = xs + ((c / 8) * rows + tok) * 32 + (c % 8);
      d[0] = v.x;
      d[8] = v.y;
      d[16] = v.z;
      d[24] = v.w;
    }
  }
}

template <int NT, bool kGated, int kScale, bool kStageX, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks) w4a16_gemv_kernel(W4a16GemvArgs a) {
  constexpr int kProj = kGated ? 2 : 1;
  constexpr int kUnroll = kGated ? 2 : 4;
  constexpr int kEs = scale_bytes<kScale>();
  __shared__ float red[kWarps][kProj][16][NT * 8];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  // This CTA's projection(s) and tile, chosen with constant indices only (a run-time index into
  // the parameter array would copy it to local memory).
  W4a16Projection pr[kProj];
  int64_t nt = blockIdx.x;
  if constexpr (kGated) {
    pr[0] = a.proj[0];
    pr[1] = a.proj[1];
  } else {
    static_assert(kW4a16MaxProjections == 3, "projection selection below is unrolled for three");
    pr[0] = a.proj[0];
    if (a.num_proj > 1 && nt >= a.tile_end[0]) {
      if (a.num_proj > 2 && nt >= a.tile_end[1]) {
        pr[0] = a.proj[2];
        nt -= a.tile_end[1];
      } else {
        pr[0] = a.proj[1];
        nt -= a.tile_end[0];
      }
    }
  }
  const int64_t chunks = a.k / 64;
  const int groups = a.num_groups;
  TileView tv[kProj];
#pragma unroll
  for (int i = 0; i < kProj; ++i) {
    tv[i].codes = static_cast<const uint4*>(pr[i].codes) + nt * chunks * 32 + lane;
    tv[i].scales = static_cast<uint32_t>(i * groups * 16 * kEs);
    tv[i].zeros = static_cast<uint32_t>(kProj * groups * 16 * kEs + i * groups * 16);
    tv[i].has_zeros = pr[i].zeros != nullptr;
  }
  const uint32_t x_off = static_cast<uint32_t>((kProj * groups * 16 * (kEs + 1) + 15) / 16 * 16);
  uint4 w[kProj][kUnroll];
  int64_t unit0 = warp;
  load_round<kProj, kUnroll>(tv, unit0, chunks, w);
#pragma unroll
  for (int i = 0; i < kProj; ++i) {
    stage_group_data<kScale>(pr[i], nt, groups, w4a16_smem + tv[i].scales, w4a16_smem + tv[i].zeros);
  }
  cp_async_commit();
  pdl_begin();
  const uint32_t* xw[NT];
  int xtok[NT];
#pragma unroll
  for (int o = 0; o < NT; ++o) {
    xtok[o] = min(o * 8 + g, a.rows - 1);
    xw[o] = reinterpret_cast<const uint32_t*>(a.x + static_cast<int64_t>(xtok[o]) * a.k) + t;
  }
  if constexpr (kStageX) stage_x(a.x, a.rows, a.k, reinterpret_cast<uint32_t*>(w4a16_smem + x_off));
  GroupRun<NT> run[kProj];
#pragma unroll
  for (int i = 0; i < kProj; ++i) run_init<NT>(run[i]);
  cp_async_wait<0>();
  __syncthreads();
  const uint32_t magic = a.groups.magic;
  const bool split_chunks = a.groups.split_chunks != 0;
  while (2 * unit0 < chunks) {
    uint4 cur[kProj][kUnroll];
#pragma unroll
    for (int i = 0; i < kProj; ++i) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) cur[i][u] = w[i][u];
    }
    const int64_t next = unit0 + kWarps * (kUnroll / 2);
    if (2 * next < chunks) load_round<kProj, kUnroll>(tv, next, chunks, w);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t kc = chunk_of(unit0, u);
      if (kc >= chunks) break;
      uint32_t b[NT][8];
      x_frags<NT, kStageX>(kc, xw, xtok, a.rows, x_off, t, b);
#pragma unroll
      for (int i = 0; i < kProj; ++i) chunk<NT, kScale>(cur[i][u], kc, tv[i], b, magic, split_chunks, g, run[i]);
    }
    unit0 = next;
  }
#pragma unroll
  for (int i = 0; i < kProj; ++i) {
    if (run[i].group != ~0u) run_flush<NT, kScale>(run[i], tv[i], g);
#pragma unroll
    for (int o = 0; o < NT; ++o) {
      const int tok = o * 8 + 2 * t;
      red[warp][i][g][tok] = run[i].acc[o][0];
      red[warp][i][g][tok + 1] = run[i].acc[o][1];
      red[warp][i][g + 8][tok] = run[i].acc[o][2];
      red[warp][i][g + 8][tok + 1] = run[i].acc[o][3];
    }
  }
  __syncthreads();
  const int tok = threadIdx.x / 16, col = threadIdx.x % 16;  // 256 threads: the 16 x 16 tile
  if (tok >= a.rows || tok >= NT * 8) return;
  float sum[kProj];
#pragma unroll
  for (int i = 0; i < kProj; ++i) {
    sum[i] = 0.0f;
#pragma unroll
    for (int w8 = 0; w8 < kWarps; ++w8) sum[i] += red[w8][i][col][tok];
  }
  const int64_t n = nt * 16 + col;
  if constexpr (kGated) {
    const int64_t m = pr[0].out_features;
    // Rounded like the unfused ops: gate and up are bf16 tensors there.
    const float gv = __bfloat162float(__float2bfloat16(sum[0]));
    const float uv = __bfloat162float(__float2bfloat16(sum[1]));
    static_cast<bf16*>(pr[1].y)[tok * m + n] = __float2bfloat16(uv);
    static_cast<bf16*>(pr[0].y)[tok * m + n] = __float2bfloat16(w4a16_gate_act(gv, a.gated) * uv);
  } else {
    const float v = sum[0] + (pr[0].bias != nullptr ? pr[0].bias[n] : 0.0f);
    if (a.f32_out) static_cast<float*>(pr[0].y)[tok * pr[0].out_features + n] = v;
    else static_cast<bf16*>(pr[0].y)[tok * pr[0].out_features + n] = __float2bfloat16(v);
  }
}

template <int NT, bool kGated, int kScale, bool kStageX, int kMinBlocks>
void launch_kernel(const W4a16GemvArgs& a, unsigned blocks, size_t smem, cudaStream_t s) {
  auto* kernel = w4a16_gemv_kernel<NT, kGated, kScale, kStageX, kMinBlocks>;
  // Static (the partial-sum tile) and dynamic shared memory together above 48 KB need the opt-in.
  constexpr size_t kStatic = sizeof(float) * kWarps * (kGated ? 2 : 1) * 16 * NT * 8;
  constexpr size_t kDefaultSmem = 48 << 10;
  if (smem + kStatic > kDefaultSmem) {
    KVASIR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
  launch(kernel, blocks, kThreads, smem, s, a);
}

template <int NT, bool kGated, bool kStageX, int kMinBlocks>
void launch_scaled(const W4a16GemvArgs& a, int scale_type, unsigned blocks, size_t smem, cudaStream_t s) {
  if (scale_type == kW4a16ScaleF32) launch_kernel<NT, kGated, kW4a16ScaleF32, kStageX, kMinBlocks>(a, blocks, smem, s);
  else if (scale_type == kW4a16ScaleBf16) launch_kernel<NT, kGated, kW4a16ScaleBf16, kStageX, kMinBlocks>(a, blocks, smem, s);
  else launch_kernel<NT, kGated, kW4a16ScaleF16, kStageX, kMinBlocks>(a, blocks, smem, s);
}

// The one-octet kernels (up to 8 tokens) capped at 85 registers by default, three CTAs an SM
// (KVASIR_W4A16_GEMV_MINB=3): the gated one held 92-96 and ran two, the others 80 and their
// launches need no more than three. ncu saw these GEMVs stalled on their code loads with under a
// quarter of the SM's warps resident; the third CTA won 2-5% on the H200's batch 1-8 steps and
// did not spill (BENCHMARKS.md, 2026-12-07). Two octets hold 96-128 registers: capped, they spill.
template <int NT, bool kGated, int kMinBlocks>
void launch_capped(const W4a16GemvArgs& a, int scale_type, unsigned blocks, size_t smem, bool stage_x, cudaStream_t s) {
  if (stage_x) launch_scaled<NT, kGated, true, kMinBlocks>(a, scale_type, blocks, smem, s);
  else launch_scaled<NT, kGated, false, kMinBlocks>(a, scale_type, blocks, smem, s);
}

template <int NT, bool kGated>
void launch_staged(const W4a16GemvArgs& a, int scale_type, unsigned blocks, size_t smem, bool stage_x,
                   cudaStream_t s) {
  if (NT == 1 && kernel_tuning().w4a16_gemv_min_blocks == 3) {
    launch_capped<NT, kGated, NT == 1 ? 3 : 2>(a, scale_type, blocks, smem, stage_x, s);
  } else {
    launch_capped<NT, kGated, 2>(a, scale_type, blocks, smem, stage_x, s);
  }
}

}  // namespace

bool w4a16_shape_supported(int64_t out_features, int64_t in_features) {
  return out_features > 0 && in_features > 0 && out_features % 16 == 0 && in_features % 64 == 0;
}

void launch_w4a16_gemv(const void* x, const W4a16Projection* proj, int num_proj, int n, int64_t k, Elem out,
                       int gated, cudaStream_t s) {
  KVASIR_CHECK(n >= 1 && n <= kW4a16GemvMaxRows && num_proj >= 1 && num_proj <= kW4a16MaxProjections && aligned16(x));
  KVASIR_CHECK(gated == kGateNone ||
               (num_proj == 2 && out == Elem::kBf16 && proj[0].out_features == proj[1].out_features &&
                proj[0].bias == nullptr && proj[1].bias == nullptr));
  static_assert(kW4a16GemvMaxRows <= 16, "the kernels hold two 8-token octets");
  W4a16GemvArgs a{};
  a.x = static_cast<const bf16*>(x);
  a.k = k;
  a.num_proj = num_proj;
  a.rows = n;
  a.f32_out = out == Elem::kF32 ? 1 : 0;
  a.gated = gated;
  const int64_t group_size = proj[0].group_size;
  const int scale_type = proj[0].scale_type;
  int64_t tiles = 0;
  for (int p = 0; p < num_proj; ++p) {
    KVASIR_CHECK_MSG(w4a16_shape_supported(proj[p].out_features, k) && aligned16(proj[p].codes),
                     "W4A16 GEMV: out_features % 16, in_features % 64 and 16-byte aligned codes");
    KVASIR_CHECK_MSG(proj[p].group_size == group_size && proj[p].scale_type == scale_type,
                     "W4A16 GEMV: projections of one launch share their group size and scale type");
    KVASIR_CHECK_MSG(aligned16(proj[p].scales) && (proj[p].zeros == nullptr || aligned16(proj[p].zeros)),
                     "W4A16 GEMV: 16-byte aligned scales and zeros");
    a.proj[p] = proj[p];
    tiles += proj[p].out_features / 16;
    a.tile_end[p] = tiles;
  }
  KVASIR_CHECK_MSG(w4a16_groups_supported(group_size, k),
                   "W4A16 GEMV: group size a multiple of 32 (or the row) below 131072, in_features below 2^25");
  a.groups = w4a16_groups(group_size);
  a.num_groups = static_cast<int32_t>((k + group_size - 1) / group_size);
  if (gated != kGateNone) tiles = a.tile_end[0];  // gate/up tile pairs
  const int proj_per_cta = gated != kGateNone ? 2 : 1;
  const size_t es = scale_type == kW4a16ScaleF32 ? 4 : 2;
  const size_t group_bytes = (static_cast<size_t>(proj_per_cta) * a.num_groups * 16 * (es + 1) + 15) / 16 * 16;
  KVASIR_CHECK_MSG(group_bytes <= (160 << 10), "W4A16 GEMV: too many groups per row for shared memory");
  // x staged in shared memory (two 16-byte loads per chunk instead of eight 4-byte ones from L1)
  // while it is small; KVASIR_W4A16_STAGE_X=0 keeps it in L1 for the A/B.
  const size_t x_bytes = static_cast<size_t>(n) * k * 2;
  const bool stage_x = kernel_tuning().w4a16_stage_x && x_bytes <= (64 << 10);
  const size_t smem = group_bytes + (stage_x ? x_bytes : 0);
  const unsigned blocks = static_cast<unsigned>(tiles);
  if (gated != kGateNone) {
    if (n > 8) launch_staged<2, true>(a, scale_type, blocks, smem, stage_x, s);
    else launch_staged<1, true>(a, scale_type, blocks, smem, stage_x, s);
  } else {
    if (n > 8) launch_staged<2, false>(a, scale_type, blocks, smem, stage_x, s);
    else launch_staged<1, false>(a, scale_type, blocks, smem, stage_x, s);
  }
  KVASIR_CUDA_LAUNCH_CHECK();
}

}  // namespace kvasir::cuda
