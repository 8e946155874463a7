// Paged decode attention on tensor cores with bulk copies ("mma_bulk"): the all-heads CTA shape (a CTA owns (split, sequence) and every kv head) with
// the GQA group on the tensor cores and the cache rows brought in by the bulk-copy engine. The
// query heads sharing a kv head are the rows of an mma.sync tile (padded to 16), so QK^T and PV are
// m16n8k16 / m16n8k8 with fp32 accumulators; each tile's token rows (every kv head, K and V)
// arrive as one cp.async.bulk per row, completing on the stage's mbarrier, so a CTA keeps whole
// tiles in flight without tying up its threads. Same partial layout as all_heads; the split plan,
// the kernel choice and the combine are in attention.cu.
// A bf16 cache is read by ldmatrix (rows padded by 16 bytes so the eight tokens an ldmatrix reads
// fall in eight bank groups). An FP8 cache (e4m3 / e5m2 codes, half the bytes: the point of it at
// the batches this kernel serves, where the KV stream is most of a step) is widened in registers
// to float16 (one cvt per two codes, exact) and runs f16 mma: the codes are bytes, which ldmatrix
// cannot transpose, so each lane loads the bytes its fragments need and the tile's dimension order
// is permuted to make those loads 16 contiguous bytes (see fp8_tile_scores / fp8_tile_values).
#include <algorithm>

#include "backend/cuda/attention_decode.cuh"
#include "backend/cuda/bulk_copy.cuh"
#include "backend/cuda/kv_cache_codes.cuh"

namespace kvasir::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kKvHeads = 8;  // the shape this kernel takes: 8 kv heads of 128 dims
constexpr int kHeadDim = 128;
constexpr int kT = 8;                              // tokens per tile: one n8 score tile per warp
constexpr int kRow = kKvHeads * kHeadDim;          // values per cache row (token)

// A stage's shared-memory rows: kT K rows, then kT V rows, each row padded. bf16: 16 bytes, for
// ldmatrix. FP8: K rows by 64 bytes, V rows by 16 (strides 64 and 16 mod 128), so that the
// quarter-warps of fp8_tile_scores (tokens g, g + 1 at one offset) and fp8_tile_values (tokens 0, 2,
// 4, 6 at offsets 0 and 16) touch eight different 16-byte bank groups.
template <typename C>
struct BulkRows {
  static constexpr bool kFp8 = CacheCodes<C>::kFp8;
  static constexpr int kRowBytes = kRow * static_cast<int>(sizeof(C));
  static constexpr int kKStride = kRowBytes + (kFp8 ? 64 : 16);
  static constexpr int kVStride = kRowBytes + 16;
  static constexpr size_t kStageBytes = static_cast<size_t>(kT) * (kKStride + kVStride);
};

template <typename C, int STAGES, int GC>
size_t mma_bulk_smem_bytes() {
  const size_t pipe = STAGES * BulkRows<C>::kStageBytes;
  const size_t red = static_cast<size_t>(kWarps) * GC * kHeadDim * sizeof(float);
  return std::max(pipe, red);
}

// Rows 8..15 of A are zero padding (a group has at most 8 heads): their outputs go to dead
// registers and their inputs are zero, so only row gid's two columns are kept. kF16: float16
// operands (the FP8 cache's path), else bf16.
#define KVASIR_MMA_K16_TOP(T)                                                                                \
  asm volatile("{\n.reg .f32 z2, z3;\n"                                                                       \
               "mma.sync.aligned.m16n8k16.row.col.f32." T "." T ".f32 {%0, %1, z2, z3}, {%2, %3, %4, %3}, " \
               "{%5, %6}, {%0, %1, %7, %7};\n}"                                                              \
               : "+f"(d0), "+f"(d1)                                                                          \
               : "r"(a0), "r"(0u), "r"(a2), "r"(b0), "r"(b1), "f"(0.0f))
#define KVASIR_MMA_K8_TOP(T)                                                                                  \
  asm volatile("{\n.reg .f32 z2, z3;\n"                                                                       \
               "mma.sync.aligned.m16n8k8.row.col.f32." T "." T ".f32 {%0, %1, z2, z3}, {%2, %3}, {%4}, "      \
               "{%0, %1, %5, %5};\n}"                                                                        \
               : "+f"(d0), "+f"(d1)                                                                          \
               : "r"(a0), "r"(0u), "r"(b0), "f"(0.0f))
template <bool kF16>
__device__ __forceinline__ void mma_k16_top(float& d0, float& d1, uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
  if constexpr (kF16) KVASIR_MMA_K16_TOP("f16");
  else KVASIR_MMA_K16_TOP("bf16");
}
template <bool kF16>
__device__ __forceinline__ void mma_k8_top(float& d0, float& d1, uint32_t a0, uint32_t b0) {
  if constexpr (kF16) KVASIR_MMA_K8_TOP("f16");
  else KVASIR_MMA_K8_TOP("bf16");
}
#undef KVASIR_MMA_K16_TOP
#undef KVASIR_MMA_K8_TOP
// Two floats as the operand pair of either type, the first in the low half.
template <bool kF16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (kF16) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}
// Two FP8 codes (the first in the low byte) as a float16 pair, the first in the low half: exact.
template <typename C>
__device__ __forceinline__ uint32_t f16x2_of(uint32_t two_codes) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_codes & 0xFFFFu), CacheCodes<C>::kKind);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

// The FP8 path's dimension order. QK^T sums over dims, so a k16 step may take any 16 of them as long
// as Q's A fragments take the same: step kk = 4 c + s gives k positions 2 tig, 2 tig + 1 to dims
// 64 c + 16 tig + 4 s + {0, 1} and k positions 2 tig + 8, + 9 to + {2, 3}. A lane then reads its
// token's 16 bytes 64 c + 16 tig .. + 15 once for four steps (one word per step, a cvt per half).
// Q is scaled by 1/16 into float16 (exact for |q| in [2^-10, 2^20]; sscale carries the 16 back).
constexpr float kFp8QScale = 1.0f / 16.0f;
template <typename C>
__device__ __forceinline__ void fp8_tile_scores(const uint8_t* ks, int kvh, int gid, int tig,
                                                const uint32_t (&qa)[kHeadDim / 16][2], float& s0, float& s1) {
  const uint8_t* krow = ks + gid * BulkRows<C>::kKStride + kvh * kHeadDim + tig * 16;
  const uint4 lo = *reinterpret_cast<const uint4*>(krow);
  const uint4 hi = *reinterpret_cast<const uint4*>(krow + 64);
  const uint32_t kw[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  float t0 = 0.0f, t1 = 0.0f;  // two chains of four dependent mma
#pragma unroll
  for (int kk = 0; kk < kHeadDim / 16; kk += 2) {
    mma_k16_top<true>(s0, s1, qa[kk][0], qa[kk][1], f16x2_of<C>(kw[kk]), f16x2_of<C>(kw[kk] >> 16));
    mma_k16_top<true>(t0, t1, qa[kk + 1][0], qa[kk + 1][1], f16x2_of<C>(kw[kk + 1]), f16x2_of<C>(kw[kk + 1] >> 16));
  }
  s0 += t0;
  s1 += t1;
}
// PV: tokens are the k dimension (a lane's B pair is tokens 2 tig, 2 tig + 1 of one output column,
// two bytes of two rows, which no ldmatrix transposes). Output dims are permuted instead: n8 tile
// nt's column j is dim 16 j + nt, so lane (gid, tig) needs dims 16 gid .. 16 gid + 15 of tokens
// 2 tig and 2 tig + 1, two 16-byte loads, paired by byte permutes; its accumulators acc[nt][0] and
// acc[nt][1] hold dims 32 tig + nt and 32 tig + 16 + nt.
template <typename C>
__device__ __forceinline__ void fp8_tile_values(const uint8_t* vs, int kvh, int gid, int tig, uint32_t pa, float corr,
                                                float (&acc)[kHeadDim / 8][2]) {
  const uint8_t* v0 = vs + 2 * tig * BulkRows<C>::kVStride + kvh * kHeadDim + gid * 16;
  const uint4 r0 = *reinterpret_cast<const uint4*>(v0);
  const uint4 r1 = *reinterpret_cast<const uint4*>(v0 + BulkRows<C>::kVStride);
  const uint32_t w0[4] = {r0.x, r0.y, r0.z, r0.w}, w1[4] = {r1.x, r1.y, r1.z, r1.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    // Bytes b of the two tokens side by side: (t0[b], t1[b], t0[b + 1], t1[b + 1]).
    const uint32_t p01 = __byte_perm(w0[q], w1[q], 0x5140), p23 = __byte_perm(w0[q], w1[q], 0x7362);
    const uint32_t b[4] = {f16x2_of<C>(p01), f16x2_of<C>(p01 >> 16), f16x2_of<C>(p23), f16x2_of<C>(p23 >> 16)};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      acc[4 * q + e][0] *= corr;
      acc[4 * q + e][1] *= corr;
      mma_k8_top<true>(acc[4 * q + e][0], acc[4 * q + e][1], pa, b[e]);
    }
  }
}

// Warp w serves kv head w and the tile's 8 tokens. In mma terms (gid = lane / 4, tig = lane % 4):
// row gid is query head gid of the group, the lane holds the scores of tokens tig * 2, tig * 2 + 1
// and output dims n * 8 + tig * 2, +1 of every n8 tile (bf16; the FP8 path's order is in
// fp8_tile_values).
template <typename C, int STAGES, int GC>
__global__ void __launch_bounds__(kThreads, STAGES <= 3 ? 2 : 1)
    decode_mma_bulk_kernel(AttentionArgs a, const int32_t* __restrict__ decode_seqs, int num_decode, int num_splits,
                     int part_tokens, float* __restrict__ partial) {
  using Rows = BulkRows<C>;
  constexpr bool kFp8 = Rows::kFp8;
  constexpr int HD = kHeadDim, KVH = kKvHeads;
  pdl_launch_dependents();
  extern __shared__ __align__(128) unsigned char mma_bulk_smem[];
  __shared__ float red_m[kWarps][GC], red_l[kWarps][GC];
  __shared__ int32_t blocks[kMaxPartition + 2];
  __shared__ __align__(8) uint64_t full[STAGES];

  const int group = a.num_heads / KVH;  // <= GC <= 8
  const SplitKeys keys = split_keys(a, decode_seqs, part_tokens, blockIdx.x, blockIdx.y);
  if (finish_empty_split(a, keys, num_splits, HD, partial)) return;
  const int64_t token = keys.token;
  const int begin = keys.begin, end = keys.end, bs = a.block_size;
  const int num_heads = a.num_heads;
  const int64_t part_stride = static_cast<int64_t>(num_decode) * num_heads * num_splits;
  const KeyTiles tiles = stage_key_tiles<kT>(a, keys, blocks);
  const int t0 = tiles.t0, ntiles = tiles.ntiles, b_first = tiles.b_first;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int i = 0; i < STAGES; ++i) mbar_init(&full[i], 1);
    mbar_init_fence();
  }
  __syncthreads();

  const auto* kc = static_cast<const uint8_t*>(a.k_cache);
  const auto* vc = static_cast<const uint8_t*>(a.v_cache);
  uint8_t* stage_base = mma_bulk_smem;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // Warp 0 issues a tile: lane 0 arms the stage's barrier with the tile's byte count, then lanes
  // 0..kT-1 copy one token's K row and V row each. Rows outside [begin, end) are not copied.
  auto issue_tile = [&](int tile) {
    const int st = tile % STAGES;
    uint8_t* ks = stage_base + st * Rows::kStageBytes;
    uint8_t* vs = ks + kT * Rows::kKStride;
    const int tb = t0 + tile * kT;
    const int nvalid = min(end, tb + kT) - max(begin, tb);
    if (lane == 0) mbar_expect_tx(&full[st], static_cast<unsigned>(nvalid) * Rows::kRowBytes * 2);
    __syncwarp();
    const int j = tb + lane;
    if (lane < kT && j >= begin && j < end) {
      const int64_t off = (static_cast<int64_t>(blocks[j / bs - b_first]) * bs + j % bs) * Rows::kRowBytes;
      bulk_copy(ks + lane * Rows::kKStride, kc + off, Rows::kRowBytes, &full[st]);
      bulk_copy(vs + lane * Rows::kVStride, vc + off, Rows::kRowBytes, &full[st]);
    }
  };
  // Cache rows other than the newest token's are older than this step, but the newest is written
  // by the previous kernel: every copy waits for it.
  pdl_wait();
  if (warp == 0) {
    for (int i = 0; i < STAGES - 1 && i < ntiles; ++i) issue_tile(i);
  }

  const int kvh = warp;
  const int gid = lane >> 2, tig = lane & 3;
  const int head0 = kvh * group;
  const bool capped = a.softcap > 0.0f;
  // Scores kept in log2 units; the FP8 path's Q is scaled by kFp8QScale.
  const float sscale = (capped ? a.scale : a.scale * kLog2e) * (kFp8 ? 1.0f / kFp8QScale : 1.0f);
  const bf16* q = static_cast<const bf16*>(a.q);
  // A fragments of Q, row gid: bf16 dims kk * 16 + tig * 2 (+1) and +8, exact; FP8 path: float16 of
  // q * kFp8QScale in fp8_tile_scores' order.
  uint32_t qa[HD / 16][2];
  {
    const bf16* qrow = q + (token * num_heads + head0 + min(gid, group - 1)) * HD;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      if constexpr (kFp8) {
        const int d = (kk / 4) * 64 + tig * 16 + (kk % 4) * 4;
        const float2 x01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(qrow + d));
        const float2 x23 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(qrow + d + 2));
        qa[kk][0] = gid < group ? pack2<true>(x01.x * kFp8QScale, x01.y * kFp8QScale) : 0u;
        qa[kk][1] = gid < group ? pack2<true>(x23.x * kFp8QScale, x23.y * kFp8QScale) : 0u;
      } else {
        qa[kk][0] = gid < group ? *reinterpret_cast<const uint32_t*>(qrow + tig * 2 + kk * 16) : 0u;
        qa[kk][1] = gid < group ? *reinterpret_cast<const uint32_t*>(qrow + tig * 2 + kk * 16 + 8) : 0u;
      }
    }
  }
  float m = -INFINITY, l = 0.0f;
  float acc[HD / 8][2];
#pragma unroll
  for (int n = 0; n < HD / 8; ++n) acc[n][0] = acc[n][1] = 0.0f;

  // ldmatrix addressing (bf16): lane L gives row L % 8 (a token) of matrix L / 8 (a chunk).
  const int lt = lane & 7;
  const int hc0 = kvh * (HD / 8) + (lane >> 3);
  const int jt = tig * 2;  // this lane's first score column in the tile

  for (int i = 0; i < ntiles; ++i) {
    const int st = i % STAGES;
    mbar_wait(&full[st], static_cast<unsigned>((i / STAGES) & 1));
    uint8_t* ks_stage = stage_base + st * Rows::kStageBytes;
    uint8_t* vs_stage = ks_stage + kT * Rows::kKStride;
    const int tb = t0 + i * kT;
    if (tb < begin || tb + kT > end) {
      // A partial tile: V rows not copied hold stale or uninitialised values, and a zero weight
      // times a NaN is still NaN. Zero them (K rows are masked through the scores; code 0 is +0).
      constexpr int kPieces = Rows::kRowBytes / 16;
      for (int c = threadIdx.x; c < kT * kPieces; c += kThreads) {
        const int tt = c / kPieces;
        if (tb + tt < begin || tb + tt >= end) {
          *reinterpret_cast<uint4*>(vs_stage + tt * Rows::kVStride + (c % kPieces) * 16) = uint4{0, 0, 0, 0};
        }
      }
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();  // tile i is in (and fixed up) for every warp; tile i - 1's stage is free again
    if (warp == 0 && i + STAGES - 1 < ntiles) issue_tile(i + STAGES - 1);
    float s0 = 0.0f, s1 = 0.0f;
    if constexpr (kFp8) {
      fp8_tile_scores<C>(ks_stage, kvh, gid, tig, qa, s0, s1);
    } else {
      const bf16* ks = reinterpret_cast<const bf16*>(ks_stage + lt * Rows::kKStride);
      // Two accumulator pairs: the eight dependent mma.sync of a row become two chains of four.
      float t0a = 0.0f, t1a = 0.0f;
#pragma unroll
      for (int kk = 0; kk < HD / 16; kk += 2) {
        uint32_t kb[4];
        ldsm_x4(kb, ks + (hc0 + kk * 2) * 8);
        mma_k16_top<false>(s0, s1, qa[kk][0], qa[kk][1], kb[0], kb[1]);
        mma_k16_top<false>(t0a, t1a, qa[kk + 1][0], qa[kk + 1][1], kb[2], kb[3]);
      }
      s0 += t0a;
      s1 += t1a;
    }
    const int j0 = tb + jt;
    s0 *= sscale;
    s1 *= sscale;
    if (capped) {
      s0 = a.softcap * tanhf(s0 / a.softcap) * kLog2e;
      s1 = a.softcap * tanhf(s1 / a.softcap) * kLog2e;
    }
    if (j0 < begin || j0 >= end) s0 = -INFINITY;
    if (j0 + 1 < begin || j0 + 1 >= end) s1 = -INFINITY;
    float mt = fmaxf(s0, s1);
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
    mt = fmaxf(m, mt);
    const bool none = mt == -INFINITY;
    const float corr = none ? 1.0f : exp2f(m - mt);
    const float p0 = none ? 0.0f : exp2f(s0 - mt), p1 = none ? 0.0f : exp2f(s1 - mt);
    l = l * corr + p0 + p1;  // this lane's columns only; summed over tig at the end
    m = mt;
    if constexpr (kFp8) {
      fp8_tile_values<C>(vs_stage, kvh, gid, tig, pack2<true>(p0, p1), corr, acc);
    } else {
      const uint32_t pa = pack2<false>(p0, p1);
      const bf16* vs = reinterpret_cast<const bf16*>(vs_stage + lt * Rows::kVStride);
#pragma unroll
      for (int nn = 0; nn < HD / 32; ++nn) {
        uint32_t vb[4];
        ldsm_x4_trans(vb, vs + (hc0 + nn * 4) * 8);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          acc[nn * 4 + e][0] *= corr;
          acc[nn * 4 + e][1] *= corr;
          mma_k8_top<false>(acc[nn * 4 + e][0], acc[nn * 4 + e][1], pa, vb[e]);
        }
      }
    }
  }
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  __syncthreads();  // every tile consumed: the pipeline's shared memory becomes the reduction buffer

  float* red_acc = reinterpret_cast<float*>(mma_bulk_smem);  // [warp][GC][HD]
  if (gid < group) {
    if (tig == 0) {
      red_m[warp][gid] = m;
      red_l[warp][gid] = l;
    }
    if constexpr (kFp8) {
      float* r = red_acc + (warp * GC + gid) * HD + tig * 32;
#pragma unroll
      for (int n = 0; n < HD / 8; ++n) r[n] = acc[n][0], r[16 + n] = acc[n][1];
    } else {
      float* r = red_acc + (warp * GC + gid) * HD + tig * 2;
#pragma unroll
      for (int n = 0; n < HD / 8; ++n) *reinterpret_cast<float2*>(r + n * 8) = make_float2(acc[n][0], acc[n][1]);
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < num_heads * HD; idx += blockDim.x) {
    const int h = idx / HD, d = idx % HD;
    const int hk = h / group, g = h % group;
    const float mx = red_m[hk][g];
    const float sum = red_l[hk][g];
    const float v = sum > 0.0f ? red_acc[(hk * GC + g) * HD + d] / sum : 0.0f;
    // natural-log units for the combine
    const float m_ln = mx == -INFINITY ? -INFINITY : mx * 0.6931471805599453f;
    store_split_result(a, keys, part_stride, num_splits, HD, h, d, v, m_ln, sum, partial);
  }
}

// KVASIR_CUDA_TMA_STAGES: pipeline depth (3: two CTAs per SM, default; 6: one CTA per SM).
int mma_bulk_stages() {
  return kernel_tuning().mma_bulk_stages;
}

template <typename C, int STAGES, int GC>
void launch_t(const AttentionArgs& a, const int32_t* decode_seqs, int nd, const DecodeSplit& sp, float* partial,
              cudaStream_t s) {
  launch(decode_mma_bulk_kernel<C, STAGES, GC>, dim3(sp.num_splits, nd), kThreads,
         mma_bulk_smem_bytes<C, STAGES, GC>(), s, a, decode_seqs, nd, sp.num_splits, sp.partition_tokens, partial);
  KVASIR_CUDA_LAUNCH_CHECK();
}
template <typename C, int STAGES>
void launch_stages(const AttentionArgs& a, const int32_t* decode_seqs, int nd, const DecodeSplit& sp, float* partial,
                   cudaStream_t s) {
  const int group = a.num_heads / kKvHeads;
  if (group <= 1) launch_t<C, STAGES, 1>(a, decode_seqs, nd, sp, partial, s);
  else if (group <= 2) launch_t<C, STAGES, 2>(a, decode_seqs, nd, sp, partial, s);
  else if (group <= 4) launch_t<C, STAGES, 4>(a, decode_seqs, nd, sp, partial, s);
  else launch_t<C, STAGES, 8>(a, decode_seqs, nd, sp, partial, s);
}
template <typename C, int STAGES, int GC>
void init_t() {
  KVASIR_CUDA_CHECK(cudaFuncSetAttribute(decode_mma_bulk_kernel<C, STAGES, GC>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(mma_bulk_smem_bytes<C, STAGES, GC>())));
}
template <typename C, int STAGES>
void init_stages() {
  init_t<C, STAGES, 1>();
  init_t<C, STAGES, 2>();
  init_t<C, STAGES, 4>();
  init_t<C, STAGES, 8>();
}
template <typename C>
void init_codes() {
  init_stages<C, 3>();
  init_stages<C, 6>();
}

}  // namespace

bool mma_bulk_shape_ok(int num_heads, int num_kv_heads, int head_dim) {
  return num_kv_heads == kKvHeads && head_dim == kHeadDim && num_heads % num_kv_heads == 0 &&
         num_heads / num_kv_heads >= 1 && num_heads / num_kv_heads <= 8;
}

void launch_decode_mma_bulk(const AttentionArgs& a, const int32_t* decode_seqs, int nd, const DecodeSplit& sp,
                      float* partial, cudaStream_t s) {
  with_cache_codes(a.kv_cache, [&]<typename C>() {
    if (mma_bulk_stages() == 6) launch_stages<C, 6>(a, decode_seqs, nd, sp, partial, s);
    else launch_stages<C, 3>(a, decode_seqs, nd, sp, partial, s);
  });
}

void init_decode_mma_bulk_kernels() {
  init_codes<bf16>();
  init_codes<e4m3>();
  init_codes<e5m2>();
}

}  // namespace kvasir::cuda
