#include "model/pipeline_parallel.h"

#include <algorithm>
#include <cstdlib>

namespace kvasir {
namespace {

std::string pp_text(int size) { return "pipeline parallel size (" + std::to_string(size) + ")"; }

StatusOr<std::vector<int>> parse_partition(const std::string& text, int num_layers, int size) {
  std::vector<int> counts;
  int sum = 0;
  for (size_t at = 0; at <= text.size();) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(at, end - at);
    char* stop = nullptr;
    const long n = std::strtol(item.c_str(), &stop, 10);
    if (item.empty() || *stop != '\0' || n < 1 || n > num_layers)
      return invalid_argument("VLLM_PP_LAYER_PARTITION \"" + text + "\": \"" + item +
                              "\" is not a layer count in [1, " + std::to_string(num_layers) + "]");
    counts.push_back(static_cast<int>(n));
    sum += static_cast<int>(n);
    at = end + 1;
  }
  if (static_cast<int>(counts.size()) != size)
    return invalid_argument("VLLM_PP_LAYER_PARTITION \"" + text + "\" has " + std::to_string(counts.size()) +
                            " stages, but the " + pp_text(size) + " needs one count per stage");
  if (sum != num_layers)
    return invalid_argument("VLLM_PP_LAYER_PARTITION \"" + text + "\" sums to " + std::to_string(sum) +
                            " layers, but the model has " + std::to_string(num_layers));
  return counts;
}

}  // namespace

StatusOr<LayerRange> pipeline_stage_layers(int num_layers, int rank, int size, const std::string& partition) {
  if (size < 1 || rank < 0 || rank >= size) return invalid_argument("pipeline stage out of range");
  if (num_layers < size)
    return invalid_argument("the model has " + std::to_string(num_layers) + " layers, fewer than the " +
                            pp_text(size) + ": every stage needs at least one layer.");
  std::vector<int> counts(static_cast<size_t>(size), num_layers / size);
  if (!partition.empty()) {
    KVASIR_ASSIGN_OR_RETURN(counts, parse_partition(partition, num_layers, size));
  } else {
    // vLLM: the remainder goes one layer each to the stages before the last, from the back.
    for (int i = 2; i < num_layers % size + 2; ++i) counts[static_cast<size_t>(size - i)] += 1;
  }
  LayerRange r;
  for (int s = 0; s < rank; ++s) r.begin += counts[static_cast<size_t>(s)];
  r.end = r.begin + counts[static_cast<size_t>(rank)];
  return r;
}

Status check_pipeline_parallel(const ModelConfig& config, int size, const std::string& partition) {
  for (int rank = 0; rank < size; ++rank)
    KVASIR_RETURN_IF_ERROR(pipeline_stage_layers(static_cast<int>(config.num_layers), rank, size, partition).status());
  return Status();
}

std::vector<int> micro_batch_bounds(const AttentionMetadata& m, int parts) {
  std::vector<int> bounds = {0};
  const int64_t total = m.query_start_loc[m.num_seqs];
  // Micro-batch k ends at the first sequence boundary at or past k/parts of the tokens (but
  // before the last sequence); a boundary that would leave a micro-batch empty is skipped.
  for (int k = 1; k < parts; ++k) {
    const int64_t target = total * k / parts;
    int s = bounds.back() + 1;
    while (s < m.num_seqs && m.query_start_loc[s] < target) ++s;
    s = std::min(s, m.num_seqs - 1);
    if (s > bounds.back()) bounds.push_back(s);
  }
  bounds.push_back(m.num_seqs);
  return bounds;
}

ForwardBatch micro_batch(const ForwardBatch& batch, int seq_begin, int seq_end, int32_t* qsl) {
  const AttentionMetadata& m = batch.attn;
  const int32_t first = m.query_start_loc[seq_begin];
  for (int s = seq_begin; s <= seq_end; ++s) qsl[s - seq_begin] = m.query_start_loc[s] - first;
  ForwardBatch mb;
  mb.num_tokens = m.query_start_loc[seq_end] - first;
  mb.input_ids = batch.input_ids + first;
  mb.positions = batch.positions + first;
  mb.attn = m;
  mb.attn.num_seqs = seq_end - seq_begin;
  mb.attn.num_tokens = mb.num_tokens;
  mb.attn.query_start_loc = qsl;
  mb.attn.seq_lens = m.seq_lens + seq_begin;
  mb.attn.block_tables = m.block_tables + static_cast<int64_t>(seq_begin) * m.max_blocks_per_seq;
  mb.attn.slot_mapping = m.slot_mapping + first;
  return mb;
}

}  // namespace kvasir
