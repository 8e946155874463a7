// Helpers for the CUDA backend's tests: bf16-exact random data, device tensors poisoned with NaN
// before use (an unwritten element fails the comparison), read-back, and relative L2 error.
// Test-only; must not be linked into the library.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace kvasir::cuda_test {

inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}

inline float bf16_bits_to_f32(uint16_t h) {
  const uint32_t b = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

inline float round_bf16(float f) { return bf16_bits_to_f32(f32_to_bf16_bits(f)); }

// The step queue's counters from a CUDA backend's stats() line: device steps and graph replays
// (captures included); -1 each when the line has none.
struct StepCounts {
  long long steps = -1, graph_replays = -1;
};
inline StepCounts step_counts(const Backend& b) {
  StepCounts c;
  const std::string st = b.stats();
  const size_t at = st.find("device steps ");
  if (at != std::string::npos) std::sscanf(st.c_str() + at, "device steps %lld (graph replays %lld", &c.steps, &c.graph_replays);
  return c;
}

// Uniform in [-scale, scale], rounded to bf16 so both backends see identical inputs.
inline std::vector<float> random_values(std::mt19937& rng, size_t n, float scale = 1.0f) {
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = round_bf16(d(rng));
  return v;
}

// A device tensor that frees itself; filled with NaN bits until written.
struct DeviceTensor {
  Tensor t;
  DeviceTensor() = default;
  DeviceTensor(DType dt, std::initializer_list<int64_t> dims) {
    t = Tensor::make(nullptr, dt, dims, Device::kCuda);
    const size_t bytes = t.nbytes();
    if (cudaMalloc(&t.data, bytes == 0 ? 16 : bytes) != cudaSuccess) std::abort();
    cudaMemset(t.data, 0xff, bytes);
    cudaDeviceSynchronize();
  }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  ~DeviceTensor() {
    if (t.data != nullptr) cudaFree(t.data);
  }
  void set(const std::vector<float>& v) {
    if (t.dtype == DType::kF32) {
      cudaMemcpy(t.data, v.data(), v.size() * 4, cudaMemcpyHostToDevice);
    } else {
      std::vector<uint16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_bf16_bits(v[i]);
      cudaMemcpy(t.data, h.data(), h.size() * 2, cudaMemcpyHostToDevice);
    }
    cudaDeviceSynchronize();
  }
};

// Reads a device tensor back through the backend (which flushes its recorded work first).
inline std::vector<float> read_back(Backend& b, const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (t.dtype == DType::kF32) {
    b.copy_to_host(t, out.data());
  } else {
    std::vector<uint16_t> h(out.size());
    b.copy_to_host(t, h.data());
    for (size_t i = 0; i < h.size(); ++i) out[i] = bf16_bits_to_f32(h[i]);
  }
  return out;
}

// ||a - b|| / ||b||; infinity when anything is NaN or the reference is all zeros.
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : INFINITY;
}

}  // namespace kvasir::cuda_test
