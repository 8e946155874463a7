#include "setup/loaded_model.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>

#include "backend/cpu/cpu_backend.h"
#include "common/json.h"
#include "common/log.h"
#include "common/mapped_file.h"
#include "config/config_readers.h"
#include "loader/dummy_weights.h"
#include "loader/gguf_file.h"
#include "model/registry.h"
#include "quant/int_quantized_weight_source.h"
#include "quant/quantized_weight_source.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/hf_loader.h"
#ifdef KVASIR_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace kvasir {
namespace {

bool file_exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

std::string exe_dir() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string p(buf, static_cast<size_t>(n));
  return p.substr(0, p.find_last_of('/'));
}

// config.json and generation_config.json, each read once: the config (its eos ids from the
// generation config, which wins) and the model's sampling defaults.
Status read_hf_config_and_defaults(LoadedModel& m) {
  KVASIR_ASSIGN_OR_RETURN(HfConfigFiles files, read_hf_config_files(m.path));
  const Json* gen = files.generation_config ? &*files.generation_config : nullptr;
  auto config = model_config_from_hf_json(files.config, gen);
  if (!config.ok()) return Status(config.status().code(), m.path + ": " + config.status().message());
  m.config = std::move(config).value();
  if (const Json* q = files.config.find("quantization_config"); q != nullptr && !q->is_null()) {
    KVASIR_ASSIGN_OR_RETURN(m.quantization, quant::parse_quantization_config(*q, m.path + "/config.json: quantization_config"));
  }
  if (gen) {
    KVASIR_ASSIGN_OR_RETURN(m.generation_defaults,
                            generation_defaults_from_json(*gen, m.path + "/generation_config.json"));
  }
  return Status();
}

Status load_config_and_tokenizer(LoadedModel& m) {
  if (const GgufFile* gguf = m.weights->gguf()) {
    KVASIR_ASSIGN_OR_RETURN(m.config, model_config_from_gguf(*gguf));
    KVASIR_ASSIGN_OR_RETURN(Tokenizer tok, tokenizer_from_gguf(*gguf));
    m.tokenizer = std::make_unique<Tokenizer>(std::move(tok));
  } else {
    KVASIR_RETURN_IF_ERROR(read_hf_config_and_defaults(m));
    KVASIR_ASSIGN_OR_RETURN(Tokenizer tok, load_hf_tokenizer(m.path));
    m.tokenizer = std::make_unique<Tokenizer>(std::move(tok));
  }
  if (m.tokenizer->vocab_size() > static_cast<size_t>(m.config.vocab_size)) {
    return data_loss("tokenizer has " + std::to_string(m.tokenizer->vocab_size()) + " tokens but the model only " +
                     std::to_string(m.config.vocab_size));
  }
  if (m.tokenizer->eos_id() >= 0) m.eos_token_ids.push_back(m.tokenizer->eos_id());
  // End-of-turn tokens end generation as EOS does (llama.cpp's EOT rule): GGUF files often list
  // only the document EOS (Gemma: <eos>) while chat turns end with <end_of_turn>.
  for (const char* eot : {"<end_of_turn>", "<|eot_id|>", "<|im_end|>"}) {
    if (auto id = m.tokenizer->token_to_id(eot); id && m.tokenizer->is_special(*id)) m.config.eos_token_ids.push_back(*id);
  }
  for (int64_t id64 : m.config.eos_token_ids) {
    const auto id = static_cast<int32_t>(id64);
    if (std::find(m.eos_token_ids.begin(), m.eos_token_ids.end(), id) == m.eos_token_ids.end()) m.eos_token_ids.push_back(id);
  }
  return Status();
}

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Token i decodes to "t<i> ": enough for benchmarks on token ids, never for text.
StatusOr<std::unique_ptr<Tokenizer>> dummy_tokenizer(int64_t vocab_size) {
  tok::TokenMap vocab;
  vocab.reserve(static_cast<size_t>(vocab_size));
  for (int64_t i = 0; i < vocab_size; ++i) vocab.emplace("t" + std::to_string(i), static_cast<int32_t>(i));
  KVASIR_ASSIGN_OR_RETURN(tok::BpeModel bpe, tok::BpeModel::from_merges(std::move(vocab), {}, tok::BpeOptions{}));
  TokenizerParts parts;
  parts.model = std::move(bpe);
  KVASIR_ASSIGN_OR_RETURN(Tokenizer t, Tokenizer::create(std::move(parts)));
  return std::make_unique<Tokenizer>(std::move(t));
}

}  // namespace

std::vector<DummyTensorSpec> dummy_weight_specs(const ModelConfig& c, bool matrices_on_device) {
  // The family's weight manifest lists them (model/registry.h); `c` came through the registry.
  auto specs = dummy_weight_specs_for(c, matrices_on_device);
  KVASIR_CHECK_MSG(specs.ok(), specs.status().to_string().c_str());
  return std::move(specs).value();
}

namespace {

StatusOr<std::unique_ptr<LoadedModel>> load_dummy_config(const std::string& path) {
  auto m = std::make_unique<LoadedModel>();
  m->path = path;
  const bool dir = is_dir(path);
  const std::string file = dir ? path + "/config.json" : path;
  KVASIR_ASSIGN_OR_RETURN(std::string text, read_text_file(file, 16u << 20));
  auto json = parse_json(text);
  if (!json.ok()) return invalid_argument(file + ": not valid JSON: " + json.status().message());
  // A directory is a model's folder: its generation_config.json counts as for real weights.
  std::optional<Json> gen;
  if (dir) {
    KVASIR_ASSIGN_OR_RETURN(gen, read_generation_config(path));
  }
  KVASIR_ASSIGN_OR_RETURN(m->config, model_config_from_hf_json(*json, gen ? &*gen : nullptr));
  // Dummy weights take an integer weight-only quantization_config (GPTQ / AWQ / pack-quantized:
  // a GPU fills packed codes of that scheme); any other method is refused, not ignored.
  if (const Json* q = json->find("quantization_config"); q != nullptr && !q->is_null()) {
    KVASIR_ASSIGN_OR_RETURN(m->quantization, quant::parse_quantization_config(*q, file + ": quantization_config"));
    for (const quant::QuantScheme& s : m->quantization->schemes) {
      if (!quant::is_int_weight_format(s.format)) {
        return unimplemented(file + ": --load-format dummy takes integer weight-only quantization_configs (gptq, awq, "
                             "compressed-tensors pack-quantized), not format '" + s.format +
                             "' (for FP8 dummies use --quantization fp8 on an unquantized config)");
      }
    }
  }
  if (gen) {
    KVASIR_ASSIGN_OR_RETURN(m->generation_defaults, generation_defaults_from_json(*gen, path + "/generation_config.json"));
  }
  KVASIR_ASSIGN_OR_RETURN(m->tokenizer, dummy_tokenizer(m->config.vocab_size));
  for (int64_t id : m->config.eos_token_ids) m->eos_token_ids.push_back(static_cast<int32_t>(id));
  return m;
}

// vLLM accepts --calculate-kv-scales and does nothing without an FP8 cache: a flag with no effect
// is refused, on either backend.
Status calculate_kv_scales_without_fp8_cache() {
  return invalid_argument("--calculate-kv-scales needs an FP8 KV cache (--kv-cache-dtype fp8, fp8_e4m3 or fp8_e5m2)");
}

StatusOr<std::unique_ptr<Backend>> make_backend(const LoadOptions& opts) {
  if (opts.device != "auto" && opts.device != "cpu" && opts.device != "cuda") {
    return invalid_argument("unknown --device " + opts.device);
  }
  KVASIR_ASSIGN_OR_RETURN(const std::optional<DType> kv_dtype, parse_kv_cache_dtype(opts.kv_cache_dtype));
  KVASIR_ASSIGN_OR_RETURN(const std::optional<DType> dtype, parse_dtype(opts.dtype));
#ifdef KVASIR_HAVE_CUDA
  if (device_flag_selects_gpu(opts.device)) {
    const bool fp8_kv = kv_dtype && is_fp8(*kv_dtype);
    if (kv_dtype && *kv_dtype != DType::kBF16 && !fp8_kv) {
      return invalid_argument("--kv-cache-dtype " + opts.kv_cache_dtype +
                              ": the CUDA backend keeps K/V in bfloat16 or FP8 (auto, fp8, fp8_e4m3, fp8_e5m2)");
    }
    if (dtype && *dtype != DType::kBF16) {
      return invalid_argument("--dtype " + opts.dtype + ": the CUDA backend computes in bfloat16 (use auto or bfloat16)");
    }
    if (opts.calculate_kv_scales && !fp8_kv) return calculate_kv_scales_without_fp8_cache();
    CudaBackendOptions co;
    co.enable_graphs = !opts.enforce_eager;
    // Tensor parallelism: a rank drives the GPU of its local rank on its host and sums over the
    // group's device communicator (the rank's CPU communicator bootstraps it).
    co.tp_rank = opts.model.tp.rank;
    co.tp_size = opts.model.tp.size;
    co.tp_bootstrap = opts.model.tp.comm;
    co.tp_on_one_host = opts.tp_on_one_host;
    co.kv_cache_dtype = kv_dtype.value_or(DType::kBF16);
    co.calculate_kv_scales = opts.calculate_kv_scales;
    KVASIR_ASSIGN_OR_RETURN(co.device, gpu_for_rank(opts.placement, cuda_device_count()));
    co.device_collectives = opts.device_collectives;
    return create_cuda_backend(co);
  }
#else
  if (opts.device == "cuda") return unimplemented("this build has no CUDA backend");
#endif
  if (opts.device_collectives) return invalid_argument("device collectives need the CUDA backend");
  CpuBackendOptions bo;
  bo.num_threads = opts.num_threads;
  bo.precision = opts.exact_matmul ? MatmulPrecision::kExact : MatmulPrecision::kFast;
  if (kv_dtype && *kv_dtype == DType::kBF16) {
    return invalid_argument("--kv-cache-dtype " + opts.kv_cache_dtype +
                            ": the CPU backend keeps K/V in float32, float16 or FP8 (fp8, fp8_e4m3, fp8_e5m2)");
  }
  bo.kv_cache_dtype = kv_dtype.value_or(DType::kF32);
  bo.dense_weight_dtype = dtype;
  if (opts.calculate_kv_scales && !is_fp8(bo.kv_cache_dtype)) return calculate_kv_scales_without_fp8_cache();
  bo.calculate_kv_scales = opts.calculate_kv_scales;
  return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(bo));
}

}  // namespace

std::string default_model_path() {
  if (const char* m = std::getenv("KVASIR_MODEL"); m && *m) return m;
  const std::string name = "SmolLM2-135M-Instruct.Q4_1.gguf";
  std::vector<std::string> dirs;
  if (const char* d = std::getenv("KVASIR_MODELS_DIR"); d && *d) dirs.push_back(d);
  dirs.push_back("models");
  const std::string exe = exe_dir();
  dirs.push_back(exe + "/../models");
  dirs.push_back(exe + "/../../models");
  for (const auto& d : dirs) {
    if (file_exists(d + "/" + name)) return d + "/" + name;
  }
  return "models/" + name;
}

LoadOptions LoadOptions::from(const EngineArgs& args) {
  LoadOptions lo;
  lo.device = args.device;
  lo.num_threads = args.num_threads;
  lo.exact_matmul = args.exact_matmul;
  lo.load_format = args.load_format;
  lo.tokenizer = args.tokenizer;
  lo.enforce_eager = args.enforce_eager;
  lo.kv_cache_dtype = args.kv_cache_dtype;
  lo.calculate_kv_scales = args.calculate_kv_scales;
  lo.dtype = args.dtype;
  lo.quantization = args.quantization;
  lo.model.max_num_tokens = args.max_num_batched_tokens;
  lo.model.max_num_logits = args.max_num_seqs;
  // A verify step samples 1 + k rows per request. On a GPU they are one call (ModelRunner's device
  // verify). The CPU computes logits in chunks of max_num_logits rows, and each chunk streams the
  // whole lm_head: chunks of one row made a k = 4 verify step at batch 1 pay five lm_head reads
  // (SmolLM2: 3.7 ms each, a quarter of a plain step). So its chunks hold at least one batch-1
  // verify step and up to 64 rows, and never fewer than max_num_seqs (float32 [rows, vocab]: 12 MB
  // at 64 rows of a 49k vocabulary).
  if (args.speculative.enabled()) {
    const int64_t verify_rows = int64_t{args.max_num_seqs} * (1 + args.speculative.num_speculative_tokens);
    const int64_t cap = device_flag_selects_gpu(args.device) ? std::max(args.max_num_seqs, args.max_num_batched_tokens)
                                                            : std::max<int64_t>(args.max_num_seqs, 64);
    lo.model.max_num_logits = static_cast<int>(std::min(verify_rows, cap));
  }
  lo.model.tp.expert_parallel = args.enable_expert_parallel;
  return lo;
}

namespace {

// Tokenizer and config, both required: what a model that is going to run needs.
StatusOr<std::unique_ptr<LoadedModel>> load_tokenizer_and_config(const std::string& path) {
  auto m = std::make_unique<LoadedModel>();
  m->path = path;
  KVASIR_ASSIGN_OR_RETURN(m->weights, open_weights(path));
  KVASIR_RETURN_IF_ERROR(load_config_and_tokenizer(*m));
  return m;
}

}  // namespace

namespace {

// The checkpoint's quantization_config, or --quantization fp8 for an unquantized one: the weight
// source is wrapped so the model binds the quantized linears dequantized.
Status apply_quantization(LoadedModel& m, const std::string& flag, bool dummy) {
  KVASIR_ASSIGN_OR_RETURN(const std::string method, quant::quantization_flag_method(flag));
  if (!method.empty() && m.quantization) {
    // vLLM's rule: the flag may name the checkpoint's own method, never another.
    if (method != m.quantization->method) {
      return invalid_argument("--quantization " + flag + " does not match " + m.path +
                              "'s quantization_config (quant_method '" + m.quantization->method + "')");
    }
  } else if (!method.empty()) {
    KVASIR_ASSIGN_OR_RETURN(m.quantization, quant::online_quantization(method));
  }
  if (!m.quantization) return Status();
  if (dummy && !m.quantization->schemes.empty() && quant::is_int_weight_format(m.quantization->schemes[0].format)) {
    KVASIR_ASSIGN_OR_RETURN(m.weights, quant::IntQuantizedWeightSource::wrap_dummy(std::move(m.weights), *m.quantization));
    return Status();
  }
  KVASIR_ASSIGN_OR_RETURN(m.weights, quant::open_quantized_weights(std::move(m.weights), *m.quantization));
  return Status();
}

}  // namespace

StatusOr<std::unique_ptr<LoadedModel>> load_tokenizer_only(const std::string& path) {
  auto m = std::make_unique<LoadedModel>();
  m->path = path;
  // Tokenizing needs only the tokenizer's own fields: a vocabulary-only GGUF of an architecture
  // the model code cannot run, or an HF directory with tokenizer files but no weights or no
  // usable config.json, still tokenizes. Then the config stays empty and eos comes from the
  // tokenizer alone.
  auto weights = open_weights(path);
  if (!weights.ok() && !is_dir(path)) return weights.status();
  if (weights.ok()) m->weights = std::move(*weights);
  if (m->weights && load_config_and_tokenizer(*m).ok()) return m;
  m->config = ModelConfig();
  m->eos_token_ids.clear();
  if (const GgufFile* gguf = m->weights ? m->weights->gguf() : nullptr) {
    KVASIR_ASSIGN_OR_RETURN(Tokenizer tok, tokenizer_from_gguf(*gguf));
    m->tokenizer = std::make_unique<Tokenizer>(std::move(tok));
  } else {
    KVASIR_ASSIGN_OR_RETURN(Tokenizer tok, load_hf_tokenizer(path));
    m->tokenizer = std::make_unique<Tokenizer>(std::move(tok));
  }
  if (m->tokenizer->eos_id() >= 0) m->eos_token_ids.push_back(m->tokenizer->eos_id());
  return m;
}

StatusOr<std::unique_ptr<LoadedModel>> load_model_without_weights(const std::string& path, const LoadOptions& opts) {
  if (opts.load_format != "auto" && opts.load_format != "dummy") {
    return invalid_argument("unknown --load-format " + opts.load_format + " (auto or dummy)");
  }
  const bool dummy = opts.load_format == "dummy";
  std::unique_ptr<LoadedModel> m;
  if (dummy) {
    KVASIR_ASSIGN_OR_RETURN(m, load_dummy_config(path));
  } else {
    KVASIR_ASSIGN_OR_RETURN(m, load_tokenizer_and_config(path));
  }
  if (!opts.tokenizer.empty()) {
    KVASIR_ASSIGN_OR_RETURN(auto other, load_tokenizer_only(opts.tokenizer));
    if (other->tokenizer->vocab_size() > static_cast<size_t>(m->config.vocab_size)) {
      return invalid_argument("--tokenizer " + opts.tokenizer + " has " + std::to_string(other->tokenizer->vocab_size()) +
                              " tokens, more than the model's vocabulary of " + std::to_string(m->config.vocab_size));
    }
    m->tokenizer = std::move(other->tokenizer);
    // End-of-sequence ids the new vocabulary cannot produce (a placeholder config's) give way to its own.
    bool eos_in_vocab = !m->eos_token_ids.empty();
    for (int32_t id : m->eos_token_ids) eos_in_vocab = eos_in_vocab && static_cast<size_t>(id) < m->tokenizer->vocab_size();
    if (!eos_in_vocab) m->eos_token_ids = other->eos_token_ids;
  }
  return m;
}

bool device_flag_selects_gpu(const std::string& device) {
#ifdef KVASIR_HAVE_CUDA
  if (device == "auto") return cuda_device_count() > 0;
#endif
  return device == "cuda";
}

StatusOr<std::unique_ptr<LoadedModel>> load_model(const std::string& path, const LoadOptions& opts, Backend* backend) {
  KVASIR_ASSIGN_OR_RETURN(std::unique_ptr<LoadedModel> m, load_model_without_weights(path, opts));
  const bool dummy = opts.load_format == "dummy";
  if (backend == nullptr) {
    KVASIR_ASSIGN_OR_RETURN(m->backend, make_backend(opts));
    backend = m->backend.get();
  }
  if (dummy) {
    const bool on_device = backend->device() != Device::kCpu;
    if (!on_device && m->quantization) {  // said before any host dummy is made (8B: 16 GB of them)
      return unimplemented(path + ": --load-format dummy with quant_method '" + m->quantization->method +
                           "' needs a GPU backend (--device cuda), which fills the packed codes itself");
    }
    KVASIR_ASSIGN_OR_RETURN(m->weights, open_dummy_weights(dummy_weight_specs(m->config, on_device), 0x6b76, path));
  }
  KVASIR_RETURN_IF_ERROR(apply_quantization(*m, opts.quantization, dummy));
  KVASIR_ASSIGN_OR_RETURN(m->model, DecoderModel::create(m->config, *m->weights, *backend, opts.model));
  KVASIR_LOG_INFO("loaded %s: %s on %s", path.c_str(), m->config.to_string().c_str(), backend->name().c_str());
  return m;
}

}  // namespace kvasir
