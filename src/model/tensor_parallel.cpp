#include "model/tensor_parallel.h"

#include <string>

#include "model/model_family.h"
#include "model/registry.h"

namespace kvasir {
namespace {

enum class Split { kReplicate, kRows, kColumns };

// How a rank's part of each role lies in the full tensor: `Split::kRows` takes rows [begin,
// begin + count), `kColumns` takes columns [begin, begin + count).
struct Part {
  Split split = Split::kReplicate;
  int64_t begin = 0, count = 0;
};

std::string tp_text(int size) { return "tensor parallel size (" + std::to_string(size) + ")"; }

// Rank r's KV head range: its share when there are at least as many KV heads as ranks, else the
// one head its query heads attend with (ranks r * kv / size share it).
void kv_heads_of(const ModelConfig& c, int rank, int size, int64_t* first, int64_t* count) {
  if (c.num_kv_heads >= size) {
    *count = c.num_kv_heads / size;
    *first = rank * *count;
  } else {
    *count = 1;
    *first = static_cast<int64_t>(rank) * c.num_kv_heads / size;
  }
}

// A family's own role: the rank's equal share of the spec's output rows (dimension 1 of a
// [E, rows, cols] stack) or of its input columns (the last dimension).
StatusOr<Part> family_part(const WeightSpec& spec, TensorParallelSplit split, const ModelConfig& c, int rank,
                           int size) {
  if (split == TensorParallelSplit::kReplicate) return Part{};
  if (spec.shape.size() < 2 || spec.shape.size() > 3)
    return internal_error("tensor parallelism: " + spec.role + " must be a matrix or a stack of them to be split");
  const size_t dim = split == TensorParallelSplit::kRows ? spec.shape.size() - 2 : spec.shape.size() - 1;
  const int64_t n = spec.shape[dim];
  if (n % size != 0)
    return invalid_argument("weight " + spec.role + " of the " + c.architecture + " model has " + std::to_string(n) +
                            (split == TensorParallelSplit::kRows ? " rows" : " columns") + ", not divisible by " +
                            tp_text(size) + ".");
  return Part{split == TensorParallelSplit::kRows ? Split::kRows : Split::kColumns, rank * (n / size), n / size};
}

StatusOr<Part> part_of(const WeightSpec& spec, const ModelConfig& c, int rank, int size) {
  const std::string& role = spec.role;
  const int64_t hd = c.head_dim;
  const int64_t heads = c.num_heads / size, ffn = c.intermediate_size / size;
  int64_t kv_first = 0, kv_count = 0;
  kv_heads_of(c, rank, size, &kv_first, &kv_count);
  if (role == "attn_norm.weight" || role == "ffn_norm.weight" || role == "post_attention_norm.weight" ||
      role == "post_ffw_norm.weight" || role == "attn_q_norm.weight" || role == "attn_k_norm.weight" ||
      role == "output_norm.weight")
    return Part{};
  // A bias of a column-parallel projection is split with its rows (Qwen2's q/k/v biases).
  if (role == "attn_q.weight" || role == "attn_q.bias") return Part{Split::kRows, rank * heads * hd, heads * hd};
  if (role == "attn_k.weight" || role == "attn_v.weight" || role == "attn_k.bias" || role == "attn_v.bias")
    return Part{Split::kRows, kv_first * hd, kv_count * hd};
  if (role == "attn_output.weight") return Part{Split::kColumns, rank * heads * hd, heads * hd};
  if (role == "ffn_gate.weight" || role == "ffn_up.weight") return Part{Split::kRows, rank * ffn, ffn};
  if (role == "ffn_down.weight") return Part{Split::kColumns, rank * ffn, ffn};
  if (role == "token_embd.weight" || role == "output.weight") {
    const VocabShard v = vocab_shard(c.vocab_size, rank, size);
    return Part{Split::kRows, v.begin, v.rows};
  }
  KVASIR_ASSIGN_OR_RETURN(const ModelFamily* family, family_of(c));
  if (const auto split = family->tensor_parallel_split(role)) return family_part(spec, *split, c, rank, size);
  return unimplemented("tensor parallelism is not supported for the " + c.architecture +
                       " family yet (it does not split weight " + role +
                       "); run it with --tensor-parallel-size 1");
}

Status shard_spec(WeightSpec& spec, const ModelConfig& c, int rank, int size,
                  const std::function<bool(const WeightSpec&)>& present) {
  auto part = part_of(spec, c, rank, size);
  if (!part.ok() && spec.optional && !present(spec)) return Status();  // never bound
  KVASIR_ASSIGN_OR_RETURN(Part p, std::move(part));
  if (p.split == Split::kReplicate) return Status();
  const bool bias = spec.kind == WeightKind::kVector && spec.shape.size() == 1 && p.split == Split::kRows;
  if (!bias && (spec.kind != WeightKind::kMatrix || spec.shape.size() < 2 || spec.shape.size() > 3))
    return internal_error("tensor parallelism: " + spec.role + " must be a matrix to be split");
  // Rows of one matrix of a stack ([E, rows, cols] experts), of the matrix itself, or of a bias.
  const size_t rows_dim = bias ? 0 : spec.shape.size() - 2, cols_dim = spec.shape.size() - 1;
  for (WeightName* name : {&spec.gguf, &spec.hf}) {
    if (name->transposed)
      return unimplemented("tensor parallelism: " + name->name +
                           " is stored in-features first; it cannot be split yet");
    if (p.split == Split::kRows) {
      // A row range of the (possibly already fused) tensor: the binder's fused-rows view.
      if (!name->fused()) {
        name->row_begin = 0;
        name->fused_rows = spec.shape[rows_dim];
      }
      name->row_begin += p.begin;
    } else {
      if (name->fused())
        return unimplemented("tensor parallelism: " + spec.role + " is a row range of a fused tensor; its columns "
                             "cannot be split yet");
      name->col_begin = p.begin;
      name->full_cols = spec.shape[cols_dim];
    }
  }
  if (p.split == Split::kRows) {
    spec.shape[rows_dim] = p.count;
  } else {
    spec.shape[cols_dim] = p.count;
  }
  return Status();
}

}  // namespace

VocabShard vocab_shard(int64_t vocab_size, int rank, int size) {
  VocabShard v;
  v.padded_rows = (vocab_size + size - 1) / size;
  v.begin = std::min<int64_t>(vocab_size, rank * v.padded_rows);
  v.rows = std::min<int64_t>(vocab_size, v.begin + v.padded_rows) - v.begin;
  return v;
}

StatusOr<ModelConfig> shard_config(const ModelConfig& full, int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size)
    return invalid_argument("tensor parallel rank " + std::to_string(rank) + " of size " + std::to_string(size));
  if (full.num_heads % size != 0)
    return invalid_argument("Total number of attention heads (" + std::to_string(full.num_heads) +
                            ") must be divisible by " + tp_text(size) + ".");
  if (full.num_kv_heads >= size ? full.num_kv_heads % size != 0 : size % full.num_kv_heads != 0)
    return invalid_argument("Total number of key/value heads (" + std::to_string(full.num_kv_heads) +
                            ") must be divisible by " + tp_text(size) + ", or divide it.");
  if (full.intermediate_size % size != 0)
    return invalid_argument("intermediate_size (" + std::to_string(full.intermediate_size) +
                            ") must be divisible by " + tp_text(size) + ".");
  ModelConfig c = full;
  c.num_heads = full.num_heads / size;
  int64_t kv_first = 0;
  kv_heads_of(full, rank, size, &kv_first, &c.num_kv_heads);
  c.intermediate_size = full.intermediate_size / size;
  if (size > 1) {
    KVASIR_ASSIGN_OR_RETURN(const ModelFamily* family, family_of(full));
    KVASIR_RETURN_IF_ERROR(family->shard_family_params(c, size));
  }
  return c;
}

Status shard_manifest(WeightManifest& manifest, const ModelConfig& full, int rank, int size,
                      const std::function<bool(const WeightSpec&)>& present) {
  if (size == 1) return Status();
  for (WeightSpec& spec : manifest.model) KVASIR_RETURN_IF_ERROR(shard_spec(spec, full, rank, size, present));
  for (auto& layer : manifest.layers)
    for (WeightSpec& spec : layer) KVASIR_RETURN_IF_ERROR(shard_spec(spec, full, rank, size, present));
  return Status();
}

Status check_tensor_parallel(const ModelConfig& full, int size, const std::function<bool(const WeightSpec&)>& present) {
  if (size == 1) return Status();
  KVASIR_ASSIGN_OR_RETURN(const ModelFamily* family, family_of(full));
  // The manifest first: a family that cannot be split at all is named before its sizes are.
  for (int rank = 0; rank < size; ++rank) {
    WeightManifest m = family->manifest(full);
    KVASIR_RETURN_IF_ERROR(shard_manifest(m, full, rank, size, present));
    KVASIR_RETURN_IF_ERROR(shard_config(full, rank, size).status());
  }
  return Status();
}

}  // namespace kvasir
