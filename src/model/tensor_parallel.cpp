#include "model/tensor_parallel.h"

#include <algorithm>
#include <string>

#include "model/model_family.h"
#include "model/registry.h"

namespace kvasir {
namespace {

enum class Split { kReplicate, kRows, kColumns, kLeading, kAbsent };

// How a rank's part of each role lies in the full tensor: `Split::kRows` takes rows [begin,
// begin + count), `kColumns` columns [begin, begin + count), `kLeading` entries [begin, begin +
// count) of the first dimension; `kAbsent` is a weight the rank does not hold.
struct Part {
  Split split = Split::kReplicate;
  int64_t begin = 0, count = 0;
};

constexpr const char* kNumExperts = "num_experts";
constexpr const char* kFirstExpert = "expert_parallel.first_expert";
constexpr const char* kLocalExperts = "expert_parallel.num_local_experts";

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
// [E, rows, cols] stack; the last dimension of a bias), of its input columns (the last
// dimension), or of its first dimension; its experts of a stack; or all or nothing.
StatusOr<Part> family_part(const WeightSpec& spec, TensorParallelSplit split, const ModelConfig& c,
                           const ShardPosition& at) {
  const int rank = at.rank, size = at.size;
  const bool vector = spec.kind == WeightKind::kVector;
  switch (split) {
    case TensorParallelSplit::kReplicate:
      return Part{};
    case TensorParallelSplit::kAbsent:
      return Part{Split::kAbsent};
    case TensorParallelSplit::kFirstRank:
      return rank == 0 ? Part{} : Part{Split::kAbsent};
    case TensorParallelSplit::kExperts: {
      if (spec.shape.size() < 2) return internal_error("expert parallelism: " + spec.role + " is not a stack of experts");
      const ExpertRange r = expert_range(static_cast<int>(spec.shape[0]), rank, size);
      return Part{Split::kLeading, r.first, r.count};
    }
    case TensorParallelSplit::kRows:
    case TensorParallelSplit::kColumns:
    case TensorParallelSplit::kLeading:
      break;
  }
  const bool rows = split == TensorParallelSplit::kRows, lead = split == TensorParallelSplit::kLeading;
  if (spec.shape.empty() || spec.shape.size() > 3 || (!vector && !lead && spec.shape.size() < 2) ||
      (vector && !rows && !lead))
    return internal_error("tensor parallelism: " + spec.role + " cannot be split that way");
  const size_t dim = lead ? 0 : (rows && !vector) ? spec.shape.size() - 2 : spec.shape.size() - 1;
  const int64_t n = spec.shape[dim];
  if (n % size != 0)
    return invalid_argument("weight " + spec.role + " of the " + c.architecture + " model has " + std::to_string(n) +
                            (lead ? " entries in its first dimension" : rows ? " rows" : " columns") +
                            ", not divisible by " + tp_text(size) + ".");
  const Split s = lead ? Split::kLeading : rows ? Split::kRows : Split::kColumns;
  return Part{s, rank * (n / size), n / size};
}

StatusOr<Part> part_of(const WeightSpec& spec, const ModelConfig& c, const ShardPosition& at) {
  const std::string& role = spec.role;
  const int rank = at.rank, size = at.size;
  // The family first: its blocks may give a generic role another shape (MLA's o_proj).
  KVASIR_ASSIGN_OR_RETURN(const ModelFamily* family, family_of(c));
  if (const auto split = family->tensor_parallel_split(role, c, at)) return family_part(spec, *split, c, at);
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
  // o_proj's bias (GPT-OSS) on rank 0 only: the all-reduce of the partial outputs adds it once.
  if (role == "attn_output.bias") return rank == 0 ? Part{} : Part{Split::kAbsent};
  if (role == "ffn_gate.weight" || role == "ffn_up.weight") return Part{Split::kRows, rank * ffn, ffn};
  if (role == "ffn_down.weight") return Part{Split::kColumns, rank * ffn, ffn};
  if (role == "token_embd.weight" || role == "output.weight") {
    const VocabShard v = vocab_shard(c.vocab_size, rank, size);
    return Part{Split::kRows, v.begin, v.rows};
  }
  return unimplemented("tensor parallelism is not supported for the " + c.architecture +
                       " family yet (it does not split weight " + role +
                       "); run it with --tensor-parallel-size 1");
}

// Rewrites `spec` to rank `at`'s part; false when the rank holds none of it.
StatusOr<bool> shard_spec(WeightSpec& spec, const ModelConfig& c, const ShardPosition& at,
                          const std::function<bool(const WeightSpec&)>& present) {
  auto part = part_of(spec, c, at);
  if (!part.ok() && spec.optional && !present(spec)) return true;  // never bound
  KVASIR_ASSIGN_OR_RETURN(Part p, std::move(part));
  if (p.split == Split::kAbsent) return false;
  if (p.split == Split::kReplicate) return true;
  const bool vector = spec.kind == WeightKind::kVector;
  if (p.split == Split::kLeading) {
    for (WeightName* name : {&spec.gguf, &spec.hf}) {
      name->outer_begin = p.begin;
      name->full_outer = spec.shape[0];
    }
    spec.shape[0] = p.count;
    return true;
  }
  if (vector ? p.split != Split::kRows : (spec.kind != WeightKind::kMatrix || spec.shape.size() < 2))
    return internal_error("tensor parallelism: " + spec.role + " must be a matrix to be split");
  // Rows of one matrix of a stack ([E, rows, cols] experts), of the matrix itself, of a bias (its
  // last dimension, per expert for a stack of biases); columns are the last dimension.
  const size_t rows_dim = vector ? spec.shape.size() - 1 : spec.shape.size() - 2, cols_dim = spec.shape.size() - 1;
  for (WeightName* name : {&spec.gguf, &spec.hf}) {
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
  return true;
}

Status shard_specs(std::vector<WeightSpec>& specs, const ModelConfig& c, const ShardPosition& at,
                   const std::function<bool(const WeightSpec&)>& present) {
  std::vector<WeightSpec> kept;
  kept.reserve(specs.size());
  for (WeightSpec& spec : specs) {
    KVASIR_ASSIGN_OR_RETURN(bool keep, shard_spec(spec, c, at, present));
    if (keep) kept.push_back(std::move(spec));
  }
  specs = std::move(kept);
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

ExpertRange expert_range(int num_experts, int rank, int size) {
  const int base = num_experts / size, extra = num_experts % size;
  return ExpertRange{rank * base + std::min(rank, extra), base + (rank < extra ? 1 : 0)};
}

ExpertRange held_experts(const ModelConfig& c) {
  auto get = [&c](const char* key) {
    auto it = c.family_params.find(key);
    return it == c.family_params.end() ? 0 : static_cast<int>(it->second);
  };
  if (c.family_params.count(kFirstExpert) != 0) return ExpertRange{get(kFirstExpert), get(kLocalExperts)};
  return ExpertRange{0, get(kNumExperts)};
}

Status divide_family_param(ModelConfig& c, const char* key, int size) {
  auto it = c.family_params.find(key);
  if (it == c.family_params.end()) return Status();
  const auto n = static_cast<int64_t>(it->second);
  if (n % size != 0)
    return invalid_argument(std::string(key) + " (" + std::to_string(n) + ") must be divisible by " + tp_text(size) + ".");
  it->second = static_cast<double>(n / size);
  return Status();
}

StatusOr<ModelConfig> shard_config(const ModelConfig& full, int rank, int size, bool expert_parallel) {
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
  if (expert_parallel) {
    const int experts = held_experts(full).count;
    if (experts == 0)
      return invalid_argument("expert parallelism (--enable-expert-parallel) needs a mixture-of-experts model; the " +
                              full.architecture + " model has no experts");
    if (experts < size)
      return invalid_argument("expert parallelism: " + std::to_string(experts) + " experts cannot be distributed over " +
                              std::to_string(size) + " ranks (the tensor parallel size); every rank must hold at "
                              "least one");
    const ExpertRange r = expert_range(experts, rank, size);
    c.family_params[kFirstExpert] = r.first;
    c.family_params[kLocalExperts] = r.count;
  }
  if (size > 1) {
    KVASIR_ASSIGN_OR_RETURN(const ModelFamily* family, family_of(full));
    KVASIR_RETURN_IF_ERROR(family->shard_family_params(full, c, ShardPosition{rank, size, expert_parallel}));
  }
  return c;
}

Status shard_manifest(WeightManifest& manifest, const ModelConfig& full, int rank, int size,
                      const std::function<bool(const WeightSpec&)>& present, bool expert_parallel) {
  if (size == 1) return Status();
  const ShardPosition at{rank, size, expert_parallel};
  KVASIR_RETURN_IF_ERROR(shard_specs(manifest.model, full, at, present));
  for (auto& layer : manifest.layers) KVASIR_RETURN_IF_ERROR(shard_specs(layer, full, at, present));
  return Status();
}

Status check_tensor_parallel(const ModelConfig& full, int size, const std::function<bool(const WeightSpec&)>& present,
                             bool expert_parallel) {
  if (expert_parallel && held_experts(full).count == 0)
    return shard_config(full, 0, size, expert_parallel).status();  // no experts: its message
  if (size == 1) return Status();
  KVASIR_ASSIGN_OR_RETURN(const ModelFamily* family, family_of(full));
  // The config first, as a rank's load does: vLLM's message on the heads before any weight's.
  for (int rank = 0; rank < size; ++rank) {
    KVASIR_RETURN_IF_ERROR(shard_config(full, rank, size, expert_parallel).status());
    WeightManifest m = family->manifest(full);
    KVASIR_RETURN_IF_ERROR(shard_manifest(m, full, rank, size, present, expert_parallel));
  }
  return Status();
}

}  // namespace kvasir
