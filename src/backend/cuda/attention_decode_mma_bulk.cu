// Paged decode attention on tensor cores with bulk copies ("mma_bulk"): the all-heads CTA shape (a CTA owns (split, sequence) and every kv head) with
// the GQA group on the tensor cores and the cache rows brought in by the bulk-copy engine. The
// query heads sharing a kv head are the rows of an mma.sync tile (padded to 16), so QK^T and PV are
// m16n8k16 / m16n8k8 bf16 with fp32 accumulators; each tile's token rows (every kv head, K and V)
// arrive as one cp.async.bulk per row, completing on the stage's mbarrier, so a CTA keeps whole
// tiles in flight without tying up its threads. Rows are padded by 16 bytes in shared memory (the
// eight tokens an ldmatrix reads fall in eight bank groups). Same partial layout as all_heads; the split
// plan, the kernel choice and the combine are in attention.cu.
#include <algorithm>

#include "backend/cuda/attention_decode.cuh"

namespace kvasir::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kKvHeads = 8;  // the shape this kernel takes: 8 kv heads of 128 dims
constexpr int kHeadDim = 128;
constexpr int kT = 8;                              // tokens per tile: one n8 score tile per warp
constexpr int kRow = kKvHeads * kHeadDim;          // values per cache row (token)
constexpr int kRowPad = kRow + 8;                  // shared-memory row stride in values
constexpr int kRowBytes = kRow * 2;
constexpr size_t kStageBytes = static_cast<size_t>(2) * kT * kRowPad * sizeof(bf16);

template <int STAGES, int GC>
size_t mma_bulk_smem_bytes() {
  const size_t pipe = STAGES * kStageBytes;
  const size_t red = static_cast<size_t>(kWarps) * GC * kHeadDim * sizeof(float);
  return std::max(pipe, red);
}

__device__ __forceinline__ void mbar_init(uint64_t* b, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* b, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* b, unsigned parity) {
  const uint32_t a = smem_addr(b);
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(a), "r"(parity)
        : "memory");
  }
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, uint64_t* b) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(b))
               : "memory");
}

// Rows 8..15 of A are zero padding (a group has at most 8 heads): their outputs go to dead
// registers and their inputs are zero, so only row gid's two columns are kept.
__device__ __forceinline__ void mma_k16_top(float& d0, float& d1, uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
  asm volatile(
      "{\n.reg .f32 z2, z3;\n"
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, z2, z3}, {%2, %3, %4, %3}, {%5, %6}, "
      "{%0, %1, %7, %7};\n}"
      : "+f"(d0), "+f"(d1)
      : "r"(a0), "r"(0u), "r"(a2), "r"(b0), "r"(b1), "f"(0.0f));
}
__device__ __forceinline__ void mma_k8_top(float& d0, float& d1, uint32_t a0, uint32_t b0) {
  asm volatile(
      "{\n.reg .f32 z2, z3;\n"
      "mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0, %1, z2, z3}, {%2, %3}, {%4}, {%0, %1, %5, %5};\n}"
      : "+f"(d0), "+f"(d1)
      : "r"(a0), "r"(0u), "r"(b0), "f"(0.0f));
}
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// Warp w serves kv head w and the tile's 8 tokens. In mma terms (gid = lane / 4, tig = lane % 4):
// row gid is query head gid of the group, the lane holds the scores of tokens tig * 2, tig * 2 + 1
// and output dims n * 8 + tig * 2, +1 of every n8 tile.
template <int STAGES, int GC>
__global__ void __launch_bounds__(kThreads, STAGES <= 3 ? 2 : 1)
    decode_mma_bulk_kernel(AttentionArgs a, const int32_t* __restrict__ decode_seqs, int num_decode, int num_splits,
                     int part_tokens, float* __restrict__ partial) {
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
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  const bf16* kc = static_cast<const bf16*>(a.k_cache);
  const bf16* vc = static_cast<const bf16*>(a.v_cache);
  bf16* stage_base = reinterpret_cast<bf16*>(mma_bulk_smem);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // Warp 0 issues a tile: lane 0 arms the stage's barrier with the tile's byte count, then lanes
  // 0..kT-1 copy one token's K row and V row each. Rows outside [begin, end) are not copied.
  auto issue_tile = [&](int tile) {
    const int st = tile % STAGES;
    bf16* ks = stage_base + static_cast<size_t>(st) * 2 * kT * kRowPad;
    bf16* vs = ks + kT * kRowPad;
    const int tb = t0 + tile * kT;
    const int nvalid = min(end, tb + kT) - max(begin, tb);
    if (lane == 0) mbar_expect_tx(&full[st], static_cast<unsigned>(nvalid) * kRowBytes * 2);
    __syncwarp();
    const int j = tb + lane;
    if (lane < kT && j >= begin && j < end) {
      const int64_t off = (static_cast<int64_t>(blocks[j / bs - b_first]) * bs + j % bs) * kRow;
      bulk_copy(ks + lane * kRowPad, kc + off, kRowBytes, &full[st]);
      bulk_copy(vs + lane * kRowPad, vc + off, kRowBytes, &full[st]);
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
  const float sscale = capped ? a.scale : a.scale * kLog2e;  // scores kept in log2 units
  const bf16* q = static_cast<const bf16*>(a.q);
  // A fragments of Q (unscaled, exact bf16): row gid, dims kk * 16 + tig * 2 (+1) and +8.
  uint32_t qa[HD / 16][2];
  {
    const bf16* qrow = q + (token * num_heads + head0 + min(gid, group - 1)) * HD + tig * 2;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      qa[kk][0] = gid < group ? *reinterpret_cast<const uint32_t*>(qrow + kk * 16) : 0u;
      qa[kk][1] = gid < group ? *reinterpret_cast<const uint32_t*>(qrow + kk * 16 + 8) : 0u;
    }
  }
  float m = -INFINITY, l = 0.0f;
  float acc[HD / 8][2];
#pragma unroll
  for (int n = 0; n < HD / 8; ++n) acc[n][0] = acc[n][1] = 0.0f;

  // ldmatrix addressing: lane L gives row L % 8 (a token) of matrix L / 8 (a chunk).
  const int lt = lane & 7;
  const int hc0 = kvh * (HD / 8) + (lane >> 3);
  const int jt = tig * 2;  // this lane's first score column in the tile

  for (int i = 0; i < ntiles; ++i) {
    const int st = i % STAGES;
    mbar_wait(&full[st], static_cast<unsigned>((i / STAGES) & 1));
    bf16* ks_stage = stage_base + static_cast<size_t>(st) * 2 * kT * kRowPad;
    const int tb = t0 + i * kT;
    if (tb < begin || tb + kT > end) {
      // A partial tile: V rows not copied hold stale or uninitialised values, and a zero weight
      // times a NaN is still NaN. Zero them (K rows are masked through the scores).
      bf16* vs = ks_stage + kT * kRowPad;
      for (int c = threadIdx.x; c < kT * (kRow / 8); c += kThreads) {
        const int tt = c / (kRow / 8);
        if (tb + tt < begin || tb + tt >= end) {
          *reinterpret_cast<uint4*>(vs + tt * kRowPad + (c % (kRow / 8)) * 8) = uint4{0, 0, 0, 0};
        }
      }
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();  // tile i is in (and fixed up) for every warp; tile i - 1's stage is free again
    if (warp == 0 && i + STAGES - 1 < ntiles) issue_tile(i + STAGES - 1);
    const bf16* ks = ks_stage + lt * kRowPad;
    const bf16* vs = ks + kT * kRowPad;
    // Two accumulator pairs: the eight dependent mma.sync of a row become two chains of four.
    float s0 = 0.0f, s1 = 0.0f, t0a = 0.0f, t1a = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk += 2) {
      uint32_t kb[4];
      ldsm_x4(kb, ks + (hc0 + kk * 2) * 8);
      mma_k16_top(s0, s1, qa[kk][0], qa[kk][1], kb[0], kb[1]);
      mma_k16_top(t0a, t1a, qa[kk + 1][0], qa[kk + 1][1], kb[2], kb[3]);
    }
    s0 += t0a;
    s1 += t1a;
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
    const uint32_t pa = pack2(p0, p1);
#pragma unroll
    for (int nn = 0; nn < HD / 32; ++nn) {
      uint32_t vb[4];
      ldsm_x4_trans(vb, vs + (hc0 + nn * 4) * 8);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        acc[nn * 4 + e][0] *= corr;
        acc[nn * 4 + e][1] *= corr;
        mma_k8_top(acc[nn * 4 + e][0], acc[nn * 4 + e][1], pa, vb[e]);
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
    float* r = red_acc + (warp * GC + gid) * HD + tig * 2;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) *reinterpret_cast<float2*>(r + n * 8) = make_float2(acc[n][0], acc[n][1]);
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

template <int STAGES, int GC>
void launch_t(const AttentionArgs& a, const int32_t* decode_seqs, int nd, const DecodeSplit& sp, float* partial,
              cudaStream_t s) {
  launch(decode_mma_bulk_kernel<STAGES, GC>, dim3(sp.num_splits, nd), kThreads, mma_bulk_smem_bytes<STAGES, GC>(), s, a,
         decode_seqs, nd, sp.num_splits, sp.partition_tokens, partial);
  KVASIR_CUDA_LAUNCH_CHECK();
}
template <int STAGES>
void launch_stages(const AttentionArgs& a, const int32_t* decode_seqs, int nd, const DecodeSplit& sp, float* partial,
                   cudaStream_t s) {
  const int group = a.num_heads / kKvHeads;
  if (group <= 1) launch_t<STAGES, 1>(a, decode_seqs, nd, sp, partial, s);
  else if (group <= 2) launch_t<STAGES, 2>(a, decode_seqs, nd, sp, partial, s);
  else if (group <= 4) launch_t<STAGES, 4>(a, decode_seqs, nd, sp, partial, s);
  else launch_t<STAGES, 8>(a, decode_seqs, nd, sp, partial, s);
}
template <int STAGES, int GC>
void init_t() {
  KVASIR_CUDA_CHECK(cudaFuncSetAttribute(decode_mma_bulk_kernel<STAGES, GC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(mma_bulk_smem_bytes<STAGES, GC>())));
}
template <int STAGES>
void init_stages() {
  init_t<STAGES, 1>();
  init_t<STAGES, 2>();
  init_t<STAGES, 4>();
  init_t<STAGES, 8>();
}

}  // namespace

bool mma_bulk_shape_ok(int num_heads, int num_kv_heads, int head_dim) {
  return num_kv_heads == kKvHeads && head_dim == kHeadDim && num_heads % num_kv_heads == 0 &&
         num_heads / num_kv_heads >= 1 && num_heads / num_kv_heads <= 8;
}

void launch_decode_mma_bulk(const AttentionArgs& a, const int32_t* decode_seqs, int nd, const DecodeSplit& sp,
                      float* partial, cudaStream_t s) {
  if (mma_bulk_stages() == 6) launch_stages<6>(a, decode_seqs, nd, sp, partial, s);
  else launch_stages<3>(a, decode_seqs, nd, sp, partial, s);
}

void init_decode_mma_bulk_kernels() {
  init_stages<3>();
  init_stages<6>();
}

}  // namespace kvasir::cuda
