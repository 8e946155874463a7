// Every environment tuning knob of the CUDA backend, in one struct: the A/B switches that choose
// between equivalent kernels, fusions and launch shapes. Read from the environment once (kernel
// knobs once per process, recording knobs once per backend at start) and logged there; the code
// they steer reads the struct, never the environment. Unset or out-of-range values give the
// default, as listed below.
// Must not hold anything that changes results beyond rounding-order differences between the
// equivalent kernels, and must not be re-read mid-run (captured graphs bake the choices in).
#pragma once

#include <string>

#include "backend/cuda/attention_decode_flashinfer_plan.h"  // kFlashInferDecodeMinChunkTokens
#include "backend/cuda/gguf_kernels.h"
#include "backend/cuda/w4a16_kernels.h"  // kW4a16GemvMaxRows

namespace kvasir::cuda {

// Longest split of a decode sequence's keys, in tokens (also the cap of the all-heads plan).
inline constexpr int kMaxDecodePartition = 512;

// KVASIR_CUDA_ATTN: which decode-attention kernel runs every decode batch. The digits are the
// historical values scripts use; the names say the same.
enum class DecodeAttentionKernel {
  kAuto = 0,           // unset: the plan of attention.cu (all-heads, mma+bulk copy from 8 seqs)
  kPerHeadPhased = 1,  // "per_head_phased" / 1: per-head, scores -> softmax -> values
  kPerHeadOnline = 2,  // "per_head_online" / 2: per-head, one online-softmax pass
  kAllHeads = 3,       // "all_heads" / 3: a CTA per (split, sequence), cp.async pipeline
  kMmaBulk = 5,        // "mma_bulk" / 5: all-heads on tensor cores with bulk copies, where it fits
};
const char* decode_attention_kernel_name(DecodeAttentionKernel k);

// Read by the kernels' launchers; one snapshot per process (the launchers are process-wide).
struct KernelTuning {
  DecodeAttentionKernel decode_attention = DecodeAttentionKernel::kAuto;  // KVASIR_CUDA_ATTN
  int all_heads_ctas_per_sm = 2;      // KVASIR_CUDA_V3_CTAS [1, 64]: CTAs per SM the plan aims for
  int all_heads_max_partition = kMaxDecodePartition;  // KVASIR_CUDA_V3_PART [32, 512], multiple of 32
  int all_heads_min_ctas = -1;        // KVASIR_CUDA_V3_MIN_CTAS [0, 2^20]; -1: one per SM (see attention.cu)
  int prefill_key_tile = 32;          // KVASIR_CUDA_PREFILL_KT 32|64: keys per prefill tile at 128 dims
  bool splits_by_context = true;      // KVASIR_CUDA_SPLITS_BY_CONTEXT=0: decode splits cut at plan multiples
  int mma_bulk_stages = 3;            // KVASIR_CUDA_TMA_STAGES 3|6: bulk-copy pipeline depth
  bool rope_per_head = true;          // KVASIR_CUDA_ROPE_HEADS=0: token-per-CTA rope+write_kv kernel
  bool gemv_early = true;             // KVASIR_GEMV_EARLY=0: first weight round to L2 before the wait
  int gemv_split = 2;                 // KVASIR_GEMV_SPLIT 1|2|4: warps per row of single-token GEMVs
  bool w4a16_stage_x = true;          // KVASIR_W4A16_STAGE_X=0: the W4A16 GEMV reads x from L1, not shared memory
  int w4a16_gemv_min_blocks = 3;      // KVASIR_W4A16_GEMV_MINB {2, 3}: the one-octet W4A16 GEMVs' register cap, as CTAs an SM
  int w4a16_gemm_stages = 4;          // KVASIR_W4A16_GEMM_STAGES 3|4|6: the W4A16 GEMM's cp.async pipeline depth
  bool w4a16_gemm_wgmma = true;       // KVASIR_W4A16_GEMM_WGMMA=0: the W4A16 GEMM on mma.sync, not wgmma (w4a16_wgmma.cu; 9.0 devices only)
  int w4a16_gemm_max_splits = 8;      // KVASIR_W4A16_GEMM_SPLITS [1, 8]: most K slices (cluster CTAs) of a W4A16 GEMM tile
  int w4a16_wgmma_ahead = 4;          // KVASIR_W4A16_WGMMA_AHEAD 4|6|8: chunks of K the wgmma GEMM's fills run ahead
  // KVASIR_W4A16_WGMMA_STREAM [0, 4096]: the fewest tokens a wgmma GEMM runs stream-K at (every SM,
  // tiles cut between CTAs; fewer tokens split K across cluster CTAs); 0: never. 65, two row tiles:
  // on an H100 stream-K took a batch-128 INT4 step from 9.56 to 8.51 ms and slowed batch 32 and 64
  // by 16-18% (BENCHMARKS.md 2026-12-07).
  int w4a16_wgmma_stream_rows = 65;
  int gemv_max_rows = 8;              // KVASIR_GEMV_MAX_ROWS [1, 8]: most rows a GEMV takes (more: cuBLASLt)
  int gemv_tc_min_rows = 2;           // KVASIR_GEMV_TC_MIN_ROWS [1, 9]: fewest tokens a GEMV runs on tensor cores (9: never)
  int gemv_tc_variant = 0;            // KVASIR_GEMV_TC_VARIANT 0|1: the tensor-core GEMV's build (gemv_tensor_core.cu)
  int exact_decode_buckets = 8;       // KVASIR_CUDA_EXACT_BUCKETS [2, 8]: decode batches up to this size are not padded
  int gemv_min_blocks = 1;            // KVASIR_GEMV_MINB 1|4|5: register-capped GEMV builds (A/B)
  int gemv_prefetch_mb = 0;           // KVASIR_GEMV_PREFETCH_MB [0, 48]: weights pulled to L2 early
  bool pdl = true;                    // KVASIR_CUDA_PDL=0: no programmatic dependent launches
  // KVASIR_GGUF_KQUANT_GEMV 0|q4k: Q4_K and Q6_K on the generic GGUF GEMV (0) or only Q6_K (q4k)
  // instead of the K-quant GEMV (gguf_kquant_gemv.cu); 2, the default: both on it.
  int gguf_kquant_gemv = 2;
  // KVASIR_GGUF_KQUANT_STREAM 0|1|2|3|4: one token's K-quant GEMV streams its weights through a
  // shared-memory ring fed by bulk copies, persistent CTAs, this many per SM (gguf_kquant_stream.cu;
  // 4: 2 or 3 per launch, whichever needs fewer rounds of tiles); 0: the per-tile kernel with
  // register prefetch (gguf_kquant_gemv.cu). 2, the default: the batch-1 Q4_K_M 8B step 3.11-3.16
  // ms against 3.37-3.46 on the per-tile kernel (H100, 2026-12-07; 4 ties with 2 at 3.13-3.18).
  int gguf_kquant_stream = 2;
};

// KVASIR_CUDA_PREFILL: which kernel runs the prefill rows of attention (per call, where it can:
// attention_prefill_flashinfer.h lists what FlashInfer's path takes; the rest always runs ours).
enum class PrefillAttentionKernel {
  kFlashInfer,  // "flashinfer" (default; only where the build has it and the device is sm_90)
  kOwn,         // "own": attention_prefill.cu for every prefill
};
const char* prefill_attention_kernel_name(PrefillAttentionKernel k);

// KVASIR_CUDA_DECODE: which kernel runs pure decode steps (one query per sequence) of up to
// KVASIR_CUDA_DECODE_FI_MAX_SEQS sequences whose block table holds at least
// KVASIR_CUDA_DECODE_FI_MIN_TOKENS tokens (attention_decode_flashinfer.h lists what FlashInfer's
// path takes; the rest, and bigger batches, run attention.cu's plan, which KVASIR_CUDA_ATTN steers;
// a kernel forced by KVASIR_CUDA_ATTN runs every decode, FlashInfer's path included).
enum class DecodeAttentionPath {
  kFlashInfer,  // "flashinfer" (default; only where the build has it and the device is sm_90)
  kOwn,         // "own": attention.cu's kernels for every decode
};
const char* decode_attention_path_name(DecodeAttentionPath k);
// The default batch bound of FlashInfer's decode: the long-context batches of issue 19 (1..8);
// from 8 sequences up attention.cu's mma_bulk streams the KV cache at 3.6 TB/s (attention.cu).
inline constexpr int kFlashInferDecodeMaxSeqs = 8;
// The default table bound: FlashInfer's decode takes a call only when its block table holds at
// least this many tokens (max_blocks_per_seq x block_size; the runner sizes decode tables to the
// next power of two of the blocks in use, so a bound follows the context while staying fixed for a
// captured graph); shorter tables keep attention.cu's kernels. 0, the default: every table. On an
// H100 FlashInfer won at short contexts too (BENCHMARKS.md, 2026-12-06: batch 1 by 1-2%, batch 8
// by 25%). A first try of 0 as the default made the CUDA speculative-decoding engine tests leave
// plain decoding within 16 tokens: rounding, not a fault (2026-12-07, H100): their plain runs'
// six-sequence steps took FlashInfer and the verify steps (more rows) ours, which round
// differently in bf16; on one family the tests pass, and they now pin ours.
inline constexpr int kFlashInferDecodeMinTableTokens = 0;
// From how many tokens a W4A16 linear dequantizes its weight for cuBLASLt (RecordingTuning).
inline constexpr int kW4a16DequantMinRows = 512;

// KVASIR_MLA_GEMM: where MLA's per-head products run (cuda_mla_ops.cpp).
enum class MlaHeadGemm {
  kAuto,    // "auto" (default): head_gemv for decode-sized batches, cuBLASLt above
  kKernel,  // "kernel": head_gemv always
  kCublas,  // "cublas": cuBLASLt wherever it has an algorithm
};

// Read by CudaBackend when it starts (each backend reads its own; the op tests build two).
struct RecordingTuning {
  bool fuse = true;        // KVASIR_CUDA_FUSE=0: one record per op (for A/B timing)
  bool fuse_norm = false;  // KVASIR_CUDA_FUSE_NORM=1: norms and residual adds folded into GEMVs
  bool profile = false;    // KVASIR_CUDA_PROFILE=1: eager steps with per-op device time
  // KVASIR_CUDA_OVERLAP_STEPS=0: sample_async / embedding_fed (overlapped steps, runner/model_runner.h)
  // not offered to the runner, so every step is read back before the next is recorded (A/B runs).
  bool overlap_steps = true;
  // KVASIR_MOE_GEMV_TOKENS [0, 256]: moe_experts of up to this many tokens takes the GEMV path
  // (only the chosen experts' rows, read per token); more take the grouped GEMM.
  int moe_gemv_max_tokens = 8;
  // KVASIR_MOE_FUSE_ROUTE: whether the GEMV path folds the moe_route op before it into its gate/up
  // kernel (each CTA routes its token; that variant fits 4 CTAs per SM, the plain one 6).
  // -1 (unset): fold when the gate/up grid takes as many waves either way; 0 never; 1 always.
  // H200, batch 1 (3.40 / 3.46 vs 3.70 / 3.63 ms, 4.45 / 4.45 vs 4.22 / 4.24 ms): folding lost on
  // Qwen3-30B-A3B (768 CTAs: one wave plain, two folded) and won on DeepSeek-V2-Lite (1,056 CTAs:
  // two waves both ways), so the rule is the wave count.
  int moe_fuse_route = -1;
  PrefillAttentionKernel prefill_attention = PrefillAttentionKernel::kFlashInfer;  // KVASIR_CUDA_PREFILL
  DecodeAttentionPath decode_attention = DecodeAttentionPath::kFlashInfer;         // KVASIR_CUDA_DECODE
  int flashinfer_decode_max_seqs = kFlashInferDecodeMaxSeqs;  // KVASIR_CUDA_DECODE_FI_MAX_SEQS [1, 4096]
  int flashinfer_decode_min_table = kFlashInferDecodeMinTableTokens;  // KVASIR_CUDA_DECODE_FI_MIN_TOKENS [0, 2^30]
  // KVASIR_CUDA_DECODE_FI_MIN_CHUNK [1, 2^20]: the shortest chunk of keys FlashInfer's decode plan
  // gives one CTA (rounded up to a block; longer where the sequences need fewer chunks to fit).
  // H100, 2026-12-07, 128-token contexts: 16 was 0.2-1.4% faster than 32 and 64 1-2% slower
  // (BENCHMARKS.md), and the decode op tests and the whole e2e suite pass with 16: the default.
  int flashinfer_decode_min_chunk = kFlashInferDecodeMinChunkTokens;
  // KVASIR_CUDA_DECODE_FI_FP8=1: e4m3 caches (value scale 1) through FlashInfer's decode too. Off:
  // on an H100 at batch 1, 32k context, FP8 weights it took 5.45 ms a step against 4.64 for our
  // mma_bulk (BENCHMARKS.md, 2026-12-06).
  int flashinfer_decode_fp8 = 0;
  // KVASIR_W4A16_DEQUANT_ROWS [17, 2^30]: W4A16 linears of at least this many tokens dequantize
  // their weight to bf16 and run cuBLASLt (cuda_w4a16_ops.cpp); fewer run the W4A16 GEMM.
  int w4a16_dequant_rows = kW4a16DequantMinRows;
  // KVASIR_W4A16_GEMV_ROWS [1, kW4a16GemvMaxRows]: the most tokens a W4A16 linear gives the GEMV;
  // more take the GEMM (A/B of the crossover: the GEMV's second octet doubles its mma and x work,
  // while the wgmma GEMM's 64-token tiles cost about the same at 16 tokens as at 32).
  int w4a16_gemv_rows = kW4a16GemvDefaultRows;
  // KVASIR_CUDA_L2_PREFETCH_MB [0, 64]: the o projection's weights (up to this many MB) pulled into
  // L2 during the RoPE and decode attention before it, at up to kL2PrefetchMaxRows tokens
  // (CudaBackend::prefetch_linear_weights); 0: off.
  int l2_prefetch_mb = 0;
  // KVASIR_CUDA_L2_PREFETCH_EVERY=1: every decode-sized linear's weights, not only the o projection's.
  bool l2_prefetch_every = false;
  // KVASIR_GGUF_GEMV=exact: GGUF linears of up to kGgufGemvMaxRows tokens on the float32 GEMV with
  // the reference's exact weights (A/B runs, accuracy checks), not the tensor-core ones.
  bool gguf_exact_gemv = false;
  // KVASIR_GGUF_GEMV_ROWS [1, 4096]: most tokens the tensor-core GGUF GEMV takes (Q4_K and Q6_K: at
  // most kGgufKquantGemvMaxRows while the K-quant GEMM is on); dequantize + cuBLASLt above.
  int gguf_gemv_rows = kGgufMmaGemvMaxRows;
  // KVASIR_GGUF_KQUANT_GEMM_ROWS [0, 4096]: most tokens Q4_K / Q6_K linears take the K-quant GEMM
  // (gguf_kquant_gemm.cu) with; 0 turns it off.
  int gguf_kquant_gemm_rows = kGgufKquantGemmMaxRows;
  MlaHeadGemm mla_head_gemm = MlaHeadGemm::kAuto;  // KVASIR_MLA_GEMM auto|kernel|cublas
};

const char* mla_head_gemm_name(MlaHeadGemm k);

struct CudaTuning {
  RecordingTuning recording;
  KernelTuning kernels;
};

// Every knob as the environment sets it now. KVASIR_CUDA_PREFILL or KVASIR_CUDA_DECODE other than
// flashinfer or own, or KVASIR_MLA_GEMM other than auto, kernel or cublas, aborts with a message
// naming it (a typo would otherwise silently benchmark the other kernel).
CudaTuning read_cuda_tuning();
// The kernel knobs in force for this process: read_cuda_tuning().kernels on first use, then fixed.
const KernelTuning& kernel_tuning();
// "KVASIR_CUDA_FUSE=1 ..." for the start-up log line.
std::string describe(const CudaTuning& t);

}  // namespace kvasir::cuda
