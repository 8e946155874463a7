#include "model/tensor_parallel.h"

#include <string>

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

StatusOr<Part> part_of(const std::string& role, const ModelConfig& c, int rank, int size) {
  const int64_t hd = c.head_dim;
  const int64_t heads = c.num_heads / size, ffn = c.intermediate_size / size;
  int64_t kv_first = 0, kv_count = 0;
  kv_heads_of(c, rank, size, &kv_first, &kv_count);
  if (role == "attn_norm.weight" || role == "ffn_norm.weight" || role == "post_attention_norm.weight" ||
      role == "post_ffw_norm.weight" || role == "attn_q_norm.weight" || role == "attn_k_norm.weight" ||
      role == "output_norm.weight")
    return Part{};
  if (role == "attn_q.weight") return Part{Split::kRows, rank * heads * hd, heads * hd};
  if (role == "attn_k.weight" || role == "attn_v.weight") return Part{Split::kRows, kv_first * hd, kv_count * hd};
  if (role == "attn_output.weight") return Part{Split::kColumns, rank * heads * hd, heads * hd};
  if (role == "ffn_gate.weight" || role == "ffn_up.weight") return Part{Split::kRows, rank * ffn, ffn};
  if (role == "ffn_down.weight") return Part{Split::kColumns, rank * ffn, ffn};
  if (role == "token_embd.weight" || role == "output.weight") {
    const VocabShard v = vocab_shard(c.vocab_size, rank, size);
    return Part{Split::kRows, v.begin, v.rows};
  }
  return unimplemented("tensor parallelism does not split weight " + role + " (of a " + c.architecture +
                       " model) yet; run it with --tensor-parallel-size 1");
}

Status shard_spec(WeightSpec& spec, const ModelConfig& c, int rank, int size,
                  const std::function<bool(const WeightSpec&)>& present) {
  auto part = part_of(spec.role, c, rank, size);
  if (!part.ok() && spec.optional && !present(spec)) return Status();  // never bound
  KVASIR_ASSIGN_OR_RETURN(Part p, std::move(part));
  if (p.split == Split::kReplicate) return Status();
  if (spec.kind != WeightKind::kMatrix || spec.shape.size() != 2)
    return internal_error("tensor parallelism: " + spec.role + " must be a matrix to be split");
  for (WeightName* name : {&spec.gguf, &spec.hf}) {
    if (p.split == Split::kRows) {
      // A row range of the (possibly already fused) tensor: the binder's fused-rows view.
      if (!name->fused()) {
        name->row_begin = 0;
        name->fused_rows = spec.shape[0];
      }
      name->row_begin += p.begin;
    } else {
      if (name->fused())
        return unimplemented("tensor parallelism: " + spec.role + " is a row range of a fused tensor; its columns "
                             "cannot be split yet");
      name->col_begin = p.begin;
      name->full_cols = spec.shape[1];
    }
  }
  if (p.split == Split::kRows) {
    spec.shape[0] = p.count;
  } else {
    spec.shape[1] = p.count;
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

}  // namespace kvasir
