// FlashInfer's SM90 paged prefill kernel (FA3-style: TMA for Q, cp.async gathers of K/V pages by a
// producer warpgroup, wgmma in two consumer warpgroups, online softmax in registers) launched with
// our grid and our host plan. Mirrors FlashInfer's BatchPrefillWithPagedKVCacheDispatched (its
// tile sizes per head dim, the persistent per-head scheduler) except that the grid is the plan's
// CTA count rather than a device query per launch, and the shared-memory limit is raised once.
// Compiled only for sm_90a (wgmma and setmaxnreg need the arch-specific target).
#include "backend/cuda/attention_prefill_flashinfer.h"

#include <cuda.h>

#include <flashinfer/attention/hopper/default_params.cuh>
#include <flashinfer/attention/hopper/prefill_sm90.cuh>
#include <flashinfer/attention/hopper/variants.cuh>

#include "backend/cuda/cuda_check.h"

namespace kvasir::cuda {
namespace {

using DType = cutlass::bfloat16_t;
using Params = flashinfer::BatchPrefillPagedParams<DType, DType, DType, int32_t>;

// FlashInfer's paged SM90 tiles (CTA_Q, CTA_KV): (192, 96) at 64, (128, 96) at 128, (128, 32) at
// 256; K/V come by cp.async gathers (pages are not contiguous), Q by TMA.
template <int HD>
struct Tiles;
template <>
struct Tiles<64> {
  static constexpr int kQ = 192, kKv = 96;
};
template <>
struct Tiles<128> {
  static constexpr int kQ = 128, kKv = 96;
};
template <>
struct Tiles<256> {
  static constexpr int kQ = 128, kKv = 32;
};

template <int HD>
using Traits = flashinfer::AttentionKernelTraits</*USE_TMA_LOAD_KV=*/false, HD, HD, Tiles<HD>::kQ, Tiles<HD>::kKv,
                                                 /*NUM_STAGES=*/2, DType, DType, DType, int32_t,
                                                 flashinfer::StandardAttention>;
template <int HD>
using Mainloop = flashinfer::SparseCollectiveMainloop<typename Params::AdditionalParams, Traits<HD>, /*CAUSAL=*/true,
                                                      /*MULTIITEMSCORING=*/false>;
template <int HD>
using Epilogue = flashinfer::CollectiveEpilogue<Traits<HD>>;
using Scheduler = flashinfer::BatchPrefillPersistentTileScheduler<int32_t>;

template <int HD>
void* kernel_of() {
  return reinterpret_cast<void*>(
      flashinfer::PrefillWithKVCacheKernel<Mainloop<HD>, Epilogue<HD>, Traits<HD>, /*LEFT_SLIDING_WINDOW=*/false,
                                           /*CAUSAL=*/true, Scheduler, /*MULTIITEMSCORING=*/false>);
}

template <int HD>
int smem_bytes() {
  return static_cast<int>(sizeof(typename Traits<HD>::SharedStorage));
}

template <int HD>
void launch_hd(const FlashInferPrefillArgs& a, cudaStream_t s) {
  using Tr = Traits<HD>;
  auto* q = static_cast<DType*>(const_cast<void*>(a.q));
  auto* k = static_cast<DType*>(const_cast<void*>(a.k_cache));
  auto* v = static_cast<DType*>(const_cast<void*>(a.v_cache));
  auto* o = static_cast<DType*>(a.out);
  const int64_t q_stride_n = static_cast<int64_t>(a.num_heads) * HD, q_stride_h = HD;
  const int64_t kv_stride_n = static_cast<int64_t>(a.num_kv_heads) * HD, kv_stride_h = HD;
  const int64_t page_stride = kv_stride_n * a.block_size;
  typename Params::AdditionalParams extra{};
  extra.logits_soft_cap = 0.0f;
  extra.sm_scale = a.scale;

  typename Mainloop<HD>::Params mainloop = Mainloop<HD>::to_underlying_arguments(
      {q, flashinfer::get_gmem_layout(a.num_tokens, a.num_heads, HD, q_stride_n, q_stride_h), k,
       flashinfer::get_gmem_layout(0, a.num_kv_heads, HD, kv_stride_n, kv_stride_h), v,
       flashinfer::get_gmem_layout(0, a.num_kv_heads, HD, kv_stride_n, kv_stride_h),
       const_cast<int32_t*>(a.block_tables), /*window_left=*/-1, page_stride, page_stride,
       static_cast<uint32_t>(a.block_size), extra});
  typename Epilogue<HD>::Params epilogue = Epilogue<HD>::to_underlying_arguments(
      {o, flashinfer::get_gmem_layout(a.num_tokens, a.num_heads, HD, q_stride_n, q_stride_h), /*lse=*/nullptr,
       flashinfer::get_lse_gmem_layout(a.num_tokens, a.num_heads)});
  auto ptr = [](const int32_t* p) { return const_cast<int32_t*>(p); };
  typename Scheduler::Arguments sched_args = {ptr(a.work_indptr), ptr(a.head_indices), ptr(a.qo_tile_indices),
                                              ptr(a.qo_indptr),   ptr(a.kv_indptr),    ptr(a.qo_lens),
                                              ptr(a.kv_lens),     ptr(a.batch_indices),
                                              cutlass::FastDivmod(a.num_heads / a.num_kv_heads), a.num_heads};
  typename Scheduler::Params sched = Scheduler::to_underlying_arguments(sched_args);
  void* args[] = {&mainloop, &epilogue, &sched};
  KVASIR_CUDA_CHECK(cudaLaunchKernel(kernel_of<HD>(), dim3(a.num_ctas), dim3(Tr::NUM_WARPS * 32), args,
                                     smem_bytes<HD>(), s));
}

template <int HD>
void raise_smem_limit() {
  KVASIR_CUDA_CHECK(
      cudaFuncSetAttribute(kernel_of<HD>(), cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes<HD>()));
}

}  // namespace

void init_flashinfer_prefill_kernels() {
  raise_smem_limit<64>();
  raise_smem_limit<128>();
  raise_smem_limit<256>();
}

void launch_flashinfer_prefill(const FlashInferPrefillArgs& a, cudaStream_t s) {
  if (a.num_ctas <= 0) return;
  switch (a.head_dim) {
    case 64: launch_hd<64>(a, s); break;
    case 128: launch_hd<128>(a, s); break;
    case 256: launch_hd<256>(a, s); break;
    default: KVASIR_CHECK_MSG(false, "FlashInfer prefill: head_dim must be 64, 128 or 256");
  }
}

}  // namespace kvasir::cuda
