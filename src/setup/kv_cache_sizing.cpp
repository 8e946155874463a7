#include "setup/kv_cache_sizing.h"

#include <algorithm>
#include <string>
#include <vector>

#include "common/log.h"
#include "runner/contiguous_batch.h"
#include "setup/loaded_model.h"

namespace kvasir {

int resolve_max_model_len(const EngineArgs& args, const ModelConfig& config) {
  if (args.max_model_len) return *args.max_model_len;
  if (config.max_position_embeddings > kMaxModelLenLimit) {
    KVASIR_LOG_INFO("max_model_len capped from the model's %lld to %d (the largest --max-model-len accepts)",
                    static_cast<long long>(config.max_position_embeddings), kMaxModelLenLimit);
    return kMaxModelLenLimit;
  }
  return static_cast<int>(config.max_position_embeddings);
}

int64_t kv_cache_capacity_tokens(int num_kv_blocks, int block_size) {
  KVASIR_CHECK(num_kv_blocks >= 2 && block_size >= 1);
  return static_cast<int64_t>(num_kv_blocks - 1) * block_size;
}

StatusOr<int> fit_max_model_len_to_kv_cache(const EngineArgs& args, int max_model_len, int num_kv_blocks) {
  const int64_t capacity = kv_cache_capacity_tokens(num_kv_blocks, args.block_size);
  if (max_model_len <= capacity) return max_model_len;
  const std::string cache =
      std::to_string(num_kv_blocks - 1) + " usable blocks of " + std::to_string(args.block_size) + " tokens";
  if (args.max_model_len) {
    return invalid_argument("max_model_len " + std::to_string(max_model_len) +
                            " is larger than the maximum number of tokens that can be stored in KV cache (" +
                            std::to_string(capacity) + "; " + cache +
                            "): raise --kv-cache-memory (on a GPU: --gpu-memory-utilization) or lower --max-model-len");
  }
  KVASIR_LOG_INFO("max_model_len capped from %d to %lld, the tokens the KV cache holds (%s); raise --kv-cache-memory "
                  "(on a GPU: --gpu-memory-utilization) for longer sequences",
                  max_model_len, static_cast<long long>(capacity), cache.c_str());
  return static_cast<int>(capacity);
}

StatusOr<int> num_kv_blocks_for_budget(int64_t kv_bytes, int64_t bytes_per_block) {
  KVASIR_CHECK(bytes_per_block > 0);
  const int64_t num_blocks = kv_bytes / bytes_per_block;
  if (num_blocks < 2) {
    return invalid_argument("the KV cache budget of " + std::to_string(kv_bytes) + " bytes holds fewer than 2 blocks of " +
                            std::to_string(bytes_per_block) + " bytes");
  }
  return static_cast<int>(std::min<int64_t>(num_blocks, 1 << 24));
}

StatusOr<int64_t> device_kv_cache_bytes(LoadedModel& lm, const EngineArgs& args) {
  constexpr int64_t kHeadroom = int64_t{1} << 30;
  DecoderModel& model = *lm.model;
  const int T = args.max_num_batched_tokens, bs = args.block_size;
  const int blocks = (T + bs - 1) / bs + 1;
  KVASIR_ASSIGN_OR_RETURN(KvCache tmp, model.allocate_kv_cache(blocks, bs));
  const int64_t tmp_bytes = static_cast<int64_t>(model.kv_cache_bytes_per_block(bs)) * blocks;
  ContiguousBatch cb(1, T, bs);
  std::vector<std::vector<int32_t>> toks(1, std::vector<int32_t>(static_cast<size_t>(T), 0));
  KVASIR_RETURN_IF_ERROR(model.run_layers(cb.build(toks), tmp));
  const int n = std::min(model.max_num_logits(), T);
  std::vector<int32_t> rows(static_cast<size_t>(n), T - 1);
  KVASIR_ASSIGN_OR_RETURN(Tensor logits, model.compute_logits_on_device(rows.data(), n));
  (void)logits;
  lm.backend->synchronize();
  const DeviceMemoryInfo mi = lm.backend->memory_info();
  // The profile's own KV blocks are freed with `tmp`: they do not count as activation memory.
  const int64_t used = static_cast<int64_t>(mi.total_bytes - mi.free_bytes) - tmp_bytes;
  const int64_t budget = static_cast<int64_t>(args.gpu_memory_utilization * static_cast<double>(mi.total_bytes));
  KVASIR_LOG_INFO("profile forward (%d tokens): %.2f GiB in use of %.2f GiB; KV cache gets %.2f GiB", T,
                  static_cast<double>(used) / (1 << 30), static_cast<double>(mi.total_bytes) / (1 << 30),
                  static_cast<double>(budget - used - kHeadroom) / (1 << 30));
  if (budget - used - kHeadroom <= 0) {
    return resource_exhausted("no GPU memory left for the KV cache under --gpu-memory-utilization");
  }
  return budget - used - kHeadroom;
}

StatusOr<int> plan_num_kv_blocks(LoadedModel& lm, const EngineArgs& args, const CompanionKv& companion) {
  const auto per_block = static_cast<int64_t>(lm.model->kv_cache_bytes_per_block(args.block_size));
  int64_t kv_bytes = args.kv_cache_memory, budget_per_block = per_block;
  if (lm.backend->device() != Device::kCpu) {
    KVASIR_ASSIGN_OR_RETURN(kv_bytes, device_kv_cache_bytes(lm, args));
    if (companion.bytes_per_block > 0 || companion.fixed_bytes > 0) {
      KVASIR_LOG_INFO("KV budget %.2f GiB shared with the draft's cache (%lld bytes per block beside the target's %lld, "
                      "%.1f MiB fixed)", static_cast<double>(kv_bytes) / (1 << 30),
                      static_cast<long long>(companion.bytes_per_block), static_cast<long long>(per_block),
                      static_cast<double>(companion.fixed_bytes) / (1 << 20));
    }
    kv_bytes -= companion.fixed_bytes;
    budget_per_block += companion.bytes_per_block;
  }
  KVASIR_ASSIGN_OR_RETURN(const int blocks, num_kv_blocks_for_budget(kv_bytes, budget_per_block));
  // vLLM's "KV cache size: N tokens" line: what --kv-cache-dtype buys (fp8 holds twice bf16's).
  KVASIR_LOG_INFO("KV cache size: %lld tokens (%d blocks of %d, %s, %lld bytes per token over all layers)",
                  static_cast<long long>(kv_cache_capacity_tokens(blocks, args.block_size)), blocks, args.block_size,
                  std::string(dtype_name(lm.backend->kv_cache_dtype())).c_str(),
                  static_cast<long long>(per_block / args.block_size));
  return blocks;
}

}  // namespace kvasir
