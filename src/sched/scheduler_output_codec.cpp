#include "sched/scheduler_output_codec.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

#include "sched/wire_io.h"

namespace kvasir {
namespace {

using wire::Reader;
using wire::Writer;

constexpr uint32_t kMagic = 0x314f534b;  // "KSO1"
// 2: drafts to verify (speculative decoding); 3: mask positions; 4: drafts to propose
constexpr uint32_t kVersion = 4;

// A field added to one of these structs must be added to the codec too (and kVersion bumped):
// these sizes change with it and stop the build here.
static_assert(sizeof(SamplingParams) == 232, "SamplingParams changed: update scheduler_output_codec.cpp");
static_assert(sizeof(NewRequestData) == 344, "NewRequestData changed: update scheduler_output_codec.cpp");
static_assert(sizeof(CachedRequestData) == 96, "CachedRequestData changed: update scheduler_output_codec.cpp");
static_assert(sizeof(SchedulerOutput) == 296, "SchedulerOutput changed: update scheduler_output_codec.cpp");
static_assert(sizeof(StructuredOutputSpec) == 64, "StructuredOutputSpec changed: update scheduler_output_codec.cpp");

// A per-request count, sorted by id: the same SchedulerOutput always encodes to the same bytes.
void write_counts(Writer& w, const std::unordered_map<std::string, int32_t>& counts) {
  std::vector<std::pair<std::string, int32_t>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end());
  w.pod(static_cast<uint32_t>(sorted.size()));
  for (const auto& [id, n] : sorted) {
    w.str(id);
    w.pod(n);
  }
}

Status read_counts(Reader& r, std::unordered_map<std::string, int32_t>& counts, const char* twice) {
  for (uint32_t i = 0, n = r.count(8); i < n && r.ok(); ++i) {
    std::string id = r.str();
    const int32_t count = r.pod<int32_t>();
    if (!counts.emplace(std::move(id), count).second) return data_loss(std::string("step message: ") + twice);
  }
  return Status();
}

void write_params(Writer& w, const SamplingParams& p) {
  w.pod<int32_t>(p.n);
  w.pod(p.temperature);
  w.pod(p.top_p);
  w.pod<int32_t>(p.top_k);
  w.pod(p.min_p);
  w.pod(p.repetition_penalty);
  w.pod(p.presence_penalty);
  w.pod(p.frequency_penalty);
  w.pods(p.logit_bias);
  w.opt(p.seed);
  w.pod<int32_t>(p.max_tokens);
  w.pod<int32_t>(p.min_tokens);
  w.pod<uint8_t>(p.ignore_eos);
  w.strs(p.stop);
  w.pods(p.stop_token_ids);
  w.pod<uint8_t>(p.include_stop_str_in_output);
  w.pod<uint8_t>(p.skip_special_tokens);
  w.opt(p.logprobs);
  w.opt(p.prompt_logprobs);
  w.pod<uint8_t>(p.structured_outputs.has_value());
  if (p.structured_outputs) {
    w.pod(static_cast<uint32_t>(p.structured_outputs->kind));
    w.str(p.structured_outputs->text);
    w.strs(p.structured_outputs->choices);
  }
}

SamplingParams read_params(Reader& r) {
  SamplingParams p;
  p.n = r.pod<int32_t>();
  p.temperature = r.pod<float>();
  p.top_p = r.pod<float>();
  p.top_k = r.pod<int32_t>();
  p.min_p = r.pod<float>();
  p.repetition_penalty = r.pod<float>();
  p.presence_penalty = r.pod<float>();
  p.frequency_penalty = r.pod<float>();
  p.logit_bias = r.pods<std::pair<int32_t, float>>();
  p.seed = r.opt<uint64_t>();
  p.max_tokens = r.pod<int32_t>();
  p.min_tokens = r.pod<int32_t>();
  p.ignore_eos = r.boolean();
  p.stop = r.strs();
  p.stop_token_ids = r.pods<int32_t>();
  p.include_stop_str_in_output = r.boolean();
  p.skip_special_tokens = r.boolean();
  p.logprobs = r.opt<int>();
  p.prompt_logprobs = r.opt<int>();
  if (r.boolean()) {
    StructuredOutputSpec spec;
    const uint32_t kind = r.pod<uint32_t>();
    if (kind > static_cast<uint32_t>(StructuredOutputSpec::Kind::kStructuralTag)) {
      r.fail();
      return p;
    }
    spec.kind = static_cast<StructuredOutputSpec::Kind>(kind);
    spec.text = r.str();
    spec.choices = r.strs();
    p.structured_outputs = std::move(spec);
  }
  return p;
}

}  // namespace

void encode_step(const SchedulerOutput& so, const GrammarBitmask* bitmask, std::vector<uint8_t>& out) {
  out.clear();
  Writer w(out);
  w.pod(kMagic);
  w.pod(kVersion);
  w.pod(static_cast<uint32_t>(so.scheduled_new_reqs.size()));
  for (const NewRequestData& r : so.scheduled_new_reqs) {
    w.str(r.req_id);
    w.pods(r.prompt_token_ids);
    write_params(w, r.sampling_params);
    w.opt(r.eos_token_id);
    w.opt(r.adapter_id);
    w.pods(r.block_ids);
    w.pod(r.num_computed_tokens);
  }
  w.pod(static_cast<uint32_t>(so.scheduled_cached_reqs.size()));
  for (const CachedRequestData& r : so.scheduled_cached_reqs) {
    w.str(r.req_id);
    w.pod<uint8_t>(r.resumed_from_preemption);
    w.pods(r.resumed_token_ids);
    w.pods(r.new_block_ids);
    w.pod(r.num_computed_tokens);
  }
  write_counts(w, so.num_scheduled_tokens);
  // Speculative decoding's drafts to verify, sorted by id as the counts are.
  std::vector<std::pair<std::string, std::vector<TokenId>>> drafts(so.scheduled_spec_decode_tokens.begin(),
                                                                   so.scheduled_spec_decode_tokens.end());
  std::sort(drafts.begin(), drafts.end());
  w.pod(static_cast<uint32_t>(drafts.size()));
  for (const auto& [id, d] : drafts) {
    w.str(id);
    w.pods(d);
  }
  write_counts(w, so.num_drafts_to_propose);
  w.pod(so.total_num_scheduled_tokens);
  w.strs(so.finished_req_ids);
  w.strs(so.preempted_req_ids);
  w.strs(so.structured_output_req_ids);
  w.pod<uint8_t>(bitmask != nullptr);
  if (bitmask) {
    w.strs(bitmask->req_ids);
    w.pod(bitmask->words_per_row);
    w.pods(bitmask->words);
    w.pods(bitmask->positions);
  }
}

StatusOr<StepMessage> decode_step(const uint8_t* data, size_t size) {
  Reader r(data, size);
  if (r.pod<uint32_t>() != kMagic || !r.ok()) return data_loss("step message: no step magic (not a step message)");
  const uint32_t version = r.pod<uint32_t>();
  if (version != kVersion)
    return data_loss("step message: version " + std::to_string(version) + ", this build reads " +
                     std::to_string(kVersion) + " (ranks run different builds?)");
  StepMessage m;
  SchedulerOutput& so = m.scheduler_output;
  // Every request record is at least 16 bytes, so a count past the bytes left is refused early.
  for (uint32_t i = 0, n = r.count(16); i < n && r.ok(); ++i) {
    NewRequestData q;
    q.req_id = r.str();
    q.prompt_token_ids = r.pods<TokenId>();
    q.sampling_params = read_params(r);
    q.eos_token_id = r.opt<TokenId>();
    q.adapter_id = r.opt<int64_t>();
    q.block_ids = r.pods<BlockId>();
    q.num_computed_tokens = r.pod<int32_t>();
    so.scheduled_new_reqs.push_back(std::move(q));
  }
  for (uint32_t i = 0, n = r.count(16); i < n && r.ok(); ++i) {
    CachedRequestData q;
    q.req_id = r.str();
    q.resumed_from_preemption = r.boolean();
    q.resumed_token_ids = r.pods<TokenId>();
    q.new_block_ids = r.pods<BlockId>();
    q.num_computed_tokens = r.pod<int32_t>();
    so.scheduled_cached_reqs.push_back(std::move(q));
  }
  KVASIR_RETURN_IF_ERROR(read_counts(r, so.num_scheduled_tokens, "a request is scheduled twice"));
  for (uint32_t i = 0, n = r.count(8); i < n && r.ok(); ++i) {
    std::string id = r.str();
    std::vector<TokenId> d = r.pods<TokenId>();
    if (!so.scheduled_spec_decode_tokens.emplace(std::move(id), std::move(d)).second)
      return data_loss("step message: a request has drafts twice");
  }
  KVASIR_RETURN_IF_ERROR(read_counts(r, so.num_drafts_to_propose, "a request has drafts to propose twice"));
  for (const auto& [id, n] : so.num_drafts_to_propose) {
    if (n < 0) return data_loss("step message: a negative number of drafts to propose");
  }
  so.total_num_scheduled_tokens = r.pod<int32_t>();
  so.finished_req_ids = r.strs();
  so.preempted_req_ids = r.strs();
  so.structured_output_req_ids = r.strs();
  if (r.boolean()) {
    GrammarBitmask b;
    b.req_ids = r.strs();
    b.words_per_row = r.pod<int32_t>();
    b.words = r.pods<int32_t>();
    b.positions = r.pods<int32_t>();
    if (r.ok() && (b.words_per_row < 0 ||
                   b.words.size() != static_cast<size_t>(b.words_per_row) * b.req_ids.size()))
      return data_loss("step message: the grammar bitmask's size does not match its rows");
    if (r.ok() && !b.positions.empty() && b.positions.size() != b.req_ids.size())
      return data_loss("step message: the grammar bitmask's positions do not match its rows");
    m.grammar_bitmask = std::move(b);
  }
  if (!r.ok()) return data_loss("step message: truncated or corrupt");
  if (r.left() != 0) return data_loss("step message: " + std::to_string(r.left()) + " bytes past its end");
  return m;
}

}  // namespace kvasir
