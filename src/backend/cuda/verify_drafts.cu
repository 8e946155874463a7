// Speculative verify on the device (backend/draft_verify.h's rule): after the sampling kernel has
// written every row's token, one CTA keeps each request's drafts while they equal its samples and
// packs the emitted tokens, so the read-back is the counts and the accepted ids only. One thread
// per request, in chunks of the CTA's size; an in-CTA scan gives each request its packed offset.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/kernels.h"

namespace kvasir::cuda {
namespace {

constexpr int kThreads = 1024;

__global__ void __launch_bounds__(kThreads)
    verify_drafts_kernel(const int32_t* samples, const DraftVerifyRowParams* requests, int num_requests,
                         const int32_t* drafts, int32_t* out_num_emitted, int32_t* out_tokens) {
  pdl_begin();
  __shared__ int32_t scan[kThreads];
  const int t = threadIdx.x;
  int32_t carry = 0;  // tokens packed by the earlier chunks
  for (int base = 0; base < num_requests; base += kThreads) {
    const int i = base + t;
    int32_t count = 0;
    DraftVerifyRowParams r{};
    if (i < num_requests) {
      r = requests[i];
      int32_t kept = 0;
      while (kept < r.num_drafts && drafts[r.draft_offset + kept] == samples[r.first_row + kept]) ++kept;
      count = kept + 1;
      out_num_emitted[i] = count;
    }
    // Inclusive Hillis-Steele scan of the counts over the CTA.
    scan[t] = count;
    __syncthreads();
    for (int d = 1; d < kThreads; d <<= 1) {
      const int32_t add = t >= d ? scan[t - d] : 0;
      __syncthreads();
      scan[t] += add;
      __syncthreads();
    }
    const int32_t offset = carry + scan[t] - count;
    for (int32_t j = 0; j < count; ++j) out_tokens[offset + j] = samples[r.first_row + j];
    carry += scan[kThreads - 1];
    __syncthreads();  // scan[] is rewritten by the next chunk
  }
}

}  // namespace

void launch_verify_drafts(const int32_t* samples, const DraftVerifyRowParams* requests, int num_requests,
                          const int32_t* drafts, int32_t* out_num_emitted, int32_t* out_tokens, cudaStream_t s) {
  if (num_requests <= 0) return;
  launch(verify_drafts_kernel, 1, kThreads, 0, s, samples, requests, num_requests, drafts, out_num_emitted,
         out_tokens);
  KVASIR_CUDA_LAUNCH_CHECK();
}

}  // namespace kvasir::cuda
