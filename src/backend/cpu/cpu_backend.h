// CpuBackend: the reference implementation of the Backend op table (backend.h) and the test
// oracle for every other backend. Weights are used in place from the mapped file; quantized
// matmuls read GGUF blocks directly (cpu/quant). On AVX-512 machines without AMX the 32-block
// formats are also repacked once at upload into panels for batched matmuls (packed_q32.h).
// Threads come from one ThreadPool.
// Must not know about models or requests: it only runs ops.
#pragma once

#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/quant/matmul.h"
#include "backend/cpu/packed_weights.h"
#include "backend/cpu/thread_pool.h"

namespace kvasir {

struct CpuBackendOptions {
  int num_threads = 0;  // 0: all hardware threads
  MatmulPrecision precision = MatmulPrecision::kFast;
  // KV cache elements: F32 (default) or F16 (half the bytes to hold and to stream each decode
  // step; K and V rounded to float16 when written).
  DType kv_cache_dtype = DType::kF32;
  // --dtype: element type of dense (F32/F16/BF16) weight matrices, converted at upload
  // (dense_weight_dtype.h); nullopt keeps them as stored.
  std::optional<DType> dense_weight_dtype;
  bool calculate_kv_scales = false;  // Backend::calculates_kv_scales (FP8 caches only)
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& opts = {});
  ~CpuBackend() override;

  Device device() const override { return Device::kCpu; }
  std::string name() const override;
  DType activation_dtype() const override { return DType::kF32; }
  DType kv_cache_dtype() const override { return kv_dtype_; }
  bool calculates_kv_scales() const override { return calculate_kv_scales_; }
  int num_threads() const { return pool_->num_threads(); }
  void set_precision(MatmulPrecision p) { precision_ = p; }
  MatmulPrecision precision() const { return precision_; }

  StatusOr<std::unique_ptr<Buffer>> allocate(size_t bytes) override;
  StatusOr<Tensor> upload_weight(const Tensor& host_weight, std::unique_ptr<Buffer>* owner) override;
  // Never converted by --dtype (backend.h says why); packed like any other matrix.
  StatusOr<Tensor> upload_vocab_table(const Tensor& host_weight, std::unique_ptr<Buffer>* owner) override;
  void copy_to_host(const Tensor& src, void* dst) override;
  void synchronize() override {}

  void embedding(const Tensor& table, const int32_t* ids, int n, float scale, Tensor& out) override;
  void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) override;
  void linears(const Tensor& x, const LinearTarget* targets, int count) override;
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) override;
  void add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& w, float eps, Tensor& out) override;
  void add(Tensor& a, const Tensor& b) override;
  void rope(Tensor& q, Tensor& k, const int32_t* positions, const RopeParams& p) override;
  void write_kv(const Tensor& k, const Tensor& v, Tensor& k_cache, Tensor& v_cache,
                const AttentionMetadata& m) override;
  void attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                 const AttentionMetadata& m, const AttentionParams& p, Tensor& out) override;
  // cpu_mla_attention.cpp
  bool supports_mla() const override { return true; }
  void write_latent_kv(const Tensor& c_kv, const Tensor& k_pe, const int32_t* positions,
                       const RopeParams& rope, Tensor& cache, const AttentionMetadata& m) override;
  void mla_attention(const Tensor& q, const int32_t* positions, const Tensor& cache,
                     const AttentionMetadata& m, const MlaParams& p, Tensor& out) override;
  void gated_activation(const Tensor& gate, const Tensor& up, GateActivation act, Tensor& out) override;
  void softcap(Tensor& x, float cap) override;
  void gather_rows(const Tensor& src, const int32_t* rows, int k, Tensor& out) override;
  // cpu_moe.cpp
  bool supports_moe() const override { return true; }
  void moe_route(const Tensor& router_logits, const MoeRouting& routing, Tensor& topk_ids,
                 Tensor& topk_weights) override;
  void moe_experts(const Tensor& x, const Tensor& topk_ids, const Tensor& topk_weights,
                   const MoeExpertWeights& experts, Tensor& out) override;

 private:
  // The activation mode of the matmuls (MatmulPrecision).
  cpu::ActQuant act_quant() const;
  // w's panels (packed_q32.h) for a batch of n rows, if it has them and they fit a batch.
  const cpu::PackedQ32* panels_of(const Tensor& w, int64_t n) const;
  static void add_bias(const Tensor& bias, Tensor& out);

  std::unique_ptr<ThreadPool> pool_;
  MatmulPrecision precision_;
  DType kv_dtype_;
  bool calculate_kv_scales_;
  cpu::MatmulScratch scratch_;
  std::optional<DType> dense_weight_dtype_;
  bool pack_weights_;  // the matmul kernels have a packed-panel tile here (see upload_weight)
  // Packed panels of uploaded weights, each freed with its weight's owner buffer.
  std::shared_ptr<cpu::PackedWeights> packed_ = std::make_shared<cpu::PackedWeights>();
  std::vector<float> input_fp8_;  // linear: FP8-rounded inputs of W8A8 weights (grows to the largest batch)
  std::vector<float> attn_partials_;  // attention: per-unit results of split key ranges
  std::vector<int32_t> attn_pending_;  // attention: per (token, kv head), its ranges not yet done
  // mla_attention: latent queries, latent outputs, split results, units (grow to the largest
  // batch once, then are reused)
  struct MlaTask {
    int token;      // row in q / out
    int seq;        // sequence index in the metadata
    int32_t ctx;    // keys it sees: positions [0, ctx)
    int splits;     // key ranges
    int64_t unit0;  // its first unit: units unit0 + s
  };
  std::vector<float> mla_q_, mla_o_, mla_partials_;
  std::vector<MlaTask> mla_tasks_;
  // MoE: routing scratch, and the sorted rows and intermediates of a chunk of tokens (grows to the
  // largest batch's need, bounded by a fixed chunk size, then never again).
  cpu::MatmulScratch moe_scratch_;
};

}  // namespace kvasir
