// The packed panels (quant/packed_q32.h) of the weights a CpuBackend uploaded, found by the
// weight's data pointer. Each panel lives exactly as long as its weight: upload_weight hands the
// caller an owner buffer (kept beside the weight by every model) whose destruction removes the
// panel, so an address reused by a later weight never finds a stale panel.
#pragma once

#include <memory>
#include <mutex>
#include <unordered_map>

#include "backend/backend.h"
#include "backend/cpu/quant/packed_q32.h"

namespace kvasir::cpu {

class PackedWeights {
 public:
  // Registers `panel` for the weight at `weight_data`; the returned buffer owns it (data() is the
  // panel's bytes) and unregisters it when destroyed.
  static std::unique_ptr<Buffer> add(const std::shared_ptr<PackedWeights>& self, const void* weight_data,
                                     std::unique_ptr<PackedQ32> panel);
  // The panel of the weight at `weight_data`, or null.
  const PackedQ32* find(const void* weight_data) const;
  bool empty() const;

 private:
  void remove(const void* weight_data, const PackedQ32* panel);
  class Owner;
  mutable std::mutex mu_;  // models load and free weights on other threads than the one stepping
  std::unordered_map<const void*, const PackedQ32*> by_data_;
};

}  // namespace kvasir::cpu
