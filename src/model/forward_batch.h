// ForwardBatch: one flattened step of several sequences, as the runner hands it to the model:
// token ids and positions of every scheduled token, where their K/V go (slot mapping) and what
// each sequence attends to (block tables). Plain host data; the model never sees requests.
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace kvasir {

struct ForwardBatch {
  int num_tokens = 0;
  const int32_t* input_ids = nullptr;  // [num_tokens]
  // Overlapped steps (Backend::sample_async): per token, the row of the previous step's device
  // samples that holds its id (input_ids[i] is then a stand-in), or -1; null when every id is in
  // input_ids. Only where DecoderModel::feeds_sampled_tokens().
  const int32_t* input_id_sources = nullptr;
  const int32_t* positions = nullptr;  // [num_tokens]
  AttentionMetadata attn;              // sequences, block tables, slot mapping
  int num_logits = 0;
  const int32_t* logits_indices = nullptr;  // [num_logits] token rows whose logits are wanted
};

}  // namespace kvasir
