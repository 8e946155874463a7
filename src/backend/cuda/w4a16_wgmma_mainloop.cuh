// The W4A16 GEMM's wgmma main loop, shared by its two kernels (w4a16_wgmma.cu: K split across
// cluster CTAs; w4a16_wgmma_stream.cu: stream-K over every SM), with the tile's store and the
// launch-time choice of kernel variant. Header-only; holds no kernels.
//
// W4A16 GEMM on Hopper's warpgroup MMA (wgmma), for the token counts of batched decode and short
// prefills. Weights are the wgmma A operand from registers: a warp's 16 layout bytes per lane are
// exactly its m16n8k16-shaped A fragments (rows g and g + 8), which is what wgmma takes from each
// warp of a warpgroup for its 16 of 64 rows. The activations are the B operand (64 tokens), read by
// the tensor cores straight from the stage's 128-byte-swizzled rows (K-major, no ldmatrix).
//
// Shape of the work, chosen for a batch-64 decode step (weights ~1 byte per 2 values, the
// tensor cores and the weight stream about equally loaded):
//  - A CTA's tile is 64 tokens x 256 features, one CTA per SM: every activation byte brought into
//    shared memory serves 256 features (a 128-feature tile read as many activation bytes as code
//    bytes, all of them through L2 again for every tile). Four warpgroups, each one m64n64k16 per
//    k16 step on its 64 features: four warps a scheduler to hide the dequantization's latencies.
//  - The group scale is applied to the weight in registers, (code - zero) exact in bf16 times the
//    scale rounded once to bf16 (as vLLM's Marlin kernels do; the dequantizing prefill path rounds
//    the same way), so one float32 accumulator runs over all of K: no wait for the tensor cores at
//    group ends to scale partial sums.
//  - The loop is pipelined across chunks: chunk i's fragments are built while chunk i - 1's
//    wgmmas run (two fragment sets, alternating), and a chunk waits only for the one before it
//    (wgmma.wait_group 1). Stages are handed over a pair of chunks at a time: one cp.async wait and
//    one CTA barrier per 128 columns of K. Under ncu (H100, batch 64, 2026-12-07) the kernel issued
//    194 instructions a warp per chunk, two thirds of them not the dequantization, with barrier
//    stalls 13-23% of the samples; a barrier per pair halves that share. cp.async fills run
//    kAhead chunks ahead (kAhead + 3 stages: the pair being read, the chunk before it whose wgmmas
//    may still run, the fills in flight), from pointers advanced chunk by chunk. The weights of
//    the first kAhead chunks are requested before the wait for the previous kernel (PDL): no
//    earlier kernel writes them.
#pragma once

#include "backend/cuda/cuda_tuning.h"
#include "backend/cuda/w4a16_gemm_tile.cuh"

namespace kvasir::cuda {

constexpr int kWgBN = 256;       // features a tile
constexpr int kWgABytes = kBM * 64 * 2;           // activations: 64 tokens x 64 bf16, swizzled rows
constexpr int kWgBBytes = (kWgBN / 16) * 512;     // codes: 16 layout tiles
constexpr int kWgSBytes = 2 * kWgBN * 4;          // two group rows of scales, up to float32
constexpr int kWgZBytes = 2 * kWgBN;              // two group rows of zero points
constexpr int kWgStageBytes = (kWgABytes + kWgBBytes + kWgSBytes + kWgZBytes + 1023) / 1024 * 1024;
// Chunks the fills run ahead (KVASIR_W4A16_WGMMA_AHEAD: 4, 6 or 8; even, whole pairs) and the
// shared memory that takes: kAhead + 3 stages (214 KB at 8, inside the 227 KB an SM gives a CTA).
constexpr int wg_stages(int ahead) { return ahead + 3; }
constexpr size_t wg_smem(int ahead) { return static_cast<size_t>(wg_stages(ahead)) * kWgStageBytes; }
static_assert(wg_smem(4) >= static_cast<size_t>(kBM) * (kWgBN + 8) * 4, "the split tile fits the stages");
static_assert(wg_smem(8) <= 227 * 1024, "the stages fit an SM");
constexpr int kWgThreads = 512;  // four warpgroups

// The shared-memory matrix descriptor of a K-major bf16 operand with 128-byte swizzle: rows of 64
// values (128 bytes), atoms of 8 rows (1,024 bytes apart: the stride byte offset), the leading
// byte offset unused (1 by convention); start address in 16-byte units; swizzle mode 1 (bits 62-63).
__device__ __forceinline__ uint64_t sw128_desc(uint32_t smem_byte_addr) {
  return (uint64_t{1} << 62) | (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 16) |
         static_cast<uint64_t>((smem_byte_addr & 0x3FFFFu) >> 4);
}

// wgmma exists only in sm_90a machine code; the build's compute_90 PTX (for later GPUs, which
// never take this kernel: the launcher checks for 9.0) gets traps instead.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KVASIR_WGMMA(...) asm volatile(__VA_ARGS__)
#else
#define KVASIR_WGMMA(...) __trap()
#endif

__device__ __forceinline__ void wgmma_fence() { KVASIR_WGMMA("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { KVASIR_WGMMA("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  KVASIR_WGMMA("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// cp.async fills shared memory through the generic proxy and wgmma reads it through the async
// proxy: each thread fences its landed copies before the barrier that hands the stage over.
__device__ __forceinline__ void fence_async_shared() { KVASIR_WGMMA("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Keeps the compiler from moving reads or writes of v across the asynchronous wgmma (which reads
// A and reads/writes the accumulators behind its back).
__device__ __forceinline__ void fence_operand(float& v) { asm volatile("" : "+f"(v)::"memory"); }
__device__ __forceinline__ void fence_operand(uint32_t& v) { asm volatile("" : "+r"(v)::"memory"); }

// d (64 x 64 float32 over the warpgroup, 32 per thread) += A (64 x 16 bf16, four registers per
// thread in mma.sync's A fragment order) x B (16 x 64 bf16 in shared memory).
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b) {
  KVASIR_WGMMA(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b)
      : "memory");
}

// bf16x2 of the scale in both halves (rounded once from the checkpoint's type).
__device__ __forceinline__ uint32_t scale_pair(float s) {
  const uint32_t b = __bfloat16_as_ushort(__float2bfloat16_rn(s));
  return b * 0x10001u;
}
// (code - zero) * scale for pair q of a layout word: the difference exact, the product rounded once.
__device__ __forceinline__ uint32_t scaled_pair(uint32_t word, int q, uint32_t zero_pair, uint32_t scale) {
  const uint32_t d = w4a16_pair(word, q, zero_pair);
  __nv_bfloat162 v = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&d), *reinterpret_cast<const __nv_bfloat162*>(&scale));
  return *reinterpret_cast<uint32_t*>(&v);
}

// What one thread copies into every stage, as pointers advanced chunk by chunk (the address
// math is done once: redone per chunk it was a third of the loop's instructions): one 16-byte
// piece of activations (row tid / 8, piece tid % 8; rows past the batch zero-filled), one of codes
// (layout tile tid / 32, lane tid % 32), and for warps 0-1 the scale pieces of group row `slot` =
// warp (lane, and lane + 32 for float32 scales), for warp 2 a zero-point piece (row lane / 16,
// piece lane % 16).
struct WgCopies {
  const uint8_t* a_src;   // chunk `next`'s activation piece
  const uint8_t* b_src;   // chunk `next`'s codes
  const uint8_t* s_src;   // group 0's scale / zero piece
  int64_t s_group;        // bytes per group row
  uint32_t a_dst, b_dst, s_dst;
  int32_t s_slot;         // -1: no scale or zero piece
  bool a_ok, b_ok, s_ok[2];
};

template <int kType>
__device__ __forceinline__ WgCopies wg_copies(const W4a16GemmArgs& a, const W4a16Projection& p, int64_t m0, int64_t n0,
                                              int kb, int tid) {
  constexpr int sb = kType == kW4a16ScaleF32 ? 4 : 2;
  WgCopies c;
  const int64_t K = a.k, N = p.out_features, chunks = K / 64;
  const int r = tid >> 3, piece = tid & 7;
  c.a_ok = m0 + r < a.rows;
  c.a_src = reinterpret_cast<const uint8_t*>(a.x + (c.a_ok ? m0 + r : 0) * K + piece * 8) + kb * 128;
  c.a_dst = static_cast<uint32_t>(r * 128 + ((piece ^ (r & 7)) << 4));
  const int64_t nt = n0 / 16 + (tid >> 5);
  c.b_ok = nt < N / 16;
  c.b_src = static_cast<const uint8_t*>(p.codes) + (c.b_ok ? nt : 0) * chunks * 512 + (tid & 31) * 16 +
            static_cast<int64_t>(kb) * 512;
  c.b_dst = static_cast<uint32_t>(kWgABytes + tid * 16);
  const int warp = tid >> 5, lane = tid & 31;
  c.s_slot = -1;
  c.s_src = nullptr;
  c.s_group = 0;
  c.s_dst = 0;
  c.s_ok[0] = c.s_ok[1] = false;
  if (warp < 2) {
    c.s_slot = warp;
#pragma unroll
    for (int i = 0; i < (sb == 4 ? 2 : 1); ++i) c.s_ok[i] = n0 + (lane + 32 * i) * 16 / sb < N;
    c.s_src = static_cast<const uint8_t*>(p.scales) + (c.s_ok[0] ? n0 + lane * 16 / sb : 0) * sb;
    c.s_group = N * sb;
    c.s_dst = static_cast<uint32_t>(kWgABytes + kWgBBytes + warp * kWgBN * 4 + lane * 16);
  } else if (warp == 2 && p.zeros != nullptr) {
    const int slot = lane / 16;
    const int64_t col = n0 + (lane % 16) * 16;
    c.s_slot = slot;
    c.s_ok[0] = col < N;
    c.s_src = p.zeros + (c.s_ok[0] ? col : 0);
    c.s_group = N;
    c.s_dst = static_cast<uint32_t>(kWgABytes + kWgBBytes + kWgSBytes + slot * kWgBN + (lane % 16) * 16);
  }
  return c;
}

// Chunk kc into stage `st`, the copy pointers moved on to chunk kc + 1. `real` false: the
// padding chunk past the slice (below), every piece zero-filled (zero activations times weights
// of zero codes and zero scales add nothing; stale or never-written shared memory could hold
// NaNs). Each group row of scales and zeros is copied only when the chunk needs it (row 1 only
// when the chunk's 32-column halves lie in two groups).
// The weights' part (codes, scales, zero points) and the activations' part are separate calls:
// the weights of the first chunks are requested before the PDL wait. Each part advances its own
// pointer, so either is called for chunks in order.
__device__ __forceinline__ void load_chunk_activations(uint8_t* st, WgCopies& c, bool real) {
  cp_async16(st + c.a_dst, c.a_src, c.a_ok && real);
  c.a_src += 128;
}
template <int kType>
__device__ __forceinline__ void load_chunk_weights(uint8_t* st, WgCopies& c, const W4a16Groups& groups, int kc, bool real) {
  cp_async16(st + c.b_dst, c.b_src, c.b_ok && real);
  c.b_src += 512;
  if (c.s_slot >= 0) {
    const uint32_t h = 2 * static_cast<uint32_t>(real ? kc : 0);
    const uint32_t g0 = w4a16_group_of(h, groups.magic);
    const uint32_t g1 = groups.split_chunks ? w4a16_group_of(h + 1, groups.magic) : g0;
    if (c.s_slot == 0 || g1 != g0 || !real) {
      const uint8_t* src = c.s_src + static_cast<int64_t>(c.s_slot ? g1 : g0) * c.s_group;
      cp_async16(st + c.s_dst, src, c.s_ok[0] && real);
      if constexpr (kType == kW4a16ScaleF32) cp_async16(st + c.s_dst + 512, src + 512, c.s_ok[1] && real);
    }
  }
}
template <int kType>
__device__ __forceinline__ void load_chunk(uint8_t* st, WgCopies& c, const W4a16Groups& groups, int kc, bool real) {
  load_chunk_activations(st, c, real);
  load_chunk_weights<kType>(st, c, groups, kc, real);
}

// One chunk's A fragments for this thread: its warpgroup's tile (features 64 wg + 16 wq + g and
// + 8), k16 step s = 2 j + odd reads words j (row g) and 2 + j (row g + 8), pairs 2 odd (columns
// 2t, 2t + 1) and 2 odd + 1 (columns 2t + 8, + 9); j is the chunk's 32-column half, whose group
// gives the zero point and scale.
template <int kType, bool kZeros>
__device__ __forceinline__ void build_fragments(const uint8_t* st, bool two_groups, int wg, int wq, int lane,
                                                uint32_t (&frag)[4][4]) {
  const uint8_t* S = st + kWgABytes + kWgBBytes;
  const uint8_t* Z = S + kWgSBytes;
  const int tile = wg * 4 + wq;  // this warp's 16-feature layout tile
  const uint4 codes = *reinterpret_cast<const uint4*>(st + kWgABytes + tile * 512 + lane * 16);
  const int f = tile * 16 + (lane >> 2);
  // Group row 0's zero points and scales serve both 32-column halves unless the chunk spans two
  // groups (group sizes that are not a multiple of 64; uniform across the CTA): then row 1's
  // serve the second half. Loaded and converted once, not per half.
  uint32_t z_lo = w4a16_zero_pair(kZeros ? Z[f] : 8u);
  uint32_t z_hi = w4a16_zero_pair(kZeros ? Z[f + 8] : 8u);
  uint32_t s_lo = scale_pair(w4a16_scale_as<kType>(S, f));
  uint32_t s_hi = scale_pair(w4a16_scale_as<kType>(S, f + 8));
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    if (j == 1 && two_groups) {
      if constexpr (kZeros) {
        z_lo = w4a16_zero_pair(Z[kWgBN + f]);
        z_hi = w4a16_zero_pair(Z[kWgBN + f + 8]);
      }
      s_lo = scale_pair(w4a16_scale_as<kType>(S + kWgBN * 4, f));
      s_hi = scale_pair(w4a16_scale_as<kType>(S + kWgBN * 4, f + 8));
    }
    const uint32_t w_lo = word_of(codes, j), w_hi = word_of(codes, 2 + j);
#pragma unroll
    for (int odd = 0; odd < 2; ++odd) {
      uint32_t(&fr)[4] = frag[2 * j + odd];
      fr[0] = scaled_pair(w_lo, 2 * odd, z_lo, s_lo);
      fr[1] = scaled_pair(w_hi, 2 * odd, z_hi, s_hi);
      fr[2] = scaled_pair(w_lo, 2 * odd + 1, z_lo, s_lo);
      fr[3] = scaled_pair(w_hi, 2 * odd + 1, z_hi, s_hi);
    }
  }
}

__device__ __forceinline__ void fence_fragments(uint32_t (&f)[4][4]) {
#pragma unroll
  for (int s = 0; s < 4; ++s) {
#pragma unroll
    for (int r = 0; r < 4; ++r) fence_operand(f[s][r]);
  }
}

// What every chunk of a CTA's loop reads. desc0: the wgmma descriptor of shared memory's start
// (a stage's rows are desc0 plus the stage's offset in 16-byte units: the address field cannot
// carry over, shared memory being under 2^18 bytes).
struct WgLoop {
  W4a16Groups groups;
  uint8_t* smem;
  uint64_t desc0;
  int ke, ke_pad, wg, wq, lane;
};

// Chunk kc, in stage `read` (already handed over): builds its fragments into `frag` and issues
// its four wgmmas, then waits for the chunk before it, whose fragment set `prev` the next chunk
// overwrites. `prev` is fenced after that wait: to the compiler the registers are dead once its
// wgmma statements have read them, and it would reuse them for `frag` while those wgmmas still run
// (ptxas then serializes every wgmma).
template <int kType, bool kZeros>
__device__ __forceinline__ void compute_chunk(const WgLoop& L, int kc, int read, float (&acc)[32], uint32_t (&frag)[4][4],
                                              uint32_t (&prev)[4][4]) {
  const uint8_t* st = L.smem + read * kWgStageBytes;
  const bool two_groups = L.groups.split_chunks &&
                          w4a16_group_of(2 * static_cast<uint32_t>(kc), L.groups.magic) !=
                              w4a16_group_of(2 * static_cast<uint32_t>(kc) + 1, L.groups.magic);
  build_fragments<kType, kZeros>(st, two_groups, L.wg, L.wq, L.lane, frag);
  const uint64_t desc = L.desc0 + static_cast<uint32_t>(read * (kWgStageBytes >> 4));
  wgmma_fence();
#pragma unroll
  for (int s = 0; s < 4; ++s) wgmma_m64n64k16(acc, frag[s], desc + 2 * s);
  wgmma_commit();
  wgmma_wait<1>();
  fence_fragments(prev);
}

// One tile's slice [kb, ke) of K's chunks through the pipeline, added to acc (zeroed by the
// caller: zeroed here, ptxas serializes the cluster kernel's wgmmas); ke_pad:
// ke rounded up to whole pairs (the loop runs chunks in pairs, for the two fragment sets: an odd
// slice gets one zero chunk more; a conditional second chunk makes ptxas serialize every wgmma,
// as it cannot follow a wgmma in flight across that branch). The first kAhead chunks' weights are
// requested before the wait for the previous kernel (a no-op after the first tile), then their
// activations, one cp.async group a pair (the first group also holds every early weight). On
// return every stage is free for this thread's warpgroup; the others may still read theirs.
template <int kType, bool kZeros, int kAhead>
__device__ __forceinline__ void tile_mainloop(const W4a16GemmArgs& a, const W4a16Projection& p, int64_t m0, int64_t n0,
                                              int kb, int ke, int ke_pad, uint8_t* smem, float (&acc)[32]) {
  static_assert(kAhead % 2 == 0, "fills run whole pairs ahead");
  constexpr int kStages = wg_stages(kAhead);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const WgLoop L{a.groups, smem, sw128_desc(smem_addr(smem)), ke, ke_pad, warp >> 2, warp & 3, lane};
  WgCopies copies = wg_copies<kType>(a, p, m0, n0, kb, tid);
#pragma unroll
  for (int s = 0; s < kAhead; ++s) {
    if (kb + s < ke_pad) load_chunk_weights<kType>(smem + s * kWgStageBytes, copies, a.groups, kb + s, kb + s < ke);
  }
  pdl_wait();
#pragma unroll
  for (int s = 0; s < kAhead; ++s) {
    if (kb + s < ke_pad) load_chunk_activations(smem + s * kWgStageBytes, copies, kb + s < ke);
    if (s % 2 == 1) cp_async_commit();
  }
  uint32_t frag0[4][4] = {}, frag1[4][4] = {};
  int read = 0;  // chunk kc's stage
  for (int kc = kb; kc < ke_pad; kc += 2) {
    // Hands this pair's two stages over: every warpgroup has waited for the wgmmas of chunk kc - 2
    // (and all before), so the fills below may take the stages of chunks up to kc - 2; kc - 1's
    // wgmmas may still run, and kAhead + 3 stages keep it apart from the fills.
    cp_async_wait<kAhead / 2 - 1>();
    fence_async_shared();
    __syncthreads();
    const int ahead = kc + kAhead;
    if (ahead < ke_pad) {
      const int w0 = read + kAhead >= kStages ? read + kAhead - kStages : read + kAhead;
      const int w1 = w0 == kStages - 1 ? 0 : w0 + 1;
      load_chunk<kType>(smem + w0 * kWgStageBytes, copies, a.groups, ahead, ahead < ke);
      load_chunk<kType>(smem + w1 * kWgStageBytes, copies, a.groups, ahead + 1, ahead + 1 < ke);
    }
    cp_async_commit();
    const int read1 = read == kStages - 1 ? 0 : read + 1;
    compute_chunk<kType, kZeros>(L, kc, read, acc, frag0, frag1);
    compute_chunk<kType, kZeros>(L, kc + 1, read1, acc, frag1, frag0);
    read = read1 == kStages - 1 ? 0 : read1 + 1;
  }
  wgmma_wait<0>();
  fence_fragments(frag0);
  fence_fragments(frag1);
#pragma unroll
  for (int v = 0; v < 32; ++v) fence_operand(acc[v]);
  cp_async_wait<0>();
}

// The tile's outputs from a thread's accumulators (bias added), rows and columns that exist only.
// Thread (warpgroup wg, warp wq in it, lane = 4 g + t) owns feature f = 64 wg + 16 wq + g and
// f + 8 of the tile's 256 and, for n8 block b, tokens 8 b + 2 t and + 1: acc[4 b + 0..1]
// (feature f), acc[4 b + 2..3] (feature f + 8).
__device__ __forceinline__ void store_tile(const W4a16GemmArgs& a, const W4a16Projection& p, int64_t m0, int64_t n0,
                                           const float (&acc)[32]) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t = lane & 3, g = lane >> 2;
  const int f0 = warp * 16 + g;  // = 64 wg + 16 wq + g
  const int64_t N = p.out_features;
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    const int64_t col = n0 + f0 + 8 * (c >> 1);
    if (col >= N) continue;
    const float bias = p.bias != nullptr ? p.bias[col] : 0.0f;
#pragma unroll
    for (int b = 0; b < 8; ++b) {
      const int64_t row = m0 + 8 * b + 2 * t + (c & 1);
      if (row >= a.rows) continue;
      const float v = acc[4 * b + c] + bias;
      if (a.f32_out) static_cast<float*>(p.y)[row * N + col] = v;
      else static_cast<bf16*>(p.y)[row * N + col] = __float2bfloat16_rn(v);
    }
  }
}

// Calls f.template operator()<kType, kZeros, kAhead>() for the launch's scale type, zero points
// (all projections with or none) and KVASIR_W4A16_WGMMA_AHEAD: the kernels' variants, chosen in
// one place for both kernels.
template <int kType, typename F>
void with_zeros_and_ahead(const W4a16GemmArgs& a, F&& f) {
  const bool zeros = a.p[0].zeros != nullptr;
  switch (kernel_tuning().w4a16_wgmma_ahead) {
    case 4: zeros ? f.template operator()<kType, true, 4>() : f.template operator()<kType, false, 4>(); break;
    case 6: zeros ? f.template operator()<kType, true, 6>() : f.template operator()<kType, false, 6>(); break;
    default: zeros ? f.template operator()<kType, true, 8>() : f.template operator()<kType, false, 8>(); break;
  }
}
template <typename F>
void with_wgmma_variant(const W4a16GemmArgs& a, F&& f) {
  switch (a.p[0].scale_type) {
    case kW4a16ScaleF32: with_zeros_and_ahead<kW4a16ScaleF32>(a, f); break;
    case kW4a16ScaleBf16: with_zeros_and_ahead<kW4a16ScaleBf16>(a, f); break;
    default: with_zeros_and_ahead<kW4a16ScaleF16>(a, f); break;
  }
}

// The stream-K kernel (w4a16_wgmma_stream.cu) on `ctas` CTAs, one an SM.
void launch_w4a16_wgmma_stream(const W4a16GemmArgs& a, const W4a16StreamSplit& sk, int ctas, cudaStream_t s);

}  // namespace kvasir::cuda
