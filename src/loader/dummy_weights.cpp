#include "loader/dummy_weights.h"

#include <algorithm>
#include <cstring>
#include <map>

namespace kvasir {
namespace {

uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint16_t to_bf16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  b += 0x7fffu + ((b >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(b >> 16);
}

uint16_t to_f16(float f) {
  // Values here are small and normal: a plain rounding conversion is enough.
  uint32_t b;
  std::memcpy(&b, &f, 4);
  const uint32_t sign = (b >> 16) & 0x8000u;
  const int exp = static_cast<int>((b >> 23) & 0xff) - 127 + 15;
  uint32_t mant = b & 0x7fffffu;
  if (exp <= 0) return static_cast<uint16_t>(sign);
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  uint32_t h = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  if ((mant & 0x1fffu) > 0x1000u || ((mant & 0x1fffu) == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(h);
}

class DummyWeightSource final : public WeightSource {
 public:
  DummyWeightSource(std::string path) : path_(std::move(path)) {}

  Status add(const DummyTensorSpec& spec, uint64_t seed) {
    if (spec.dtype != DType::kF32 && spec.dtype != DType::kF16 && spec.dtype != DType::kBF16) {
      return invalid_argument("dummy weight " + spec.name + ": only f32, f16 and bf16");
    }
    if (spec.shape.empty()) return invalid_argument("dummy weight " + spec.name + " has no shape");
    Entry e;
    e.tensor.name = spec.name;
    e.tensor.dtype = spec.dtype;
    e.tensor.shape = spec.shape;
    const int64_t n = e.tensor.num_elements();
    if (n <= 0) return invalid_argument("dummy weight " + spec.name + " is empty");
    const size_t elem = spec.dtype == DType::kF32 ? 4 : 2;
    e.tensor.nbytes = static_cast<size_t>(n) * elem;
    if (!spec.on_device) {
      e.bytes.resize(e.tensor.nbytes + 64);
      // Keep the payload 64-byte aligned like a mapped file's tensors.
      uint8_t* p = e.bytes.data();
      p += (64 - reinterpret_cast<uintptr_t>(p) % 64) % 64;
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t h = mix(seed ^ mix(static_cast<uint64_t>(i)));
        const float u = static_cast<float>(h >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
        const float v = spec.offset + u * spec.scale;
        if (spec.dtype == DType::kF32) std::memcpy(p + i * 4, &v, 4);
        else {
          const uint16_t b = spec.dtype == DType::kBF16 ? to_bf16(v) : to_f16(v);
          std::memcpy(p + i * 2, &b, 2);
        }
      }
      e.tensor.data = p;
    }
    tensors_[spec.name] = std::move(e);
    return Status();
  }

  WeightFormat format() const override { return WeightFormat::kDummy; }
  const std::string& path() const override { return path_; }
  std::vector<std::string> tensor_names() const override {
    std::vector<std::string> names;
    for (const auto& [name, e] : tensors_) names.push_back(name);
    return names;
  }
  bool has_tensor(std::string_view name) const override { return tensors_.count(std::string(name)) > 0; }
  StatusOr<WeightTensor> tensor(std::string_view name) const override {
    auto it = tensors_.find(std::string(name));
    if (it == tensors_.end()) return not_found("no dummy tensor " + std::string(name));
    return it->second.tensor;
  }

 private:
  struct Entry {
    WeightTensor tensor;
    std::vector<uint8_t> bytes;
  };
  std::string path_;
  std::map<std::string, Entry> tensors_;
};

}  // namespace

StatusOr<std::unique_ptr<WeightSource>> open_dummy_weights(std::vector<DummyTensorSpec> specs, uint64_t seed,
                                                           std::string path) {
  auto src = std::make_unique<DummyWeightSource>(std::move(path));
  uint64_t i = 0;
  for (const auto& s : specs) KVASIR_RETURN_IF_ERROR(src->add(s, mix(seed + (i++) * 0x1234567ull)));
  return std::unique_ptr<WeightSource>(std::move(src));
}

}  // namespace kvasir
