// The model registry: the list of families we run (model/families/*) and the lookups that map a
// file to one (GGUF general.architecture; HF model_type, or architectures without one), plus the
// ModelConfig entry points, which need the family (config/ names none). Adding a family = its file + one line in registry.cpp. Must not
// build models or bind weights.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "config/config_readers.h"
#include "config/model_config.h"
#include "loader/weight_source.h"
#include "model/model_family.h"

namespace kvasir {

// Every registered family, in registry order.
const std::vector<const ModelFamily*>& model_families();

// nullptr when no family has that name / GGUF architecture / HF id.
const ModelFamily* find_family(std::string_view name);
const ModelFamily* find_family_by_gguf(std::string_view gguf_architecture);
const ModelFamily* find_family_by_hf(const HfModelId& id);

// The family of `config.architecture`; Unimplemented naming the supported families otherwise.
StatusOr<const ModelFamily*> family_of(const ModelConfig& config);

// "gemma, gemma2, ..." (registry names), for error messages.
std::string supported_families();

// From GGUF metadata (`general.architecture`, `<arch>.block_count`, ...); tensors are consulted
// for what the metadata leaves implicit (output.weight absent => tied, rope_freqs.weight).
StatusOr<ModelConfig> model_config_from_gguf(const GgufFile& file);
// From a parsed config.json and, if present, generation_config.json (its eos ids win).
StatusOr<ModelConfig> model_config_from_hf_json(const Json& config, const Json* generation_config);
// Reads <dir>/config.json and the optional <dir>/generation_config.json.
StatusOr<ModelConfig> model_config_from_hf_dir(const std::string& dir);

// GGUF source: model_config_from_gguf(*source.gguf()); safetensors source: from_hf_dir(its
// directory, or the directory of the single file).
StatusOr<ModelConfig> load_model_config(const WeightSource& source);

// The dummy weights (--load-format dummy) a model of `config` binds: its family's manifest, HF
// names. matrices_on_device leaves the matrices for the backend to fill.
StatusOr<std::vector<DummyTensorSpec>> dummy_weight_specs_for(const ModelConfig& config,
                                                              bool matrices_on_device);

}  // namespace kvasir
