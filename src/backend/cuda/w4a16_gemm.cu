// W4A16 GEMM for more tokens than the GEMV takes (prefill, large decode batches): 64 x 128 output
// tiles (wide in N: every CTA reads its 64 tokens' activations from L2 once per 128 columns, so
// at decode sizes those reads stay below the weights' own), 8 warps of 32 x 32, K in 64-column
// chunks through a 3-stage cp.async pipeline holding each chunk's activations (64 x 64 bf16, rows
// XOR-swizzled in 16-byte units so ldmatrix is free of bank conflicts), codes (eight 512-byte
// layout tiles, read back as one 16-byte B-fragment load per lane and tile), and the one or two
// groups' scales and zero points of the tile's 128 columns.
// Codes become exact bf16 integers code - zero in registers; each group's float32 partial sums
// are scaled once. When the tiles cannot fill the GPU (decode batches of a few dozen tokens),
// K is split across CTAs that add into a float32 workspace; the last CTA of a tile to finish (a
// counter per tile) writes the tile's output and zeroes its sums and counter for the next GEMM,
// so a split GEMM is one launch.
#include "backend/cuda/w4a16_common.cuh"
#include "backend/cuda/warp_mma.cuh"

namespace kvasir::cuda {
namespace {

constexpr int kBM = 64, kBN = 128, kStages = 3, kThreads = 256;
constexpr int kABytes = kBM * 64 * 2;
constexpr int kBBytes = (kBN / 16) * 512;
constexpr int kSBytes = 2 * kBN * 4;  // two group rows, up to float32
constexpr int kZBytes = 2 * kBN;
constexpr int kStageBytes = kABytes + kBBytes + kSBytes + kZBytes;
static_assert(kStageBytes % 128 == 0 && kStages * kStageBytes <= 48 * 1024, "static shared memory");

struct W4a16GemmArgs {
  const bf16* x;
  W4a16Projection p;
  float* ws;        // split K: float32 [rows, out] accumulated with atomics; null: write y directly
  int32_t* counts;  // split K: CTAs done per output tile
  int64_t rows, k;
  W4a16Groups groups;  // 32-column half -> its group, without a division
  int32_t kc_per_split, f32_out;
};

__device__ __forceinline__ void load_stage(uint8_t* st, const W4a16GemmArgs& a, int64_t m0, int64_t n0, int64_t kc,
                                           int tid) {
  const int64_t K = a.k, N = a.p.out_features, chunks = K / 64;
  uint8_t* A = st;
  for (int i = tid; i < kBM * 8; i += kThreads) {
    const int r = i >> 3, c = i & 7;
    const int64_t row = m0 + r;
    const bool ok = row < a.rows;
    cp_async16(A + r * 128 + ((c ^ (r & 7)) << 4), a.x + (ok ? row : 0) * K + kc * 64 + c * 8, ok);
  }
  uint8_t* B = st + kABytes;
  static_assert((kBN / 16) * 32 == kThreads, "one code load per thread");
  {
    const int tile = tid >> 5, l = tid & 31;
    const int64_t nt = n0 / 16 + tile;
    const bool ok = nt < N / 16;
    cp_async16(B + tile * 512 + l * 16,
               static_cast<const uint8_t*>(a.p.codes) + ((ok ? nt : 0) * chunks + kc) * 512 + l * 16, ok);
  }
  const uint32_t g0 = w4a16_group_of(2 * static_cast<uint32_t>(kc), a.groups.magic);
  const uint32_t g1 = a.groups.split_chunks ? w4a16_group_of(2 * static_cast<uint32_t>(kc) + 1, a.groups.magic) : g0;
  const int sb = a.p.scale_type == kW4a16ScaleF32 ? 4 : 2;
  uint8_t* S = st + kABytes + kBBytes;
  uint8_t* Z = S + kSBytes;
  const int u = tid;
  constexpr int kScaleChunks = kBN * 4 / 16;  // per group row, at most (float32 scales)
  if (u < 2 * kScaleChunks) {
    const int slot = u / kScaleChunks, c = u % kScaleChunks;
    if (c < kBN * sb / 16 && (slot == 0 || g1 != g0)) {
      const int64_t grp = slot ? g1 : g0, col = n0 + c * 16 / sb;
      const bool ok = col < N;
      cp_async16(S + slot * kBN * 4 + c * 16,
                 static_cast<const uint8_t*>(a.p.scales) + (grp * N + (ok ? col : 0)) * sb, ok);
    }
  } else if (a.p.zeros != nullptr && u >= 2 * kScaleChunks && u < 2 * kScaleChunks + 2 * kBN / 16) {
    const int slot = (u - 2 * kScaleChunks) / (kBN / 16), c = (u - 2 * kScaleChunks) % (kBN / 16);
    if (slot == 0 || g1 != g0) {
      const int64_t grp = slot ? g1 : g0, col = n0 + c * 16;
      const bool ok = col < N;
      cp_async16(Z + slot * kBN + c * 16, a.p.zeros + grp * N + (ok ? col : 0), ok);
    }
  }
}

// acc[mt][f] += this chunk for the warp's rows 32 wm + 16 mt (+ g, g + 8) and n8 tile f
// (columns 32 wn + 8 f + 2t (+1)); n16 layout tile i = f / 2 of the warp, its row half h = f % 2.
__device__ __forceinline__ void compute_stage(const uint8_t* st, const W4a16GemmArgs& a, int64_t kc, int warp, int lane,
                                              float (&acc)[2][4][4]) {
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
        z2[f] = w4a16_zero_pair(a.p.zeros != nullptr ? Z[slot * kBN + wn * 32 + f * 8 + g] : 8u);
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
        const float s0 = w4a16_scale(S + slot * kBN * 4, c, a.p.scale_type);
        const float s1 = w4a16_scale(S + slot * kBN * 4, c + 1, a.p.scale_type);
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

__global__ void __launch_bounds__(kThreads) w4a16_gemm_kernel(W4a16GemmArgs a) {
  __shared__ __align__(128) uint8_t smem[kStages * kStageBytes];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBN, m0 = static_cast<int64_t>(blockIdx.y) * kBM;
  const int64_t chunks = a.k / 64;
  const int64_t kb = static_cast<int64_t>(blockIdx.z) * a.kc_per_split;
  const int64_t ke = min(chunks, kb + a.kc_per_split);
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
    if (kb + s < ke) load_stage(smem + s * kStageBytes, a, m0, n0, kb + s, tid);
    cp_async_commit();
  }
  for (int64_t kc = kb; kc < ke; ++kc) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    const int64_t next = kc + kStages - 1;
    if (next < ke) load_stage(smem + ((next - kb) % kStages) * kStageBytes, a, m0, n0, next, tid);
    cp_async_commit();
    compute_stage(smem + ((kc - kb) % kStages) * kStageBytes, a, kc, warp, lane, acc);
  }
  cp_async_wait<0>();
  const int wm = warp >> 2, wn = warp & 3, g = lane >> 2, t = lane & 3;
  const int64_t N = a.p.out_features;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int f = 0; f < 4; ++f) {
      const int64_t col = n0 + wn * 32 + f * 8 + 2 * t;
      if (col >= N) continue;
      const float b0 = a.ws == nullptr && a.p.bias != nullptr ? a.p.bias[col] : 0.0f;
      const float b1 = a.ws == nullptr && a.p.bias != nullptr ? a.p.bias[col + 1] : 0.0f;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int64_t row = m0 + wm * 32 + mt * 16 + g + half * 8;
        if (row >= a.rows) continue;
        const float v0 = acc[mt][f][half * 2], v1 = acc[mt][f][half * 2 + 1];
        if (a.ws != nullptr) {
          atomicAdd(a.ws + row * N + col, v0);
          atomicAdd(a.ws + row * N + col + 1, v1);
        } else if (a.f32_out) {
          *reinterpret_cast<float2*>(static_cast<float*>(a.p.y) + row * N + col) = make_float2(v0 + b0, v1 + b1);
        } else {
          *reinterpret_cast<uint32_t*>(static_cast<bf16*>(a.p.y) + row * N + col) = pack_bf16(v0 + b0, v1 + b1);
        }
      }
    }
  }
  if (a.ws == nullptr) return;
  // Split K: the tile's last CTA to get here finishes it (the threadFenceReduction pattern: every
  // CTA's sums are visible device-wide before it counts itself in).
  __shared__ int last;
  __threadfence();
  __syncthreads();
  const int64_t tile = static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x;
  if (tid == 0) last = atomicAdd(a.counts + tile, 1) == static_cast<int>(gridDim.z) - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int i = tid; i < kBM * kBN / 2; i += kThreads) {
    const int64_t row = m0 + (2 * i) / kBN, col = n0 + (2 * i) % kBN;
    if (row >= a.rows || col >= N) continue;
    float* p = a.ws + row * N + col;
    const float v0 = __ldcg(p), v1 = __ldcg(p + 1);  // from L2, where the atomics landed
    __stcg(reinterpret_cast<float2*>(p), make_float2(0.0f, 0.0f));
    const float b0 = a.p.bias != nullptr ? a.p.bias[col] : 0.0f, b1 = a.p.bias != nullptr ? a.p.bias[col + 1] : 0.0f;
    if (a.f32_out) *reinterpret_cast<float2*>(static_cast<float*>(a.p.y) + row * N + col) = make_float2(v0 + b0, v1 + b1);
    else *reinterpret_cast<uint32_t*>(static_cast<bf16*>(a.p.y) + row * N + col) = pack_bf16(v0 + b0, v1 + b1);
  }
  if (tid == 0) a.counts[tile] = 0;
}

}  // namespace

int w4a16_gemm_splits(int64_t n, int64_t m, int64_t k, int num_sms) {
  const int64_t tiles = ((m + kBN - 1) / kBN) * ((n + kBM - 1) / kBM), chunks = k / 64;
  if (tiles >= num_sms || chunks < 8) return 1;
  // About two CTAs per SM, each with at least four chunks of K.
  const int64_t want = (2 * static_cast<int64_t>(num_sms) + tiles - 1) / tiles;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(want, chunks / 4)));
}

size_t w4a16_gemm_workspace_bytes(int64_t n, int64_t m, int64_t k, int num_sms) {
  if (w4a16_gemm_splits(n, m, k, num_sms) <= 1) return 0;
  const int64_t tiles = ((m + kBN - 1) / kBN) * ((n + kBM - 1) / kBM);
  return (static_cast<size_t>(n * m) * sizeof(float) + 255) / 256 * 256 + static_cast<size_t>(tiles) * sizeof(int32_t);
}

void launch_w4a16_gemm(const void* x, const W4a16Projection& p, int64_t n, int64_t k, Elem out, void* workspace,
                       int num_sms, cudaStream_t s) {
  KVASIR_CHECK_MSG(n >= 1 && w4a16_shape_supported(p.out_features, k) && aligned16(x) && aligned16(p.codes) &&
                       aligned16(p.scales) && (p.zeros == nullptr || aligned16(p.zeros)),
                   "W4A16 GEMM: out_features % 16, in_features % 64 and 16-byte aligned operands");
  KVASIR_CHECK_MSG(w4a16_groups_supported(p.group_size, k),
                   "W4A16 GEMM: group size a multiple of 32 (or the row) below 131072, in_features below 2^25");
  const int splits = w4a16_gemm_splits(n, p.out_features, k, num_sms);
  const int64_t chunks = k / 64;
  W4a16GemmArgs a{};
  a.groups = w4a16_groups(p.group_size);
  a.x = static_cast<const bf16*>(x);
  a.p = p;
  a.rows = n;
  a.k = k;
  a.kc_per_split = static_cast<int32_t>((chunks + splits - 1) / splits);
  a.f32_out = out == Elem::kF32 ? 1 : 0;
  const unsigned z = static_cast<unsigned>((chunks + a.kc_per_split - 1) / a.kc_per_split);
  if (splits > 1) {
    KVASIR_CHECK_MSG(workspace != nullptr, "W4A16 GEMM: a split GEMM needs its workspace");
    a.ws = static_cast<float*>(workspace);
    a.counts = reinterpret_cast<int32_t*>(static_cast<uint8_t*>(workspace) +
                                          (static_cast<size_t>(n * p.out_features) * sizeof(float) + 255) / 256 * 256);
  }
  const dim3 grid(static_cast<unsigned>((p.out_features + kBN - 1) / kBN), static_cast<unsigned>((n + kBM - 1) / kBM), z);
  launch(w4a16_gemm_kernel, grid, kThreads, 0, s, a);
  KVASIR_CUDA_LAUNCH_CHECK();
}

}  // namespace kvasir::cuda
