#include "setup/engine_args.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>

#include "common/json.h"
#include "quant/quantization_config.h"

namespace kvasir {

Status EngineArgs::validate() const {
  if (max_num_seqs < 1 || max_num_seqs > 65536) return invalid_argument("--max-num-seqs must be in [1, 65536]");
  if (max_num_batched_tokens < 1) return invalid_argument("--max-num-batched-tokens must be >= 1");
  if (block_size < 1 || block_size > 1024 || (block_size & (block_size - 1)) != 0) {
    return invalid_argument("--block-size must be a power of two in [1, 1024]");
  }
  if (kv_cache_memory < 1) return invalid_argument("--kv-cache-memory must be positive");
  if (max_model_len && (*max_model_len < 1 || *max_model_len > kMaxModelLenLimit)) {
    return invalid_argument("--max-model-len must be in [1, " + std::to_string(kMaxModelLenLimit) + "]");
  }
  if (num_threads < 0) return invalid_argument("--threads must be >= 0");
  if (tensor_parallel_size < 1 || tensor_parallel_size > 64) {
    return invalid_argument("--tensor-parallel-size must be in [1, 64]");
  }
  if (pipeline_parallel_size < 1 || tensor_parallel_size * pipeline_parallel_size > 64) {
    return invalid_argument("--pipeline-parallel-size must be at least 1, and tensor x pipeline parallel size at most 64");
  }
  KVASIR_RETURN_IF_ERROR(launch.validate(parallel_layout().world_size()));
  const std::string& backend = distributed_executor_backend;
  if (backend == "ray" || backend == "external_launcher") {
    return unimplemented("--distributed-executor-backend " + backend +
                         " is not supported; use mp (every model rank in a worker process) or uni (TP 1, in this "
                         "process)");
  }
  if (!backend.empty() && backend != "mp" && backend != "uni") {
    return invalid_argument("--distributed-executor-backend must be mp or uni (vLLM's ray and external_launcher are "
                            "not supported), not '" + backend + "'");
  }
  if (backend == "uni" && tensor_parallel_size > 1) {
    return invalid_argument("--distributed-executor-backend uni runs the model in this one process: it needs "
                            "--tensor-parallel-size 1 (got " + std::to_string(tensor_parallel_size) + "); use mp");
  }
  if (backend == "mp" && pipeline_parallel_size > 1) {
    return unimplemented("--distributed-executor-backend mp with --pipeline-parallel-size > 1 is not supported yet");
  }
  if (data_parallel_size < 1 || data_parallel_size > 64) {
    return invalid_argument("--data-parallel-size must be in [1, 64]");
  }
  KVASIR_RETURN_IF_ERROR(data_parallel.validate(data_parallel_size, launch.headless));
  if (data_parallel_size > 1 && tensor_parallel_size > 1) {
    // Replicas live in one process; a tensor-parallel rank 0 re-runs the command line as its
    // workers, one group per process. D groups of TP ranks would need a launcher of their own.
    return unimplemented("--data-parallel-size with --tensor-parallel-size > 1 is not supported yet: data-parallel "
                         "replicas are engines in one process and each would need its own tensor-parallel group");
  }
  if (data_parallel_size > 1 && device == "cuda") {
    return unimplemented("--data-parallel-size > 1 runs on the CPU backend only (one device per replica is not built)");
  }
  if (data_parallel_size > 1 && (pipeline_parallel_size > 1 || distributed_executor_backend == "mp" || launch.nnodes > 1)) {
    return unimplemented("--data-parallel-size > 1 with --pipeline-parallel-size, --distributed-executor-backend mp or "
                         "--nnodes is not supported yet: data-parallel replicas are engines in this one process");
  }
  if (max_logprobs < 0) return invalid_argument("--max-logprobs must be >= 0");
  if (load_format != "auto" && load_format != "dummy") return invalid_argument("--load-format must be auto or dummy");
  if (!(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0)) {
    return invalid_argument("--gpu-memory-utilization must be in (0, 1]");
  }
  KVASIR_RETURN_IF_ERROR(parse_kv_cache_dtype(kv_cache_dtype).status());
  KVASIR_RETURN_IF_ERROR(parse_dtype(dtype).status());
  KVASIR_RETURN_IF_ERROR(quant::quantization_flag_method(quantization).status());
  if (scheduling_policy != "fcfs" && scheduling_policy != "priority") {
    return invalid_argument("--scheduling-policy must be fcfs or priority");
  }
  // draft_model is built and tested for one rank in the serving process; in a group or in the
  // multiprocess executor's workers it has never run.
  // The same for eagle and eagle3, whose heads also read the target's unsharded hidden states.
  const bool runs_a_model =
      speculative.method == "draft_model" || speculative.method == "eagle" || speculative.method == "eagle3";
  if (runs_a_model && tensor_parallel_size > 1) {
    return invalid_argument("--speculative-config method \"" + speculative.method +
                            "\" with --tensor-parallel-size > 1 is not supported yet");
  }
  if (runs_a_model && (pipeline_parallel_size > 1 || distributed_executor_backend == "mp")) {
    return invalid_argument("--speculative-config method \"" + speculative.method +
                            "\" with --pipeline-parallel-size > 1 or --distributed-executor-backend mp is not supported yet");
  }
  if (speculative.enabled() && async_scheduling.value_or(false)) {
    return invalid_argument("--speculative-config with --async-scheduling is not supported yet");
  }
  return Status();
}

int default_max_num_batched_tokens(bool on_gpu) { return on_gpu ? 2048 : 512; }

bool EngineArgs::async_scheduling_on(bool model_on_gpu) const {
  if (async_scheduling.has_value()) return *async_scheduling;
  return model_on_gpu && !speculative.enabled();
}

StatusOr<StructuredOutputsConfig> parse_structured_outputs_config(const std::string& text) {
  auto j = parse_json(text);
  if (!j.ok() || !j->is_object()) return invalid_argument("--structured-outputs-config must be a JSON object");
  StructuredOutputsConfig c;
  for (const auto& [key_, v_] : j->as_object()) {
    // Named copies of the bindings: clang before 16 cannot capture structured bindings.
    const std::string& key = key_;
    const Json& v = v_;
    auto flag = [&](bool* out) -> Status {
      if (!v.is_bool()) return invalid_argument("--structured-outputs-config: '" + key + "' must be true or false");
      *out = v.as_bool();
      return Status();
    };
    if (key == "backend") {
      if (!v.is_string() || (v.as_string() != "xgrammar" && v.as_string() != "auto")) {
        return invalid_argument("--structured-outputs-config: backend must be \"xgrammar\" or \"auto\" (the one grammar backend here)");
      }
    } else if (key == "disable_fallback") {
      bool unused = false;
      KVASIR_RETURN_IF_ERROR(flag(&unused));  // no fallback backend exists to disable
    } else if (key == "disable_any_whitespace") {
      KVASIR_RETURN_IF_ERROR(flag(&c.disable_any_whitespace));
    } else if (key == "disable_additional_properties") {
      bool closed = true;
      KVASIR_RETURN_IF_ERROR(flag(&closed));
      if (!closed) {
        return invalid_argument("--structured-outputs-config: disable_additional_properties false is not supported "
                                "(objects a schema leaves open are always closed, as in vLLM with XGrammar)");
      }
    } else if (key == "enable_in_reasoning") {
      KVASIR_RETURN_IF_ERROR(flag(&c.enable_in_reasoning));
    } else {
      return invalid_argument("--structured-outputs-config: '" + key +
                              "' is not supported (backend, disable_fallback, disable_any_whitespace, "
                              "disable_additional_properties, enable_in_reasoning)");
    }
  }
  return c;
}

StatusOr<std::optional<DType>> parse_kv_cache_dtype(const std::string& name) {
  if (name == "auto") return std::optional<DType>();
  if (name == "float16" || name == "fp16" || name == "half") return std::optional<DType>(DType::kF16);
  if (name == "float32" || name == "fp32" || name == "float") return std::optional<DType>(DType::kF32);
  if (name == "bfloat16" || name == "bf16") return std::optional<DType>(DType::kBF16);
  // vLLM's names; whether a backend keeps its cache in FP8 is its own answer (make_backend).
  if (name == "fp8" || name == "fp8_e4m3") return std::optional<DType>(DType::kF8E4M3);
  if (name == "fp8_e5m2") return std::optional<DType>(DType::kF8E5M2);
  return invalid_argument("--kv-cache-dtype must be auto, float16, float32, bfloat16, fp8, fp8_e4m3 or fp8_e5m2, got '" +
                          name + "'");
}

StatusOr<std::optional<DType>> parse_dtype(const std::string& name) {
  if (name == "auto") return std::optional<DType>();
  if (name == "float16" || name == "half") return std::optional<DType>(DType::kF16);
  if (name == "float32" || name == "float") return std::optional<DType>(DType::kF32);
  if (name == "bfloat16") return std::optional<DType>(DType::kBF16);
  return invalid_argument("--dtype must be auto, bfloat16, float16 (half) or float32 (float), got '" + name + "'");
}

StatusOr<int64_t> parse_memory_size(const std::string& text) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !std::isfinite(v) || v <= 0) return invalid_argument("invalid memory size '" + text + "'");
  std::string unit(end);
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double mult = 1;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "k" || unit == "kb") mult = 1e3;
  else if (unit == "m" || unit == "mb") mult = 1e6;
  else if (unit == "g" || unit == "gb") mult = 1e9;
  else if (unit == "kib") mult = 1024.0;
  else if (unit == "mib") mult = 1024.0 * 1024;
  else if (unit == "gib") mult = 1024.0 * 1024 * 1024;
  else return invalid_argument("unknown memory unit in '" + text + "'");
  if (v * mult > 9e18) return invalid_argument("memory size too large: " + text);
  return static_cast<int64_t>(v * mult);
}

}  // namespace kvasir
