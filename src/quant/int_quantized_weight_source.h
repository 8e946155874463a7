// IntQuantizedWeightSource: a WeightSource over an integer weight-only checkpoint (GPTQ, AWQ,
// compressed-tensors pack-quantized) that shows each packed linear layer as the "<layer>.weight"
// [out, in] the model binds, made when first asked for: GGML Q4_0 / Q8_0 blocks where those hold the
// values exactly (packed_int_blocks.h), else float32 (packed_int_weight.h's exact dequantization), so
// every backend runs it unchanged and the CPU is the reference. The packed tensors stay
// reachable as PackedIntWeight for kernels that read them directly. Every layer's tensors are
// checked when the source is made, so a bad file is refused before any weight is bound.
// open_quantized_weights (quantized_weight_source.h) hands it configs whose schemes are integer formats.
// Must not change tensors that are not packed (norms, embeddings, biases pass through).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "loader/weight_source.h"
#include "quant/int_weight_scheme.h"
#include "quant/packed_int_weight.h"

namespace kvasir::quant {

class IntQuantizedWeightSource final : public WeightSource {
 public:
  // Checks every packed layer of `base` against `config` (whose schemes must all be integer formats,
  // int_weight_scheme.h); DataLoss naming the tensor or layer at fault, InvalidArgument when the
  // checkpoint holds no packed layer at all, Unimplemented for a config mixing in other formats.
  static StatusOr<std::unique_ptr<WeightSource>> wrap(std::unique_ptr<WeightSource> base, QuantizationConfig config);
  // --load-format dummy: `base` holds dense dummy linears without values (a GPU fills them); each
  // one the config targets (lm_head aside, as real checkpoints leave it dense) is marked with its
  // scheme (a PackedIntWeight without tensors) so a backend with int4 kernels makes dummy codes of
  // that scheme. Unimplemented when a targeted
  // linear has host values (the CPU cannot make packed dummies).
  static StatusOr<std::unique_ptr<WeightSource>> wrap_dummy(std::unique_ptr<WeightSource> base,
                                                            QuantizationConfig config);

  WeightFormat format() const override { return base_->format(); }
  const std::string& path() const override { return base_->path(); }
  std::vector<std::string> tensor_names() const override;
  bool has_tensor(std::string_view name) const override;
  StatusOr<WeightTensor> tensor(std::string_view name) const override;
  const GgufFile* gguf() const override { return base_->gguf(); }

  // The packed form of the dense weight `weight_name` ("<layer>.weight"), or nullptr when it is not
  // packed (its tensor pointers are null for wrap_dummy's weights).
  const PackedIntWeight* packed(std::string_view weight_name) const;
  const QuantizationConfig& config() const { return config_; }

 private:
  IntQuantizedWeightSource(std::unique_ptr<WeightSource> base, QuantizationConfig config)
      : base_(std::move(base)), config_(std::move(config)) {}

  struct AlignedFree {
    void operator()(uint8_t* p) const;
  };

  std::unique_ptr<WeightSource> base_;
  Status find_packed_layers();

  QuantizationConfig config_;
  std::map<std::string, PackedIntWeight, std::less<>> packed_;  // by "<layer>.weight"
  std::vector<std::string> hidden_;                             // the packed tensors' own names, sorted
  // Dense weights made so far, by name; filled on first request (loading is one thread, but the
  // interface is const, so the cache is guarded).
  mutable std::mutex mu_;
  mutable std::map<std::string, std::unique_ptr<uint8_t[], AlignedFree>, std::less<>> dense_;
};

// The packed form of `weight_name` ("<layer>.weight") when `src` is an IntQuantizedWeightSource that
// holds it, else nullptr: what a backend with integer kernels uploads instead of the dense weight.
const PackedIntWeight* packed_int_weight(const WeightSource& src, std::string_view weight_name);

}  // namespace kvasir::quant
