#include "setup/draft_model.h"

#include <algorithm>

#include "common/log.h"

namespace kvasir {

int num_draft_kv_blocks(int target_kv_blocks, int block_size, int max_num_seqs, int num_speculative_tokens) {
  const int64_t per_seq = (num_speculative_tokens + block_size - 1) / block_size + 1;
  return static_cast<int>(std::min<int64_t>(int64_t{target_kv_blocks} + int64_t{max_num_seqs} * per_seq, int64_t{1} << 24));
}

Status check_same_vocabulary(const LoadedModel& target, const LoadedModel& draft) {
  auto mismatch = [&](const std::string& what, const std::string& t, const std::string& d) {
    return invalid_argument("--speculative-config: the draft model " + draft.path +
                            " does not share the target's vocabulary: " + what + " " + d + " (draft) vs " + t +
                            " (target)");
  };
  if (target.config.vocab_size != draft.config.vocab_size) {
    return mismatch("vocab_size", std::to_string(target.config.vocab_size), std::to_string(draft.config.vocab_size));
  }
  const Tokenizer& tt = *target.tokenizer;
  const Tokenizer& dt = *draft.tokenizer;
  if (tt.vocab_size() != dt.vocab_size()) {
    return mismatch("tokenizer size", std::to_string(tt.vocab_size()), std::to_string(dt.vocab_size()));
  }
  if (tt.bos_id() != dt.bos_id()) return mismatch("BOS id", std::to_string(tt.bos_id()), std::to_string(dt.bos_id()));
  if (tt.eos_id() != dt.eos_id()) return mismatch("EOS id", std::to_string(tt.eos_id()), std::to_string(dt.eos_id()));
  auto ids = [](const std::vector<int32_t>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
    return s + "]";
  };
  // Plain words, digits, code, non-ASCII, and the special tokens' own texts.
  std::vector<std::string> probes = {"Hello, world!", " The quick brown fox jumps over the lazy dog.",
                                     "def f(x):\n    return x * 42\n", "Größe 東京 naïve café 🙂", "12345 + 678"};
  if (!tt.bos_token().empty()) probes.push_back(tt.bos_token());
  if (!tt.eos_token().empty()) probes.push_back(tt.eos_token() + "\n" + tt.eos_token());
  for (const std::string& p : probes) {
    const auto a = tt.encode(p, true), b = dt.encode(p, true);
    if (a != b) return mismatch("the ids of \"" + p + "\":", ids(a), ids(b));
  }
  return Status();
}

StatusOr<LoadedDraftModel> load_draft_model(const EngineArgs& args, const LoadedModel& target) {
  LoadOptions lo = LoadOptions::from(args);
  lo.quantization.clear();  // the target's checkpoint format; the draft's own config says its own
  if (args.load_format != "dummy") {
    lo.load_format = "auto";
    lo.tokenizer.clear();
  }
  // With --load-format dummy (as vLLM) the draft too is a config.json with random weights, and it
  // takes the target's --tokenizer: both then hold the same vocabulary.
  LoadedDraftModel d;
  auto m = load_model(args.speculative.draft_model, lo, &target.model->backend());
  if (!m.ok()) {
    return Status(m.status().code(), "--speculative-config: loading the draft model " + args.speculative.draft_model +
                                          ": " + m.status().message());
  }
  d.model = std::move(*m);
  KVASIR_RETURN_IF_ERROR(check_same_vocabulary(target, *d.model));
  return d;
}

CompanionKv draft_kv_companion(const LoadedDraftModel& draft, const EngineArgs& args) {
  CompanionKv c;
  c.bytes_per_block = static_cast<int64_t>(draft.model->model->kv_cache_bytes_per_block(args.block_size));
  c.fixed_bytes = c.bytes_per_block * num_draft_kv_blocks(0, args.block_size, args.max_num_seqs,
                                                          args.speculative.num_speculative_tokens);
  return c;
}

Status allocate_draft_kv_cache(LoadedDraftModel& d, const EngineArgs& args, int target_kv_blocks) {
  const int blocks = num_draft_kv_blocks(target_kv_blocks, args.block_size, args.max_num_seqs,
                                         args.speculative.num_speculative_tokens);
  d.cache = std::make_unique<KvCache>();
  KVASIR_ASSIGN_OR_RETURN(*d.cache, d.model->model->allocate_kv_cache(blocks, args.block_size));
  KVASIR_LOG_INFO("draft model %s: %d KV blocks of %d tokens (%.1f MiB)", args.speculative.draft_model.c_str(), blocks,
                  args.block_size,
                  static_cast<double>(d.model->model->kv_cache_bytes_per_block(args.block_size)) * blocks / (1 << 20));
  return Status();
}

StatusOr<LoadedDraftModel> load_draft_model(const EngineArgs& args, const LoadedModel& target, int target_kv_blocks) {
  KVASIR_ASSIGN_OR_RETURN(LoadedDraftModel d, load_draft_model(args, target));
  KVASIR_RETURN_IF_ERROR(allocate_draft_kv_cache(d, args, target_kv_blocks));
  return d;
}

}  // namespace kvasir
