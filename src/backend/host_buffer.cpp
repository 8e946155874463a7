#include "backend/host_buffer.h"

#include <cstdlib>

namespace kvasir {
namespace {

class HostBuffer final : public Buffer {
 public:
  HostBuffer(void* data, size_t size) : data_(data), size_(size) {}
  ~HostBuffer() override { std::free(data_); }
  void* data() override { return data_; }
  size_t size() const override { return size_; }

 private:
  void* data_;
  size_t size_;
};

}  // namespace

StatusOr<std::unique_ptr<Buffer>> allocate_host_buffer(size_t bytes) {
  // 64-byte alignment for AVX-512 loads; aligned_alloc needs a multiple of the alignment.
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
  if (p == nullptr) return resource_exhausted("cannot allocate " + std::to_string(bytes) + " bytes of host memory");
  return std::unique_ptr<Buffer>(new HostBuffer(p, bytes));
}

}  // namespace kvasir
