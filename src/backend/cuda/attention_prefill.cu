// Paged attention for prefill and mixed batches: tiles of query rows (tokens x heads of one kv
// head) on the tensor cores (mma.sync m16n8k16 bf16, float32 accumulators) with an online softmax
// over key tiles staged in shared memory; causal by position, optional sliding window and logit
// soft-capping, optional attention sinks. Work items (sequence, first query of a tile) come from the host.
#include <algorithm>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kv_cache_codes.cuh"
#include "backend/cuda/warp_mma.cuh"

namespace kvasir::cuda {
namespace {

// ---------------------------------------------------------------------------------------------
// Prefill / mixed on the tensor cores. A CTA: 4 warps, 64 x MT query rows, each warp MT m16 tiles
// of them; row r is token r / hc of the tile and head r % hc of the kv head's group chunk. A warp
// reads each key/value fragment from shared memory once for its MT row tiles (shared-memory
// bandwidth, not the tensor cores, bounds one row tile per warp), and its Q fragments per k-step
// (registers hold the MT x 64 scores and the MT x HD accumulators). Key/value tiles of 64 tokens go
// through a two-stage cp.async pipeline (the next tile streams in while this one is used);
// fragments come by ldmatrix (V transposed on the way); the softmax runs in base 2 (scores
// pre-multiplied by log2 e, one ex2 per probability); the causal mask is applied only on tiles that
// reach past the CTA's first query position.
constexpr int kPrefillThreads = 128;
constexpr int kPrefillWarps = kPrefillThreads / 32;
constexpr int kKvStages = 2;
constexpr float kLog2e = 1.4426950408889634f;

// Row tiles per warp: two up to 128 dims; one at 256 (its accumulators alone take 128 registers).
template <int HD>
constexpr int prefill_row_tiles() {
  return HD <= 128 ? 2 : 1;
}
template <int HD>
constexpr int prefill_tile_rows() {
  return kPrefillWarps * 16 * prefill_row_tiles<HD>();
}

// bf16 (K, V) tile stages: two for a bf16 cache (cp.async fills one while the other is read); one
// for FP8 codes, whose two stages hold the codes as copied and are widened into it per tile.
template <typename C>
constexpr int prefill_bf16_stages() {
  return CacheCodes<C>::kFp8 ? 1 : kKvStages;
}

template <typename C, int HD, int KT>
constexpr int prefill_smem_bytes() {
  // Q, then the (K, V) tiles; rows padded by 16 bytes (ldmatrix rows hit distinct banks); then,
  // for FP8, kKvStages x (K, V) tiles of codes.
  const int codes = CacheCodes<C>::kFp8 ? kKvStages * 2 * KT * HD : 0;
  return (prefill_tile_rows<HD>() + 2 * prefill_bf16_stages<C>() * KT) * (HD + 8) * 2 + codes;
}

// KT: keys per tile (64; 32 keeps 128-dim heads' two row tiles within the registers). C: the
// cache's element type (kv_cache_codes.cuh). Tiles are bf16 for ldmatrix: FP8 codes go through the
// same two-stage cp.async pipeline as they are stored (half the bytes), and each thread widens the
// chunks it copied into the one bf16 tile once they land, before the tile's barrier.
template <typename C, int HD, int KT>
__global__ void __launch_bounds__(kPrefillThreads, 2) prefill_kernel(AttentionArgs a, const PrefillWork* __restrict__ work,
                                                                    int heads_per_cta, int num_chunks) {
  pdl_begin();
  constexpr int MT = prefill_row_tiles<HD>();
  constexpr int kKeyTile = KT;
  constexpr int kRows = prefill_tile_rows<HD>();
  constexpr int kStride = HD + 8;  // bf16 elements per smem row
  constexpr int kKc = HD / 16;     // k-steps over the head dim
  constexpr int kDn = HD / 8;      // n-tiles of the output
  constexpr int kChunks = HD / 8;  // 16-byte chunks per row
  constexpr int kNt = kKeyTile / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* qs = reinterpret_cast<bf16*>(smem_raw);
  bf16* kv_base = qs + kRows * kStride;

  const PrefillWork wi = work[blockIdx.x];  // the host lists the tiles that see the most keys first
  const int kvh = blockIdx.y / num_chunks, chunk = blockIdx.y % num_chunks;
  const int group = a.num_heads / a.num_kv_heads;
  const int hc = heads_per_cta;
  const int g0 = chunk * hc;
  const int ng = min(hc, group - g0);
  const int tq = kRows / hc;  // tokens in the tile
  const int s = wi.seq;
  const int q_seq_begin = a.query_start_loc[s], q_seq_end = a.query_start_loc[s + 1];
  const int seq_len = a.seq_lens[s];
  const int first_pos = seq_len - (q_seq_end - q_seq_begin);
  const int q_begin = wi.q_begin;
  const int q_end = min(q_seq_end, q_begin + tq);
  const int pos_first = first_pos + (q_begin - q_seq_begin);
  const int pos_last = first_pos + (q_end - 1 - q_seq_begin);
  const int k_lo = a.sliding_window > 0 ? max(0, pos_first - a.sliding_window + 1) : 0;
  const int k_hi = pos_last + 1;
  const int32_t* table = a.block_tables + static_cast<int64_t>(s) * a.max_blocks_per_seq;
  const int num_heads = a.num_heads, kv_heads = a.num_kv_heads, bs = a.block_size;
  const bf16* q = static_cast<const bf16*>(a.q);
  const C* kc = static_cast<const C*>(a.k_cache);
  const C* vc = static_cast<const C*>(a.v_cache);

  // Q rows (zeros past the tile), then the first K/V tile, one cp.async group.
  for (int i = threadIdx.x; i < kRows * kChunks; i += kPrefillThreads) {
    const int r = i / kChunks, c = (i % kChunks) * 8;
    const int t = q_begin + r / hc, g = r % hc;
    const bool valid = r / hc < tq && t < q_end && g < ng;
    const int64_t off = valid ? (static_cast<int64_t>(t) * num_heads + kvh * group + g0 + g) * HD + c : 0;
    cp_async16(qs + r * kStride + c, q + off, valid);
  }
  constexpr bool kFp8 = CacheCodes<C>::kFp8;
  unsigned char* code_base = reinterpret_cast<unsigned char*>(kv_base + prefill_bf16_stages<C>() * 2 * kKeyTile * kStride);
  // A stage's K and V rows in 16-byte chunks: FP8 codes as stored into its code tiles (HD bytes a
  // row), bf16 values into its bf16 tiles (kStride values a row).
  constexpr int kChunkValues = 16 / static_cast<int>(sizeof(C));
  constexpr int kRowChunks = HD / kChunkValues;
  constexpr int kTileBytes = kFp8 ? kKeyTile * HD : kKeyTile * kStride * 2;
  constexpr int kRowBytes = kFp8 ? HD : kStride * 2;
  unsigned char* tiles = kFp8 ? code_base : reinterpret_cast<unsigned char*>(kv_base);
  auto load_kv = [&](int kt0, int stage) {
    unsigned char* kd = tiles + stage * 2 * kTileBytes;
    for (int i = threadIdx.x; i < kKeyTile * kRowChunks; i += kPrefillThreads) {
      const int r = i / kRowChunks, c = (i % kRowChunks) * kChunkValues;
      const int j = kt0 + r;
      const bool valid = j < k_hi;  // rows past the keys are zeros (their scores are masked)
      const int64_t off = valid ? (slot_of(table, j, bs) * kv_heads + kvh) * HD + c : 0;
      const int at = r * kRowBytes + c * static_cast<int>(sizeof(C));
      cp_async16(kd + at, kc + off, valid);
      cp_async16(kd + kTileBytes + at, vc + off, valid);
    }
  };
  // FP8: the codes this thread copied for a stage, widened into the bf16 tile (the same chunk
  // assignment as load_kv, so a thread's own cp.async wait covers what it reads).
  auto widen_kv = [&](int stage) {
    if constexpr (kFp8) {
      const unsigned char* kr = code_base + stage * 2 * kKeyTile * HD;
      const unsigned char* vr = kr + kKeyTile * HD;
      for (int i = threadIdx.x; i < kKeyTile * kRowChunks; i += kPrefillThreads) {
        const int r = i / kRowChunks, c = (i % kRowChunks) * 16;
        widen16_to_bf16<C>(kv_base + r * kStride + c, kr + r * HD + c);
        widen16_to_bf16<C>(kv_base + (kKeyTile + r) * kStride + c, vr + r * HD + c);
      }
    }
  };
  const int ntiles = (k_hi - k_lo + kKeyTile - 1) / kKeyTile;
  load_kv(k_lo, 0);
  cp_async_commit();

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int gid = lane >> 2, tig = lane & 3;
  auto row_pos = [&](int r) -> int {  // -1: padding row
    const int t = q_begin + r / hc;
    return (r / hc < tq && t < q_end && (r % hc) < ng) ? first_pos + (t - q_seq_begin) : -1;
  };
  // Row tile mt of this warp: rows warp * 16 * MT + mt * 16 + {gid, gid + 8}; [mt][half].
  int pos[MT][2], lo[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      pos[mt][hf] = row_pos((warp * MT + mt) * 16 + gid + 8 * hf);
      lo[mt][hf] = a.sliding_window > 0 ? pos[mt][hf] - a.sliding_window + 1 : 0;
    }
  }
  // ldmatrix row addresses: lane L serves row L % 8 of matrix L / 8.
  const int lm_row = (lane & 7) + ((lane >> 3) & 1) * 8, lm_col = (lane >> 4) * 8;  // Q and V^T tiles
  const int kb_row = lane & 7, kb_col = (lane >> 3) * 8;                              // K tiles
  const bf16* q_warp = qs + (warp * MT * 16 + lm_row) * kStride + lm_col;

  float acc[MT][kDn][4];
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int dn = 0; dn < kDn; ++dn) {
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[mt][dn][c] = 0.0f;
    }
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.0f;
  }
  const float score_scale = a.softcap > 0.0f ? a.scale : a.scale * kLog2e;

  for (int t = 0; t < ntiles; ++t) {
    const int kt0 = k_lo + t * kKeyTile;
    if (t + 1 < ntiles) load_kv(kt0 + kKeyTile, (t + 1) % kKvStages);
    cp_async_commit();
    cp_async_wait<1>();  // this tile (and Q) landed; the next one may still be in flight
    if constexpr (kFp8) widen_kv(t % kKvStages);  // the last tile's readers passed the loop's end barrier
    __syncthreads();
    const bf16* ks = kv_base + (kFp8 ? 0 : (t % kKvStages) * 2 * kKeyTile * kStride);
    const bf16* vs = ks + kKeyTile * kStride;

    float sc[MT][kNt][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
        for (int c = 0; c < 4; ++c) sc[mt][nt][c] = 0.0f;
      }
    }
#pragma unroll
    for (int kk = 0; kk < kKc; kk += 2) {
      uint32_t qf[MT][2][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        ldsm_x4(qf[mt][0], q_warp + mt * 16 * kStride + kk * 16);
        ldsm_x4(qf[mt][1], q_warp + mt * 16 * kStride + (kk + 1) * 16);
      }
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
        uint32_t kf[4];  // b0, b1 of k-step kk, then of kk + 1
        ldsm_x4(kf, ks + (nt * 8 + kb_row) * kStride + kk * 16 + kb_col);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_bf16(sc[mt][nt], qf[mt][0], kf[0], kf[1]);
          mma_bf16(sc[mt][nt], qf[mt][1], kf[2], kf[3]);
        }
      }
    }
    // Scale (to base 2), cap, mask; row maxima over the quad that shares a row; rescale.
    const bool masked = a.sliding_window > 0 || kt0 + kKeyTile - 1 > pos_first;
    float alpha[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int hf = c >> 1;
          float v = sc[mt][nt][c] * score_scale;
          if (a.softcap > 0.0f) v = a.softcap * tanhf(v / a.softcap) * kLog2e;
          if (masked) {
            const int j = kt0 + nt * 8 + tig * 2 + (c & 1);
            if (pos[mt][hf] < 0 || j > pos[mt][hf] || j < lo[mt][hf]) v = -INFINITY;
          }
          sc[mt][nt][c] = v;
          mx[hf] = fmaxf(mx[hf], v);
        }
      }
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
#pragma unroll
        for (int o = 1; o <= 2; o <<= 1) mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], o));
        const float mn = fmaxf(m[mt][hf], mx[hf]);
        const float base = mn == -INFINITY ? 0.0f : mn;
        alpha[mt][hf] = exp2f(m[mt][hf] - base);
        m[mt][hf] = mn;
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt) {
          sc[mt][nt][2 * hf] = exp2f(sc[mt][nt][2 * hf] - base);
          sc[mt][nt][2 * hf + 1] = exp2f(sc[mt][nt][2 * hf + 1] - base);
          sum += sc[mt][nt][2 * hf] + sc[mt][nt][2 * hf + 1];
        }
#pragma unroll
        for (int o = 1; o <= 2; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        l[mt][hf] = l[mt][hf] * alpha[mt][hf] + sum;
      }
#pragma unroll
      for (int dn = 0; dn < kDn; ++dn) {
        acc[mt][dn][0] *= alpha[mt][0];
        acc[mt][dn][1] *= alpha[mt][0];
        acc[mt][dn][2] *= alpha[mt][1];
        acc[mt][dn][3] *= alpha[mt][1];
      }
    }
    // O += P V: two adjacent score n-tiles form one A fragment over 16 keys; one transposing
    // ldmatrix gives the B fragments of two output n-tiles, used by every row tile.
#pragma unroll
    for (int kk = 0; kk < kKeyTile / 16; ++kk) {
      uint32_t pa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        pa[mt][0] = pack_bf16(sc[mt][2 * kk][0], sc[mt][2 * kk][1]);
        pa[mt][1] = pack_bf16(sc[mt][2 * kk][2], sc[mt][2 * kk][3]);
        pa[mt][2] = pack_bf16(sc[mt][2 * kk + 1][0], sc[mt][2 * kk + 1][1]);
        pa[mt][3] = pack_bf16(sc[mt][2 * kk + 1][2], sc[mt][2 * kk + 1][3]);
      }
      const bf16* vb = vs + (kk * 16 + lm_row) * kStride + lm_col;
#pragma unroll
      for (int dn = 0; dn < kDn; dn += 2) {
        uint32_t vf[4];  // b0, b1 of n-tile dn, then of dn + 1
        ldsm_x4_trans(vf, vb + dn * 8);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_bf16(acc[mt][dn], pa[mt], vf[0], vf[1]);
          mma_bf16(acc[mt][dn + 1], pa[mt], vf[2], vf[3]);
        }
      }
    }
    __syncthreads();  // this stage is refilled by the next iteration's load
  }

  // Attention sinks: one more logit of the head's softmax with no value, so only the denominator
  // grows (every live row saw at least its own key, so m is finite; m is in base 2). Then the
  // rows this thread holds are written.
  bf16* out = static_cast<bf16*>(a.out);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      if (pos[mt][hf] < 0) continue;
      const int r = (warp * MT + mt) * 16 + gid + 8 * hf;
      const int h = kvh * group + g0 + r % hc;
      float den = l[mt][hf];
      if (a.sinks != nullptr) den += exp2f(a.sinks[h] * kLog2e - m[mt][hf]);
      const float inv = den > 0.0f ? a.v_scale / den : 0.0f;  // an FP8 cache's value scale (else 1)
      bf16* o = out + (static_cast<int64_t>(q_begin + r / hc) * num_heads + h) * HD + tig * 2;
#pragma unroll
      for (int dn = 0; dn < kDn; ++dn) {
        *reinterpret_cast<__nv_bfloat162*>(o + dn * 8) =
            __floats2bfloat162_rn(acc[mt][dn][2 * hf] * inv, acc[mt][dn][2 * hf + 1] * inv);
      }
    }
  }
}

int heads_per_cta(int num_heads, int num_kv_heads) { return std::min(num_heads / num_kv_heads, 8); }

template <typename C, int HD, int KT>
void launch_prefill_hd(const AttentionArgs& a, const PrefillWork* work, int num_work, cudaStream_t s) {
  const int group = a.num_heads / a.num_kv_heads;
  const int hc = heads_per_cta(a.num_heads, a.num_kv_heads);
  const int chunks = (group + hc - 1) / hc;
  dim3 grid(num_work, a.num_kv_heads * chunks);
  launch(prefill_kernel<C, HD, KT>, grid, kPrefillThreads, prefill_smem_bytes<C, HD, KT>(), s, a, work, hc, chunks);
  KVASIR_CUDA_LAUNCH_CHECK();
}

template <typename C, int HD, int KT>
void set_smem_limits() {
  KVASIR_CUDA_CHECK(cudaFuncSetAttribute(prefill_kernel<C, HD, KT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         prefill_smem_bytes<C, HD, KT>()));
}

template <typename C>
void set_smem_limits_codes() {
  set_smem_limits<C, 64, 64>();
  set_smem_limits<C, 128, 32>();
  set_smem_limits<C, 128, 64>();
  set_smem_limits<C, 256, 64>();
}

template <typename C>
void launch_prefill_codes(const AttentionArgs& a, const PrefillWork* work, int num_work, cudaStream_t s) {
  switch (a.head_dim) {
    case 64: launch_prefill_hd<C, 64, 64>(a, work, num_work, s); break;
    case 128:
      if (kernel_tuning().prefill_key_tile == 64) launch_prefill_hd<C, 128, 64>(a, work, num_work, s);
      else launch_prefill_hd<C, 128, 32>(a, work, num_work, s);
      break;
    case 256: launch_prefill_hd<C, 256, 64>(a, work, num_work, s); break;
    default: KVASIR_CHECK_MSG(false, "attention: unsupported head_dim");
  }
}

}  // namespace

void init_attention_kernels() {
  set_smem_limits_codes<bf16>();
  set_smem_limits_codes<e4m3>();
  set_smem_limits_codes<e5m2>();
  init_decode_attention_kernels();
}

int prefill_tokens_per_tile(int num_heads, int num_kv_heads, int head_dim) {
  const int rows = head_dim <= 128 ? prefill_tile_rows<128>() : prefill_tile_rows<256>();
  return rows / heads_per_cta(num_heads, num_kv_heads);
}

void launch_prefill_attention(const AttentionArgs& a, const PrefillWork* work, int num_work, cudaStream_t s) {
  if (num_work <= 0) return;
  with_cache_codes(a.kv_cache, [&]<typename C>() { launch_prefill_codes<C>(a, work, num_work, s); });
}

}  // namespace kvasir::cuda
