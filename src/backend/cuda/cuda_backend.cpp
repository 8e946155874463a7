// CudaBackend: the Backend op table on one GPU. Ops are recorded into a StepQueue (so a step costs
// one H2D copy and, for decode, one graph launch) and executed by execute() below. Activations and
// the KV cache are bf16; norms and biases stay float32; logits are float32.
#include "backend/cuda/cuda_backend_impl.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_check.h"
#if KVASIR_HAVE_FLASHINFER
#include "backend/cuda/attention_decode_flashinfer.h"
#include "backend/cuda/attention_prefill_flashinfer.h"
#endif
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/moe_kernels.h"
#include "backend/cuda/step_queue.h"
#include "common/log.h"
#include "quant/dequantize.h"

namespace kvasir {

// Small weights are carved out of shared slabs instead of one cudaMalloc each: a MoE checkpoint
// with per-expert tensors (Qwen3-30B-A3B: 18,432 of 3 MiB) would otherwise pay the allocator's
// 2 MiB rounding on every one (+1 MiB each, ~18 GiB) and a cudaMalloc per tensor at load.
struct WeightSlab {
  void* base = nullptr;
  size_t cap = 0, used = 0;
  ~WeightSlab() { cudaFree(base); }
};

namespace {

class CudaBuffer final : public Buffer {
 public:
  CudaBuffer(void* p, size_t n) : p_(p), n_(n) {}
  ~CudaBuffer() override { cudaFree(p_); }
  void* data() override { return p_; }
  size_t size() const override { return n_; }

 private:
  void* p_;
  size_t n_;
};

class SlabBuffer final : public Buffer {
 public:
  SlabBuffer(std::shared_ptr<WeightSlab> slab, void* p, size_t n) : slab_(std::move(slab)), p_(p), n_(n) {}
  void* data() override { return p_; }
  size_t size() const override { return n_; }

 private:
  std::shared_ptr<WeightSlab> slab_;  // the slab lives while any weight carved from it does
  void* p_;
  size_t n_;
};

constexpr size_t kSlabBytes = size_t{256} << 20;
constexpr size_t kSlabMaxWeight = size_t{16} << 20;  // larger weights get their own allocation

struct CudaFree {
  void operator()(void* p) const { cudaFree(p); }
};

constexpr size_t kGemmWorkspace = size_t{32} << 20;
constexpr int64_t kConvertChunk = int64_t{1} << 25;  // elements per staging chunk during uploads

}  // namespace

CudaBackend::~CudaBackend() {
  cudaSetDevice(opts_.device);
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  queue_.reset();
  for (void* p : retired_) cudaFree(p);
  if (partial_ != nullptr) cudaFree(partial_);
  if (moe_scratch_ != nullptr) cudaFree(moe_scratch_);
  if (fp8_act_ != nullptr) cudaFree(fp8_act_);
  if (gguf_w_bf16_ != nullptr) cudaFree(gguf_w_bf16_);
  if (gguf_out_tmp_ != nullptr) cudaFree(gguf_out_tmp_);
  if (gguf_partial_ != nullptr) cudaFree(gguf_partial_);
  if (w4a16_perm_ != nullptr) cudaFree(w4a16_perm_);
  if (w4a16_ws_ != nullptr) cudaFree(w4a16_ws_);
  for (auto& [views, t] : moe_tables_) cudaFree(t.table);
  if (tokens_dev_ != nullptr) cudaFree(tokens_dev_);
  if (tokens_host_ != nullptr) cudaFreeHost(tokens_host_);
  if (async_.tokens_dev != nullptr) cudaFree(async_.tokens_dev);
  for (int32_t* h : async_.host) {
    if (h != nullptr) cudaFreeHost(h);
  }
  if (gathered_ != nullptr) cudaFree(gathered_);
  comm_.reset();
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

Status CudaBackend::init() {
  const DType kv = opts_.kv_cache_dtype;
  if (kv != DType::kBF16 && kv != DType::kF8E4M3 && kv != DType::kF8E5M2) {
    return invalid_argument("the CUDA backend keeps its KV cache in bfloat16 or FP8 (e4m3, e5m2), not " +
                            std::string(dtype_name(kv)));
  }
  KVASIR_CUDA_RETURN_IF_ERROR(cudaSetDevice(opts_.device));
  cudaDeviceProp prop{};
  KVASIR_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, opts_.device));
  num_sms_ = prop.multiProcessorCount;
  // Every tuning knob, read here once (the kernel knobs once per process) and logged.
  tuning_.recording = cuda::read_cuda_tuning().recording;
  tuning_.kernels = cuda::kernel_tuning();
  fuse_ = tuning_.recording.fuse;
  fuse_norm_ = tuning_.recording.fuse_norm;
  KVASIR_LOG_INFO("CUDA tuning: %s", cuda::describe(tuning_).c_str());
  name_ = std::string("cuda(") + prop.name + ", sm_" + std::to_string(prop.major) + std::to_string(prop.minor) +
          (opts_.enable_graphs ? ", graphs" : ", eager") + ")";
  KVASIR_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  KVASIR_RETURN_IF_ERROR(gemm_.init(kGemmWorkspace));
  cuda::init_attention_kernels();
  // FlashInfer's prefill kernel is sm_90a machine code only (wgmma, setmaxnreg): a 9.0 device.
  const bool flashinfer_wanted = tuning_.recording.prefill_attention == cuda::PrefillAttentionKernel::kFlashInfer;
#if KVASIR_HAVE_FLASHINFER
  flashinfer_prefill_ = flashinfer_wanted && prop.major == 9 && prop.minor == 0;
  if (flashinfer_prefill_) cuda::init_flashinfer_prefill_kernels();
  KVASIR_LOG_INFO("CUDA prefill attention: %s",
                  flashinfer_prefill_ ? "FlashInfer SM90 (own kernel where it cannot)"
                  : flashinfer_wanted ? "own kernel (FlashInfer's needs an sm_90 device)"
                                      : "own kernel (KVASIR_CUDA_PREFILL=own)");
#else
  KVASIR_LOG_INFO("CUDA prefill attention: own kernel%s", flashinfer_wanted ? " (built without FlashInfer)" : "");
#endif
  // FlashInfer's decode kernel is built into the same sm_90a library.
  const bool fi_decode_wanted = tuning_.recording.decode_attention == cuda::DecodeAttentionPath::kFlashInfer;
#if KVASIR_HAVE_FLASHINFER
  flashinfer_decode_ = fi_decode_wanted && prop.major == 9 && prop.minor == 0;
  if (flashinfer_decode_) cuda::init_flashinfer_decode_kernels();
  KVASIR_LOG_INFO("CUDA decode attention: %s",
                  flashinfer_decode_ ? "FlashInfer split-KV up to KVASIR_CUDA_DECODE_FI_MAX_SEQS sequences (own kernels beyond and where it cannot)"
                  : fi_decode_wanted ? "own kernels (FlashInfer's needs an sm_90 device)"
                                     : "own kernels (KVASIR_CUDA_DECODE=own)");
#else
  KVASIR_LOG_INFO("CUDA decode attention: own kernels%s", fi_decode_wanted ? " (built without FlashInfer)" : "");
#endif
  cuda::init_gemv_kernels();
  cuda::init_moe_kernels();
  KVASIR_CUDA_RETURN_IF_ERROR(cudaMallocHost(reinterpret_cast<void**>(&tokens_host_), 65536 * sizeof(int32_t)));
  KVASIR_CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void**>(&async_.tokens_dev), kMaxSampleRows * sizeof(int32_t)));
  for (int32_t*& h : async_.host) {
    KVASIR_CUDA_RETURN_IF_ERROR(cudaMallocHost(reinterpret_cast<void**>(&h), kMaxSampleRows * sizeof(int32_t)));
  }
  queue_ = std::make_unique<cuda::StepQueue>(stream_, &CudaBackend::execute_op, this, opts_.enable_graphs, opts_.max_graphs,
                                               tuning_.recording.profile);
  if (opts_.tp_size > 1 || opts_.device_collectives) {
    dist::DeviceCommunicatorOptions dc;
    dc.rank = opts_.tp_rank;
    dc.world_size = opts_.tp_size;
    dc.device = opts_.device;
    dc.custom_all_reduce = opts_.tp_on_one_host;
    KVASIR_ASSIGN_OR_RETURN(comm_, dist::DeviceCommunicator::create(dc, opts_.tp_bootstrap));
    KVASIR_CUDA_RETURN_IF_ERROR(cudaSetDevice(opts_.device));
    name_ += ", tensor-parallel rank " + std::to_string(opts_.tp_rank) + " of " + std::to_string(opts_.tp_size) +
             (comm_->has_custom_all_reduce() ? " (custom all-reduce + NCCL)" : " (NCCL)");
  }
  return Status();
}

StatusOr<std::unique_ptr<Buffer>> CudaBackend::allocate(size_t bytes) {
  bind_device();
  void* p = nullptr;
  const size_t n = std::max<size_t>(bytes, 256);
  const cudaError_t err = cudaMalloc(&p, n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return resource_exhausted("cudaMalloc of " + std::to_string(bytes) + " bytes failed: " + cudaGetErrorString(err));
  }
  // Zeroed once so no kernel ever meets uninitialised bits (padding rows read block 0).
  KVASIR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p, 0, n, stream_));
  return std::unique_ptr<Buffer>(new CudaBuffer(p, bytes));
}

Status CudaBackend::upload_matrix(const Tensor& host, void* dst) {
  const int64_t n = host.numel(), cols = host.cols();
  if (host.dtype == DType::kBF16) {
    KVASIR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, host.data, static_cast<size_t>(n) * 2, cudaMemcpyHostToDevice, stream_));
    return Status();
  }
  if (host.dtype != DType::kF32 && host.dtype != DType::kF16 && !quant::dequantize_supported(host.dtype)) {
    return unimplemented("CUDA backend cannot convert weights of type " + std::string(dtype_name(host.dtype)));
  }
  // Row chunks through a float32 (or f16) device staging buffer, converted to bf16 on the device.
  const int64_t rows = host.rows();
  const int64_t chunk_rows = std::max<int64_t>(1, kConvertChunk / std::max<int64_t>(cols, 1));
  void* stage = nullptr;
  KVASIR_CUDA_RETURN_IF_ERROR(cudaMalloc(&stage, static_cast<size_t>(std::min(rows, chunk_rows) * cols) * 4));
  std::unique_ptr<void, CudaFree> stage_owner(stage);
  std::vector<float> host_f32;
  const size_t rb = host.row_bytes();
  for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
    const int64_t nr = std::min(chunk_rows, rows - r0);
    const int64_t ne = nr * cols;
    const auto* src = static_cast<const uint8_t*>(host.data) + static_cast<size_t>(r0) * rb;
    if (host.dtype == DType::kF16) {
      KVASIR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(stage, src, static_cast<size_t>(ne) * 2, cudaMemcpyHostToDevice, stream_));
      cuda::launch_f16_to_bf16(stage, static_cast<uint16_t*>(dst) + r0 * cols, ne, stream_);
    } else {
      const float* f = reinterpret_cast<const float*>(src);
      if (host.dtype != DType::kF32) {
        host_f32.resize(static_cast<size_t>(ne));
        for (int64_t r = 0; r < nr; ++r) {
          quant::dequantize_row(host.dtype, src + static_cast<size_t>(r) * rb, host_f32.data() + r * cols, cols);
        }
        f = host_f32.data();
      }
      KVASIR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(stage, f, static_cast<size_t>(ne) * 4, cudaMemcpyHostToDevice, stream_));
      cuda::launch_f32_to_bf16(static_cast<const float*>(stage), static_cast<uint16_t*>(dst) + r0 * cols, ne, stream_);
    }
    KVASIR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  }
  return Status();
}

StatusOr<std::unique_ptr<Buffer>> CudaBackend::allocate_weight(size_t bytes) {
  bind_device();
  if (bytes > kSlabMaxWeight) return allocate(bytes);
  const size_t aligned = (bytes + 255) / 256 * 256;
  if (weight_slab_ == nullptr || weight_slab_->used + aligned > weight_slab_->cap) {
    auto slab = std::make_shared<WeightSlab>();
    const cudaError_t err = cudaMalloc(&slab->base, kSlabBytes);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return resource_exhausted("cudaMalloc of a " + std::to_string(kSlabBytes >> 20) + " MiB weight slab failed: " +
                                cudaGetErrorString(err));
    }
    slab->cap = kSlabBytes;
    KVASIR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(slab->base, 0, kSlabBytes, stream_));
    weight_slab_ = std::move(slab);
  }
  void* p = static_cast<uint8_t*>(weight_slab_->base) + weight_slab_->used;
  weight_slab_->used += aligned;
  return std::unique_ptr<Buffer>(new SlabBuffer(weight_slab_, p, bytes));
}

StatusOr<Tensor> CudaBackend::upload_weight(const Tensor& host, std::unique_ptr<Buffer>* owner) {
  bind_device();
  synchronize();
  if (keeps_fp8(host)) return upload_fp8_weight(host, owner);
  // Integer checkpoints come as GGML blocks where those hold their values exactly, with the packed
  // form alongside: the W4A16 kernels take it before the GGUF-block path would take the blocks.
  KVASIR_ASSIGN_OR_RETURN(const bool int4, keeps_int4(host));
  if (int4) return upload_int4_weight(host, owner);
  if (keeps_gguf(host)) return upload_gguf_weight(host, owner);
  const bool matrix = host.ndim >= 2;
  const DType dt = matrix ? DType::kBF16 : DType::kF32;
  const int64_t n = host.numel();
  KVASIR_ASSIGN_OR_RETURN(auto buf, allocate_weight(static_cast<size_t>(n) * (matrix ? 2 : 4)));
  Tensor t = host;
  t.data = buf->data();
  t.dtype = dt;
  t.device = Device::kCuda;
  if (host.data == nullptr) {
    // Dummy weights: uniform in [-1/sqrt(cols), 1/sqrt(cols)] keeps activations O(1) layer to layer.
    const float scale = matrix ? 1.0f / std::sqrt(static_cast<float>(std::max<int64_t>(host.cols(), 1))) : 1.0f;
    cuda::launch_fill_random(t.data, n, matrix ? Elem::kBf16 : Elem::kF32, dummy_seed_++, scale, stream_);
    KVASIR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  } else if (matrix) {
    KVASIR_RETURN_IF_ERROR(upload_matrix(host, t.data));
  } else if (host.dtype == DType::kF32) {
    KVASIR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(t.data, host.data, static_cast<size_t>(n) * 4, cudaMemcpyHostToDevice, stream_));
  } else {
    if (!quant::dequantize_supported(host.dtype)) return unimplemented("CUDA backend: unsupported vector weight type");
    std::vector<float> f(static_cast<size_t>(n));
    quant::dequantize_row(host.dtype, host.data, f.data(), n);
    KVASIR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(t.data, f.data(), f.size() * 4, cudaMemcpyHostToDevice, stream_));
  }
  // The source may be a temporary of the caller's: the copies must be done before we return.
  KVASIR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  *owner = std::move(buf);
  return t;
}

void CudaBackend::copy_to_host(const Tensor& src, void* dst) {
  bind_device();
  queue_->flush();
  // Straight into the caller's (pageable) memory: measured faster than a pinned bounce buffer plus
  // a host memcpy for the logits sizes we read back.
  KVASIR_CUDA_CHECK(cudaMemcpyAsync(dst, src.data, src.nbytes(), cudaMemcpyDeviceToHost, stream_));
  queue_->finish();
  for (void* p : retired_) cudaFree(p);
  retired_.clear();
}

void CudaBackend::submit() {
  bind_device();
  queue_->submit();
}

void CudaBackend::synchronize() {
  bind_device();
  queue_->flush();
  queue_->finish();
  for (void* p : retired_) cudaFree(p);
  retired_.clear();
}

void* CudaBackend::device_scratch(void*& ptr, size_t& cap, size_t bytes) {
  bind_device();
  if (bytes > cap) {
    if (ptr != nullptr) retired_.push_back(ptr);
    const size_t n = std::max(bytes, cap * 2);
    KVASIR_CUDA_CHECK(cudaMalloc(&ptr, n));
    cap = n;
  }
  return ptr;
}

BackendCapabilities CudaBackend::capabilities() const {
  BackendCapabilities c;
  c.activation_dtype = activation_dtype();
  c.kv_cache_dtype = kv_cache_dtype();
  c.device_sampling = supports_device_sampling();
  c.device_token_bitmask = supports_device_token_bitmask();
  c.sampled_token_feedback = supports_sampled_token_feedback();
  // Decode batches are bucketed even under --enforce-eager (as before the capabilities query):
  // the same padded shapes keep eager and graph runs computing the same batches.
  c.decode_batch_buckets = true;
  // Every batch size up to 8 its own graph: the GEMVs take 1-8 rows natively, so padding 5 rows
  // (a batch-1 verify of 4 drafts) to 8 only adds work.
  c.exact_decode_buckets_up_to = tuning_.kernels.exact_decode_buckets;
  c.graph_replay = opts_.enable_graphs;
  c.max_graphs = opts_.max_graphs;
  return c;
}

DeviceMemoryInfo CudaBackend::memory_info() {
  bind_device();
  DeviceMemoryInfo info;
  KVASIR_CUDA_CHECK(cudaMemGetInfo(&info.free_bytes, &info.total_bytes));
  return info;
}

std::string CudaBackend::stats() const {
  const cuda::StepStats& s = queue_->stats();
  char buf[512];
  const double busy = s.busy_ms, idle = s.idle_ms;
  const double gb = s.graph_busy_ms, gi = s.graph_idle_ms;
  std::snprintf(buf, sizeof(buf),
                "device steps %lld (graph replays %lld, captures %lld): busy %.1f ms, idle between steps %.1f ms "
                "(%.2f%%); decode graph steps: busy %.1f ms, idle %.1f ms (%.2f%%)",
                static_cast<long long>(s.steps), static_cast<long long>(s.graph_steps),
                static_cast<long long>(s.captures), busy, idle, busy + idle > 0 ? 100.0 * idle / (busy + idle) : 0.0, gb,
                gi, gb + gi > 0 ? 100.0 * gi / (gb + gi) : 0.0);
  std::string out(buf);
  if (fp8_weights_ > 0) {
    std::snprintf(buf, sizeof(buf), "; FP8 weights %lld (%.1f MiB)", static_cast<long long>(fp8_weights_),
                  static_cast<double>(fp8_weight_bytes_) / (1 << 20));
    out += buf;
  }
  if (gguf_weights_ > 0) {
    std::snprintf(buf, sizeof(buf), "; GGUF block weights %lld (%.1f MiB)", static_cast<long long>(gguf_weights_),
                  static_cast<double>(gguf_weight_bytes_) / (1 << 20));
    out += buf;
  }
  if (int4_weights_ > 0) {
    std::snprintf(buf, sizeof(buf), "; W4A16 weights %lld (%.1f MiB)", static_cast<long long>(int4_weights_),
                  static_cast<double>(int4_weight_bytes_) / (1 << 20));
    out += buf;
  }
  char prefill[320];
  std::snprintf(prefill, sizeof(prefill),
                "\nprefill attention calls: flashinfer %lld, own %lld (host plans made %lld)"
                "\ndecode attention calls: flashinfer %lld, own %lld (host plans made %lld)",
                static_cast<long long>(prefill_calls_flashinfer_), static_cast<long long>(prefill_calls_own_),
                static_cast<long long>(flashinfer_plans_.plans_made()), static_cast<long long>(decode_calls_flashinfer_),
                static_cast<long long>(decode_calls_own_), static_cast<long long>(flashinfer_decode_plans_.plans_made()));
  const std::string prof = queue_->profile_report();
  return out + prefill + (prof.empty() ? "" : "\n" + prof);
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

StatusOr<std::unique_ptr<Backend>> create_cuda_backend(const CudaBackendOptions& opts) {
  const int devices = cuda_device_count();
  if (opts.tp_size > 1 && devices < opts.tp_size)
    return invalid_argument("--tensor-parallel-size " + std::to_string(opts.tp_size) + " on the CUDA backend needs " +
                            std::to_string(opts.tp_size) + " GPUs (one per rank); this machine has " +
                            std::to_string(devices));
  if (devices <= opts.device) return unavailable("no CUDA device " + std::to_string(opts.device));
  auto b = std::make_unique<CudaBackend>(opts);
  KVASIR_RETURN_IF_ERROR(b->init());
  return std::unique_ptr<Backend>(std::move(b));
}

}  // namespace kvasir
