// Tensor: a non-owning, contiguous, row-major view of device or host memory with a DType and up
// to four dimensions (shape.back() is the contiguous one; quantized types block along it).
// Ownership lives in Buffer (backend.h) or in a mapped weight file. Must not allocate.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "common/check.h"
#include "core/dtype.h"
#include "core/input_quant.h"

namespace kvasir {

namespace quant {
struct PackedIntWeight;
}

// A weight a backend keeps as 4-bit integer codes with group scales (W4A16): the codes are the
// Tensor's data (in the backend's own layout, quant/w4a16_layout.h on CUDA); the rest is here,
// device pointers owned with the weight's Buffer.
struct Int4Weight {
  int64_t out_features = 0, in_features = 0;
  int64_t group_size = 0, num_groups = 0;
  DType scale_dtype = DType::kF16;
  const void* scales = nullptr;       // [num_groups, out_features] of scale_dtype
  const uint8_t* zeros = nullptr;     // [num_groups, out_features], or null: every zero point is 8
  const int32_t* perm = nullptr;      // [in_features] act-order column order, or null
};

enum class Device { kCpu, kCuda };

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  std::array<int64_t, 4> shape{0, 0, 0, 0};
  int ndim = 0;
  Device device = Device::kCpu;
  // A weight's FP8 input-activation quantization (kNone for everything else).
  InputQuant input_quant;
  // FP8 (e4m3) weights: the per-output-row float32 scales, [rows()] (a per-tensor scale repeated);
  // value = code x scale. On a host tensor handed to upload_weight it may instead describe a
  // float32 matrix that is exactly codes x scales (a backend with FP8 kernels keeps the codes).
  const float* weight_scales = nullptr;
  // Integer weight-only linears. On a host tensor handed to upload_weight: the packed checkpoint
  // tensors the (dense) data came from, for a backend with int4 kernels to keep instead (data may
  // then be null: dummy weights of that scheme). On a device tensor: the backend kept the weight
  // as int4 (dtype kI32, shape [out_features, in_features / 8] words) and this describes it.
  const quant::PackedIntWeight* packed_int = nullptr;
  const Int4Weight* int4 = nullptr;
  // An FP8 KV-cache tensor (--kv-cache-dtype fp8*): its per-tensor scale, the layer's k_scale or
  // v_scale. write_kv stores x / cache_scale (saturated), attention reads code x cache_scale.
  // 1 for every other tensor.
  float cache_scale = 1.0f;

  static Tensor make(void* data, DType dtype, std::initializer_list<int64_t> dims,
                     Device device = Device::kCpu) {
    Tensor t;
    t.data = data;
    t.dtype = dtype;
    t.device = device;
    KVASIR_CHECK(dims.size() >= 1 && dims.size() <= 4);
    for (int64_t d : dims) t.shape[t.ndim++] = d;
    return t;
  }

  int64_t dim(int i) const { return shape[i < 0 ? ndim + i : i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }
  int64_t cols() const { return ndim == 0 ? 0 : shape[ndim - 1]; }
  int64_t rows() const { return cols() == 0 ? 0 : numel() / cols(); }
  size_t row_bytes() const { return *kvasir::row_bytes(dtype, cols()); }
  size_t nbytes() const { return row_bytes() * static_cast<size_t>(rows()); }

  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
  // Rows [begin, begin + count) of the 2-D view [rows(), cols()].
  Tensor slice_rows(int64_t begin, int64_t count) const {
    Tensor t = *this;
    t.data = static_cast<uint8_t*>(data) + static_cast<size_t>(begin) * row_bytes();
    t.ndim = 2;
    t.shape = {count, cols(), 0, 0};
    return t;
  }
  // Same bytes, new shape with the same element count.
  Tensor reshape(std::initializer_list<int64_t> dims) const {
    Tensor t = make(data, dtype, dims, device);
    KVASIR_CHECK(t.numel() == numel());
    t.cache_scale = cache_scale;
    return t;
  }
};

}  // namespace kvasir
