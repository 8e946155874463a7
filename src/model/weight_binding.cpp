#include "model/weight_binding.h"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "backend/host_buffer.h"
#include "common/log.h"
#include "quant/dequantize.h"

namespace kvasir {

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s;
  for (int64_t d : shape) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return "[" + s + "]";
}

const char* kind_name(WeightKind kind) {
  switch (kind) {
    case WeightKind::kMatrix:
      return "a matrix";
    case WeightKind::kNorm:
      return "a norm weight";
    case WeightKind::kVector:
      return "a bias";
    case WeightKind::kHostMatrix:
      return "a matrix";
  }
  return "a weight";
}

// The types every weight may have: those the reference dequantizer reads. Norms and biases are
// made float32 by it here, on the host; matrices are read by the backend's kernels in the same
// block formats (a GPU converts them with it at upload), and the backend's upload_weight refuses
// the few a kernel lacks (the CPU matmul reads neither Q8_1 nor Q8_K). Integer types (I8..I64)
// and F64 are never weights: a file that gives one is refused here, at load, for every role.
Status check_weight_type(const WeightSpec& spec, const WeightTensor& w) {
  if (quant::dequantize_supported(w.dtype)) return Status();
  std::string allowed;
  for (uint32_t id = 0; id < 64; ++id) {
    const DType t = static_cast<DType>(id);
    if (dtype_info(id) && quant::dequantize_supported(t)) {
      allowed += (allowed.empty() ? "" : ", ") + std::string(dtype_name(t));
    }
  }
  return unimplemented("weight " + w.name + " (" + kind_name(spec.kind) + ") has type " +
                       std::string(dtype_name(w.dtype)) + "; weights must be one of " + allowed);
}

}  // namespace

const WeightName* WeightBinder::locate(const WeightSpec& spec) const {
  if (src_.has_tensor(spec.gguf.name)) return &spec.gguf;
  if (src_.has_tensor(spec.hf.name)) return &spec.hf;
  return nullptr;
}

StatusOr<LayerWeights> WeightBinder::bind(const std::vector<WeightSpec>& specs) {
  LayerWeights out;
  for (const WeightSpec& spec : specs) {
    if (spec.optional && locate(spec) == nullptr) continue;
    KVASIR_ASSIGN_OR_RETURN(Tensor t, bind_one(spec));
    out.tensors[spec.role] = t;
  }
  return out;
}

Status WeightBinder::expect_absent(const std::vector<WeightSpec>& specs,
                                   const std::string& why) const {
  for (const WeightSpec& spec : specs) {
    if (const WeightName* name = locate(spec)) {
      return data_loss("weight " + name->name + " is in the checkpoint, but " + why);
    }
  }
  return Status();
}

StatusOr<WeightTensor> WeightBinder::read(const WeightSpec& spec, const WeightName& name) const {
  KVASIR_ASSIGN_OR_RETURN(WeightTensor w, src_.tensor(name.name));
  if (!name.outer_slice()) return w;
  if (spec.shape.empty() || (name.transposed && spec.shape.size() < 3) ||
      name.outer_begin + spec.shape[0] > name.full_outer) {
    return internal_error("weight " + spec.role + ": entries outside the first dimension of " + name.name);
  }
  if (w.shape.empty() || w.shape[0] != name.full_outer || w.nbytes % static_cast<size_t>(name.full_outer) != 0) {
    return data_loss("weight " + w.name + " has shape " + shape_text(w.shape) + ", expected a first dimension of " +
                     std::to_string(name.full_outer));
  }
  const size_t entry = w.nbytes / static_cast<size_t>(name.full_outer);
  w.packed_int = nullptr;  // describes the whole matrix, not this slice
  w.shape[0] = spec.shape[0];
  w.nbytes = entry * static_cast<size_t>(spec.shape[0]);
  if (w.data != nullptr) w.data += entry * static_cast<size_t>(name.outer_begin);
  return w;
}

StatusOr<Tensor> WeightBinder::bind_one(const WeightSpec& spec) {
  const WeightName* name = locate(spec);
  if (name == nullptr) {
    return not_found("model weight missing: " + spec.gguf.name + " (HF name " + spec.hf.name + ")");
  }
  if (name->transposed) return transposed_matrix(spec, *name);
  if (name->column_slice()) return column_slice(spec, *name);
  if (name->fused() && spec.kind == WeightKind::kVector) return bias_range(spec, *name);
  if (name->fused()) return spec.shape.size() == 3 ? stacked_rows(spec, *name) : fused_rows(spec, *name);
  KVASIR_ASSIGN_OR_RETURN(WeightTensor w, read(spec, *name));
  if (w.packed_int != nullptr && !spec.linear_only) {
    // An int4 form only a linear reads is no use to another op: it binds the dense values.
    w.packed_int = nullptr;
    if (backend_.device() != Device::kCpu) {
      static std::once_flag said;
      std::call_once(said, [] {
        KVASIR_LOG_WARN("MoE expert weights of integer weight-only checkpoints run dequantized in bf16 on this "
                        "backend (no int4 MoE kernel)");
      });
    }
  }
  if (w.shape != spec.shape) {
    return data_loss("weight " + w.name + " has shape " + shape_text(w.shape) + ", expected " +
                     shape_text(spec.shape));
  }
  KVASIR_RETURN_IF_ERROR(check_weight_type(spec, w));
  switch (spec.kind) {
    case WeightKind::kMatrix:
      return upload(w, /*vocab_table=*/spec.role == "token_embd.weight" || spec.role == "output.weight",
                    /*keep_fp8=*/!name->outer_slice());
    case WeightKind::kNorm:
      // GGUF Gemma files store (1 + w) (offset 0); HF files store w and add 1 in the forward pass.
      return to_f32_vector(w, static_cast<float>(config_.norm_weight_offset));
    case WeightKind::kVector:
      return to_f32_vector(w, 0.0f);
    case WeightKind::kHostMatrix:
      return to_f32_host(w);
  }
  return internal_error("unknown weight kind");
}

// A row range of a fused matrix: a view into the fused tensor, uploaded once, so every backend's
// linear runs on it unchanged. Rows whose start would be misaligned for the kernels are copied out.
StatusOr<Tensor> WeightBinder::fused_rows(const WeightSpec& spec, const WeightName& name) {
  if (spec.kind != WeightKind::kMatrix || spec.shape.size() != 2 || name.outer_slice()) {
    return internal_error("fused weight " + spec.role + " must be a matrix");
  }
  const std::vector<int64_t> fused_shape = {name.fused_rows, spec.shape[1]};
  if (name.row_begin + spec.shape[0] > name.fused_rows) {
    return internal_error("fused weight " + spec.role + ": rows outside " + name.name);
  }
  if (backend_.device() != Device::kCpu) {
    // A device holds only these rows (a tensor-parallel shard, or one role of a fused tensor):
    // uploading the whole tensor for a view would keep all of it on every rank.
    KVASIR_ASSIGN_OR_RETURN(WeightTensor w, src_.tensor(name.name));
    if (w.shape != fused_shape) {
      return data_loss("weight " + w.name + " has shape " + shape_text(w.shape) + ", expected " +
                       shape_text(fused_shape));
    }
    KVASIR_RETURN_IF_ERROR(check_weight_type(spec, w));
    const std::optional<size_t> row_bytes = kvasir::row_bytes(w.dtype, spec.shape[1]);
    if (!row_bytes || (w.data != nullptr && *row_bytes * static_cast<size_t>(name.fused_rows) != w.nbytes))
      return internal_error("fused weight " + w.name + ": rows of " + std::string(dtype_name(w.dtype)) + " not separable");
    WeightTensor rows = w;
    rows.shape = spec.shape;
    rows.nbytes = *row_bytes * static_cast<size_t>(spec.shape[0]);
    if (w.data != nullptr) rows.data = w.data + static_cast<size_t>(name.row_begin) * *row_bytes;
    return upload(rows, /*vocab_table=*/spec.role == "token_embd.weight" || spec.role == "output.weight");
  }
  auto it = fused_.find(name.name);
  if (it == fused_.end()) {
    KVASIR_ASSIGN_OR_RETURN(WeightTensor w, src_.tensor(name.name));
    if (w.shape != fused_shape) {
      return data_loss("weight " + w.name + " has shape " + shape_text(w.shape) + ", expected " +
                       shape_text(fused_shape));
    }
    KVASIR_RETURN_IF_ERROR(check_weight_type(spec, w));
    KVASIR_ASSIGN_OR_RETURN(Tensor t, upload(w));
    it = fused_.emplace(name.name, t).first;
  }
  Tensor view = it->second.slice_rows(name.row_begin, spec.shape[0]);
  if (view.data == nullptr || reinterpret_cast<uintptr_t>(view.data) % 32 == 0 ||
      backend_.device() != Device::kCpu) {
    return view;
  }
  KVASIR_ASSIGN_OR_RETURN(WeightTensor w, src_.tensor(name.name));
  WeightTensor rows = w;
  rows.shape = spec.shape;
  rows.nbytes = view.nbytes();
  rows.data = w.data + static_cast<size_t>(name.row_begin) * view.row_bytes();
  return upload(rows);
}

StatusOr<Tensor> WeightBinder::column_slice(const WeightSpec& spec, const WeightName& name) {
  if (spec.kind != WeightKind::kMatrix || spec.shape.size() < 2 || spec.shape.size() > 3 || name.fused() ||
      name.transposed) {
    return internal_error("column slice of " + spec.role + " must be of a plain matrix or a stack of them");
  }
  KVASIR_ASSIGN_OR_RETURN(WeightTensor w, read(spec, name));
  std::vector<int64_t> full = spec.shape;
  full.back() = name.full_cols;
  if (w.shape != full) {
    return data_loss("weight " + w.name + " has shape " + shape_text(w.shape) + ", expected " + shape_text(full));
  }
  KVASIR_RETURN_IF_ERROR(check_weight_type(spec, w));
  const auto info = dtype_info(w.dtype);
  const int64_t bs = info->block_size, cols = spec.shape.back();
  if (name.col_begin % bs != 0 || cols % bs != 0 || name.col_begin + cols > name.full_cols) {
    return unimplemented("weight " + w.name + " (" + std::string(dtype_name(w.dtype)) + ", blocks of " +
                         std::to_string(bs) + " columns) cannot be split at columns [" +
                         std::to_string(name.col_begin) + ", " + std::to_string(name.col_begin + cols) +
                         "): not on block boundaries; choose another --tensor-parallel-size");
  }
  // Every row of every matrix of a stack is one row here.
  const int64_t rows = w.num_elements() / name.full_cols;
  WeightTensor out = w;
  out.shape = spec.shape;
  const size_t src_row = static_cast<size_t>(name.full_cols / bs) * info->type_size;
  const size_t dst_row = static_cast<size_t>(cols / bs) * info->type_size;
  const size_t skip = static_cast<size_t>(name.col_begin / bs) * info->type_size;
  out.nbytes = dst_row * static_cast<size_t>(rows);
  if (w.data == nullptr) return upload(out);  // dummy weights the backend fills on the device
  KVASIR_ASSIGN_OR_RETURN(auto buf, allocate_host_buffer(out.nbytes));
  auto* dst = static_cast<uint8_t*>(buf->data());
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(dst + static_cast<size_t>(r) * dst_row, w.data + static_cast<size_t>(r) * src_row + skip, dst_row);
  }
  out.data = dst;
  owned_.push_back(std::move(buf));
  return upload(out);
}

// Elements [row_begin, row_begin + n) of a bias [fused_rows], or of every bias of a stack
// [E, fused_rows] (a tensor-parallel rank's part of a q/k/v bias, of GPT-OSS's expert biases).
StatusOr<Tensor> WeightBinder::bias_range(const WeightSpec& spec, const WeightName& name) {
  KVASIR_ASSIGN_OR_RETURN(WeightTensor w, read(spec, name));
  std::vector<int64_t> full = spec.shape;
  full.back() = name.fused_rows;
  if (w.shape != full) {
    return data_loss("weight " + w.name + " has shape " + shape_text(w.shape) + ", expected " + shape_text(full));
  }
  KVASIR_RETURN_IF_ERROR(check_weight_type(spec, w));
  const auto info = dtype_info(w.dtype);
  const int64_t n = spec.shape.back();
  if (info->block_size != 1 || spec.shape.size() > 2 || name.row_begin + n > name.fused_rows) {
    return unimplemented("bias " + w.name + " (" + std::string(dtype_name(w.dtype)) + ") cannot be split at [" +
                         std::to_string(name.row_begin) + ", " + std::to_string(name.row_begin + n) + ")");
  }
  const int64_t stacks = spec.shape.size() == 2 ? spec.shape[0] : 1;
  const size_t es = info->type_size, take = static_cast<size_t>(n) * es;
  std::vector<uint8_t> part_bytes(take * static_cast<size_t>(stacks));
  for (int64_t e = 0; e < stacks; ++e) {
    std::memcpy(part_bytes.data() + static_cast<size_t>(e) * take,
                w.data + static_cast<size_t>(e * name.fused_rows + name.row_begin) * es, take);
  }
  WeightTensor part = w;
  part.shape = spec.shape;
  part.nbytes = part_bytes.size();
  part.data = part_bytes.data();
  return to_f32_vector(part, 0.0f);
}

// Rows [row_begin, row_begin + rows) of every matrix of a stack [E, fused_rows, cols] (a
// tensor-parallel rank's slice of each expert): not contiguous, so copied out once.
StatusOr<Tensor> WeightBinder::stacked_rows(const WeightSpec& spec, const WeightName& name) {
  if (spec.kind != WeightKind::kMatrix || spec.shape.size() != 3 || name.transposed || name.column_slice()) {
    return internal_error("row range of " + spec.role + " must be of a plain stack of matrices");
  }
  KVASIR_ASSIGN_OR_RETURN(WeightTensor w, read(spec, name));
  const std::vector<int64_t> full = {spec.shape[0], name.fused_rows, spec.shape[2]};
  if (w.shape != full) {
    return data_loss("weight " + w.name + " has shape " + shape_text(w.shape) + ", expected " + shape_text(full));
  }
  if (name.row_begin + spec.shape[1] > name.fused_rows) {
    return internal_error("stacked weight " + spec.role + ": rows outside " + name.name);
  }
  KVASIR_RETURN_IF_ERROR(check_weight_type(spec, w));
  const size_t row = w.nbytes / static_cast<size_t>(full[0] * full[1]);
  const size_t take = row * static_cast<size_t>(spec.shape[1]);
  WeightTensor out = w;
  out.shape = spec.shape;
  out.nbytes = take * static_cast<size_t>(spec.shape[0]);
  if (w.data == nullptr) return upload(out);  // dummy weights the backend fills on the device
  KVASIR_ASSIGN_OR_RETURN(auto buf, allocate_host_buffer(out.nbytes));
  auto* dst = static_cast<uint8_t*>(buf->data());
  for (int64_t e = 0; e < spec.shape[0]; ++e) {
    const uint8_t* src = w.data + (static_cast<size_t>(e * name.fused_rows + name.row_begin)) * row;
    std::memcpy(dst + static_cast<size_t>(e) * take, src, take);
  }
  out.data = dst;
  owned_.push_back(std::move(buf));
  return upload(out);
}

// A matrix (or a stack of them) stored [..., in, out]: copied once into [..., out, in], the
// layout every backend's matmul reads; a tensor-parallel rank copies only its out-features (a
// row range) or its in-features (a column slice). Only element types (f32, f16, bf16) can be
// transposed: quantized blocks run along the stored rows.
StatusOr<Tensor> WeightBinder::transposed_matrix(const WeightSpec& spec, const WeightName& name) {
  if (spec.kind != WeightKind::kMatrix || spec.shape.size() < 2) {
    return internal_error("transposed weight " + spec.role + " must be a matrix");
  }
  KVASIR_ASSIGN_OR_RETURN(WeightTensor w, read(spec, name));
  const int64_t out_n = spec.shape[spec.shape.size() - 2], in_n = spec.shape.back();
  const int64_t out_full = name.fused() ? name.fused_rows : out_n, in_full = name.column_slice() ? name.full_cols : in_n;
  const int64_t out_begin = name.fused() ? name.row_begin : 0, in_begin = name.column_slice() ? name.col_begin : 0;
  if (out_begin + out_n > out_full || in_begin + in_n > in_full) {
    return internal_error("transposed weight " + spec.role + ": a part outside " + name.name);
  }
  std::vector<int64_t> stored = spec.shape;
  stored[stored.size() - 2] = in_full;
  stored.back() = out_full;
  if (w.shape != stored) {
    return data_loss("weight " + w.name + " has shape " + shape_text(w.shape) + ", expected " +
                     shape_text(stored) + " (in-features first)");
  }
  KVASIR_RETURN_IF_ERROR(check_weight_type(spec, w));
  WeightTensor out = w;
  out.shape = spec.shape;
  const auto info = dtype_info(w.dtype);
  const int64_t mats = w.num_elements() / (in_full * out_full);
  if (w.data == nullptr) {  // dummy weights the backend fills on the device
    out.nbytes = w.nbytes / static_cast<size_t>(in_full * out_full) * static_cast<size_t>(in_n * out_n);
    return upload(out);
  }
  if (!info || info->block_size != 1 || (info->type_size != 2 && info->type_size != 4)) {
    return unimplemented("weight " + w.name + " is stored in-features first as " +
                         std::string(dtype_name(w.dtype)) + "; only f32, f16 and bf16 are transposed at load");
  }
  const size_t es = info->type_size;
  out.nbytes = static_cast<size_t>(mats * in_n * out_n) * es;
  KVASIR_ASSIGN_OR_RETURN(auto buf, allocate_host_buffer(out.nbytes));
  auto* dst = static_cast<uint8_t*>(buf->data());
  // In tiles, so both sides stay in cache; the source may be unaligned, hence memcpy per element.
  constexpr int64_t kTile = 32;
  for (int64_t m = 0; m < mats; ++m) {
    const uint8_t* src = w.data + static_cast<size_t>(m * in_full * out_full) * es;
    uint8_t* to = dst + static_cast<size_t>(m * in_n * out_n) * es;
    for (int64_t i0 = 0; i0 < in_n; i0 += kTile) {
      for (int64_t o0 = 0; o0 < out_n; o0 += kTile) {
        for (int64_t i = i0; i < std::min(in_n, i0 + kTile); ++i) {
          for (int64_t o = o0; o < std::min(out_n, o0 + kTile); ++o) {
            std::memcpy(to + static_cast<size_t>(o * in_n + i) * es,
                        src + static_cast<size_t>((in_begin + i) * out_full + out_begin + o) * es, es);
          }
        }
      }
    }
  }
  out.data = dst;
  owned_.push_back(std::move(buf));
  return upload(out);
}

StatusOr<Tensor> WeightBinder::upload(const WeightTensor& w, bool vocab_table, bool keep_fp8) {
  if (!dtype_info(w.dtype)) return unimplemented("unsupported dtype for weight " + w.name);
  Tensor host;
  host.dtype = w.dtype;
  host.ndim = static_cast<int>(w.shape.size());
  for (int i = 0; i < host.ndim; ++i) host.shape[static_cast<size_t>(i)] = w.shape[static_cast<size_t>(i)];
  host.data = const_cast<uint8_t*>(w.data);
  host.input_quant = w.input_quant;
  host.weight_scales = keep_fp8 ? w.fp8_row_scales : nullptr;
  host.packed_int = keep_fp8 ? w.packed_int : nullptr;  // the whole matrix only, as the FP8 scales
  if (w.fp8_row_scales != nullptr && !keep_fp8 && backend_.device() != Device::kCpu) {
    // Said, not silent: the slice runs with its FP8-rounded values in the backend's compute type.
    static std::once_flag said;
    std::call_once(said, [] {
      KVASIR_LOG_WARN("FP8 weights sliced for tensor parallelism run in bf16 on this backend (FP8 slices "
                      "per rank are not built): FP8 numerics, bf16 memory and speed");
    });
  }
  if (w.packed_int != nullptr && !keep_fp8 && backend_.device() != Device::kCpu) {
    static std::once_flag said_int;
    std::call_once(said_int, [] {
      KVASIR_LOG_WARN("integer weight-only (GPTQ / AWQ / pack-quantized) weights sliced for tensor parallelism or "
                      "split from a fused tensor run dequantized in bf16 on this backend (int4 slices are not built)");
    });
  }
  // Kernels assume aligned rows; safetensors payloads can sit at any offset, so copy those.
  if (reinterpret_cast<uintptr_t>(w.data) % 32 != 0) {
    KVASIR_ASSIGN_OR_RETURN(auto buf, allocate_host_buffer(w.nbytes));
    std::memcpy(buf->data(), w.data, w.nbytes);
    host.data = buf->data();
    owned_.push_back(std::move(buf));
  }
  std::unique_ptr<Buffer> owner;
  auto t = vocab_table ? backend_.upload_vocab_table(host, &owner) : backend_.upload_weight(host, &owner);
  if (!t.ok()) return Status(t.status().code(), "weight " + w.name + ": " + t.status().message());
  if (owner) owned_.push_back(std::move(owner));
  t->input_quant = w.input_quant;  // whatever form the backend keeps the weight in
  if (t->dtype != DType::kF8E4M3) t->weight_scales = nullptr;  // never a host pointer on a kept tensor
  t->packed_int = nullptr;
  return t;
}

StatusOr<Tensor> WeightBinder::to_f32_host(const WeightTensor& w) {
  const int64_t n = w.num_elements();
  if (w.shape.empty() || w.shape.size() > 4) return data_loss("weight " + w.name + " must have 1 to 4 dimensions");
  KVASIR_ASSIGN_OR_RETURN(auto buf, allocate_host_buffer(static_cast<size_t>(n) * sizeof(float)));
  // Row by row through an aligned copy (the source may be unaligned): a block format's rows are
  // whole blocks, so each row dequantizes on its own.
  const int64_t cols = w.shape.back(), rows = n / cols;
  const size_t rb = w.nbytes / static_cast<size_t>(rows);
  std::vector<uint8_t> raw(rb);
  float* out = static_cast<float*>(buf->data());
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(raw.data(), w.data + static_cast<size_t>(r) * rb, rb);
    quant::dequantize_row(w.dtype, raw.data(), out + r * cols, cols);
  }
  Tensor t;
  t.data = buf->data();
  t.dtype = DType::kF32;
  t.ndim = static_cast<int>(w.shape.size());
  for (int i = 0; i < t.ndim; ++i) t.shape[static_cast<size_t>(i)] = w.shape[static_cast<size_t>(i)];
  owned_.push_back(std::move(buf));
  return t;
}

StatusOr<Tensor> WeightBinder::to_f32_vector(const WeightTensor& w, float offset) {
  const int64_t n = w.num_elements();
  std::vector<float> host(static_cast<size_t>(n));
  // Dequantize through an aligned copy: the source may be unaligned (safetensors).
  std::vector<uint8_t> raw(w.data, w.data + w.nbytes);
  quant::dequantize_row(w.dtype, raw.data(), host.data(), n);
  for (float& f : host) f += offset;
  Tensor t = Tensor::make(host.data(), DType::kF32, {n});
  KVASIR_ASSIGN_OR_RETURN(auto buf, allocate_host_buffer(static_cast<size_t>(n) * sizeof(float)));
  std::memcpy(buf->data(), host.data(), host.size() * sizeof(float));
  t.data = buf->data();
  owned_.push_back(std::move(buf));
  std::unique_ptr<Buffer> owner;
  KVASIR_ASSIGN_OR_RETURN(Tensor dev, backend_.upload_weight(t, &owner));
  if (owner) owned_.push_back(std::move(owner));
  return dev;
}

}  // namespace kvasir
