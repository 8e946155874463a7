// FlashInfer's batch decode kernel in its partition-kv form, launched through FlashInfer's own
// dispatcher (BatchDecodeWithPagedKVCacheDispatched: its thread shape per head dim and group, its
// shared-memory sizing, then VariableLengthMergeStates over the chunks) with our plan's arrays in
// place of the ones FlashInfer's DecodePlan would fill. The dispatcher's host-side calls (device
// attributes, occupancy, cudaFuncSetAttribute) are not stream work, so it may run while a decode
// graph is captured, as in vLLM's FlashInfer backend. Compiled into the sm_90a FlashInfer library.
#include "backend/cuda/attention_decode_flashinfer.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <flashinfer/attention/decode.cuh>
#include <flashinfer/attention/default_decode_params.cuh>
#include <flashinfer/attention/variants.cuh>

#include "backend/cuda/cuda_check.h"

namespace kvasir::cuda {
namespace {

using DType = nv_bfloat16;  // queries and outputs
// KV: the cache's elements, bf16 or e4m3 codes (FlashInfer's vec_t widens them as they load).
template <typename KV>
using Params = flashinfer::BatchDecodeParams<DType, KV, DType, int32_t>;
// No custom mask, no sliding window, no soft-cap, no ALiBi: what the backend sends here.
using Variant = flashinfer::DefaultAttention<false, false, false, false>;
constexpr flashinfer::PosEncodingMode kNoRope = flashinfer::PosEncodingMode::kNone;

// The launch shape BatchDecodeWithPagedKVCacheDispatched picks (decode.cuh), repeated only to ask
// the kernel's occupancy (FlashInfer's DecodePlan asks the same to size its CUDA-graph grid).
template <uint32_t HD, uint32_t GROUP, typename KV>
struct DecodeShape {
  static constexpr uint32_t kVec = std::max<uint32_t>(16 / sizeof(KV), HD / 32);
  static constexpr uint32_t kBdx = HD / kVec;
  static constexpr uint32_t kBdy = GROUP;
  static constexpr uint32_t kThreads = std::max<uint32_t>(128, kBdx * kBdy);
  static constexpr uint32_t kBdz = kThreads / (kBdx * kBdy);
  static constexpr uint32_t kTile = GROUP == 1 ? (sizeof(KV) == 1 ? 2 : 4) : 1;
  static constexpr uint32_t kStages = 2;  // DISPATCH_COMPUTE_CAP_DECODE_NUM_STAGES_SMEM from sm_80
  static constexpr size_t kSmem =
      std::max<size_t>(2 * kStages * kTile * kBdy * kBdz * HD * sizeof(KV), kBdz * kBdy * HD * sizeof(float)) +
      std::max<size_t>(kTile * kThreads * sizeof(KV*), 2 * kBdy * kBdz * sizeof(float));
  static int ctas_per_sm() {
    auto kernel = flashinfer::BatchDecodeWithPagedKVCacheKernel<kNoRope, kStages, kTile, kVec, kBdx, kBdy, kBdz,
                                                                Variant, Params<KV>>;
    KVASIR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem)));
    int n = 0;
    KVASIR_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, static_cast<int>(kThreads), kSmem));
    return n;
  }
};

// The group sizes FlashInfer's dispatcher (DISPATCH_GQA_GROUP_SIZE) instantiates.
constexpr int kGroups[] = {1, 2, 3, 4, 6, 8, 16};

int hd_index(int head_dim) { return head_dim == 64 ? 0 : head_dim == 128 ? 1 : head_dim == 256 ? 2 : -1; }

// Resident CTAs per SM, [cache bf16/e4m3][head dim 64/128/256][group]: measured once per process
// (every device of a run is the same model), thread-safe for tensor-parallel ranks starting together.
struct CtasPerSm {
  int n[2][3][17] = {};
};

template <uint32_t HD, typename KV>
void measure_hd(CtasPerSm& t, int kv_index) {
  int* n = t.n[kv_index][hd_index(static_cast<int>(HD))];
  n[1] = DecodeShape<HD, 1, KV>::ctas_per_sm();
  n[2] = DecodeShape<HD, 2, KV>::ctas_per_sm();
  n[4] = DecodeShape<HD, 4, KV>::ctas_per_sm();
  n[8] = DecodeShape<HD, 8, KV>::ctas_per_sm();
  n[3] = DecodeShape<HD, 3, KV>::ctas_per_sm();
  n[6] = DecodeShape<HD, 6, KV>::ctas_per_sm();
  n[16] = DecodeShape<HD, 16, KV>::ctas_per_sm();
}

template <typename KV>
void measure_kv(CtasPerSm& t, int kv_index) {
  measure_hd<64, KV>(t, kv_index);
  measure_hd<128, KV>(t, kv_index);
  measure_hd<256, KV>(t, kv_index);
}

const CtasPerSm& ctas_per_sm_table() {
  static const CtasPerSm t = [] {
    CtasPerSm m;
    measure_kv<DType>(m, 0);
    measure_kv<__nv_fp8_e4m3>(m, 1);
    return m;
  }();
  return t;
}

template <uint32_t HD, typename KV>
void launch_hd(const FlashInferDecodeArgs& a, cudaStream_t s) {
  using P = Params<KV>;
  auto ids = [](const int32_t* p) { return const_cast<int32_t*>(p); };
  auto* k = static_cast<KV*>(const_cast<void*>(a.k_cache));
  auto* v = static_cast<KV*>(const_cast<void*>(a.v_cache));
  flashinfer::paged_kv_t<KV, int32_t> kv(static_cast<uint32_t>(a.num_kv_heads), static_cast<uint32_t>(a.block_size),
                                            HD, static_cast<uint32_t>(a.num_seqs), flashinfer::QKVLayout::kNHD, k, v,
                                            ids(a.block_tables), ids(a.page_indptr), ids(a.last_page_len));
  P p(static_cast<DType*>(const_cast<void*>(a.q)), /*q_rope_offset=*/nullptr, kv, static_cast<DType*>(a.out),
           /*lse=*/nullptr, /*maybe_alibi_slopes=*/nullptr, static_cast<uint32_t>(a.num_heads),
           /*q_stride_n=*/a.num_heads * static_cast<int32_t>(HD), /*q_stride_h=*/static_cast<int32_t>(HD),
           /*window_left=*/-1, /*logits_soft_cap=*/0.0f, a.scale, /*rope_scale=*/1.0f, /*rope_theta=*/1e4f);
  p.padded_batch_size = static_cast<uint32_t>(a.num_works);
  p.request_indices = ids(a.request_indices);
  p.kv_tile_indices = ids(a.kv_tile_indices);
  p.o_indptr = ids(a.o_indptr);
  p.kv_chunk_size_ptr = ids(a.chunk_tokens);
  p.block_valid_mask = static_cast<bool*>(const_cast<void*>(a.valid_mask));
  // Non-null partials: the partition-kv kernel, then the merge into a.out.
  KVASIR_CUDA_CHECK((flashinfer::BatchDecodeWithPagedKVCacheDispatched<HD, kNoRope, Variant>(
      p, static_cast<DType*>(a.partial_o), a.partial_lse, a.pdl, s)));
}

}  // namespace

bool flashinfer_decode_shape_ok(int num_heads, int num_kv_heads, int head_dim) {
  if (hd_index(head_dim) < 0 || num_kv_heads <= 0 || num_heads % num_kv_heads != 0) return false;
  const int group = num_heads / num_kv_heads;
  return std::find(std::begin(kGroups), std::end(kGroups), group) != std::end(kGroups);
}

int flashinfer_decode_ctas_per_sm(int num_heads, int num_kv_heads, int head_dim, KvCacheType kv_cache) {
  if (!flashinfer_decode_shape_ok(num_heads, num_kv_heads, head_dim)) return 0;
  if (kv_cache != KvCacheType::kBf16 && kv_cache != KvCacheType::kE4m3) return 0;  // e5m2: ours
  return ctas_per_sm_table().n[kv_cache == KvCacheType::kE4m3 ? 1 : 0][hd_index(head_dim)][num_heads / num_kv_heads];
}

void init_flashinfer_decode_kernels() { (void)ctas_per_sm_table(); }

void launch_flashinfer_decode(const FlashInferDecodeArgs& a, cudaStream_t s) {
  KVASIR_CHECK_MSG(flashinfer_decode_shape_ok(a.num_heads, a.num_kv_heads, a.head_dim),
                   "FlashInfer decode: head_dim 64/128/256 and a GQA group of 1, 2, 3, 4, 6, 8 or 16");
  KVASIR_CHECK_MSG(a.num_works >= a.num_seqs && a.num_seqs > 0, "FlashInfer decode: fewer CTA rows than sequences");
  KVASIR_CHECK_MSG(a.kv_cache == KvCacheType::kBf16 || a.kv_cache == KvCacheType::kE4m3,
                   "FlashInfer decode: a bf16 or e4m3 cache");
  const bool e4m3 = a.kv_cache == KvCacheType::kE4m3;
  switch (a.head_dim) {
    case 64: e4m3 ? launch_hd<64, __nv_fp8_e4m3>(a, s) : launch_hd<64, DType>(a, s); break;
    case 128: e4m3 ? launch_hd<128, __nv_fp8_e4m3>(a, s) : launch_hd<128, DType>(a, s); break;
    default: e4m3 ? launch_hd<256, __nv_fp8_e4m3>(a, s) : launch_hd<256, DType>(a, s); break;
  }
}

}  // namespace kvasir::cuda
