// The benchmark's prompts: `random` (text of a controlled token length, lengths
// drawn uniformly around --random-input-len / --random-output-len as vLLM's
// RandomDataset does) and `prompts` (a JSONL file of real prompts, e.g.
// shared/testdata/prompts beside the checkout). With a tokenizer the random lengths are
// exact, counting the special tokens a completion prompt gets (a BOS) as vLLM does;
// without one they are word counts (about one token each). Deterministic for a
// seed. Must not send anything.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench_serve/openai_request.h"
#include "common/status.h"
#include "tokenizer/tokenizer.h"

namespace kvasir::bench {

struct RandomDatasetOptions {
  int64_t input_len = 1024;
  int64_t output_len = 128;
  double range_ratio = 0; // lengths uniform in [len * (1 - r), len * (1 + r)]
  int64_t prefix_len =
      0; // a shared prefix of this many tokens before every prompt
};

// `tok` may be null (word-count approximation). A request's prompt_len is
// prefix_len + its input length (the tokens the server will count).
StatusOr<std::vector<BenchRequest>>
sample_random_requests(const RandomDatasetOptions &opts, int64_t num_prompts,
                       uint64_t seed, const Tokenizer *tok);

// One prompt per line: a JSON object with "prompt", "text" or "turns" (its
// first turn), or a plain text line. Shuffled with `seed` and repeated as
// needed to reach num_prompts.
StatusOr<std::vector<BenchRequest>>
load_prompt_requests(const std::string &path, int64_t num_prompts,
                     int64_t output_len, uint64_t seed, const Tokenizer *tok);

} // namespace kvasir::bench
