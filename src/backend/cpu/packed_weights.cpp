#include "backend/cpu/packed_weights.h"

namespace kvasir::cpu {

class PackedWeights::Owner : public Buffer {
 public:
  Owner(std::shared_ptr<PackedWeights> registry, const void* key, std::unique_ptr<PackedQ32> panel)
      : registry_(std::move(registry)), key_(key), panel_(std::move(panel)) {}
  ~Owner() override { registry_->remove(key_, panel_.get()); }
  void* data() override { return const_cast<uint8_t*>(panel_->panel(0)); }
  size_t size() const override { return panel_->bytes(); }

 private:
  std::shared_ptr<PackedWeights> registry_;  // outlives the backend if the model does
  const void* key_;
  std::unique_ptr<PackedQ32> panel_;
};

std::unique_ptr<Buffer> PackedWeights::add(const std::shared_ptr<PackedWeights>& self, const void* weight_data,
                                           std::unique_ptr<PackedQ32> panel) {
  {
    std::lock_guard<std::mutex> lock(self->mu_);
    // Two live weights never share a first byte except a view of one (same address, fewer rows),
    // which linear() tells apart by shape; the newest registration wins.
    self->by_data_[weight_data] = panel.get();
  }
  return std::make_unique<Owner>(self, weight_data, std::move(panel));
}

const PackedQ32* PackedWeights::find(const void* weight_data) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = by_data_.find(weight_data);
  return it == by_data_.end() ? nullptr : it->second;
}

bool PackedWeights::empty() const {
  std::lock_guard<std::mutex> lock(mu_);
  return by_data_.empty();
}

void PackedWeights::remove(const void* weight_data, const PackedQ32* panel) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = by_data_.find(weight_data);
  if (it != by_data_.end() && it->second == panel) by_data_.erase(it);
}

}  // namespace kvasir::cpu
