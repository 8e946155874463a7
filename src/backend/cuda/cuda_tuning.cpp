#include "backend/cuda/cuda_tuning.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>

#include "common/check.h"

namespace kvasir::cuda {
namespace {

// The integer value of `name` when it lies in [lo, hi], else `def`.
int env_int(const char* name, int def, int lo, int hi) {
  const char* e = std::getenv(name);
  if (e == nullptr) return def;
  const int v = std::atoi(e);
  return v < lo || v > hi ? def : v;
}

// The integer value of `name` when it is one of `allowed`, else `def`.
int env_choice(const char* name, int def, std::initializer_list<int> allowed) {
  const char* e = std::getenv(name);
  if (e == nullptr) return def;
  const int v = std::atoi(e);
  for (int a : allowed) {
    if (v == a) return v;
  }
  return def;
}

// An on/off switch: unset gives `def`; a default-on switch turns off only on a leading '0', a
// default-off one turns on only on a leading '1'.
bool env_flag(const char* name, bool def) {
  const char* e = std::getenv(name);
  if (e == nullptr) return def;
  return def ? e[0] != '0' : e[0] == '1';
}

constexpr DecodeAttentionKernel kKernels[] = {DecodeAttentionKernel::kPerHeadPhased, DecodeAttentionKernel::kPerHeadOnline,
                                              DecodeAttentionKernel::kAllHeads, DecodeAttentionKernel::kMmaBulk};

// A name, or (as before the names) a leading digit 1, 2, 3 or 5; anything else: kAuto.
DecodeAttentionKernel env_decode_attention() {
  const char* e = std::getenv("KVASIR_CUDA_ATTN");
  if (e == nullptr) return DecodeAttentionKernel::kAuto;
  for (DecodeAttentionKernel k : kKernels) {
    if (std::strcmp(e, decode_attention_kernel_name(k)) == 0) return k;
  }
  for (DecodeAttentionKernel k : kKernels) {
    if (e[0] == '0' + static_cast<int>(k)) return k;
  }
  return DecodeAttentionKernel::kAuto;
}

PrefillAttentionKernel env_prefill_attention() {
  const char* e = std::getenv("KVASIR_CUDA_PREFILL");
  if (e == nullptr || *e == '\0') return PrefillAttentionKernel::kFlashInfer;
  for (PrefillAttentionKernel k : {PrefillAttentionKernel::kFlashInfer, PrefillAttentionKernel::kOwn}) {
    if (std::strcmp(e, prefill_attention_kernel_name(k)) == 0) return k;
  }
  KVASIR_CHECK_MSG(false, (std::string("KVASIR_CUDA_PREFILL must be flashinfer or own, not '") + e + "'").c_str());
  return PrefillAttentionKernel::kOwn;
}

DecodeAttentionPath env_decode_path() {
  const char* e = std::getenv("KVASIR_CUDA_DECODE");
  if (e == nullptr || *e == '\0') return DecodeAttentionPath::kFlashInfer;
  for (DecodeAttentionPath k : {DecodeAttentionPath::kFlashInfer, DecodeAttentionPath::kOwn}) {
    if (std::strcmp(e, decode_attention_path_name(k)) == 0) return k;
  }
  KVASIR_CHECK_MSG(false, (std::string("KVASIR_CUDA_DECODE must be flashinfer or own, not '") + e + "'").c_str());
  return DecodeAttentionPath::kOwn;
}

MlaHeadGemm env_mla_head_gemm() {
  const char* e = std::getenv("KVASIR_MLA_GEMM");
  if (e == nullptr || *e == '\0') return MlaHeadGemm::kAuto;
  for (MlaHeadGemm k : {MlaHeadGemm::kAuto, MlaHeadGemm::kKernel, MlaHeadGemm::kCublas}) {
    if (std::strcmp(e, mla_head_gemm_name(k)) == 0) return k;
  }
  KVASIR_CHECK_MSG(false, (std::string("KVASIR_MLA_GEMM must be auto, kernel or cublas, not '") + e + "'").c_str());
  return MlaHeadGemm::kAuto;
}

}  // namespace

const char* mla_head_gemm_name(MlaHeadGemm k) {
  switch (k) {
    case MlaHeadGemm::kAuto: return "auto";
    case MlaHeadGemm::kKernel: return "kernel";
    case MlaHeadGemm::kCublas: return "cublas";
  }
  return "?";
}

const char* decode_attention_path_name(DecodeAttentionPath k) {
  return k == DecodeAttentionPath::kOwn ? "own" : "flashinfer";
}

const char* prefill_attention_kernel_name(PrefillAttentionKernel k) {
  return k == PrefillAttentionKernel::kOwn ? "own" : "flashinfer";
}

const char* decode_attention_kernel_name(DecodeAttentionKernel k) {
  switch (k) {
    case DecodeAttentionKernel::kAuto: return "auto";
    case DecodeAttentionKernel::kPerHeadPhased: return "per_head_phased";
    case DecodeAttentionKernel::kPerHeadOnline: return "per_head_online";
    case DecodeAttentionKernel::kAllHeads: return "all_heads";
    case DecodeAttentionKernel::kMmaBulk: return "mma_bulk";
  }
  return "?";
}

CudaTuning read_cuda_tuning() {
  CudaTuning t;
  t.recording.fuse = env_flag("KVASIR_CUDA_FUSE", true);
  t.recording.fuse_norm = t.recording.fuse && env_flag("KVASIR_CUDA_FUSE_NORM", false);
  t.recording.profile = env_flag("KVASIR_CUDA_PROFILE", false);
  t.recording.overlap_steps = env_flag("KVASIR_CUDA_OVERLAP_STEPS", true);
  t.recording.moe_gemv_max_tokens = env_int("KVASIR_MOE_GEMV_TOKENS", 8, 0, 256);
  t.recording.moe_fuse_route = std::getenv("KVASIR_MOE_FUSE_ROUTE") == nullptr ? -1 : env_int("KVASIR_MOE_FUSE_ROUTE", 0, 0, 1);
  t.recording.prefill_attention = env_prefill_attention();
  t.recording.decode_attention = env_decode_path();
  t.recording.flashinfer_decode_max_seqs =
      env_int("KVASIR_CUDA_DECODE_FI_MAX_SEQS", kFlashInferDecodeMaxSeqs, 1, 4096);
  t.recording.flashinfer_decode_min_table =
      env_int("KVASIR_CUDA_DECODE_FI_MIN_TOKENS", kFlashInferDecodeMinTableTokens, 0, 1 << 30);
  t.recording.flashinfer_decode_min_chunk =
      env_int("KVASIR_CUDA_DECODE_FI_MIN_CHUNK", kFlashInferDecodeMinChunkTokens, 1, 1 << 20);
  t.recording.flashinfer_decode_fp8 = env_int("KVASIR_CUDA_DECODE_FI_FP8", 0, 0, 1);
  t.recording.w4a16_dequant_rows = env_int("KVASIR_W4A16_DEQUANT_ROWS", kW4a16DequantMinRows, 17, 1 << 30);
  t.recording.w4a16_gemv_rows = env_int("KVASIR_W4A16_GEMV_ROWS", kW4a16GemvDefaultRows, 1, kW4a16GemvMaxRows);
  t.recording.l2_prefetch_mb = env_int("KVASIR_CUDA_L2_PREFETCH_MB", 0, 0, 64);
  t.recording.l2_prefetch_every = env_flag("KVASIR_CUDA_L2_PREFETCH_EVERY", false);
  const char* exact = std::getenv("KVASIR_GGUF_GEMV");
  t.recording.gguf_exact_gemv = exact != nullptr && std::strcmp(exact, "exact") == 0;
  t.recording.gguf_gemv_rows = env_int("KVASIR_GGUF_GEMV_ROWS", kGgufMmaGemvMaxRows, 1, 4096);
  t.recording.gguf_kquant_gemm_rows = env_int("KVASIR_GGUF_KQUANT_GEMM_ROWS", kGgufKquantGemmMaxRows, 0, 4096);
  t.recording.mla_head_gemm = env_mla_head_gemm();
  KernelTuning& k = t.kernels;
  k.decode_attention = env_decode_attention();
  k.all_heads_ctas_per_sm = env_int("KVASIR_CUDA_V3_CTAS", 2, 1, 64);
  k.all_heads_max_partition =
      env_int("KVASIR_CUDA_V3_PART", kMaxDecodePartition, 32, kMaxDecodePartition) / 32 * 32;
  k.all_heads_min_ctas = env_int("KVASIR_CUDA_V3_MIN_CTAS", -1, 0, 1 << 20);
  k.prefill_key_tile = env_choice("KVASIR_CUDA_PREFILL_KT", 32, {32, 64});
  k.splits_by_context = env_flag("KVASIR_CUDA_SPLITS_BY_CONTEXT", true);
  k.mma_bulk_stages = env_choice("KVASIR_CUDA_TMA_STAGES", 3, {3, 6});
  k.rope_per_head = env_flag("KVASIR_CUDA_ROPE_HEADS", true);
  k.gemv_early = env_flag("KVASIR_GEMV_EARLY", true);
  k.gemv_split = env_choice("KVASIR_GEMV_SPLIT", 2, {1, 2, 4});
  k.w4a16_stage_x = env_flag("KVASIR_W4A16_STAGE_X", true);
  k.w4a16_gemv_min_blocks = env_choice("KVASIR_W4A16_GEMV_MINB", 3, {2, 3});
  k.w4a16_gemm_stages = env_choice("KVASIR_W4A16_GEMM_STAGES", 4, {3, 4, 6});
  k.w4a16_gemm_wgmma = env_flag("KVASIR_W4A16_GEMM_WGMMA", true);
  k.w4a16_gemm_max_splits = env_int("KVASIR_W4A16_GEMM_SPLITS", 8, 1, 8);
  k.w4a16_wgmma_ahead = env_choice("KVASIR_W4A16_WGMMA_AHEAD", 4, {4, 6, 8});
  k.w4a16_wgmma_stream_rows = env_int("KVASIR_W4A16_WGMMA_STREAM", 65, 0, 4096);
  k.gemv_max_rows = env_int("KVASIR_GEMV_MAX_ROWS", 8, 1, 8);
  k.gemv_tc_min_rows = env_int("KVASIR_GEMV_TC_MIN_ROWS", 2, 1, 9);
  k.gemv_tc_variant = env_int("KVASIR_GEMV_TC_VARIANT", 0, 0, 1);
  k.exact_decode_buckets = env_int("KVASIR_CUDA_EXACT_BUCKETS", 8, 2, 8);
  k.gemv_min_blocks = env_choice("KVASIR_GEMV_MINB", 1, {1, 4, 5});
  k.gemv_prefetch_mb = env_int("KVASIR_GEMV_PREFETCH_MB", 0, 0, 48);
  k.pdl = env_flag("KVASIR_CUDA_PDL", true);
  const char* kq = std::getenv("KVASIR_GGUF_KQUANT_GEMV");
  k.gguf_kquant_gemv = kq == nullptr ? 2 : (std::strcmp(kq, "0") == 0 ? 0 : (std::strcmp(kq, "q4k") == 0 ? 1 : 2));
  k.gguf_kquant_stream = env_int("KVASIR_GGUF_KQUANT_STREAM", KernelTuning{}.gguf_kquant_stream, 0, 4);
  return t;
}

const KernelTuning& kernel_tuning() {
  static const KernelTuning k = read_cuda_tuning().kernels;
  return k;
}

std::string describe(const CudaTuning& t) {
  const RecordingTuning& r = t.recording;
  const KernelTuning& k = t.kernels;
  char buf[2048];
  std::snprintf(buf, sizeof(buf),
                "KVASIR_CUDA_FUSE=%d KVASIR_CUDA_FUSE_NORM=%d KVASIR_CUDA_PROFILE=%d KVASIR_CUDA_OVERLAP_STEPS=%d KVASIR_CUDA_ATTN=%s "
                "KVASIR_CUDA_V3_CTAS=%d KVASIR_CUDA_V3_PART=%d KVASIR_CUDA_V3_MIN_CTAS=%d KVASIR_CUDA_SPLITS_BY_CONTEXT=%d KVASIR_CUDA_PREFILL_KT=%d KVASIR_CUDA_TMA_STAGES=%d "
                "KVASIR_CUDA_ROPE_HEADS=%d KVASIR_GEMV_EARLY=%d KVASIR_GEMV_SPLIT=%d KVASIR_W4A16_STAGE_X=%d KVASIR_W4A16_GEMV_MINB=%d KVASIR_W4A16_GEMM_STAGES=%d KVASIR_W4A16_GEMM_SPLITS=%d KVASIR_W4A16_GEMM_WGMMA=%d KVASIR_W4A16_WGMMA_AHEAD=%d KVASIR_W4A16_WGMMA_STREAM=%d KVASIR_GEMV_MAX_ROWS=%d KVASIR_GEMV_TC_MIN_ROWS=%d KVASIR_GEMV_TC_VARIANT=%d KVASIR_CUDA_EXACT_BUCKETS=%d KVASIR_GEMV_MINB=%d "
                "KVASIR_GEMV_PREFETCH_MB=%d KVASIR_CUDA_PDL=%d KVASIR_MOE_GEMV_TOKENS=%d KVASIR_MOE_FUSE_ROUTE=%d KVASIR_CUDA_PREFILL=%s "
                "KVASIR_CUDA_DECODE=%s KVASIR_CUDA_DECODE_FI_MAX_SEQS=%d KVASIR_CUDA_DECODE_FI_MIN_TOKENS=%d KVASIR_CUDA_DECODE_FI_MIN_CHUNK=%d KVASIR_CUDA_DECODE_FI_FP8=%d KVASIR_W4A16_DEQUANT_ROWS=%d KVASIR_W4A16_GEMV_ROWS=%d KVASIR_CUDA_L2_PREFETCH_MB=%d KVASIR_CUDA_L2_PREFETCH_EVERY=%d "
                "KVASIR_GGUF_GEMV=%s KVASIR_GGUF_GEMV_ROWS=%d KVASIR_GGUF_KQUANT_GEMV=%s KVASIR_GGUF_KQUANT_STREAM=%d KVASIR_GGUF_KQUANT_GEMM_ROWS=%d KVASIR_MLA_GEMM=%s",
                r.fuse, r.fuse_norm, r.profile, r.overlap_steps, decode_attention_kernel_name(k.decode_attention),
                k.all_heads_ctas_per_sm, k.all_heads_max_partition, k.all_heads_min_ctas, k.splits_by_context, k.prefill_key_tile, k.mma_bulk_stages,
                k.rope_per_head, k.gemv_early, k.gemv_split, k.w4a16_stage_x, k.w4a16_gemv_min_blocks, k.w4a16_gemm_stages, k.w4a16_gemm_max_splits, k.w4a16_gemm_wgmma, k.w4a16_wgmma_ahead, k.w4a16_wgmma_stream_rows, k.gemv_max_rows, k.gemv_tc_min_rows, k.gemv_tc_variant, k.exact_decode_buckets, k.gemv_min_blocks, k.gemv_prefetch_mb, k.pdl,
                r.moe_gemv_max_tokens, r.moe_fuse_route, prefill_attention_kernel_name(r.prefill_attention),
                decode_attention_path_name(r.decode_attention), r.flashinfer_decode_max_seqs,
                r.flashinfer_decode_min_table, r.flashinfer_decode_min_chunk, r.flashinfer_decode_fp8, r.w4a16_dequant_rows, r.w4a16_gemv_rows, r.l2_prefetch_mb, r.l2_prefetch_every,
                r.gguf_exact_gemv ? "exact" : "tensor_cores", r.gguf_gemv_rows,
                k.gguf_kquant_gemv == 0 ? "0" : (k.gguf_kquant_gemv == 1 ? "q4k" : "on"), k.gguf_kquant_stream, r.gguf_kquant_gemm_rows,
                mla_head_gemm_name(r.mla_head_gemm));
  return buf;
}

}  // namespace kvasir::cuda
