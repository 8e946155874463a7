// GEMV over Q4_K and Q6_K blocks (a Q4_K_M model's matrices) with the weights as the A operand of
// m16n8k16 bf16 MMAs: a warp's tile is 16 rows, each lane's fetches of the quant bytes are its A
// fragments after a shift and one or two LOP3s per pair, and the tokens are the 8-wide B operand
// (one MMA per 16 columns for up to 8 tokens, two for up to 16). The scales are applied per
// sub-block in float32 after the MMAs, so no weight is rounded (gguf_kquant_formats.cuh). The
// generic GEMV (gguf_mma_gemv.cu) puts the weights in B (8 rows per warp), decodes every weight to
// bf16 with its scales (six operations per two weights) and reads 64 bytes of x per 16 of weights:
// it reads a Q4_K_M 8B at ~1.1-1.4 TB/s (H100, ncu).
// - The CTA is one 16-row tile of one of up to three projections of one x (q/k/v, gate/up); its 8
//   warps take super-blocks w, w + 8, ..., each with the next one's bytes in flight while the
//   current one is summed; the warps' tiles meet in shared memory at the end. (One wave of CTAs
//   walking the tiles, the next tile's bytes in flight across tile boundaries, measured slower:
//   batch-1 Q4_K_M step 3.55 ms against 3.38, H100.)
// - A warp's first two super-blocks are requested before the PDL wait (weights are never written by
//   an earlier kernel). A super-block's per-sub-block factors are decoded by the warp's lanes
//   together (each lane a quarter or an eighth of one row's header) into a per-warp shared buffer,
//   two buffers alternating.
// - x is staged in shared memory while its rows fit in 64 KB (batch 1-7 at k = 4096), else read
//   from L1.
// - One token's gate/up followed by the gated activation may be one launch (kGated, the recording
//   decides: cuda_gguf_ops.cpp): a CTA then takes gate's and up's tile and writes act(gate) * up.
// - One token runs on the streamed kernel instead where KVASIR_GGUF_KQUANT_STREAM asks for it and
//   its plan takes the shape (gguf_kquant_stream.cu: the same sums in the same order, the weights
//   through a shared-memory ring); this kernel keeps 2-16 tokens and the shapes the ring does not take.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/gguf_kernels.h"
#include "backend/cuda/gguf_kquant_formats.cuh"
#include "backend/cuda/gguf_kquant_rows.cuh"
#include "backend/cuda/gguf_kquant_stream.h"

namespace kvasir::cuda {
namespace {

using kquant::XSource;

constexpr int kWarps = kquant::kGemvWarps;
constexpr int kThreads = kquant::kGemvThreads;
using kquant::kFactorBytes;
constexpr int kXPad = 32;           // bf16 elements of padding per staged x row (64 bytes: the 8
                                    // tokens of a quarter-warp's loads fall in distinct banks)
constexpr size_t kStageLimit = 64 << 10;  // staged x rows

struct KquantGemvArgs : kquant::ProjectionRows {
  const bf16* x;
  int64_t y_offset;
  int32_t n;
};

// Dynamic shared memory: per warp two factor buffers; then, where x is staged, its n rows (stride
// k + kXPad).
extern __shared__ __align__(16) uint8_t kquant_smem[];

__device__ __forceinline__ void stage_x(const bf16* __restrict__ x, int n, int64_t k, bf16* rows) {
  const int chunks = static_cast<int>(k / 8);  // 16-byte chunks per row
  for (int tok = 0; tok < n; ++tok) {
    for (int ch = threadIdx.x; ch < chunks; ch += kThreads) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(x + tok * k + ch * 8));
      *reinterpret_cast<uint4*>(rows + tok * (k + kXPad) + ch * 8) = v;
    }
  }
}

// kGated: the CTA's tile is the same 16 rows of gate (proj[0]) and up (proj[1]), and it writes up
// and act(gate) * up (gate's rows, in place) as the unfused gated activation would: ba holds a
// warp's gate super-block, bb the same one of up, so the loop steps kWarps super-blocks at a time.
// Each matrix's super-blocks meet the same warps in the same order as in two plain tiles, so the
// sums are theirs bit for bit.
template <class F, int NT, bool kStageX, bool kOne, bool kGated>
__global__ void __launch_bounds__(kThreads, NT == 1 ? F::kMinBlocks : 2) kquant_gemv_kernel(KquantGemvArgs a) {
  constexpr int kProj = kGated ? 2 : 1;
  __shared__ float red[kWarps][kProj][16][NT * 8];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t tile = blockIdx.x;
  int p = 0;
  if constexpr (!kGated) {
    while (p + 1 < a.num_proj && tile >= a.tile_end[p]) ++p;
  }
  const GgufProjection& pr = a.proj[p];
  const int64_t m = pr.out_features;
  const int64_t row0 = (tile - (p == 0 ? 0 : a.tile_end[p - 1])) * 16;
  const kquant::TileRows tr = kquant::tile_rows(pr.w, m, a.row_bytes, row0, lane);
  const kquant::TileRows tr_b = kGated ? kquant::tile_rows(a.proj[1].w, m, a.row_bytes, row0, lane) : tr;
  const int nsb = a.super_blocks;
  float* fbuf = reinterpret_cast<float*>(kquant_smem + warp * 2 * kFactorBytes);
  constexpr int kBufFloats = kFactorBytes / 4;
  // The B stream's super-block beside the A stream's sb: sb + kWarps of the same matrix, or up's sb
  // (kGated).
  constexpr int kBOffset = kGated ? 0 : kWarps, kStep = kGated ? kWarps : 2 * kWarps;
  const auto load = [&](int sb, typename F::Block& b) { kquant::load_super_block<F>(tr, sb, t, b); };
  const auto load_b = [&](int sb, typename F::Block& b) { kquant::load_super_block<F>(tr_b, sb + kBOffset, t, b); };
  pdl_launch_dependents();
  typename F::Block ba, bb;
  int sb = warp;
  if (sb < nsb) load(sb, ba);
  if (sb + kBOffset < nsb) load_b(sb, bb);
  pdl_wait();  // x is the previous kernel's output
  XSource<NT> xs;
  if constexpr (kStageX) {
    bf16* rows = reinterpret_cast<bf16*>(kquant_smem + kWarps * 2 * kFactorBytes);
    stage_x(a.x, a.n, a.k, rows);
#pragma unroll
    for (int o = 0; o < NT; ++o) xs.row[o] = rows + static_cast<int64_t>(min(o * 8 + g, a.n - 1)) * (a.k + kXPad);
    __syncthreads();
  } else {
#pragma unroll
    for (int o = 0; o < NT; ++o) xs.row[o] = a.x + static_cast<int64_t>(min(o * 8 + g, a.n - 1)) * a.k;
  }
  float acc[kProj][NT][4];
#pragma unroll
  for (int i = 0; i < kProj; ++i) {
#pragma unroll
    for (int o = 0; o < NT; ++o) acc[i][o][0] = acc[i][o][1] = acc[i][o][2] = acc[i][o][3] = 0.0f;
  }
  // A lane writes a factor buffer only after every lane has passed the __syncwarp that follows the
  // other buffer's writes, so after its reads of the buffer's previous super-block.
  for (; sb < nsb; sb += kStep) {
    F::decode_factors(ba, lane, fbuf);
    __syncwarp();
    F::template sum<NT, kStageX, kOne>(ba, static_cast<int64_t>(sb) * 256, fbuf + F::kFactorFloats * g, xs, t, acc[0]);
    if (sb + kStep < nsb) load(sb + kStep, ba);
    if (sb + kBOffset >= nsb) break;
    F::decode_factors(bb, lane, fbuf + kBufFloats);
    __syncwarp();
    F::template sum<NT, kStageX, kOne>(bb, static_cast<int64_t>(sb + kBOffset) * 256,
                                       fbuf + kBufFloats + F::kFactorFloats * g, xs, t, acc[kProj - 1]);
    if (sb + kStep + kBOffset < nsb) load_b(sb + kStep, bb);
  }
#pragma unroll
  for (int i = 0; i < kProj; ++i) {
#pragma unroll
    for (int o = 0; o < NT; ++o) {
      red[warp][i][g][o * 8 + 2 * t] = acc[i][o][0];
      red[warp][i][g][o * 8 + 2 * t + 1] = acc[i][o][1];
      red[warp][i][g + 8][o * 8 + 2 * t] = acc[i][o][2];
      red[warp][i][g + 8][o * 8 + 2 * t + 1] = acc[i][o][3];
    }
  }
  __syncthreads();
  const int tok = threadIdx.x >> 4, rr = threadIdx.x & 15;
  const int64_t r = row0 + rr;
  if (tok >= NT * 8 || tok >= a.n || r >= m) return;
  float v[kProj];
#pragma unroll
  for (int i = 0; i < kProj; ++i) {
    v[i] = 0.0f;
#pragma unroll
    for (int w8 = 0; w8 < kWarps; ++w8) v[i] += red[w8][i][rr][tok];
  }
  kquant::store_row<kGated>(a, pr, (a.y_offset + tok) * m + r, r, v);
}

template <class F, int NT, bool kStageX, bool kOne, bool kGated>
void launch_variant(const KquantGemvArgs& a, unsigned blocks, size_t smem, cudaStream_t s) {
  auto* kernel = kquant_gemv_kernel<F, NT, kStageX, kOne, kGated>;
  constexpr size_t kStatic = sizeof(float) * kWarps * (kGated ? 2 : 1) * 16 * NT * 8;
  if (smem + kStatic > (48 << 10)) {
    KVASIR_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
  launch(kernel, blocks, kThreads, smem, s, a);
  KVASIR_CUDA_LAUNCH_CHECK();
}

template <class F, int NT, bool kStageX, bool kOne = false>
void launch_kernel(const KquantGemvArgs& a, unsigned blocks, size_t smem, cudaStream_t s) {
  if constexpr (kOne) {  // the gated tile only for one token (launch_gguf_kquant_gemv)
    if (a.gated != kGateNone) return launch_variant<F, NT, kStageX, kOne, true>(a, blocks, smem, s);
  }
  launch_variant<F, NT, kStageX, kOne, false>(a, blocks, smem, s);
}

template <class F>
void launch_format(KquantGemvArgs& a, const void* x, int n, int64_t k, unsigned blocks, cudaStream_t s) {
  const size_t factors = kquant::kFactorsBytes;
  for (int t0 = 0; t0 < n; t0 += 16) {  // 16 tokens per pass over the weights
    a.x = static_cast<const bf16*>(x) + static_cast<int64_t>(t0) * k;
    a.y_offset = t0;
    a.n = n - t0 < 16 ? n - t0 : 16;
    const int nt = a.n > 8 ? 2 : 1;
    const size_t rows = static_cast<size_t>(a.n) * (k + kXPad) * 2;
    const bool stage = rows <= kStageLimit;
    const size_t smem = factors + (stage ? rows : 0);
    if (nt == 2) {
      if (stage) launch_kernel<F, 2, true>(a, blocks, smem, s);
      else launch_kernel<F, 2, false>(a, blocks, smem, s);
    } else if (a.n == 1) {
      if (stage) launch_kernel<F, 1, true, true>(a, blocks, smem, s);
      else launch_kernel<F, 1, false, true>(a, blocks, smem, s);
    } else {
      if (stage) launch_kernel<F, 1, true>(a, blocks, smem, s);
      else launch_kernel<F, 1, false>(a, blocks, smem, s);
    }
  }
}

}  // namespace

// Q6_K rows of an even number of super-blocks: then every row starts on a word, and a super-block's
// parity says whether its words are aligned.
bool gguf_kquant_gemv_supported(DType t, int64_t k) {
  if (k <= 0 || k > (int64_t{1} << 24)) return false;
  if (t == DType::kQ4_K) return k % 256 == 0;
  return t == DType::kQ6_K && k % 512 == 0;
}

void launch_gguf_kquant_gemv(const void* x, const GgufProjection* proj, int num_proj, DType t, int n, int64_t k,
                             Elem out, cudaStream_t s, GateAct gated, int stream_ctas_per_sm) {
  KVASIR_CHECK_MSG(n >= 1 && gguf_kquant_gemv_supported(t, k) && aligned16(x) && num_proj >= 1 &&
                       num_proj <= kGgufMaxProjections,
                   "K-quant GEMV: Q4_K or Q6_K rows of whole (Q6_K: an even number of) super-blocks, a 16-byte "
                   "aligned input, 1..3 projections");
  KVASIR_CHECK_MSG(gated == kGateNone ||
                       (n == 1 && num_proj == 2 && out == Elem::kBf16 &&
                        proj[0].out_features == proj[1].out_features && proj[0].bias == nullptr &&
                        proj[1].bias == nullptr),
                   "K-quant GEMV: a gated activation takes one token's gate and up of one shape, no biases, bf16 out");
  const int stream = stream_ctas_per_sm < 0 ? kernel_tuning().gguf_kquant_stream : stream_ctas_per_sm;
  if (n == 1 && stream > 0 && launch_gguf_kquant_stream(x, proj, num_proj, t, k, out, s, gated, stream)) return;
  KquantGemvArgs a{};
  KVASIR_CHECK_MSG(kquant::set_projection_rows(a, proj, num_proj, t, k, out, gated),
                   "K-quant GEMV: 16-byte aligned, non-empty weights");
  // Gated: a CTA per tile of gate, which takes up's too.
  const auto blocks = static_cast<unsigned>(kquant::work_tiles(a));
  if (t == DType::kQ4_K) launch_format<kquant::Q4K>(a, x, n, k, blocks, s);
  else launch_format<kquant::Q6K>(a, x, n, k, blocks, s);
}

}  // namespace kvasir::cuda
