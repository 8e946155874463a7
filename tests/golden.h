// Reads the committed HF-transformers golden data (tests/data/golden/<model>/manifest.json and
// logits/*.f32, written by scripts/gen_golden_logits.py) for the model accuracy tests.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace kvasir::testing {

struct GoldenPrompt {
  std::string id;
  std::string text;
  std::vector<int32_t> token_ids;
  std::vector<int32_t> top1;     // [n_tokens] argmax at each position
  std::vector<double> margin;    // [n_tokens] top1 - top2 logit
  std::vector<int32_t> logits_positions;
  std::vector<float> logits;     // [logits_positions.size(), vocab]
  std::vector<int32_t> generated;  // greedy continuation (EOS ignored)
  std::vector<double> gen_margins;  // [generated.size()] the reference's top1 - top2 logit at each step
};

struct Golden {
  std::string model;
  int vocab_size = 0;
  std::vector<GoldenPrompt> prompts;
};

std::string repo_path(const std::string& rel);
bool file_exists(const std::string& path);
StatusOr<Golden> load_golden(const std::string& model_name);

// Relative L2 error ||a - b|| / ||b||.
double rel_l2(const float* a, const float* b, size_t n);

}  // namespace kvasir::testing
