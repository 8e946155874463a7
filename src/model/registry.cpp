#include "model/registry.h"

#include <sys/stat.h>

#include "common/quoted_text.h"
#include "loader/gguf_file.h"

namespace kvasir {

// Each family's file defines its accessor. Registering a family = one line here and one below.
const ModelFamily& llama_family();
const ModelFamily& mistral_family();
const ModelFamily& qwen2_family();
const ModelFamily& qwen3_family();
const ModelFamily& gemma_family();
const ModelFamily& gemma2_family();
const ModelFamily& gemma3_family();
const ModelFamily& phi3_family();
const ModelFamily& mixtral_family();
const ModelFamily& qwen3_moe_family();
const ModelFamily& qwen2_moe_family();
const ModelFamily& deepseek_v2_family();
const ModelFamily& deepseek_v3_family();
const ModelFamily& gpt_oss_family();

const std::vector<const ModelFamily*>& model_families() {
  static const std::vector<const ModelFamily*> kFamilies = {
      &llama_family(), &mistral_family(), &qwen2_family(),  &qwen3_family(),
      &gemma_family(), &gemma2_family(),  &gemma3_family(), &phi3_family(),
      &mixtral_family(), &qwen3_moe_family(), &qwen2_moe_family(),
      &deepseek_v2_family(), &deepseek_v3_family(),
      &gpt_oss_family(),
  };
  return kFamilies;
}

namespace {

bool contains(const std::vector<std::string>& names, std::string_view s) {
  for (const std::string& n : names) {
    if (n == s) return true;
  }
  return false;
}

// The embedding's and the first layer's tensors against the family's manifest, before anything is
// bound, so a file whose metadata disagrees with its tensors is refused naming the tensor. A
// fused tensor (Phi-3's attn_qkv) has its fused rows.
Status check_gguf_tensor_shapes(const GgufFile& file, const ModelFamily& family, const ModelConfig& c) {
  const WeightManifest m = family.manifest(c);
  std::vector<const WeightSpec*> specs;
  for (const WeightSpec& s : m.model) specs.push_back(&s);
  if (!m.layers.empty()) {
    for (const WeightSpec& s : m.layers[0]) specs.push_back(&s);
  }
  for (const WeightSpec* s : specs) {
    const GgufTensorInfo* t = file.find_tensor(s->gguf.name);
    if (t == nullptr) continue;  // absence is the binder's call (optional, tied, ...)
    std::vector<int64_t> want = s->shape;
    if (s->gguf.fused() && want.size() == 2) want[0] = s->gguf.fused_rows;
    if (t->shape() != want) {
      std::string got;
      for (int64_t d : t->shape()) got += (got.empty() ? "" : ", ") + std::to_string(d);
      return invalid_argument("GGUF: tensor '" + s->gguf.name + "' has shape [" + got +
                              "], which does not match the metadata");
    }
  }
  return Status();
}

}  // namespace

const ModelFamily* find_family(std::string_view name) {
  for (const ModelFamily* f : model_families()) {
    if (f->name() == name) return f;
  }
  return nullptr;
}

const ModelFamily* find_family_by_gguf(std::string_view arch) {
  for (const ModelFamily* f : model_families()) {
    if (contains(f->gguf_architectures(), arch)) return f;
  }
  return nullptr;
}

const ModelFamily* find_family_by_hf(const HfModelId& id) {
  // model_type decides when present (a contradicting architectures list does not override it).
  if (!id.model_type.empty()) {
    for (const ModelFamily* f : model_families()) {
      if (contains(f->hf_model_types(), id.model_type)) return f;
    }
    return nullptr;
  }
  for (const std::string& a : id.architectures) {
    for (const ModelFamily* f : model_families()) {
      if (contains(f->hf_architectures(), a)) return f;
    }
  }
  return nullptr;
}

std::string supported_families() {
  std::string s;
  for (const ModelFamily* f : model_families()) s += (s.empty() ? "" : ", ") + std::string(f->name());
  return s;
}

StatusOr<const ModelFamily*> family_of(const ModelConfig& config) {
  const ModelFamily* f = find_family(config.architecture);
  if (f == nullptr) {
    return unimplemented("model config: architecture '" + config.architecture +
                         "' is not supported (supported: " + supported_families() + ")");
  }
  return f;
}

StatusOr<ModelConfig> model_config_from_gguf(const GgufFile& file) {
  const std::string arch(file.architecture());
  if (arch.empty()) return invalid_argument("GGUF: general.architecture is missing");
  const ModelFamily* f = nullptr;
  for (const ModelFamily* c : model_families()) {
    if (c->claims_gguf(arch, GgufKeys(file, arch))) {
      f = c;
      break;
    }
  }
  if (f == nullptr) f = find_family_by_gguf(arch);
  if (f == nullptr) {
    return unimplemented("GGUF: architecture '" + quoted_text(arch) + "' is not supported (supported: " +
                         supported_families() + ")");
  }
  KVASIR_ASSIGN_OR_RETURN(ModelConfig c, read_gguf_config(file, f->config_traits()));
  KVASIR_RETURN_IF_ERROR(f->read_gguf_extras(GgufKeys(file, arch), c));
  KVASIR_RETURN_IF_ERROR(c.validate());
  KVASIR_RETURN_IF_ERROR(check_gguf_tensor_shapes(file, *f, c));
  return c;
}

StatusOr<ModelConfig> model_config_from_hf_json(const Json& config, const Json* generation) {
  KVASIR_ASSIGN_OR_RETURN(HfModelId id, hf_model_id(config));
  const ModelFamily* f = find_family_by_hf(id);
  if (f == nullptr) {
    std::string what = "model_type '" + quoted_text(id.model_type) + "'";
    if (id.model_type.empty()) {
      what = "architectures";
      for (const std::string& a : id.architectures) what += " '" + quoted_text(a) + "'";
    }
    return unimplemented("config.json: " + what + " is not supported (supported: " +
                         supported_families() + ")");
  }
  KVASIR_ASSIGN_OR_RETURN(ModelConfig c, read_hf_config(config, generation, f->config_traits()));
  KVASIR_RETURN_IF_ERROR(f->read_hf_extras(HfKeys(hf_text_config(config), "config.json"), c));
  KVASIR_RETURN_IF_ERROR(c.validate());
  return c;
}

StatusOr<ModelConfig> model_config_from_hf_dir(const std::string& dir) {
  KVASIR_ASSIGN_OR_RETURN(HfConfigFiles files, read_hf_config_files(dir));
  auto c = model_config_from_hf_json(files.config, files.generation_config ? &*files.generation_config : nullptr);
  if (!c.ok()) return Status(c.status().code(), dir + ": " + c.status().message());
  return c;
}

StatusOr<ModelConfig> load_model_config(const WeightSource& source) {
  if (const GgufFile* g = source.gguf()) return model_config_from_gguf(*g);
  std::string dir = source.path();
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
    const size_t slash = dir.rfind('/');
    dir = slash == std::string::npos ? "." : dir.substr(0, slash);
  }
  return model_config_from_hf_dir(dir);
}

StatusOr<std::vector<DummyTensorSpec>> dummy_weight_specs_for(const ModelConfig& config,
                                                              bool matrices_on_device) {
  KVASIR_ASSIGN_OR_RETURN(const ModelFamily* f, family_of(config));
  return dummy_weight_specs(f->manifest(config), config, matrices_on_device);
}

}  // namespace kvasir
