// moe_experts for many tokens, as vLLM's fused_moe does it, in four launches that depend on
// counts only (graph-capturable):
//  1. align (one CTA): count the slots (token, j) per expert, give each expert a run of positions
//     padded to the GEMM's block_m, write the slot ids in expert order (padding: num_slots), the
//     expert of every m-block and the number of m-blocks (vLLM's moe_align_block_size);
//  2. gate/up: a grouped GEMM, CTA = (64 columns of I, one m-block): the m-block's token rows of x
//     gathered against its expert's gate and up rows, biases and the activation in the epilogue,
//     act[position, :] (bf16);
//  3. down: CTA = (128 columns of H, one m-block): act rows against the expert's down rows, plus
//     the down bias, to y[slot, :] (float32);
//  4. un-permute: out[t] = sum_j w[t, j] * y[t * top_k + j] in slot order (deterministic).
// The GEMMs run on the tensor cores (mma.sync m16n8k16 bf16, float32 accumulators) with a
// three-stage cp.async pipeline over 64-wide k tiles. A row's result depends only on its own
// inputs (fixed k order), so neither the order of slots within an expert (the align step places
// them with shared-memory atomics) nor the other rows of its tile change it.
#include "backend/cuda/moe_common.cuh"
#include "backend/cuda/warp_mma.cuh"

namespace kvasir::cuda {
namespace {

constexpr int kThreads = 128;             // 4 warps, each owning 16 (gated) or 32 columns
constexpr int kBK = 64;                   // k elements per pipeline stage
constexpr int kBRows = 128;               // weight rows staged per stage (64 gate + 64 up, or 128 down)
constexpr int kStages = 3;
constexpr int kStride = kBK + 8;          // smem row stride in bf16: 144 bytes, conflict-free fragments
constexpr int kAlignThreads = 1024;       // also the most experts the align step takes

template <int BM>
constexpr int gemm_smem_bytes() {
  return kStages * (BM + kBRows) * kStride * 2;
}

__global__ void __launch_bounds__(kAlignThreads) moe_align_kernel(const int32_t* __restrict__ ids, int64_t num_slots,
                                                                  int num_experts, int first_expert, int block_m,
                                                                  MoeGemmScratch sc) {
  pdl_begin();
  __shared__ int32_t counts[kAlignThreads];
  __shared__ int32_t cursor[kAlignThreads];
  __shared__ int32_t warp_total[kAlignThreads / 32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int E = num_experts;
  counts[tid] = 0;
  __syncthreads();
  for (int64_t i = tid; i < num_slots; i += kAlignThreads) {
    const int e = ids[i] - first_expert;
    if (e >= 0 && e < E) atomicAdd(&counts[e], 1);
  }
  __syncthreads();
  // Exclusive scan of the padded counts over the experts (thread e holds expert e).
  const int padded = tid < E ? (counts[tid] + block_m - 1) / block_m * block_m : 0;
  int v = padded;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int n = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += n;
  }
  if (lane == 31) warp_total[warp] = v;
  __syncthreads();
  if (warp == 0) {
    int w = warp_total[lane];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int n = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += n;
    }
    warp_total[lane] = w;
  }
  __syncthreads();
  const int inclusive = v + (warp > 0 ? warp_total[warp - 1] : 0);
  const int begin = inclusive - padded;
  const int total = warp_total[kAlignThreads / 32 - 1];
  cursor[tid] = begin;
  if (tid < E) {
    for (int b = begin / block_m; b < inclusive / block_m; ++b) sc.block_expert[b] = tid;
  }
  if (tid == 0) *sc.num_m_blocks = total / block_m;
  for (int pos = tid; pos < total; pos += kAlignThreads) sc.sorted_slots[pos] = static_cast<int32_t>(num_slots);
  __syncthreads();  // padding written before the slots overwrite their positions
  for (int64_t i = tid; i < num_slots; i += kAlignThreads) {
    const int e = ids[i] - first_expert;
    if (e >= 0 && e < E) sc.sorted_slots[atomicAdd(&cursor[e], 1)] = static_cast<int32_t>(i);
  }
}

// One m-block of the grouped GEMM. kGated: out columns [n0, n0 + 64) of I, B rows 0-63 gate and
// 64-127 up; else out columns [n0, n0 + 128) of H from the down rows.
template <int BM, bool kGated>
__global__ void __launch_bounds__(kThreads) moe_gemm_kernel(MoeProblem p, MoeGemmScratch sc) {
  constexpr int MT = BM / 16;  // m16 tiles per warp (every warp covers all BM rows)
  constexpr int kAChunks = BM * 8 / kThreads;  // 16-byte A chunks per thread per stage
  static_assert(kAChunks >= 1 && BM % 16 == 0, "every thread stages whole A rows' chunks");
  pdl_begin();
  const int mb = blockIdx.y;
  if (mb >= *sc.num_m_blocks) return;
  extern __shared__ __align__(16) unsigned char gemm_smem[];
  bf16* a_smem = reinterpret_cast<bf16*>(gemm_smem);
  bf16* b_smem = a_smem + kStages * BM * kStride;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int gid = lane >> 2, tig = lane & 3;
  const int64_t num_slots = p.num_tokens * p.top_k;
  const MoeExpertPtrs ex = p.experts[sc.block_expert[mb]];
  const int64_t K = kGated ? p.hidden : p.inter;
  const int64_t N = kGated ? p.inter : p.hidden;
  const int64_t n0 = int64_t{blockIdx.x} * (kGated ? kBRows / 2 : kBRows);
  const int col8 = (tid & 7) * 8;  // this thread's chunk column within a k tile

  // Row sources of this thread's chunks (fixed over the k loop): A rows tid / 8 + 16 q.
  const bf16* a_row[kAChunks];
  bool a_ok[kAChunks];
#pragma unroll
  for (int q = 0; q < kAChunks; ++q) {
    const int64_t pos = int64_t{mb} * BM + tid / 8 + 16 * q;
    if constexpr (kGated) {
      const int32_t slot = sc.sorted_slots[pos];
      a_ok[q] = slot < num_slots;  // padding rows read zeros
      a_row[q] = static_cast<const bf16*>(p.x) + (a_ok[q] ? (slot / p.top_k) * K : 0);
    } else {
      a_ok[q] = true;
      a_row[q] = static_cast<const bf16*>(sc.act) + pos * K;
    }
  }
  const bf16* b_row[8];
  bool b_ok[8];
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    const int r = tid / 8 + 16 * q;
    if constexpr (kGated) {
      const int64_t n = n0 + (r & 63);
      b_ok[q] = n < N;
      b_row[q] = static_cast<const bf16*>(r < 64 ? ex.w_gate : ex.w_up) + (b_ok[q] ? n * p.gu_row_stride : 0);
    } else {
      const int64_t n = n0 + r;
      b_ok[q] = n < N;
      b_row[q] = static_cast<const bf16*>(ex.w_down) + (b_ok[q] ? n * K : 0);
    }
  }
  auto load_stage = [&](int stage, int64_t kt) {
    const int64_t k = kt * kBK + col8;
    const bool k_ok = k < K;
    bf16* as = a_smem + stage * BM * kStride;
    bf16* bs = b_smem + stage * kBRows * kStride;
#pragma unroll
    for (int q = 0; q < kAChunks; ++q) {
      const bool ok = a_ok[q] && k_ok;
      cp_async16(as + (tid / 8 + 16 * q) * kStride + col8, ok ? a_row[q] + k : a_row[q], ok);
    }
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      const bool ok = b_ok[q] && k_ok;
      cp_async16(bs + (tid / 8 + 16 * q) * kStride + col8, ok ? b_row[q] + k : b_row[q], ok);
    }
  };

  float acc[MT][4][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[mt][nt][c] = 0.0f;
    }
  }

  const int64_t k_tiles = (K + kBK - 1) / kBK;
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < k_tiles) load_stage(st, st);
    cp_async_commit();
  }
  for (int64_t kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage kt has landed for every thread; stage kt - 1 is no longer read
    const int64_t next = kt + kStages - 1;
    if (next < k_tiles) load_stage(static_cast<int>(next % kStages), next);
    cp_async_commit();
    const bf16* as = a_smem + (kt % kStages) * BM * kStride;
    const bf16* bs = b_smem + (kt % kStages) * kBRows * kStride;
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      uint32_t af[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const bf16* base = as + (mt * 16 + gid) * kStride + kk * 16 + tig * 2;
        af[mt][0] = *reinterpret_cast<const uint32_t*>(base);
        af[mt][1] = *reinterpret_cast<const uint32_t*>(base + 8 * kStride);
        af[mt][2] = *reinterpret_cast<const uint32_t*>(base + 8);
        af[mt][3] = *reinterpret_cast<const uint32_t*>(base + 8 * kStride + 8);
      }
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        // n-tiles 0, 1 from the first 64 B rows, 2, 3 from the second (gate then up when gated).
        const int brow = (nt / 2) * 64 + warp * 16 + (nt % 2) * 8 + gid;
        const bf16* bb = bs + brow * kStride + kk * 16 + tig * 2;
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(bb);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(bb + 8);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) mma_bf16(acc[mt][nt], af[mt], b0, b1);
      }
    }
  }
  cp_async_wait<0>();

  // Epilogue: D fragment element c of tile (mt, nt) is row mt * 16 + gid (+ 8 for c >= 2),
  // column 2 * tig + (c & 1) of the n-tile.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int row = mt * 16 + gid + (c >= 2 ? 8 : 0);
      const int64_t pos = int64_t{mb} * BM + row;
      if constexpr (kGated) {
        bf16* act = static_cast<bf16*>(sc.act) + pos * N;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int64_t col = n0 + warp * 16 + half * 8 + tig * 2 + (c & 1);
          if (col >= N) continue;
          float g = acc[mt][half][c], u = acc[mt][2 + half][c];
          if (ex.b_gate != nullptr) g += ex.b_gate[col * p.gu_bias_stride];
          if (ex.b_up != nullptr) u += ex.b_up[col * p.gu_bias_stride];
          act[col] = __float2bfloat16_rn(moe_activate(p.act, g, u, p.alpha, p.limit));
        }
      } else {
        const int32_t slot = sc.sorted_slots[pos];
        if (slot >= num_slots) continue;
        float* y = sc.y + int64_t{slot} * N;
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          const int64_t col = n0 + (nt / 2) * 64 + warp * 16 + (nt % 2) * 8 + tig * 2 + (c & 1);
          if (col >= N) continue;
          y[col] = acc[mt][nt][c] + (ex.b_down != nullptr ? ex.b_down[col] : 0.0f);
        }
      }
    }
  }
}

// out[t, h] = sum_j w[t, j] * y[t * top_k + j, h], j ascending (slots with no expert skipped).
__global__ void __launch_bounds__(256) moe_unpermute_kernel(MoeProblem p, const float* __restrict__ y) {
  pdl_begin();
  const int64_t t = blockIdx.x;
  const int64_t H = p.hidden, K = p.top_k;
  for (int64_t h = threadIdx.x; h < H; h += blockDim.x) {
    float o = 0.0f;
    for (int64_t j = 0; j < K; ++j) {
      const int e = p.ids[t * K + j] - static_cast<int>(p.first_expert);
      if (e >= 0 && e < p.num_experts) o += p.weights[t * K + j] * y[(t * K + j) * H + h];
    }
    static_cast<bf16*>(p.out)[t * H + h] = __float2bfloat16_rn(o);
  }
}

template <int BM>
void launch_gemms(const MoeProblem& p, const MoeGemmScratch& sc, int64_t max_m_blocks, cudaStream_t s) {
  const dim3 gu(static_cast<unsigned>((p.inter + kBRows / 2 - 1) / (kBRows / 2)), static_cast<unsigned>(max_m_blocks));
  launch(moe_gemm_kernel<BM, true>, gu, kThreads, gemm_smem_bytes<BM>(), s, p, sc);
  KVASIR_CUDA_LAUNCH_CHECK();
  const dim3 down(static_cast<unsigned>((p.hidden + kBRows - 1) / kBRows), static_cast<unsigned>(max_m_blocks));
  launch(moe_gemm_kernel<BM, false>, down, kThreads, gemm_smem_bytes<BM>(), s, p, sc);
  KVASIR_CUDA_LAUNCH_CHECK();
}

template <int BM>
void init_block_m() {
  KVASIR_CUDA_CHECK(cudaFuncSetAttribute(moe_gemm_kernel<BM, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         gemm_smem_bytes<BM>()));
  KVASIR_CUDA_CHECK(cudaFuncSetAttribute(moe_gemm_kernel<BM, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         gemm_smem_bytes<BM>()));
}

}  // namespace

void init_moe_kernels() {
  init_block_m<16>();
  init_block_m<64>();
}

bool moe_gemm_supported(int64_t hidden, int64_t inter, int64_t num_experts) {
  return hidden % 8 == 0 && inter % 8 == 0 && num_experts >= 1 && num_experts <= kAlignThreads;
}

void launch_moe_gemm(const MoeProblem& p, const MoeGemmScratch& sc, int block_m, int64_t max_m_blocks, cudaStream_t s) {
  if (p.num_tokens <= 0) return;
  KVASIR_CHECK_MSG(moe_gemm_supported(p.hidden, p.inter, p.num_experts) && (block_m == 16 || block_m == 64),
                   "moe gemm: unsupported shape");
  KVASIR_CHECK_MSG(max_m_blocks >= 1 && max_m_blocks <= 65535 && p.num_tokens <= 0x7fffffff / p.top_k,
                   "moe gemm: too many tokens for one launch");
  launch(moe_align_kernel, 1, kAlignThreads, 0, s, p.ids, p.num_tokens * p.top_k, static_cast<int>(p.num_experts),
         static_cast<int>(p.first_expert), block_m, sc);
  KVASIR_CUDA_LAUNCH_CHECK();
  if (block_m == 16) launch_gemms<16>(p, sc, max_m_blocks, s);
  else launch_gemms<64>(p, sc, max_m_blocks, s);
  launch(moe_unpermute_kernel, static_cast<unsigned>(p.num_tokens), 256, 0, s, p, static_cast<const float*>(sc.y));
  KVASIR_CUDA_LAUNCH_CHECK();
}

}  // namespace kvasir::cuda
