#include "sched/runner_output_codec.h"

#include <string>

#include "sched/wire_io.h"

namespace kvasir {
namespace {

using wire::Reader;
using wire::Writer;

constexpr uint32_t kMagic = 0x314f524b;  // "KRO1"
constexpr uint32_t kVersion = 1;

// A field added to one of these structs must be added to the codec too (and kVersion bumped):
// these sizes change with it and stop the build here.
static_assert(sizeof(LogprobsLists) == 80, "LogprobsLists changed: update runner_output_codec.cpp");
static_assert(sizeof(RunnerRequestOutput) == 256, "RunnerRequestOutput changed: update runner_output_codec.cpp");
static_assert(sizeof(ModelRunnerOutput) == 24, "ModelRunnerOutput changed: update runner_output_codec.cpp");

void write_logprobs(Writer& w, const std::optional<LogprobsLists>& l) {
  w.pod<uint8_t>(l.has_value());
  if (!l) return;
  w.pod(l->num_rows);
  w.pod(l->num_per_row);
  w.pods(l->token_ids);
  w.pods(l->logprobs);
  w.pods(l->ranks);
}

// The sizes must agree with the row counts: the engine indexes the flat arrays by them.
std::optional<LogprobsLists> read_logprobs(Reader& r, bool* consistent) {
  if (!r.boolean() || !r.ok()) return std::nullopt;
  LogprobsLists l;
  l.num_rows = r.pod<int32_t>();
  l.num_per_row = r.pod<int32_t>();
  l.token_ids = r.pods<TokenId>();
  l.logprobs = r.pods<float>();
  l.ranks = r.pods<int32_t>();
  if (!r.ok()) return std::nullopt;
  const bool rows_ok = l.num_rows >= 0 && l.num_per_row >= 0;
  const uint64_t cells = rows_ok ? static_cast<uint64_t>(l.num_rows) * static_cast<uint64_t>(l.num_per_row) : 0;
  if (!rows_ok || l.token_ids.size() != cells || l.logprobs.size() != cells ||
      l.ranks.size() != static_cast<size_t>(l.num_rows)) {
    *consistent = false;
  }
  return l;
}

}  // namespace

void encode_runner_output(const ModelRunnerOutput& output, std::vector<uint8_t>& out) {
  out.clear();
  Writer w(out);
  w.pod(kMagic);
  w.pod(kVersion);
  w.pod(static_cast<uint32_t>(output.outputs.size()));
  for (const RunnerRequestOutput& o : output.outputs) {
    w.str(o.req_id);
    w.pods(o.sampled_token_ids);
    write_logprobs(w, o.logprobs);
    write_logprobs(w, o.prompt_logprobs);
    w.pods(o.spec_token_ids);
  }
}

StatusOr<ModelRunnerOutput> decode_runner_output(const uint8_t* data, size_t size) {
  Reader r(data, size);
  if (r.pod<uint32_t>() != kMagic || !r.ok()) return data_loss("runner output: no output magic (not a step result)");
  const uint32_t version = r.pod<uint32_t>();
  if (version != kVersion)
    return data_loss("runner output: version " + std::to_string(version) + ", this build reads " +
                     std::to_string(kVersion) + " (processes run different builds?)");
  ModelRunnerOutput m;
  bool consistent = true;
  // Every record is at least 14 bytes (id length, two vector lengths, two flags), so a count past
  // the bytes left is refused before anything is allocated for it.
  for (uint32_t i = 0, n = r.count(14); i < n && r.ok(); ++i) {
    RunnerRequestOutput o;
    o.req_id = r.str();
    o.sampled_token_ids = r.pods<TokenId>();
    o.logprobs = read_logprobs(r, &consistent);
    o.prompt_logprobs = read_logprobs(r, &consistent);
    o.spec_token_ids = r.pods<TokenId>();
    m.outputs.push_back(std::move(o));
  }
  if (!r.ok()) return data_loss("runner output: truncated or corrupt");
  if (!consistent) return data_loss("runner output: a logprobs table's sizes do not match its rows");
  if (r.left() != 0) return data_loss("runner output: " + std::to_string(r.left()) + " bytes past its end");
  return m;
}

}  // namespace kvasir
