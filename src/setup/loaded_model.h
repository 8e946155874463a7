// LoadedModel: everything one model needs to run, opened from a .gguf file or an HF directory:
// the weight source (mmap), the validated ModelConfig, the tokenizer, the model's sampling
// defaults (generation_config.json, read once here), a backend and the model bound to it. Also
// finds the default model when no path is given. Must not size the KV cache or run the engine.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "config/model_config.h"
#include "loader/dummy_weights.h"
#include "loader/weight_source.h"
#include "model/decoder_model.h"
#include "quant/quantization_config.h"
#include "setup/engine_args.h"
#include "setup/generation_defaults.h"
#include "setup/rank_device.h"
#include "tokenizer/tokenizer.h"

namespace kvasir {

struct LoadOptions {
  std::string device = "auto";  // auto | cpu | cuda
  int num_threads = 0;          // CPU threads; 0 = all
  bool exact_matmul = false;    // CPU: float32 activations in quantized matmuls (accuracy tests)
  std::string load_format = "auto";  // auto | dummy (random weights from a config.json)
  // Tokenizer from another file (its vocabulary must fit the model's); empty: the model's own.
  // With dummy weights it replaces the placeholder vocabulary, so text and grammars are real.
  std::string tokenizer;
  bool enforce_eager = false;   // CUDA: no graphs
  std::string kv_cache_dtype = "auto";  // EngineArgs::kv_cache_dtype
  bool calculate_kv_scales = false;     // EngineArgs::calculate_kv_scales
  std::string dtype = "auto";           // EngineArgs::dtype
  std::string quantization;             // EngineArgs::quantization
  ModelOptions model;           // workspace sizes; tp: the rank's group (the CUDA backend's GPU and communicator)
  // CUDA at tensor-parallel size 1: make the backend's device communicator anyway, so the forward
  // pass runs the tensor-parallel path (vocabulary shard, device all-reduce and gather) over one
  // rank. For tests that compare it with the plain path on one GPU.
  bool device_collectives = false;
  // CUDA: where this rank sits on its host (its GPU, setup/rank_device.h), and whether its
  // tensor-parallel group is all on this host (the custom all-reduce over CUDA IPC needs that;
  // across hosts every collective goes to NCCL).
  RankPlacement placement;
  bool tp_on_one_host = true;

  // The load options an engine with these args needs (its workspace sized by the token and
  // sequence budgets).
  static LoadOptions from(const EngineArgs& args);
};

struct LoadedModel {
  std::string path;
  std::unique_ptr<WeightSource> weights;
  ModelConfig config;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<DecoderModel> model;
  // EOS ids: the tokenizer's, then generation_config.json's extra ones (e.g. <end_of_turn>).
  std::vector<int32_t> eos_token_ids;
  // generation_config.json's sampling defaults (HF directories; empty for GGUF files).
  GenerationDefaults generation_defaults;
  // config.json's quantization_config, parsed (HF directories); `weights` then presents the
  // quantized linears dequantized (quant/quantized_weight_source.h).
  std::optional<quant::QuantizationConfig> quantization;
};

// With load_format "dummy", `path` is an HF config.json (or a directory holding one) and the
// weights are deterministic random values (initialised on the device for a GPU backend).
// `backend`: run on this one (another model's, which outlives this one; `backend` of the result
// stays null) instead of a backend of its own made from opts (a draft model shares the target's
// device, stream and step queue).
StatusOr<std::unique_ptr<LoadedModel>> load_model(const std::string& path, const LoadOptions& opts,
                                                  Backend* backend = nullptr);

// Whether --device (auto | cpu | cuda) puts the model on a GPU, as make_backend decides: cuda, or
// auto with a CUDA device present (for a process that makes no backend, the multiprocess front).
bool device_flag_selects_gpu(const std::string& device);
// What load_model gives without a backend or a bound model (backend and model stay null): config,
// tokenizer (--tokenizer applied), EOS ids and generation defaults, read as load_model reads them.
// The engine's process of the multiprocess executor (api/multiprocess_executor.h) runs on this:
// the weights are mapped but never read, and no device is touched.
StatusOr<std::unique_ptr<LoadedModel>> load_model_without_weights(const std::string& path, const LoadOptions& opts);
// The tensors DecoderModel binds for an HF checkpoint of `config`, as dummy weights (HF names);
// matrices_on_device leaves the matrices for the backend to fill.
std::vector<DummyTensorSpec> dummy_weight_specs(const ModelConfig& config, bool matrices_on_device);
// Tokenizer and config only (tokenize / detokenize / render-template need no weights bound). Only
// the tokenizer is required: where the file holds no config we can use (a vocabulary-only GGUF of
// an unknown architecture), `config` is left default and `weights` may be null.
StatusOr<std::unique_ptr<LoadedModel>> load_tokenizer_only(const std::string& path);

// The default model: $KVASIR_MODEL, else SmolLM2-135M-Instruct.Q4_1.gguf under $KVASIR_MODELS_DIR,
// ./models, or the models/ folder next to the executable's build tree.
std::string default_model_path();

}  // namespace kvasir
