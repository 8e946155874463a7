#include "api/loaded_model.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>

#include "backend/cpu/cpu_backend.h"
#include "common/log.h"
#include "loader/gguf_file.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/hf_loader.h"

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

Status load_config_and_tokenizer(LoadedModel& m) {
  if (const GgufFile* gguf = m.weights->gguf()) {
    KVASIR_ASSIGN_OR_RETURN(m.config, ModelConfig::from_gguf(*gguf));
    KVASIR_ASSIGN_OR_RETURN(Tokenizer tok, tokenizer_from_gguf(*gguf));
    m.tokenizer = std::make_unique<Tokenizer>(std::move(tok));
  } else {
    KVASIR_ASSIGN_OR_RETURN(m.config, ModelConfig::from_hf_dir(m.path));
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

StatusOr<std::unique_ptr<LoadedModel>> load_tokenizer_only(const std::string& path) {
  auto m = std::make_unique<LoadedModel>();
  m->path = path;
  KVASIR_ASSIGN_OR_RETURN(m->weights, open_weights(path));
  KVASIR_RETURN_IF_ERROR(load_config_and_tokenizer(*m));
  return m;
}

StatusOr<std::unique_ptr<LoadedModel>> load_model(const std::string& path, const LoadOptions& opts) {
  KVASIR_ASSIGN_OR_RETURN(auto m, load_tokenizer_only(path));
  if (opts.device == "cuda") return unimplemented("this build has no CUDA backend");
  if (opts.device != "auto" && opts.device != "cpu") return invalid_argument("unknown --device " + opts.device);
  CpuBackendOptions bo;
  bo.num_threads = opts.num_threads;
  bo.precision = opts.exact_matmul ? MatmulPrecision::kExact : MatmulPrecision::kFast;
  m->backend = std::make_unique<CpuBackend>(bo);
  KVASIR_ASSIGN_OR_RETURN(m->model, DecoderModel::create(m->config, *m->weights, *m->backend, opts.model));
  KVASIR_LOG_INFO("loaded %s: %s on %s", path.c_str(), m->config.to_string().c_str(), m->backend->name().c_str());
  return m;
}

}  // namespace kvasir
