#include "sample/logit_edits.h"

#include <limits>

#include "common/check.h"

namespace kvasir {
namespace {

class RowEditor {
 public:
  RowEditor(std::span<float> row, SamplerWorkspace* ws) : row_(row), ws_(ws) {}

  float get(int32_t id) const { return row_[static_cast<size_t>(id)]; }
  void set(int32_t id, float value) {
    ws_->undo.emplace_back(id, row_[static_cast<size_t>(id)]);
    row_[static_cast<size_t>(id)] = value;
  }
  // Token ids reach the sampler already validated (request intake, tokenizer), so a bad one here
  // is a broken invariant, not user input.
  void check_id(int32_t id) const {
    KVASIR_CHECK_MSG(id >= 0 && static_cast<size_t>(id) < row_.size(), "token id outside vocab");
  }

 private:
  std::span<float> row_;
  SamplerWorkspace* ws_;
};

// Repetition penalty over the distinct ids of prompt and output (HF/vLLM): a positive logit is
// divided by r and a non-positive one multiplied, so r > 1 always makes a seen token less likely.
void apply_repetition_penalty(RowEditor& ed, const SamplingRequestState& st, float r,
                              SamplerWorkspace* ws) {
  ws->touched.clear();
  for (auto ids : {st.prompt_token_ids, st.output_token_ids}) {
    for (int32_t id : ids) {
      ed.check_id(id);
      if (ws->seen[static_cast<size_t>(id)] == 0) {
        ws->seen[static_cast<size_t>(id)] = 1;
        ws->touched.push_back(id);
      }
    }
  }
  for (int32_t id : ws->touched) {
    const float x = ed.get(id);
    ed.set(id, x > 0.0f ? x / r : x * r);
    ws->seen[static_cast<size_t>(id)] = 0;
  }
}

// OpenAI frequency/presence penalties over generated tokens only: x -= f * count, then x -= p
// once for any token that appeared.
void apply_frequency_presence(RowEditor& ed, const SamplingRequestState& st, float f, float p,
                              SamplerWorkspace* ws) {
  ws->touched.clear();
  for (int32_t id : st.output_token_ids) {
    ed.check_id(id);
    if (ws->counts[static_cast<size_t>(id)]++ == 0) ws->touched.push_back(id);
  }
  for (int32_t id : ws->touched) {
    const int32_t count = ws->counts[static_cast<size_t>(id)];
    ed.set(id, ed.get(id) - f * static_cast<float>(count) - p);
    ws->counts[static_cast<size_t>(id)] = 0;
  }
}

}  // namespace

void apply_logit_edits(std::span<float> row, const SamplingRequestState& st, SamplerWorkspace* ws) {
  const SamplingParams& p = *st.params;
  ws->undo.clear();
  RowEditor ed(row, ws);

  for (const auto& [id, bias] : p.logit_bias) {
    ed.check_id(id);
    ed.set(id, ed.get(id) + bias);
  }

  if (st.num_generated_tokens < p.min_tokens) {
    constexpr float kMasked = -std::numeric_limits<float>::infinity();
    for (int32_t id : p.stop_token_ids) {
      ed.check_id(id);
      ed.set(id, kMasked);
    }
    // With ignore_eos, EOS does not end the request, so it needs no mask.
    if (!p.ignore_eos) {
      for (int32_t id : st.eos_token_ids) {
        ed.check_id(id);
        ed.set(id, kMasked);
      }
    }
  }

  if (p.repetition_penalty != 1.0f) apply_repetition_penalty(ed, st, p.repetition_penalty, ws);
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    apply_frequency_presence(ed, st, p.frequency_penalty, p.presence_penalty, ws);
  }
}

void undo_logit_edits(std::span<float> row, SamplerWorkspace* ws) {
  for (auto it = ws->undo.rbegin(); it != ws->undo.rend(); ++it) {
    row[static_cast<size_t>(it->first)] = it->second;
  }
  ws->undo.clear();
}

}  // namespace kvasir
