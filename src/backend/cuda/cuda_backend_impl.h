// CudaBackend's declaration, shared by the files that implement it (cuda_backend.cpp: set-up,
// memory, uploads, read-backs; cuda_ops.cpp: recording and executing ops). Internal to this
// folder: everything else reaches the backend through cuda_backend.h.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/cuda/attention_decode_flashinfer_plan.h"
#include "backend/cuda/attention_prefill_flashinfer_plan.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_tuning.h"
#include "backend/cuda/fp8_gemm.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/head_gemm.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/step_queue.h"
#include "dist/device_communicator.h"

namespace kvasir {

using cuda::Elem;
using cuda::OpKind;
using cuda::OpRecord;

// The kernels' name for a KV cache's element type (bf16, FP8 e4m3 or e5m2: CudaBackend::init checks).
inline cuda::KvCacheType kv_cache_type_of(DType t) {
  KVASIR_CHECK_MSG(t == DType::kBF16 || t == DType::kF8E4M3 || t == DType::kF8E5M2,
                   "CUDA KV caches are bf16 or FP8 (e4m3, e5m2)");
  return t == DType::kF8E4M3 ? cuda::KvCacheType::kE4m3
                             : (t == DType::kF8E5M2 ? cuda::KvCacheType::kE5m2 : cuda::KvCacheType::kBf16);
}

inline Elem elem_of(DType t) {
  KVASIR_CHECK_MSG(t == DType::kBF16 || t == DType::kF32, "CUDA backend tensors are bf16 or f32");
  return t == DType::kBF16 ? Elem::kBf16 : Elem::kF32;
}

struct WeightSlab;  // cuda_backend.cpp: device memory small weights are carved from

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaBackendOptions& opts) : opts_(opts) {}
  ~CudaBackend() override;
  Status init();

  Device device() const override { return Device::kCuda; }
  std::string name() const override { return name_; }
  DType activation_dtype() const override { return DType::kBF16; }
  DType kv_cache_dtype() const override { return opts_.kv_cache_dtype; }
  bool calculates_kv_scales() const override { return opts_.calculate_kv_scales; }

  StatusOr<std::unique_ptr<Buffer>> allocate(size_t bytes) override;
  StatusOr<Tensor> upload_weight(const Tensor& host_weight, std::unique_ptr<Buffer>* owner) override;
  void copy_to_host(const Tensor& src, void* dst) override;
  void synchronize() override;
  void submit() override;

  void embedding(const Tensor& table, const int32_t* ids, int n, float scale, Tensor& out) override;
  void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) override;
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) override;
  void add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& w, float eps, Tensor& out) override;
  void add(Tensor& a, const Tensor& b) override;
  void rope(Tensor& q, Tensor& k, const int32_t* positions, const RopeParams& p) override;
  void write_kv(const Tensor& k, const Tensor& v, Tensor& k_cache, Tensor& v_cache, const AttentionMetadata& m) override;
  void attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionMetadata& m,
                 const AttentionParams& p, Tensor& out) override;
  void gated_activation(const Tensor& gate, const Tensor& up, GateActivation act, Tensor& out) override;
  void softcap(Tensor& x, float cap) override;
  void gather_rows(const Tensor& src, const int32_t* rows, int k, Tensor& out) override;
  // cuda_moe_ops.cpp
  bool supports_moe() const override { return true; }
  void moe_route(const Tensor& router_logits, const MoeRouting& routing, Tensor& topk_ids,
                 Tensor& topk_weights) override;
  void moe_experts(const Tensor& x, const Tensor& topk_ids, const Tensor& topk_weights,
                   const MoeExpertWeights& experts, Tensor& out) override;
  // MLA (cuda_mla_ops.cpp, kernels in mla_attention.cu).
  bool supports_mla() const override { return true; }
  void write_latent_kv(const Tensor& c_kv, const Tensor& k_pe, const int32_t* positions, const RopeParams& rope,
                       Tensor& cache, const AttentionMetadata& m) override;
  void mla_attention(const Tensor& q, const int32_t* positions, const Tensor& cache, const AttentionMetadata& m,
                     const MlaParams& p, Tensor& out) override;

  bool supports_device_sampling() const override { return true; }
  BackendCapabilities capabilities() const override;
  Status sample(const Tensor& logits, const DeviceSamplingRow* rows, int num_rows, int32_t* out_tokens) override;
  // Sampling plus the verify kernel (verify_drafts.cu) in the same step: one read-back of the
  // counts and the accepted ids.
  Status sample_and_verify(const Tensor& logits, const DeviceSamplingRow* rows, int num_rows,
                           const DraftVerifyRow* requests, int num_requests, const int32_t* drafts,
                           int num_draft_tokens, int32_t* out_tokens, int32_t* out_num_emitted) override;
  // Overlapped steps unless KVASIR_CUDA_OVERLAP_STEPS=0 (not while profiling: the per-op timings
  // need each step waited for).
  bool supports_sampled_token_feedback() const override {
    return tuning_.recording.overlap_steps && !tuning_.recording.profile;
  }
  Status sample_async(const Tensor& logits, const DeviceSamplingRow* rows, int num_rows) override;
  Status collect_sampled(int32_t* out_tokens) override;
  void embedding_fed(const Tensor& table, const int32_t* ids, const int32_t* sources, int n, float scale,
                     Tensor& out) override;
  bool supports_device_token_bitmask() const override { return true; }
  Status apply_token_bitmask(Tensor& logits, const int32_t* words, int words_per_row, const int32_t* logits_rows,
                             int num_rows) override;
  DeviceMemoryInfo memory_info() override;
  std::string stats() const override;
  // Tensor parallelism (cuda_collective_ops.cpp).
  int device_group_size() const override { return comm_ ? comm_->world_size() : 0; }
  void all_reduce_sum(Tensor& t) override;
  void all_gather_columns(const Tensor& local, Tensor& out) override;

 private:
  static void execute_op(void* ctx, const OpRecord& op, const uint8_t* arena, cudaStream_t s) {
    static_cast<CudaBackend*>(ctx)->execute(op, arena, s);
  }
  void execute(const OpRecord& op, const uint8_t* arena, cudaStream_t s);
  void* device_scratch(void*& ptr, size_t& cap, size_t bytes);
  void exec_attention(const cuda::AttentionOp& op, const uint8_t* arena, cudaStream_t s);
  void exec_multi_gemv(const cuda::MultiGemvOp& op, Elem elem, cudaStream_t s);
  void exec_gemv_gated(const cuda::GemvGatedOp& op, cudaStream_t s);
  void exec_moe_experts(const cuda::MoeExpertsOp& op, cudaStream_t s);
  // The device table of a layer's expert pointers (MoeExpertPtrs [E]), made at its first call.
  struct MoeTable {
    std::vector<const void*> key;  // everything the table was built from (moe_key)
    void* table = nullptr;
    bool vec = false;              // every weight 16-byte aligned, H and I multiples of 8
  };
  const MoeTable& moe_table(const MoeExpertWeights& w);
  Status upload_matrix(const Tensor& host, void* dst);
  // A weight's memory: small ones from the shared slab (cuda_backend.cpp), large ones their own.
  StatusOr<std::unique_ptr<Buffer>> allocate_weight(size_t bytes);
  void exec_write_latent_kv(const cuda::WriteLatentKvOp& op, const uint8_t* arena, cudaStream_t s);
  void exec_flashinfer_prefill(const cuda::AttentionOp& op, const uint8_t* arena, cudaStream_t s);
  // FlashInfer's decode (cuda_decode_flashinfer_ops.cpp): the plan of a call it takes, else null.
  const cuda::FlashInferDecodePlan* flashinfer_decode_plan(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                                           const Tensor& out, const AttentionMetadata& m,
                                                           const AttentionParams& p);
  void exec_flashinfer_decode(const cuda::AttentionOp& op, const uint8_t* arena, cudaStream_t s);
  void exec_mla_attention(const cuda::MlaAttentionOp& op, const uint8_t* arena, cudaStream_t s);
  void exec_all_reduce(const cuda::AllReduceOp& op, Elem elem, cudaStream_t s);
  void exec_all_gather_columns(const cuda::AllGatherColumnsOp& op, cudaStream_t s);
  // bf16 linears (cuda_fused_ops.cpp): the GEMV for decode-sized batches, else cuBLASLt.
  void linear_bf16(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out);
  // A decode-sized linear's weights pulled into L2 ahead of it (KVASIR_CUDA_L2_PREFETCH_MB).
  void prefetch_linear_weights(const Tensor& w, int64_t rows);
  // FP8 W8A8 linears (cuda_fp8_ops.cpp): weights kept as e4m3 codes + row scales.
  static bool keeps_fp8(const Tensor& host_weight);
  StatusOr<Tensor> upload_fp8_weight(const Tensor& host_weight, std::unique_ptr<Buffer>* owner);
  void linear_fp8(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out);
  // gate/up FP8 GEMVs just recorded take the activation into their epilogue; false if they cannot.
  // The last record, where gated_activation(gate, up, act, out) may fold into it: of this kind, in
  // place (out is gate: the unfused op leaves gate = x·wg otherwise), an activation the folds
  // have; else null.
  OpRecord* gated_fold_target(OpKind kind, const Tensor& gate, GateActivation act, const Tensor& out);
  bool fold_fp8_gated_activation(const Tensor& gate, const Tensor& up, GateActivation act, Tensor& out);
  void exec_fp8_linear(const cuda::Fp8LinearOp& op, Elem elem, cudaStream_t s);
  // GGUF block weights (cuda_gguf_ops.cpp): Q4_0 .. Q6_K matrices kept as the file stores them.
  static bool keeps_gguf(const Tensor& host_weight);
  StatusOr<Tensor> upload_gguf_weight(const Tensor& host_weight, std::unique_ptr<Buffer>* owner);
  void linear_gguf(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out);
  void exec_gguf_linear(const cuda::GgufLinearOp& op, Elem elem, cudaStream_t s);
  bool fold_gguf_gated_activation(const Tensor& gate, const Tensor& up, GateActivation act, Tensor& out);
  void plan_kquant_gemm_scratch(cuda::GgufLinearOp& r);
  // W4A16 linears (cuda_w4a16_ops.cpp): 4-bit integer weights kept packed in the tile layout of
  // quant/w4a16_layout.h; Unimplemented for integer weights no kernel here reads (8-bit).
  StatusOr<bool> keeps_int4(const Tensor& host_weight) const;
  StatusOr<Tensor> upload_int4_weight(const Tensor& host_weight, std::unique_ptr<Buffer>* owner);
  void linear_w4a16(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out);
  bool fold_w4a16_gated_activation(const Tensor& gate, const Tensor& up, GateActivation act, Tensor& out);
  void exec_w4a16_linear(const cuda::W4a16LinearOp& op, Elem elem, cudaStream_t s);
  // Makes this backend's device current on the calling thread: the runner may call from a thread
  // other than the one that made the backend, and a tensor-parallel rank's device is not 0.
  void bind_device() const;

  CudaBackendOptions opts_;
  std::unique_ptr<dist::DeviceCommunicator> comm_;  // tensor parallelism only
  void* gathered_ = nullptr;  // all_gather_columns: every rank's local block, grow-only
  size_t gathered_cap_ = 0;
  cuda::CudaTuning tuning_;  // the knobs in force (cuda_tuning.h), read in init()
  bool fuse_ = true;         // tuning_.recording.fuse
  bool fuse_norm_ = false;   // tuning_.recording.fuse_norm
  std::string name_;
  int num_sms_ = 132;
  cudaStream_t stream_ = nullptr;
  cuda::GemmRunner gemm_;
  std::unique_ptr<cuda::StepQueue> queue_;
  uint64_t dummy_seed_ = 0x5eed;
  std::shared_ptr<WeightSlab> weight_slab_;  // where small weights are carved from now
  // Grow-only device scratch; the old block is kept until the step that used it has finished.
  void* partial_ = nullptr;
  size_t partial_cap_ = 0;
  void* tokens_dev_ = nullptr;
  size_t tokens_cap_ = 0;
  int32_t* tokens_host_ = nullptr;
  // Overlapped steps: sample_async's tokens stay in tokens_dev (one fixed buffer, so captured
  // graphs and the next step's embedding name it) and come back into two pinned slots in turn.
  static constexpr int kMaxSampleRows = 65536;
  struct AsyncSamples {
    int32_t* tokens_dev = nullptr;  // [kMaxSampleRows]
    int32_t* host[2] = {};          // pinned [kMaxSampleRows] each
    struct Pending {
      uint64_t ticket;              // the step's StepQueue ticket
      int slot, rows;
    };
    std::deque<Pending> pending;    // oldest first, at most two
    int64_t num_issued = 0;
    int last_rows = 0;              // rows of the latest sample_async: what embedding_fed may read
  } async_;
  std::vector<void*> retired_;
  void* moe_scratch_ = nullptr;
  size_t moe_scratch_cap_ = 0;
  // Keyed by the address of the layer's down-weight views (stable for a bound model); the key
  // check catches a reused address.
  std::unordered_map<const Tensor*, MoeTable> moe_tables_;
  std::vector<const void*> moe_key_;  // reused while checking a key
  // Host-built attention schedules, reused.
  std::vector<int32_t> decode_seqs_;
  std::vector<cuda::PrefillWork> work_;
  // FlashInfer prefill (attention_prefill_flashinfer.h): whether this backend may take it (built,
  // sm_90 device, KVASIR_CUDA_PREFILL), its plans, and how many prefill calls went to each kernel.
  bool flashinfer_prefill_ = false;
  cuda::FlashInferPlanCache flashinfer_plans_;
  int64_t prefill_calls_flashinfer_ = 0, prefill_calls_own_ = 0;
  // FlashInfer decode (attention_decode_flashinfer.h): whether this backend may take it (built,
  // sm_90 device, KVASIR_CUDA_DECODE), its plans, and how many decode calls went to each path.
  bool flashinfer_decode_ = false;
  cuda::FlashInferDecodePlanCache flashinfer_decode_plans_;
  int64_t decode_calls_flashinfer_ = 0, decode_calls_own_ = 0;
  // MLA: per-head products on cuBLASLt (made on the first mla_attention), grow-only scratch.
  struct OwnedDeviceMemory {
    void* ptr = nullptr;
    size_t cap = 0;
    ~OwnedDeviceMemory() { cudaFree(ptr); }
  };
  cuda::HeadGemm head_gemm_;
  OwnedDeviceMemory mla_scratch_;
  // The W4A16 wgmma GEMM's stream-K workspace (tickets zeroed once), made when the first GEMM that
  // may run stream-K (KVASIR_W4A16_WGMMA_STREAM tokens or more) is recorded.
  OwnedDeviceMemory w4a16_stream_mem_;
  cuda::W4a16StreamWorkspace w4a16_stream_{};
  std::vector<cuda::PrefillWork> mla_work_;
  // FP8 linears: cuBLASLt FP8 GEMMs (made on first use) and the quantized activations' scratch.
  cuda::Fp8GemmRunner fp8_gemm_;
  void* fp8_act_ = nullptr;
  size_t fp8_act_cap_ = 0;
  int64_t fp8_weights_ = 0;  // weights kept as e4m3 (stats(): proof a model runs FP8)
  size_t fp8_weight_bytes_ = 0;
  // GGUF linears on the GEMM path: the weight dequantized to bf16 and a slice's product (grow-only).
  void* gguf_w_bf16_ = nullptr;
  size_t gguf_w_bf16_cap_ = 0;
  void* gguf_out_tmp_ = nullptr;
  size_t gguf_out_tmp_cap_ = 0;
  void* gguf_partial_ = nullptr;  // the K-quant GEMM's split-K workspace
  size_t gguf_partial_cap_ = 0;
  int64_t gguf_weights_ = 0;  // matrices kept in GGUF blocks (stats(): proof a model runs them)
  size_t gguf_weight_bytes_ = 0;
  // W4A16 linears: act-order gathers, the long prefills' dequantized weight slice and its product
  // (one grow-only block), and what was kept as int4 (stats()).
  void* w4a16_perm_ = nullptr;
  size_t w4a16_perm_cap_ = 0;
  void* w4a16_ws_ = nullptr;
  size_t w4a16_ws_cap_ = 0;
  int64_t int4_weights_ = 0;
  size_t int4_weight_bytes_ = 0;
};

}  // namespace kvasir
