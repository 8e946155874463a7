// The tiny random-weight Llama of tests/data/tiny (GGUF) on one CPU thread with exact matmuls:
// the model of the tests that run the engine on a CPU backend dressed as a device.
#pragma once

#include <memory>
#include <string>

#include "setup/loaded_model.h"

namespace kvasir {

inline const std::string kTinyLlamaGguf = std::string(KVASIR_SOURCE_DIR) + "/tests/data/tiny/llama3/model.gguf";

inline StatusOr<std::unique_ptr<LoadedModel>> load_tiny_llama() {
  LoadOptions lo;
  lo.device = "cpu";
  lo.num_threads = 1;
  lo.exact_matmul = true;
  return load_model(kTinyLlamaGguf, lo);
}

}  // namespace kvasir
