// Dummy weights (--load-format dummy): a WeightSource whose tensors are deterministic random
// values, for benchmarks and tests without a checkpoint. The caller lists the tensors (names,
// shapes, types) it wants; a tensor marked on_device has no host bytes at all (data == nullptr)
// and a GPU backend fills it on the device. Must not know about model architectures.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loader/weight_source.h"

namespace kvasir {

struct DummyTensorSpec {
  std::string name;
  DType dtype = DType::kF32;     // F32, F16 or BF16
  std::vector<int64_t> shape;
  bool on_device = false;        // no host data: the backend initialises it (upload_weight)
  float offset = 0.0f;           // host values are uniform in [offset - scale, offset + scale]
  float scale = 1.0f;
};

StatusOr<std::unique_ptr<WeightSource>> open_dummy_weights(std::vector<DummyTensorSpec> specs, uint64_t seed,
                                                           std::string path);

}  // namespace kvasir
