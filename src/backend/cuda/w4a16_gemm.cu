// W4A16 GEMM for more tokens than the GEMV takes (large decode batches, short prefills; long
// prefills dequantize to bf16 for cuBLASLt instead, cuda_w4a16_ops.cpp): 64 x 128 output tiles
// (wide in N: every CTA reads its 64 tokens' activations from L2 once per 128 columns, so at
// decode sizes those reads stay below the weights' own), 8 warps of 32 x 32, K in 64-column
// chunks through a cp.async pipeline (3, 4 or 6 stages: KVASIR_W4A16_GEMM_STAGES) holding each
// chunk's activations (64 x 64 bf16, rows XOR-swizzled in 16-byte units so ldmatrix is free of
// bank conflicts), codes (eight 512-byte layout tiles, read back as one 16-byte B-fragment load
// per lane and tile), and the one or two groups' scales and zero points of the tile's 128 columns.
// Codes become exact bf16 integers code - zero in registers; each group's float32 partial sums
// are scaled once. Up to three projections of one input (q/k/v, gate/up) share one launch: the
// grid runs over all their column tiles.
// When the tiles cannot fill the GPU (decode batches of a few dozen tokens), K is split over the
// CTAs of a thread-block cluster (up to 8): each leaves its float32 tile in its shared memory and
// the cluster adds them through distributed shared memory, each CTA summing a share of the tile
// in rank order (deterministic) and writing it out. No workspace and no atomics (the first
// version added float32 atomics into a workspace, ~470M in a batch-64 step of an 8B model;
// replacing them took that step only from 12.4 to 11.65 ms, H200: the main loop is the cost).
#include <cooperative_groups.h>

#include <algorithm>

#include "backend/cuda/w4a16_gemm_tile.cuh"
#include "backend/cuda/warp_mma.cuh"

namespace kvasir::cuda {
namespace {

constexpr int kStageBytes = kStageUsedBytes;
static_assert(kStageBytes % 128 == 0 && 3 * kStageBytes >= kBM * kRedStride * 4, "the split tile fits the stages");

// acc[mt][f] += this chunk for the warp's rows 32 wm + 16 mt (+ g, g + 8) and n8 tile f
// (columns 32 wn + 8 f + 2t (+1)); n16 layout tile i = f / 2 of the warp, its row half h = f % 2.
template <int kType>
__device__ __forceinline__ void compute_stage(const uint8_t* st, const W4a16GemmArgs& a, const W4a16Projection& p,
                                              int kc, int warp, int lane, float (&acc)[2][4][4]) {
  const int wm = warp >> 2, wn = warp & 3, g = lane >> 2, t = lane & 3;
  const uint8_t* A = st;
  const uint8_t* S = st + kABytes + kBBytes;
  const uint8_t* Z = S + kSBytes;
  const bool split = a.groups.split_chunks &&
                     w4a16_group_of(2 * static_cast<uint32_t>(kc), a.groups.magic) !=
                         w4a16_group_of(2 * static_cast<uint32_t>(kc) + 1, a.groups.magic);
  uint4 bv[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) bv[i] = *reinterpret_cast<const uint4*>(st + kABytes + (wn * 2 + i) * 512 + lane * 16);
  float tmp[2][4][4];
  uint32_t z2[4];
#pragma unroll
  for (int jh = 0; jh < 2; ++jh) {
    const int slot = split ? jh : 0;
    if (jh == 0 || split) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int f = 0; f < 4; ++f) {
#pragma unroll
          for (int c = 0; c < 4; ++c) tmp[mt][f][c] = 0.0f;
        }
      }
#pragma unroll
      for (int f = 0; f < 4; ++f) {
        z2[f] = w4a16_zero_pair(p.zeros != nullptr ? Z[slot * kBN + wn * 32 + f * 8 + g] : 8u);
      }
    }
#pragma unroll
    for (int ksub = 0; ksub < 2; ++ksub) {
      const int ks = 2 * jh + ksub;
      uint32_t af[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        const int r = wm * 32 + mt * 16 + (lane & 15), c = ks * 2 + (lane >> 4);
        ldsm_x4(af[mt], reinterpret_cast<const bf16*>(A + r * 128 + ((c ^ (r & 7)) << 4)));
      }
#pragma unroll
      for (int f = 0; f < 4; ++f) {
        const uint32_t w = word_of(bv[f >> 1], (f & 1) * 2 + jh);
        const uint32_t b0 = w4a16_pair(w, ksub * 2, z2[f]), b1 = w4a16_pair(w, ksub * 2 + 1, z2[f]);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) mma_bf16(tmp[mt][f], af[mt], b0, b1);
      }
    }
    if (jh == 1 || split) {
#pragma unroll
      for (int f = 0; f < 4; ++f) {
        const int c = wn * 32 + f * 8 + 2 * t;
        const float s0 = w4a16_scale_as<kType>(S + slot * kBN * 4, c);
        const float s1 = w4a16_scale_as<kType>(S + slot * kBN * 4, c + 1);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          acc[mt][f][0] = fmaf(tmp[mt][f][0], s0, acc[mt][f][0]);
          acc[mt][f][1] = fmaf(tmp[mt][f][1], s1, acc[mt][f][1]);
          acc[mt][f][2] = fmaf(tmp[mt][f][2], s0, acc[mt][f][2]);
          acc[mt][f][3] = fmaf(tmp[mt][f][3], s1, acc[mt][f][3]);
        }
      }
    }
  }
}

// Grid: (column tiles of every projection, row tiles, K splits); with splits, clusters of
// (1, 1, splits). kType: the scale type (W4a16ScaleType), fixed per launch.
template <int kStages, int kType>
__global__ void __launch_bounds__(kThreads, 2) w4a16_gemm_kernel(W4a16GemmArgs a) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const TileWork work = tile_work(a);
  const W4a16Projection& p = work.p;
  const int64_t n0 = work.n0, m0 = work.m0;
  const int kb = work.kb, ke = work.ke;
  const StageCopies copies = stage_copies<kType>(a, p, m0, n0, tid);
  float acc[2][4][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int f = 0; f < 4; ++f) {
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[mt][f][c] = 0.0f;
    }
  }
  pdl_begin();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (kb + s < ke) load_stage(smem + s * kStageBytes, copies, a.groups, kb + s);
    cp_async_commit();
  }
  int read = 0, write = kStages - 1;  // stages of chunk kc and of chunk kc + kStages - 1
  for (int kc = kb; kc < ke; ++kc) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (kc + kStages - 1 < ke) load_stage(smem + write * kStageBytes, copies, a.groups, kc + kStages - 1);
    cp_async_commit();
    compute_stage<kType>(smem + read * kStageBytes, a, p, kc, warp, lane, acc);
    read = read == kStages - 1 ? 0 : read + 1;
    write = write == kStages - 1 ? 0 : write + 1;
  }
  cp_async_wait<0>();
  if (gridDim.z > 1) {
    float* red = reinterpret_cast<float*>(smem);
    const int wm = warp >> 2, wn = warp & 3, g = lane >> 2, t = lane & 3;
    __syncthreads();  // every warp is done with the stages
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int f = 0; f < 4; ++f) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = wm * 32 + mt * 16 + g + half * 8, col = wn * 32 + f * 8 + 2 * t;
          *reinterpret_cast<float2*>(red + row * kRedStride + col) =
              make_float2(acc[mt][f][half * 2], acc[mt][f][half * 2 + 1]);
        }
      }
    }
    sum_split_tiles(a, p, m0, n0, red);
    return;
  }
  const int wm = warp >> 2, wn = warp & 3, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int f = 0; f < 4; ++f) {
      const int64_t col = n0 + wn * 32 + f * 8 + 2 * t;
      if (col >= p.out_features) continue;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int64_t row = m0 + wm * 32 + mt * 16 + g + half * 8;
        if (row < a.rows) store_pair(a, p, row, col, acc[mt][f][half * 2], acc[mt][f][half * 2 + 1]);
      }
    }
  }
}

int64_t column_tiles(int64_t out_features) { return (out_features + kBN - 1) / kBN; }

template <int kStages, int kType>
void launch_stages(const W4a16GemmArgs& a, dim3 grid, cudaStream_t s) {
  constexpr size_t smem = static_cast<size_t>(kStages) * kStageBytes;
  auto kernel = w4a16_gemm_kernel<kStages, kType>;
  if (smem > (48u << 10)) {
    KVASIR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
  launch_clustered(kernel, grid, kThreads, dim3(1, 1, grid.z), smem, s, a);
}

}  // namespace

W4a16GemmArgs w4a16_gemm_args(const void* x, const W4a16Projection* proj, int num_proj, int64_t n, int64_t k,
                              Elem out, int bn, int64_t* tiles) {
  KVASIR_CHECK_MSG(num_proj >= 1 && num_proj <= kW4a16MaxProjections, "W4A16 GEMM: 1 to 3 projections");
  W4a16GemmArgs a{};
  *tiles = 0;
  for (int i = 0; i < num_proj; ++i) {
    const W4a16Projection& p = proj[i];
    KVASIR_CHECK_MSG(n >= 1 && w4a16_shape_supported(p.out_features, k) && aligned16(x) && aligned16(p.codes) &&
                         aligned16(p.scales) && (p.zeros == nullptr || aligned16(p.zeros)),
                     "W4A16 GEMM: out_features % 16, in_features % 64 and 16-byte aligned operands");
    KVASIR_CHECK_MSG(w4a16_groups_supported(p.group_size, k),
                     "W4A16 GEMM: group size a multiple of 32 (or the row) below 131072, in_features below 2^25");
    KVASIR_CHECK_MSG(p.group_size == proj[0].group_size && p.scale_type == proj[0].scale_type,
                     "W4A16 GEMM: projections of one launch share their group size and scale type");
    a.p[i] = p;
    *tiles += (p.out_features + bn - 1) / bn;
    a.tile_end[i] = static_cast<int32_t>(*tiles);
  }
  KVASIR_CHECK_MSG(*tiles < (int64_t{1} << 31) && (n + kBM - 1) / kBM < 65536, "W4A16 GEMM: grid too large");
  a.num_proj = num_proj;
  a.groups = w4a16_groups(proj[0].group_size);
  a.x = static_cast<const bf16*>(x);
  a.rows = n;
  a.k = k;
  a.f32_out = out == Elem::kF32 ? 1 : 0;
  return a;
}

namespace {
bool use_wgmma() {
  static const bool wgmma = kernel_tuning().w4a16_gemm_wgmma && wgmma_device();
  return wgmma;
}
}  // namespace

int w4a16_splits_for(int64_t tiles, int64_t chunks, int num_sms, int ctas_per_sm, const int* clusters) {
  const int64_t slots = static_cast<int64_t>(ctas_per_sm) * std::max(1, num_sms);
  if (tiles >= 4 * slots || chunks < 8) return 1;
  const int most = static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>({kMaxSplits, kernel_tuning().w4a16_gemm_max_splits, chunks / 4})));
  auto fill = [&](int s) {
    const int64_t ctas = tiles * s;
    const int64_t waves = clusters != nullptr && clusters[s] > 0 ? (tiles + clusters[s] - 1) / clusters[s]
                                                                  : (ctas + slots - 1) / slots;
    return static_cast<double>(ctas) / static_cast<double>(waves * slots);
  };
  // With cluster capacities: clusters of more than four CTAs only where the tiles fit in one wave
  // of them (H100, batch 128: q/k/v's 48 tiles in clusters of 8, four waves of 15, cost ~75 us a
  // call against 2 slices in one wave).
  auto allowed = [&](int s) { return clusters == nullptr || clusters[s] <= 0 || s <= 4 || tiles <= clusters[s]; };
  double best = 0.0;
  for (int s = 1; s <= most; ++s) {
    if (allowed(s)) best = std::max(best, fill(s));
  }
  // Among counts within 3% of the best: the fewest while the tiles fit in one wave; where even one
  // slice takes several waves, the most (shorter CTAs: on an H100 at batch 128 the gate/up GEMM's
  // 224 tiles ran 9.41 ms a step in 4 slices against 11.61 unsplit, at equal fill).
  const bool one_wave = clusters != nullptr && clusters[1] > 0 ? tiles <= clusters[1] : tiles <= slots;
  int pick = 1;
  for (int s = 1; s <= most; ++s) {
    if (!allowed(s) || fill(s) < 0.97 * best) continue;
    pick = s;
    if (one_wave || clusters == nullptr) break;
  }
  return pick;
}

dim3 w4a16_gemm_grid(W4a16GemmArgs& a, int64_t tiles, int splits, bool even_slices) {
  const int64_t chunks = a.k / 64, per = (chunks + splits - 1) / splits;
  const bool bump = even_slices && per % 2 == 1 && (per + 1) * (splits - 1) < chunks;
  a.kc_per_split = static_cast<int32_t>(bump ? per + 1 : per);
  const unsigned z = static_cast<unsigned>((chunks + a.kc_per_split - 1) / a.kc_per_split);
  return dim3(static_cast<unsigned>(tiles), static_cast<unsigned>((a.rows + kBM - 1) / kBM), z);
}

int w4a16_gemm_splits(int64_t n, int64_t m, int64_t k, int num_sms) {
  if (use_wgmma()) return w4a16_wgmma_splits(n, m, k, num_sms);
  return w4a16_splits_for(column_tiles(m) * ((n + kBM - 1) / kBM), k / 64, num_sms, 2);
}

void launch_w4a16_gemm(const void* x, const W4a16Projection* proj, int num_proj, int64_t n, int64_t k, Elem out,
                       int num_sms, const W4a16StreamWorkspace* ws, cudaStream_t s) {
  if (use_wgmma() && w4a16_wgmma_takes(proj, num_proj)) {
    launch_w4a16_wgmma(x, proj, num_proj, n, k, out, num_sms, ws, s);
    return;
  }
  int64_t tiles = 0;
  W4a16GemmArgs a = w4a16_gemm_args(x, proj, num_proj, n, k, out, kBN, &tiles);
  const int64_t row_tiles = (n + kBM - 1) / kBM, chunks = k / 64;
  const dim3 grid = w4a16_gemm_grid(a, tiles, w4a16_splits_for(tiles * row_tiles, chunks, num_sms, 2), false);
  const bool three = kernel_tuning().w4a16_gemm_stages == 3;
  switch (proj[0].scale_type) {
    case kW4a16ScaleF32: three ? launch_stages<3, kW4a16ScaleF32>(a, grid, s) : launch_stages<4, kW4a16ScaleF32>(a, grid, s); break;
    case kW4a16ScaleBf16: three ? launch_stages<3, kW4a16ScaleBf16>(a, grid, s) : launch_stages<4, kW4a16ScaleBf16>(a, grid, s); break;
    default: three ? launch_stages<3, kW4a16ScaleF16>(a, grid, s) : launch_stages<4, kW4a16ScaleF16>(a, grid, s); break;
  }
  KVASIR_CUDA_LAUNCH_CHECK();
}

}  // namespace kvasir::cuda
