// Test-only: an in-memory WeightSource and writers that pack integer weights the way GPTQ (AutoGPTQ /
// GPTQModel), AutoAWQ's GEMM layers and compressed-tensors' pack_to_int32 do, written from those
// packers' rules independently of packed_int_weight.cpp, so the tests compare two readings of each format.
// Must not be used outside tests.
#pragma once

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "loader/weight_source.h"
#include "quant/block_formats.h"

namespace kvasir::quant::testing {

class MemoryWeightSource final : public WeightSource {
 public:
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
    tensors_[name] = {dtype, std::move(shape), std::move(bytes)};
  }
  void add_i32(const std::string& name, std::vector<int64_t> shape, const std::vector<int32_t>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    add(name, DType::kI32, std::move(shape), std::move(b));
  }
  void add_f16(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
      const fp16_t h = f32_to_fp16(v[i]);
      std::memcpy(b.data() + i * 2, &h, 2);
    }
    add(name, DType::kF16, std::move(shape), std::move(b));
  }
  void remove(const std::string& name) { tensors_.erase(name); }

  WeightFormat format() const override { return WeightFormat::kSafetensors; }
  const std::string& path() const override { return path_; }
  std::vector<std::string> tensor_names() const override {
    std::vector<std::string> out;
    for (const auto& [n, t] : tensors_) out.push_back(n);
    return out;
  }
  bool has_tensor(std::string_view name) const override { return tensors_.count(std::string(name)) != 0; }
  StatusOr<WeightTensor> tensor(std::string_view name) const override {
    auto it = tensors_.find(std::string(name));
    if (it == tensors_.end()) return not_found(std::string(name));
    WeightTensor t;
    t.name = std::string(name);
    t.dtype = it->second.dtype;
    t.shape = it->second.shape;
    t.data = it->second.bytes.data();
    t.nbytes = it->second.bytes.size();
    return t;
  }

 private:
  struct Entry {
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::map<std::string, Entry> tensors_;
  std::string path_ = "memory";
};

// Unpacked integer weights of one layer: q [out][in] and zeros [out][groups] in the unsigned domain
// 0 .. 2^bits - 1, scales [out][groups] (fp16-representable), group of each input column.
struct IntLayer {
  int bits = 4;
  int64_t out = 0, in = 0, groups = 0;
  std::vector<int32_t> q, zero, group_of;
  std::vector<float> scale;

  float expected(int64_t o, int64_t k) const {
    const int64_t g = group_of[static_cast<size_t>(k)];
    return static_cast<float>(q[static_cast<size_t>(o * in + k)] - zero[static_cast<size_t>(o * groups + g)]) *
           scale[static_cast<size_t>(o * groups + g)];
  }
};

// Random layer; `group_of` is column / group_size unless `shuffled` (act-order: groups permuted).
inline IntLayer random_layer(int bits, int64_t out, int64_t in, int64_t group_size, bool shuffled, uint32_t seed,
                             bool symmetric = false) {
  std::mt19937 rng(seed);
  IntLayer l;
  l.bits = bits;
  l.out = out;
  l.in = in;
  l.groups = (in + group_size - 1) / group_size;
  const int32_t max_q = (1 << bits) - 1;
  l.q.resize(static_cast<size_t>(out * in));
  for (auto& v : l.q) v = static_cast<int32_t>(rng() % static_cast<uint32_t>(max_q + 1));
  l.zero.resize(static_cast<size_t>(out * l.groups));
  for (auto& v : l.zero) v = symmetric ? (1 << (bits - 1)) : static_cast<int32_t>(rng() % static_cast<uint32_t>(max_q + 1));
  l.scale.resize(static_cast<size_t>(out * l.groups));
  for (auto& v : l.scale) v = fp16_to_f32(f32_to_fp16(std::ldexp(1.0f + static_cast<float>(rng() % 1000) / 1000.0f, -8)));
  for (int64_t k = 0; k < in; ++k) l.group_of.push_back(static_cast<int32_t>(k / group_size));
  if (shuffled) std::shuffle(l.group_of.begin(), l.group_of.end(), rng);
  return l;
}

// GPTQ: qweight [in / pack, out], value of column k in bits (k % pack) * bits of row k / pack;
// qzeros [groups, out / pack] storing zero - zero_offset the same way along out; scales [groups, out].
inline void add_gptq(MemoryWeightSource& src, const std::string& layer, const IntLayer& l, int zero_offset,
                     bool with_g_idx = true) {
  const int pack = 32 / l.bits;
  const uint32_t mask = (1u << l.bits) - 1u;
  std::vector<int32_t> qweight(static_cast<size_t>(l.in / pack * l.out), 0);
  for (int64_t k = 0; k < l.in; ++k) {
    for (int64_t o = 0; o < l.out; ++o) {
      auto& word = reinterpret_cast<uint32_t&>(qweight[static_cast<size_t>((k / pack) * l.out + o)]);
      word |= (static_cast<uint32_t>(l.q[static_cast<size_t>(o * l.in + k)]) & mask) << ((k % pack) * l.bits);
    }
  }
  std::vector<int32_t> qzeros(static_cast<size_t>(l.groups * (l.out / pack)), 0);
  std::vector<float> scales(static_cast<size_t>(l.groups * l.out));
  for (int64_t g = 0; g < l.groups; ++g) {
    for (int64_t o = 0; o < l.out; ++o) {
      auto& word = reinterpret_cast<uint32_t&>(qzeros[static_cast<size_t>(g * (l.out / pack) + o / pack)]);
      const uint32_t stored = static_cast<uint32_t>(l.zero[static_cast<size_t>(o * l.groups + g)] - zero_offset) & mask;
      word |= stored << ((o % pack) * l.bits);
      scales[static_cast<size_t>(g * l.out + o)] = l.scale[static_cast<size_t>(o * l.groups + g)];
    }
  }
  src.add_i32(layer + ".qweight", {l.in / pack, l.out}, qweight);
  src.add_i32(layer + ".qzeros", {l.groups, l.out / pack}, qzeros);
  src.add_f16(layer + ".scales", {l.groups, l.out}, scales);
  if (with_g_idx) src.add_i32(layer + ".g_idx", {l.in}, l.group_of);
}

// AutoAWQ GEMM: qweight [in, out / 8]; word j of row k holds column 8j + order[i] in nibble i,
// order = 0 2 4 6 1 3 5 7; qzeros [groups, out / 8] the same; scales [groups, out].
inline void add_awq(MemoryWeightSource& src, const std::string& layer, const IntLayer& l) {
  constexpr int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  std::vector<int32_t> qweight(static_cast<size_t>(l.in * (l.out / 8)), 0);
  for (int64_t k = 0; k < l.in; ++k) {
    for (int64_t j = 0; j < l.out / 8; ++j) {
      uint32_t word = 0;
      for (int i = 0; i < 8; ++i) word |= static_cast<uint32_t>(l.q[static_cast<size_t>((j * 8 + kOrder[i]) * l.in + k)]) << (4 * i);
      qweight[static_cast<size_t>(k * (l.out / 8) + j)] = static_cast<int32_t>(word);
    }
  }
  std::vector<int32_t> qzeros(static_cast<size_t>(l.groups * (l.out / 8)), 0);
  std::vector<float> scales(static_cast<size_t>(l.groups * l.out));
  for (int64_t g = 0; g < l.groups; ++g) {
    for (int64_t j = 0; j < l.out / 8; ++j) {
      uint32_t word = 0;
      for (int i = 0; i < 8; ++i) word |= static_cast<uint32_t>(l.zero[static_cast<size_t>((j * 8 + kOrder[i]) * l.groups + g)]) << (4 * i);
      qzeros[static_cast<size_t>(g * (l.out / 8) + j)] = static_cast<int32_t>(word);
    }
    for (int64_t o = 0; o < l.out; ++o) scales[static_cast<size_t>(g * l.out + o)] = l.scale[static_cast<size_t>(o * l.groups + g)];
  }
  src.add_i32(layer + ".qweight", {l.in, l.out / 8}, qweight);
  src.add_i32(layer + ".qzeros", {l.groups, l.out / 8}, qzeros);
  src.add_f16(layer + ".scales", {l.groups, l.out}, scales);
}

// compressed-tensors pack_to_int32 for 4 and 8 bits: element i of a packed row at bit i * bits of the
// row's words (so 32 / bits per word, little end first), values already offset by 2^(bits-1).
inline std::vector<int32_t> ct_pack_rows(const std::vector<int32_t>& v, int64_t rows, int64_t cols, int bits) {
  const int pack = 32 / bits;
  const int64_t words = (cols + pack - 1) / pack;
  std::vector<int32_t> out(static_cast<size_t>(rows * words), 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      auto& word = reinterpret_cast<uint32_t&>(out[static_cast<size_t>(r * words + c / pack)]);
      word |= static_cast<uint32_t>(v[static_cast<size_t>(r * cols + c)]) << ((c % pack) * bits);
    }
  }
  return out;
}

// weight_packed [out, ceil(in / pack)], weight_scale [out, groups], weight_shape [2] (int64),
// weight_zero_point packed along out: [ceil(out / pack), groups] (asymmetric only).
inline void add_pack_quantized(MemoryWeightSource& src, const std::string& layer, const IntLayer& l, bool symmetric,
                               bool with_g_idx = false) {
  const int pack = 32 / l.bits;
  src.add_i32(layer + ".weight_packed", {l.out, (l.in + pack - 1) / pack}, ct_pack_rows(l.q, l.out, l.in, l.bits));
  src.add_f16(layer + ".weight_scale", {l.out, l.groups}, l.scale);
  std::vector<uint8_t> shape(16);
  const int64_t dims[2] = {l.out, l.in};
  std::memcpy(shape.data(), dims, 16);
  src.add(layer + ".weight_shape", DType::kI64, {2}, shape);
  if (!symmetric) {
    // Transpose to [groups, out], pack along out, transpose back: [ceil(out / pack), groups].
    std::vector<int32_t> zt(static_cast<size_t>(l.groups * l.out));
    for (int64_t o = 0; o < l.out; ++o) {
      for (int64_t g = 0; g < l.groups; ++g) zt[static_cast<size_t>(g * l.out + o)] = l.zero[static_cast<size_t>(o * l.groups + g)];
    }
    const std::vector<int32_t> packed_t = ct_pack_rows(zt, l.groups, l.out, l.bits);
    const int64_t words = (l.out + pack - 1) / pack;
    std::vector<int32_t> packed(static_cast<size_t>(words * l.groups));
    for (int64_t g = 0; g < l.groups; ++g) {
      for (int64_t w = 0; w < words; ++w) packed[static_cast<size_t>(w * l.groups + g)] = packed_t[static_cast<size_t>(g * words + w)];
    }
    src.add_i32(layer + ".weight_zero_point", {words, l.groups}, packed);
  }
  if (with_g_idx) src.add_i32(layer + ".weight_g_idx", {l.in}, l.group_of);
}

}  // namespace kvasir::quant::testing
