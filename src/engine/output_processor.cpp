#include "engine/output_processor.h"

#include <algorithm>

#include "common/utf8.h"

namespace kvasir {

using Clock = std::chrono::steady_clock;

struct OutputProcessor::State {
  std::string req_id;
  int index = 0;
  SamplingParams params;
  std::shared_ptr<RequestStream> stream;
  std::unique_ptr<IncrementalDetokenizer> detok;
  std::string text;         // all output text so far (after stop-string truncation)
  size_t sent = 0;          // bytes of text already streamed
  size_t hold_back = 0;     // longest stop string - 1: never stream what could start one
  int32_t num_prompt_tokens = 0;
  int32_t num_output_tokens = 0;
  bool stopped = false;     // a stop string ended it; ignore later outputs
  bool first_token_seen = false;
  Clock::time_point arrival, last_token;
};

OutputProcessor::OutputProcessor(const Tokenizer& tokenizer, EngineCore& core, EngineMetrics& metrics,
                                 BlockingQueue<EngineCoreOutputs>& inputs)
    : tokenizer_(tokenizer), core_(core), metrics_(metrics), inputs_(inputs) {}

OutputProcessor::~OutputProcessor() { stop(); }

void OutputProcessor::start() { thread_ = std::thread([this] { loop(); }); }

void OutputProcessor::stop() {
  inputs_.close();
  if (thread_.joinable()) thread_.join();
}

int OutputProcessor::num_tracked() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(states_.size());
}

void OutputProcessor::add(const std::string& req_id, int index, const std::vector<int32_t>& prompt_ids,
                          const SamplingParams& params, std::shared_ptr<RequestStream> stream) {
  auto st = std::make_unique<State>();
  st->req_id = req_id;
  st->index = index;
  st->params = params;
  st->stream = std::move(stream);
  st->detok = std::make_unique<IncrementalDetokenizer>(tokenizer_, params.skip_special_tokens, prompt_ids);
  for (const auto& s : params.stop) st->hold_back = std::max(st->hold_back, s.size() - 1);
  st->num_prompt_tokens = static_cast<int32_t>(prompt_ids.size());
  st->arrival = st->last_token = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  states_[req_id] = std::move(st);
}

void OutputProcessor::loop() {
  while (auto batch = inputs_.pop()) {
    const auto t0 = std::chrono::steady_clock::now();
    for (auto& out : batch->outputs) process(out);
    busy_s_ = busy_s_.load() + std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    {
      std::lock_guard<std::mutex> lock(done_mu_);
      ++num_done_;
    }
    done_cv_.notify_all();
  }
  // Closed: release anyone still waiting for batches that will never be processed.
  std::lock_guard<std::mutex> lock(done_mu_);
  num_done_ = UINT64_MAX;
  done_cv_.notify_all();
}

void OutputProcessor::wait_idle() {
  const uint64_t target = inputs_.num_pushed();
  std::unique_lock<std::mutex> lock(done_mu_);
  done_cv_.wait(lock, [&] { return num_done_ >= target; });
}

static std::vector<PositionLogprobs> convert_logprobs(const LogprobsLists& l, size_t first_row, size_t num_rows) {
  std::vector<PositionLogprobs> v;
  for (size_t r = first_row; r < first_row + num_rows && r < static_cast<size_t>(l.num_rows); ++r) {
    PositionLogprobs p;
    const size_t base = r * static_cast<size_t>(l.num_per_row);
    p.chosen = {l.token_ids[base], l.logprobs[base], l.ranks[r]};
    for (int c = 1; c < l.num_per_row; ++c) {
      if (l.token_ids[base + c] < 0) continue;  // unused column of a row that asked for fewer
      p.top.push_back({l.token_ids[base + c], l.logprobs[base + c], c});
    }
    v.push_back(std::move(p));
  }
  return v;
}

// The earliest stop string in the text past `prev` (and the hold-back window before it, where a
// match could have started); truncates the text there.
std::optional<std::string> OutputProcessor::find_stop_string(State& st, size_t prev) {
  if (st.params.stop.empty() || st.text.size() <= prev) return std::nullopt;
  const size_t from = prev > st.hold_back ? prev - st.hold_back : 0;
  size_t best = std::string::npos;
  std::optional<std::string> stop_str;
  for (const auto& s : st.params.stop) {
    const size_t pos = st.text.find(s, from);
    if (pos != std::string::npos && pos < best) {
      best = pos;
      stop_str = s;
    }
  }
  if (stop_str) {
    st.text.resize(st.params.include_stop_str_in_output ? best + stop_str->size() : best);
    st.sent = std::min(st.sent, st.text.size());
  }
  return stop_str;
}

// Keeps the first `n` tokens of an output (and their logprobs rows): those after a stop string.
void OutputProcessor::cut_output(EngineCoreOutput& out, size_t n) {
  out.new_token_ids.resize(n);
  if (!out.new_logprobs) return;
  LogprobsLists& l = *out.new_logprobs;
  l.num_rows = static_cast<int32_t>(n);
  l.token_ids.resize(n * static_cast<size_t>(l.num_per_row));
  l.logprobs.resize(n * static_cast<size_t>(l.num_per_row));
  l.ranks.resize(n);
}

void OutputProcessor::process(EngineCoreOutput& out) {
  State* st;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = states_.find(out.req_id);
    if (it == states_.end()) return;  // already ended by a stop string
    st = it->second.get();
  }
  const auto now = Clock::now();
  // Stop strings are checked after each token: with speculative decoding one output carries a
  // run of tokens, and a stop string inside it ends the output at the token that completed it.
  const bool drop_stop_token = out.finish_reason == FinishReason::kStop && !out.new_token_ids.empty() &&
                               !st->params.include_stop_str_in_output;
  const size_t num_detok = out.new_token_ids.size() - (drop_stop_token ? 1 : 0);
  std::optional<std::string> stop_str;
  for (size_t i = 0; i < num_detok && !stop_str; ++i) {
    const size_t prev = st->text.size();
    st->text += st->detok->step(out.new_token_ids[i]);
    stop_str = find_stop_string(*st, prev);
    if (stop_str && i + 1 < out.new_token_ids.size()) cut_output(out, i + 1);
  }
  if (!stop_str && out.finished()) {
    const size_t prev = st->text.size();
    st->text += st->detok->flush();
    stop_str = find_stop_string(*st, prev);
  }
  if (!out.new_token_ids.empty()) {
    if (!st->first_token_seen) {
      metrics_.time_to_first_token_s.observe(std::chrono::duration<double>(now - st->arrival).count());
      metrics_.prompt_tokens += out.num_prompt_tokens;
      st->first_token_seen = true;
    } else {
      metrics_.inter_token_latency_s.observe(std::chrono::duration<double>(now - st->last_token).count());
    }
    st->last_token = now;
    metrics_.generation_tokens += static_cast<int64_t>(out.new_token_ids.size());
  }
  if (out.num_prompt_tokens > 0) st->num_prompt_tokens = out.num_prompt_tokens;
  st->num_output_tokens += static_cast<int32_t>(out.new_token_ids.size());
  if (stop_str && !out.finished()) {
    st->stopped = true;
    core_.submit(FinishRequestCmd{st->req_id, RequestStatus::kFinishedStopped});
    out.finish_reason = FinishReason::kStop;
  } else if (stop_str) {
    out.finish_reason = FinishReason::kStop;
    out.stop_token_id.reset();
  }
  RequestOutput delta;
  delta.request_id = st->req_id;
  delta.index = st->index;
  delta.token_ids = out.new_token_ids;
  if (out.new_logprobs) delta.logprobs = convert_logprobs(*out.new_logprobs, 0, out.new_token_ids.size());
  if (out.new_prompt_logprobs) delta.prompt_logprobs = convert_logprobs(*out.new_prompt_logprobs, 0, out.new_prompt_logprobs->num_rows);
  const bool finished = out.finished();
  size_t limit = finished ? st->text.size() : (st->text.size() > st->hold_back ? st->text.size() - st->hold_back : 0);
  limit = std::max(limit, st->sent);
  limit = st->sent + utf8_complete_prefix(std::string_view(st->text).substr(st->sent, limit - st->sent));
  delta.text = st->text.substr(st->sent, limit - st->sent);
  st->sent = limit;
  delta.num_prompt_tokens = st->num_prompt_tokens;
  delta.num_output_tokens = st->num_output_tokens;
  delta.num_cached_tokens = out.num_cached_tokens;
  if (finished) {
    delta.finished = true;
    delta.finish_reason = finish_reason_name(*out.finish_reason);
    delta.error_message = out.error_message;
    if (stop_str) delta.stop_reason_str = stop_str;
    else if (out.stop_token_id) delta.stop_reason_token = out.stop_token_id;
    metrics_.count_finished(delta.finish_reason);
    metrics_.e2e_request_latency_s.observe(std::chrono::duration<double>(now - st->arrival).count());
    metrics_.request_prompt_tokens.observe(st->num_prompt_tokens);
    metrics_.request_generation_tokens.observe(st->num_output_tokens);
  }
  // A finished request stops counting (num_tracked: the data-parallel router's load) before its
  // consumer can see the end, so a client that sends its next request after this one's answer
  // never finds it still counted.
  std::unique_ptr<State> done;
  if (finished) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = states_.find(out.req_id);
    done = std::move(it->second);
    states_.erase(it);
  }
  if (!delta.text.empty() || !delta.token_ids.empty() || finished || !delta.prompt_logprobs.empty()) {
    st->stream->push(std::move(delta));
  }
}

}  // namespace kvasir
