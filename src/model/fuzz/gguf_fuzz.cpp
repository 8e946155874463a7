// libFuzzer target for GGUF model files: parses the input from memory and, when it parses, walks
// every metadata value and tensor the way callers would; then takes it as a model, as `kvasir
// serve` does: the config from its metadata (model registry), every weight bound by its role
// (shape and type checks) and one forward pass of two tokens on the CPU backend. Every error on
// the way must be one printable line: a control byte in a message is a finding (file bytes are
// quoted through common/quoted_text.h). Built by CMake with -DKVASIR_FUZZ=ON (fuzz/CMakeLists.txt);
// run with scripts/fuzz gguf_fuzz SECONDS.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "loader/gguf_file.h"
#include "loader/weight_source.h"
#include "model/decoder_model.h"
#include "model/one_sequence_batch.h"
#include "model/registry.h"

namespace {

void require_printable(const kvasir::Status& s) {
  for (unsigned char c : s.message()) {
    if (c < 0x20 || c == 0x7F) __builtin_trap();
  }
}

// Config, binding and a forward pass: what a model file reaches after it parses.
void run_as_model(std::unique_ptr<kvasir::GgufFile> file) {
  std::unique_ptr<kvasir::WeightSource> src = kvasir::gguf_weight_source(std::move(file));
  auto config = kvasir::model_config_from_gguf(*src->gguf());
  if (!config.ok()) return require_printable(config.status());
  static kvasir::CpuBackend backend(kvasir::CpuBackendOptions{.num_threads = 1});
  kvasir::ModelOptions mo;
  mo.max_num_tokens = 4;
  mo.max_num_logits = 1;
  auto model = kvasir::DecoderModel::create(*config, *src, backend, mo);
  if (!model.ok()) return require_printable(model.status());
  auto cache = (*model)->allocate_kv_cache(2, 16);
  if (!cache.ok()) return require_printable(cache.status());
  kvasir::OneSequence seq({0, static_cast<int32_t>(config->vocab_size - 1)});
  std::vector<float> logits(static_cast<size_t>(config->vocab_size));
  require_printable((*model)->forward(seq.batch, *cache, logits.data()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = kvasir::GgufFile::parse(std::span<const uint8_t>(data, size));
  if (!file.ok()) {
    require_printable(file.status());
    return 0;
  }
  const kvasir::GgufFile& g = **file;
  for (const auto& kv : g.metadata()) {
    (void)g.describe(kv.value);
    if (kv.value.type == kvasir::GgufType::kArray) {
      auto items = g.array_items(kv.value);
      if (items.ok()) {
        for (const auto& item : *items) (void)g.describe(item);
      }
      (void)g.get_string_array(kv.key);
      (void)g.get_i32_array(kv.key);
      (void)g.get_f32_array(kv.key);
    }
  }
  volatile uint8_t sink = 0;
  for (const auto& info : g.tensor_infos()) {
    kvasir::WeightTensor t = g.tensor(info);
    if (t.nbytes > 0) sink = sink ^ t.data[0] ^ t.data[t.nbytes - 1];
  }
  run_as_model(std::move(*file));
  return 0;
}
