#include "bench_forced_verify.h"

#include <algorithm>

#include "backend/draft_verify.h"

namespace kvasir {

StatusOr<ForcedVerifyResult> run_forced_verify_decode(DecoderModel& model, KvCache& cache, ContiguousBatch& cb,
                                                      std::vector<int32_t> last, std::vector<int32_t> next,
                                                      int num_steps, int num_drafts, bool device,
                                                      const ForcedVerifyStepFn& after_step) {
  const int B = static_cast<int>(next.size()), K = num_drafts, rows = B * (1 + K);
  if (rows > model.max_num_logits()) return invalid_argument("forced verify: batch * (1 + K) rows exceed the logits workspace");
  const size_t vocab = static_cast<size_t>(model.config().vocab_size);
  std::vector<std::vector<int32_t>> step(static_cast<size_t>(B));
  std::vector<DraftVerifyRow> requests(static_cast<size_t>(B));
  std::vector<int32_t> drafts(static_cast<size_t>(B) * K), tokens(static_cast<size_t>(rows)), emitted(static_cast<size_t>(B));
  std::vector<DeviceSamplingRow> greedy(static_cast<size_t>(rows));  // temperature 0: argmax
  std::vector<float> logits(device ? 0 : static_cast<size_t>(rows) * vocab);
  ForcedVerifyResult res;
  for (int g = 0; g < num_steps; ++g) {
    for (int s = 0; s < B; ++s) {
      // The continuation of a 2-cycle ... last, next: last, next, last, ...
      std::vector<int32_t>& in = step[static_cast<size_t>(s)];
      in.assign(1, next[static_cast<size_t>(s)]);
      for (int j = 1; j <= K; ++j) {
        const int32_t d = j % 2 ? last[static_cast<size_t>(s)] : next[static_cast<size_t>(s)];
        in.push_back(d);
        drafts[static_cast<size_t>(s * K + j - 1)] = d;
      }
      requests[static_cast<size_t>(s)] = DraftVerifyRow{s * (1 + K), K, s * K, 0};
    }
    const ForwardBatch& fb = cb.build(step, /*all_logits=*/true, /*one_query_rows=*/true);
    if (device) {
      KVASIR_RETURN_IF_ERROR(model.run_layers(fb, cache));
      KVASIR_ASSIGN_OR_RETURN(Tensor dl, model.compute_logits_on_device(fb.logits_indices, fb.num_logits));
      KVASIR_RETURN_IF_ERROR(model.backend().sample_and_verify(dl, greedy.data(), rows, requests.data(), B,
                                                               drafts.data(), B * K, tokens.data(), emitted.data()));
    } else {
      KVASIR_RETURN_IF_ERROR(model.forward(fb, cache, logits.data()));
      for (int r = 0; r < rows; ++r) {
        const float* row = logits.data() + static_cast<size_t>(r) * vocab;
        tokens[static_cast<size_t>(r)] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
      }
      verify_drafts_on_host(tokens.data(), requests.data(), B, drafts.data(), tokens.data(), emitted.data());
    }
    cb.commit();  // all 1 + K positions, whatever the verify kept
    size_t packed = 0;
    for (int s = 0; s < B; ++s) {
      const int e = emitted[static_cast<size_t>(s)];
      res.accepted_tokens += e - 1;
      packed += static_cast<size_t>(e);
      // The next step starts after the committed drafts: its first token is the verify's last
      // emitted one (the bonus when every draft was kept).
      last[static_cast<size_t>(s)] = step[static_cast<size_t>(s)].back();
      next[static_cast<size_t>(s)] = tokens[packed - 1];
    }
    res.draft_tokens += int64_t{B} * K;
    ++res.steps;
    if (after_step) KVASIR_RETURN_IF_ERROR(after_step(step, next));
  }
  return res;
}

}  // namespace kvasir
