#include "sample/sampler.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "sample/logit_edits.h"
#include "sample/philox.h"
#include "sample/sampler_workspace.h"
#include "sample/token_select.h"

namespace kvasir {
namespace {

// The tokens step 10 draws from: candidates (ids empty = every id, e indexed by id), the
// smallest kept e and the kept mass.
struct KeptSet {
  std::span<const int32_t> ids;
  std::span<float> e;
  float cut = 0.0f;
  double mass = 0.0;
};

// Steps 6-9 of sampler.h on an edited row whose max x_max is finite.
KeptSet build_kept_set(std::span<const float> x, float x_max, const SamplingParams& p,
                       SamplerWorkspace* ws) {
  const int64_t vocab = static_cast<int64_t>(x.size());
  KeptSet kept;
  // min_p: the max token has e == 1, so "prob >= min_p * max prob" is just e >= min_p.
  kept.cut = p.min_p > 0.0f ? p.min_p : 0.0f;
  const bool top_p = p.top_p < 1.0f;
  if (p.top_k >= 1 && p.top_k < vocab) {
    // Only the (about k) tokens at or above the k-th logit, gathered in id order, so no exp
    // runs over the vocab. Their logits go into cand_e and become e in place.
    const float kth = kth_largest(x, p.top_k, ws);
    size_t m = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      const float v = x[static_cast<size_t>(i)];
      if (v >= kth) {
        ws->cand_ids[m] = static_cast<int32_t>(i);
        ws->cand_e[m++] = v;
      }
    }
    kept.ids = std::span<const int32_t>(ws->cand_ids.data(), m);
    kept.e = std::span<float>(ws->cand_e.data(), m);
    kept.mass = fill_probs(kept.e, x_max, p.temperature, kept.cut, kept.e, top_p, ws);
  } else {
    kept.e = std::span<float>(ws->e.data(), static_cast<size_t>(vocab));
    kept.mass = fill_probs(x, x_max, p.temperature, kept.cut, kept.e, top_p, ws);
  }
  if (top_p) {
    const TopPCut cut = top_p_cutoff(kept.e, kept.cut, kept.mass, p.top_p, ws);
    kept.cut = cut.cut;
    kept.mass = cut.kept_mass;
  }
  return kept;
}

// Runs steps 1-9 on `row` and hands the kept set (or nothing, for the argmax rule) to `use`, then
// restores the row. Returns the argmax of the edited row.
template <typename Use>
int32_t with_kept_set(std::span<float> row, const SamplingRequestState& st, SamplerWorkspace* ws,
                      Use use) {
  apply_logit_edits(row, st, ws);
  const int32_t best = argmax(row);
  const float x_max = row[static_cast<size_t>(best)];
  // Greedy needs no softmax. A row with no finite maximum (all masked, or a NaN/inf from the
  // model) has no distribution to draw from, so it takes the argmax rule too.
  if (!st.params->greedy() && std::isfinite(x_max)) {
    use(build_kept_set(row, x_max, *st.params, ws));
  }
  undo_logit_edits(row, ws);
  return best;
}

}  // namespace

Sampler::Sampler(int32_t vocab_size, int num_workers) : vocab_size_(vocab_size) {
  KVASIR_CHECK(vocab_size > 0);
  KVASIR_CHECK(num_workers >= 1);
  workspaces_.reserve(static_cast<size_t>(num_workers));
  for (int i = 0; i < num_workers; ++i) {
    workspaces_.push_back(std::make_unique<SamplerWorkspace>(vocab_size));
  }
}

Sampler::~Sampler() = default;

void Sampler::prepare_output(std::span<const SamplingRequestState> rows, SamplerOutput* out) {
  int max_num_logprobs = -1;
  for (const SamplingRequestState& st : rows) {
    KVASIR_CHECK(st.params != nullptr);
    if (st.params->logprobs.has_value()) {
      max_num_logprobs = std::max(max_num_logprobs, *st.params->logprobs);
    }
  }
  out->sampled_token_ids.assign(rows.size(), kNoToken);
  out->logprobs.resize(static_cast<int>(rows.size()), max_num_logprobs);
}

void Sampler::sample(std::span<float> logits, std::span<const SamplingRequestState> rows,
                     SamplerOutput* out) {
  prepare_output(rows, out);
  sample_rows(logits, rows, 0, static_cast<int>(rows.size()), 0, out);
}

void Sampler::sample_rows(std::span<float> logits, std::span<const SamplingRequestState> rows,
                          int row_begin, int row_end, int worker, SamplerOutput* out) {
  const size_t vocab = static_cast<size_t>(vocab_size_);
  KVASIR_CHECK(logits.size() == rows.size() * vocab);
  KVASIR_CHECK(0 <= row_begin && row_begin <= row_end &&
               static_cast<size_t>(row_end) <= rows.size());
  KVASIR_CHECK(worker >= 0 && worker < num_workers());
  KVASIR_CHECK_MSG(out->sampled_token_ids.size() == rows.size() &&
                       out->logprobs.num_rows == static_cast<int>(rows.size()),
                   "SamplerOutput not prepared for this batch");
  SamplerWorkspace* ws = workspaces_[static_cast<size_t>(worker)].get();
  for (int r = row_begin; r < row_end; ++r) {
    const SamplingRequestState& st = rows[static_cast<size_t>(r)];
    KVASIR_CHECK(st.params != nullptr);
    std::span<float> row = logits.subspan(static_cast<size_t>(r) * vocab, vocab);
    const int32_t token = sample_row(row.data(), st, ws);
    out->sampled_token_ids[static_cast<size_t>(r)] = token;
    if (st.params->logprobs.has_value()) {
      compute_row_logprobs(row, token, *st.params->logprobs, r, ws, &out->logprobs);
    }
  }
}

int32_t Sampler::sample_row(float* row_data, const SamplingRequestState& st, SamplerWorkspace* ws) {
  std::span<float> row(row_data, static_cast<size_t>(vocab_size_));
  int32_t drawn = kNoToken;
  const int32_t best = with_kept_set(row, st, ws, [&](const KeptSet& kept) {
    const double u =
        philox_uniform(st.rng_key, static_cast<uint64_t>(st.num_generated_tokens), kRngStreamToken);
    drawn = draw_token(kept.ids, kept.e, kept.cut, kept.mass, u);
  });
  return drawn != kNoToken ? drawn : best;
}

void Sampler::distribution(std::span<float> logits_row, const SamplingRequestState& st,
                           std::span<float> probs, int worker) {
  KVASIR_CHECK(logits_row.size() == static_cast<size_t>(vocab_size_));
  KVASIR_CHECK(probs.size() == logits_row.size());
  KVASIR_CHECK(worker >= 0 && worker < num_workers());
  KVASIR_CHECK(st.params != nullptr);
  SamplerWorkspace* ws = workspaces_[static_cast<size_t>(worker)].get();
  std::fill(probs.begin(), probs.end(), 0.0f);
  bool drawable = false;
  const int32_t best = with_kept_set(logits_row, st, ws, [&](const KeptSet& kept) {
    // Normalised by the sum of what is written, so the probs add up to 1 up to rounding.
    double total = 0.0;
    for (float v : kept.e) total += (v >= kept.cut && v > 0.0f) ? v : 0.0f;
    if (total <= 0.0) return;
    drawable = true;
    for (size_t i = 0; i < kept.e.size(); ++i) {
      const float v = kept.e[i];
      if (!(v >= kept.cut && v > 0.0f)) continue;
      const size_t id = kept.ids.empty() ? i : static_cast<size_t>(kept.ids[i]);
      probs[id] = static_cast<float>(v / total);
    }
  });
  if (!drawable) probs[static_cast<size_t>(best)] = 1.0f;
}

void Sampler::prompt_logprobs(std::span<const float> logits,
                              std::span<const int32_t> target_token_ids, int num_logprobs,
                              LogprobsTensors* out) {
  out->resize(static_cast<int>(target_token_ids.size()), std::max(num_logprobs, 0));
  prompt_logprobs_rows(logits, target_token_ids, num_logprobs, 0,
                       static_cast<int>(target_token_ids.size()), 0, out);
}

void Sampler::prompt_logprobs_rows(std::span<const float> logits,
                                   std::span<const int32_t> target_token_ids, int num_logprobs,
                                   int row_begin, int row_end, int worker, LogprobsTensors* out) {
  const size_t vocab = static_cast<size_t>(vocab_size_);
  KVASIR_CHECK(logits.size() == target_token_ids.size() * vocab);
  KVASIR_CHECK(0 <= row_begin && row_begin <= row_end &&
               static_cast<size_t>(row_end) <= target_token_ids.size());
  KVASIR_CHECK(worker >= 0 && worker < num_workers());
  KVASIR_CHECK(out->num_rows == static_cast<int>(target_token_ids.size()));
  SamplerWorkspace* ws = workspaces_[static_cast<size_t>(worker)].get();
  for (int r = row_begin; r < row_end; ++r) {
    compute_row_logprobs(logits.subspan(static_cast<size_t>(r) * vocab, vocab),
                         target_token_ids[static_cast<size_t>(r)], num_logprobs, r, ws, out);
  }
}

}  // namespace kvasir
