#include "runner/model_runner.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "common/check.h"
#include "common/log.h"
#include "runner/draft_model_proposer.h"

#include "sample/philox.h"
#include "sample/rejection_sampler.h"
#include "sample/token_bitmask.h"

namespace kvasir {

ModelRunner::ModelRunner(DecoderModel& model, KvCache& cache, const RunnerConfig& config, const DraftModelRef& draft)
    : model_(model),
      cache_(cache),
      config_(config),
      caps_(model.backend().capabilities()),
      sampler_(model.config().vocab_size, 1),
      input_batch_(config.block_size) {
  if (config.speculative.method == "draft_model") {
    KVASIR_CHECK_MSG(draft.model != nullptr && draft.cache != nullptr, "setup loads the draft model first");
    proposer_ = std::make_unique<DraftModelProposer>(*draft.model, *draft.cache, draft.max_tokens_per_forward);
  } else if (config.speculative.method == "eagle" || config.speculative.method == "eagle3") {
    KVASIR_CHECK_MSG(draft.eagle_head != nullptr && draft.cache != nullptr, "setup loads the EAGLE head first");
    eagle_ = std::make_unique<EagleProposer>(*draft.eagle_head, *draft.cache);
  } else if (config.speculative.enabled()) {
    StatusOr<std::unique_ptr<Proposer>> p = make_proposer(config.speculative);
    KVASIR_CHECK_MSG(p.ok(), "the speculative config was validated at start");
    proposer_ = std::move(*p);
  }
  // Drafts are proposed from tokens known on the host, so a speculating runner never overlaps.
  overlap_ = config.overlap_steps && !proposer_ && !eagle_ && model.feeds_sampled_tokens();
}

ModelRunner::~ModelRunner() {
  for (int c = 0; c < 2; ++c) {
    const StepTimes& t = device_times_[c];
    if (t.steps == 0) continue;
    const double n = static_cast<double>(t.steps);
    KVASIR_LOG_INFO("runner, host ms per device-sampled %s step over %lld: recording %.3f, sample call %.3f, after %.3f",
                    c ? "constrained" : "free", static_cast<long long>(t.steps), t.record_us / n / 1e3,
                    t.sample_us / n / 1e3, t.after_us / n / 1e3);
  }
  if (verify_steps_[kVerifyHost] + verify_steps_[kVerifyDevice] + verify_steps_[kVerifyOneQueryRows] > 0) {
    KVASIR_LOG_INFO("speculative verify steps: %lld on the device as one-query rows (graph-replayable), %lld on the "
                    "device as multi-token queries, %lld on the host sampling path",
                    static_cast<long long>(verify_steps_[kVerifyOneQueryRows]),
                    static_cast<long long>(verify_steps_[kVerifyDevice]), static_cast<long long>(verify_steps_[kVerifyHost]));
  }
  if (async_steps_ > 0) {
    KVASIR_LOG_INFO("overlapped steps: %lld of %lld device-sampled steps were launched before the previous step's "
                    "tokens were back; %lld left their tokens on the device, %lld read them back at once",
                    static_cast<long long>(overlapped_steps_), static_cast<long long>(async_steps_ + read_back_steps_),
                    static_cast<long long>(async_steps_), static_cast<long long>(read_back_steps_));
  }
  if (bitmask_steps_ > 0) {
    KVASIR_LOG_INFO("grammar masks: the runner waited %.3f ms per step on average over %lld steps",
                    bitmask_wait_us_ / 1000.0 / static_cast<double>(bitmask_steps_), static_cast<long long>(bitmask_steps_));
  }
}

namespace {

using Clock = std::chrono::steady_clock;
double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

int next_pow2(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

bool needs_host_sampler(const SamplingParams& p, int num_generated) {
  return p.logprobs.has_value() || p.prompt_logprobs.has_value() || !p.logit_bias.empty() ||
         p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f ||
         p.min_tokens > num_generated;
}

}  // namespace

bool ModelRunner::can_sample_on_device(const SchedulerOutput& so) const {
  if (!config_.device_sampling || !caps_.device_sampling) return false;
  if (!so.structured_output_req_ids.empty() && !caps_.device_token_bitmask) return false;
  int num_sampled_rows = 0, num_drafts = 0;
  for (const ScheduledRequest& s : scheduled_) {
    if (needs_host_sampler(s.state->params, s.state->num_output_tokens())) return false;
    if (s.samples) num_sampled_rows += 1 + s.num_drafts;
    num_drafts += s.num_drafts;
  }
  if (num_drafts == 0) return true;
  // A verify step samples 1 + k rows per request: all of them must fit the logits workspace (the
  // host path computes logits in chunks instead). Grammar rows mask each draft position's row.
  // The read-back bound counts the bucket padding too (at most 7 rows past a multiple of 8).
  return num_sampled_rows <= model_.max_num_logits() &&
         num_sampled_rows + 7 + static_cast<int>(scheduled_.size()) <= kMaxDeviceVerifyReadBack;
}

bool ModelRunner::all_rows_decode_or_verify() const {
  for (const ScheduledRequest& s : scheduled_) {
    if (!s.samples || s.num_tokens != 1 + s.num_drafts) return false;
  }
  return true;
}

Status ModelRunner::build_batch(bool pad_for_device, bool feed) {
  rows_.clear();
  input_ids_.clear(), input_id_sources_.clear(), positions_.clear(), slot_mapping_.clear(), query_start_loc_.assign(1, 0);
  bool any_fed = false;
  seq_lens_.clear(), sample_rows_.clear(), prompt_rows_.clear(), prompt_targets_.clear();
  seq_rows_.clear(), verify_rows_.clear();
  const int bs = config_.block_size;
  // A step of decode and verify rows only becomes a pure decode step on the device: each verify
  // token its own one-query sequence whose context ends at that token. All the step's K/V is
  // written before attention reads it, so token j of a request sees the tokens before it in this
  // step (causal within the request) exactly as one multi-token query would; but the step keeps
  // the decode shape the backend pads to buckets and replays as a graph.
  const bool one_query_rows = pad_for_device && all_rows_decode_or_verify();
  one_query_rows_ = one_query_rows;
  for (const ScheduledRequest& s : scheduled_) {
    CachedRequestState& r = *s.state;
    const int32_t n = s.num_tokens, start = s.start;
    ScheduledRow row{s.req_id, &r, n, static_cast<int32_t>(input_ids_.size())};
    row.start = start;
    for (int32_t p = start; p < start + n; ++p) {
      const TokenId t = r.tokens[static_cast<size_t>(p)];
      if (is_placeholder(t)) {
        // Sampled by the step before, still on the device: the embedding reads it there.
        if (!feed) return internal_error("request " + *s.req_id + " computes a token that is not back from the device");
        input_ids_.push_back(0);
        input_id_sources_.push_back(placeholder_row(t));
        any_fed = true;
      } else {
        input_ids_.push_back(t);
        input_id_sources_.push_back(-1);
      }
      positions_.push_back(p);
      slot_mapping_.push_back(int64_t{r.block_ids[static_cast<size_t>(p / bs)]} * bs + p % bs);
      if (one_query_rows) {
        query_start_loc_.push_back(static_cast<int32_t>(input_ids_.size()));
        seq_lens_.push_back(p + 1);
        seq_rows_.push_back(static_cast<int32_t>(rows_.size()));
      }
    }
    if (r.params.prompt_logprobs.has_value() && start < r.num_prompt_tokens - 1) {
      // Position p predicts prompt token p + 1; the last prompt position predicts the first output.
      const int32_t end = std::min(start + n, r.num_prompt_tokens - 1);
      row.prompt_row_begin = static_cast<int>(prompt_rows_.size());
      for (int32_t p = start; p < end; ++p) {
        prompt_rows_.push_back(row.first_token_row + (p - start));
        prompt_targets_.push_back(r.tokens[static_cast<size_t>(p + 1)]);
      }
      row.num_prompt_rows = end - start;
    }
    if (s.samples) {
      row.logits_row = static_cast<int>(sample_rows_.size());
      row.num_drafts = s.num_drafts;
      row.rng_key = rng_key_for_request(r.params.seed, config_.seed, r.arrival_index);
      // A verify step samples at the last known token and after each draft.
      for (int32_t j = s.num_drafts; j >= 0; --j) sample_rows_.push_back(row.first_token_row + n - 1 - j);
    }
    if (!one_query_rows) {
      query_start_loc_.push_back(static_cast<int32_t>(input_ids_.size()));
      seq_lens_.push_back(start + n);
      seq_rows_.push_back(static_cast<int32_t>(rows_.size()));
    }
    rows_.push_back(row);
  }

  const size_t num_real_seqs = seq_rows_.size();
  size_t num_seqs = num_real_seqs;
  size_t max_blocks = 1;
  for (const auto& row : rows_) max_blocks = std::max(max_blocks, row.req->block_ids.size());
  if (pad_for_device) {
    max_blocks = static_cast<size_t>(next_pow2(static_cast<int>(max_blocks)));
    // Padding sequences: token 0 at position 0 over block 0, written nowhere (slot -1), sampled
    // greedily and dropped. A step with verify rows (more sequences than requests) has more
    // sequences than max_num_seqs allows; its buckets go as far as the logits workspace, sized
    // for them (max_num_seqs x (1 + k) with speculation on a GPU, setup/loaded_model.cpp).
    if (input_ids_.size() == num_real_seqs && num_real_seqs > 0) {
      const int cap = num_real_seqs > rows_.size() ? model_.max_num_logits() : config_.max_num_seqs;
      num_seqs = static_cast<size_t>(caps_.decode_bucket(static_cast<int>(num_real_seqs), cap));
      for (size_t i = num_real_seqs; i < num_seqs; ++i) {
        sample_rows_.push_back(static_cast<int32_t>(input_ids_.size()));
        input_ids_.push_back(0);
        input_id_sources_.push_back(-1);
        positions_.push_back(0);
        slot_mapping_.push_back(-1);
        query_start_loc_.push_back(static_cast<int32_t>(input_ids_.size()));
        seq_lens_.push_back(1);
      }
    }
  }
  block_tables_.assign(num_seqs * max_blocks, 0);
  for (size_t i = 0; i < num_real_seqs; ++i) {
    const std::vector<BlockId>& ids = rows_[static_cast<size_t>(seq_rows_[i])].req->block_ids;
    std::copy(ids.begin(), ids.end(), block_tables_.begin() + static_cast<std::ptrdiff_t>(i * max_blocks));
  }
  batch_ = ForwardBatch{};
  batch_.num_tokens = static_cast<int>(input_ids_.size());
  batch_.input_ids = input_ids_.data();
  // Every step that may feed names its sources (all -1 when none is fed), once any step has left
  // tokens on the device: fed and unfed decode steps then record alike and share a CUDA graph.
  batch_.input_id_sources = any_fed || (feed && async_steps_ > 0) ? input_id_sources_.data() : nullptr;
  step_fed_ = any_fed;
  batch_.positions = positions_.data();
  batch_.attn.num_seqs = static_cast<int>(num_seqs);
  batch_.attn.num_tokens = batch_.num_tokens;
  batch_.attn.query_start_loc = query_start_loc_.data();
  batch_.attn.seq_lens = seq_lens_.data();
  batch_.attn.block_tables = block_tables_.data();
  batch_.attn.max_blocks_per_seq = static_cast<int>(max_blocks);
  batch_.attn.slot_mapping = slot_mapping_.data();
  batch_.attn.block_size = config_.block_size;
  return Status();
}

Status ModelRunner::compute_logits(const std::vector<int32_t>& rows, std::vector<float>& out) {
  const size_t vocab = static_cast<size_t>(model_.config().vocab_size);
  out.resize(rows.size() * vocab);
  const int chunk = model_.max_num_logits();
  for (size_t b = 0; b < rows.size(); b += static_cast<size_t>(chunk)) {
    const int n = static_cast<int>(std::min(rows.size() - b, static_cast<size_t>(chunk)));
    KVASIR_RETURN_IF_ERROR(model_.compute_logits(rows.data() + b, n, out.data() + b * vocab));
  }
  return Status();
}

static LogprobsLists to_lists(const LogprobsTensors& t, int row_begin, int num_rows) {
  LogprobsLists l;
  l.num_rows = num_rows;
  l.num_per_row = t.num_columns;
  for (int r = row_begin; r < row_begin + num_rows; ++r) {
    for (int c = 0; c < t.num_columns; ++c) {
      l.token_ids.push_back(t.token_id(r, c));
      l.logprobs.push_back(t.logprob(r, c));
    }
    l.ranks.push_back(t.ranks[static_cast<size_t>(r)]);
  }
  return l;
}

Status ModelRunner::collect_bitmask_rows(const GrammarBitmaskFuture& bitmask) {
  bitmask_.reset();
  bitmask_logits_rows_.clear();
  if (!bitmask.valid()) return Status();
  const auto t0 = std::chrono::steady_clock::now();
  bitmask_ = bitmask.get();
  ++bitmask_steps_;
  bitmask_wait_us_ += std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
  if (!bitmask_ || bitmask_->req_ids.empty()) return Status();
  const GrammarBitmask& m = *bitmask_;
  if (m.words_per_row < token_bitmask_words(model_.config().vocab_size) ||
      m.words.size() != m.req_ids.size() * static_cast<size_t>(m.words_per_row)) {
    return internal_error("grammar bitmask has the wrong shape for the model's vocabulary");
  }
  if (!m.positions.empty() && m.positions.size() != m.req_ids.size()) {
    return internal_error("grammar bitmask has a position list that does not match its rows");
  }
  bitmask_logits_rows_.assign(m.req_ids.size(), -1);
  // Few grammar rows per step: a scan of the step's rows per mask row beats building a map. A
  // verify row's 1 + d sampling rows are consecutive from its logits_row.
  for (size_t i = 0; i < m.req_ids.size(); ++i) {
    for (const auto& row : rows_) {
      if (row.logits_row >= 0 && *row.req_id == m.req_ids[i]) {
        const int32_t position = m.position(i);
        if (position < 0 || position > row.num_drafts) {
          return internal_error("grammar bitmask row for position " + std::to_string(position) + " of request " +
                                m.req_ids[i] + ", which verifies " + std::to_string(row.num_drafts) + " drafts");
        }
        bitmask_logits_rows_[i] = row.logits_row + position;
        break;
      }
    }
  }
  return Status();
}

Status ModelRunner::sample_on_device(const GrammarBitmaskFuture& bitmask, bool async) {
  const int n = static_cast<int>(sample_rows_.size());
  device_rows_.assign(static_cast<size_t>(n), DeviceSamplingRow{});  // padding rows: greedy
  verify_rows_.clear(), verify_drafts_.clear();
  bool any_drafts = false;
  for (const auto& row : rows_) {
    if (row.logits_row < 0) continue;
    const CachedRequestState& r = *row.req;
    // The tokens end with the drafts: row j of a verify draws at output position g + j, as the
    // plain step that would sample that token (sample/rejection_sampler.h).
    const uint64_t g = r.tokens.size() - static_cast<size_t>(r.num_prompt_tokens) - static_cast<size_t>(row.num_drafts);
    for (int j = 0; j <= row.num_drafts; ++j) {
      DeviceSamplingRow& d = device_rows_[static_cast<size_t>(row.logits_row + j)];
      d.temperature = r.params.temperature;
      d.top_p = r.params.top_p;
      d.min_p = r.params.min_p;
      d.top_k = r.params.top_k;
      d.rng_key = row.rng_key;
      d.position = g + static_cast<uint64_t>(j);
    }
    verify_rows_.push_back(DraftVerifyRow{row.logits_row, row.num_drafts, static_cast<int32_t>(verify_drafts_.size()), 0});
    verify_drafts_.insert(verify_drafts_.end(), r.tokens.end() - row.num_drafts, r.tokens.end());
    any_drafts = any_drafts || row.num_drafts > 0;
  }
  KVASIR_ASSIGN_OR_RETURN(Tensor logits, model_.compute_logits_on_device(sample_rows_.data(), n));
  // The masks may still be filling on the engine's side: start the forward pass first, so the
  // device computes while this thread waits.
  if (bitmask.valid()) model_.backend().submit();
  t_submitted_ = Clock::now();
  KVASIR_RETURN_IF_ERROR(collect_bitmask_rows(bitmask));
  if (bitmask_ && !bitmask_logits_rows_.empty()) {
    KVASIR_RETURN_IF_ERROR(model_.backend().apply_token_bitmask(
        logits, bitmask_->words.data(), bitmask_->words_per_row, bitmask_logits_rows_.data(),
        static_cast<int>(bitmask_logits_rows_.size())));
  }
  sampler_out_.sampled_token_ids.resize(static_cast<size_t>(n));
  if (!any_drafts) {
    verify_rows_.clear();  // a plain step: every sampled row is its request's token
    if (async) return model_.backend().sample_async(logits, device_rows_.data(), n);
    return model_.backend().sample(logits, device_rows_.data(), n, sampler_out_.sampled_token_ids.data());
  }
  if (async) return internal_error("a verify step cannot leave its tokens on the device");
  verify_num_emitted_.resize(verify_rows_.size());
  return model_.backend().sample_and_verify(logits, device_rows_.data(), n, verify_rows_.data(),
                                            static_cast<int>(verify_rows_.size()), verify_drafts_.data(),
                                            static_cast<int>(verify_drafts_.size()),
                                            sampler_out_.sampled_token_ids.data(), verify_num_emitted_.data());
}

StatusOr<ModelRunnerOutput> ModelRunner::execute(const SchedulerOutput& so, const GrammarBitmaskFuture& bitmask) {
  KVASIR_CHECK_MSG(launched_.empty(), "execute() with steps launched and not finished");
  KVASIR_RETURN_IF_ERROR(launch(so, bitmask));
  return finish();
}

int ModelRunner::num_uncollected() const {
  int n = 0;
  for (const LaunchedStep& s : launched_) n += s.on_device ? 1 : 0;
  return n;
}

Status ModelRunner::collect_oldest() {
  for (LaunchedStep& step : launched_) {
    if (!step.on_device) continue;
    collected_.resize(static_cast<size_t>(step.num_sample_rows));
    KVASIR_RETURN_IF_ERROR(model_.backend().collect_sampled(collected_.data()));
    for (const LaunchedStep::Sampled& s : step.sampled) {
      RunnerRequestOutput& out = step.result.outputs[static_cast<size_t>(s.output)];
      const TokenId tok = collected_[static_cast<size_t>(s.logits_row)];
      out.sampled_token_ids.assign(1, tok);
      // Gone when a later step's diff finished it (an abort); preempted ones keep their tokens.
      CachedRequestState* r = input_batch_.find(out.req_id);
      if (r == nullptr) continue;
      const auto at = static_cast<size_t>(s.token_index);
      if (at >= r->tokens.size() || !is_placeholder(r->tokens[at]) || placeholder_row(r->tokens[at]) != s.logits_row) {
        return internal_error("request " + out.req_id + " lost the place of a token sampled on the device");
      }
      r->tokens[at] = tok;
    }
    step.on_device = false;
    step.sampled.clear();
    return Status();
  }
  return Status();
}

bool ModelRunner::can_launch_behind(const SchedulerOutput& so) const {
  if (!overlap_ || !config_.device_sampling || !caps_.device_sampling) return false;
  if (!so.structured_output_req_ids.empty() || !so.scheduled_spec_decode_tokens.empty()) return false;
  for (const NewRequestData& d : so.scheduled_new_reqs) {
    if (needs_host_sampler(d.sampling_params, 0)) return false;
  }
  for (const CachedRequestData& d : so.scheduled_cached_reqs) {
    const CachedRequestState* r = input_batch_.find(d.req_id);
    if (r == nullptr || needs_host_sampler(r->params, r->num_output_tokens())) return false;
  }
  return true;
}

Status ModelRunner::launch(const SchedulerOutput& so, const GrammarBitmaskFuture& bitmask) {
  // Only the newest step's tokens may stand as placeholders when a step is built.
  while (num_uncollected() > 1) KVASIR_RETURN_IF_ERROR(collect_oldest());
  LaunchedStep& step = launched_.emplace_back();
  return launch_step(so, bitmask, step);
}

StatusOr<ModelRunnerOutput> ModelRunner::finish() {
  if (launched_.empty()) return internal_error("finish() without a launched step");
  if (launched_.front().on_device) KVASIR_RETURN_IF_ERROR(collect_oldest());
  ModelRunnerOutput result = std::move(launched_.front().result);
  launched_.pop_front();
  return result;
}

Status ModelRunner::launch_step(const SchedulerOutput& so, const GrammarBitmaskFuture& bitmask, LaunchedStep& step) {
  ModelRunnerOutput& result = step.result;
  const auto t_enter = Clock::now();
  if (proposer_) {
    for (const std::string& id : so.finished_req_ids) proposer_->finish_request(id);
    for (const std::string& id : so.preempted_req_ids) proposer_->preempt_request(id);
  }
  if (eagle_) {
    for (const std::string& id : so.finished_req_ids) eagle_->finish_request(id);
    for (const std::string& id : so.preempted_req_ids) eagle_->preempt_request(id);
  }
  KVASIR_RETURN_IF_ERROR(input_batch_.apply(so, &scheduled_));
  if (scheduled_.empty()) return Status();
  const bool on_device = can_sample_on_device(so);
  const bool drafts =
      std::any_of(scheduled_.begin(), scheduled_.end(), [](const ScheduledRequest& s) { return s.num_drafts > 0; });
  // A grammar row's mask waits for the engine to fold the step before, which waits for this
  // runner to answer it: the step before must be collected first. Drafts come from known tokens.
  const bool feed = overlap_ && on_device && !drafts && so.structured_output_req_ids.empty();
  // The earlier step's tokens are needed on the host (or its answer by the engine) first.
  if (!feed) {
    while (num_uncollected() > 0) KVASIR_RETURN_IF_ERROR(collect_oldest());
  }
  // Bucket padding needs the device-sampling path (padding rows are sampled there and dropped).
  KVASIR_RETURN_IF_ERROR(build_batch(on_device && caps_.decode_batch_buckets, feed));
  if (batch_.num_tokens == 0) return Status();
  KVASIR_RETURN_IF_ERROR(model_.run_layers(batch_, cache_));
  if (on_device) {
    // A plain step's tokens may stay on the device (its read-back then overlaps the next step)
    // where the next step can read them there: the same conditions as feeding, but for grammar
    // rows, whose masks are filled before this step samples.
    const bool async = overlap_ && !drafts && !sample_rows_.empty();
    if (step_fed_) ++overlapped_steps_;
    // A step that samples nothing still ends here: the backend may hold recorded work that
    // reads this step's host arrays.
    if (!sample_rows_.empty()) KVASIR_RETURN_IF_ERROR(sample_on_device(bitmask, async));
    else model_.backend().synchronize();
    if (async) {
      ++async_steps_;
      step.on_device = true;
      step.num_sample_rows = static_cast<int32_t>(sample_rows_.size());
      result.outputs.reserve(rows_.size());
      for (const auto& row : rows_) {
        RunnerRequestOutput& out = result.outputs.emplace_back();
        out.req_id = *row.req_id;
        if (row.logits_row < 0) continue;
        step.sampled.push_back(LaunchedStep::Sampled{static_cast<int32_t>(result.outputs.size() - 1), row.logits_row,
                                                     static_cast<int32_t>(row.req->tokens.size())});
        InputBatch::append_sampled(*row.req, -(row.logits_row + 1));
      }
      StepTimes& t = device_times_[bitmask.valid()];
      ++t.steps;
      t.record_us += std::chrono::duration<double, std::micro>(t_submitted_ - t_enter).count();
      return Status();
    }
    if (!sample_rows_.empty()) ++read_back_steps_;
    const auto t_sampled = Clock::now();
    result.outputs.reserve(rows_.size());
    // A verify step's tokens come back packed per sampling request (verify_rows_ order).
    size_t verify_index = 0, packed = 0;
    for (const auto& row : rows_) {
      RunnerRequestOutput out;
      out.req_id = *row.req_id;
      if (row.logits_row >= 0 && !verify_rows_.empty()) {
        const int emitted = verify_num_emitted_[verify_index++];
        const std::span<const int32_t> tokens(sampler_out_.sampled_token_ids.data() + packed, static_cast<size_t>(emitted));
        packed += static_cast<size_t>(emitted);
        out.sampled_token_ids.assign(tokens.begin(), tokens.end());
        if (row.num_drafts > 0) InputBatch::finish_verify(*row.req, row.num_drafts, tokens);
        else InputBatch::append_sampled(*row.req, tokens[0]);
      } else if (row.logits_row >= 0) {
        const int32_t tok = sampler_out_.sampled_token_ids[static_cast<size_t>(row.logits_row)];
        out.sampled_token_ids.push_back(tok);
        InputBatch::append_sampled(*row.req, tok);
      }
      result.outputs.push_back(std::move(out));
    }
    if (!verify_rows_.empty()) ++verify_steps_[one_query_rows_ ? kVerifyOneQueryRows : kVerifyDevice];
    if (!sample_rows_.empty()) {
      StepTimes& t = device_times_[bitmask.valid()];
      ++t.steps;
      t.after_us += us_since(t_sampled);
      t.record_us += std::chrono::duration<double, std::micro>(t_submitted_ - t_enter).count();
      t.sample_us += std::chrono::duration<double, std::micro>(t_sampled - t_submitted_).count();
    }
    propose_drafts(result, so.num_drafts_to_propose);
    return Status();
  }
  KVASIR_RETURN_IF_ERROR(compute_logits(sample_rows_, sample_logits_));
  if (!prompt_rows_.empty()) {
    KVASIR_RETURN_IF_ERROR(compute_logits(prompt_rows_, prompt_logits_));
    int max_n = 0;
    for (const auto& row : rows_) {
      if (row.num_prompt_rows > 0) max_n = std::max(max_n, *row.req->params.prompt_logprobs);
    }
    sampler_.prompt_logprobs(prompt_logits_, prompt_targets_, max_n, &prompt_lp_);
  }

  states_.clear();
  for (const auto& row : rows_) {
    if (row.logits_row < 0) continue;
    const CachedRequestState& r = *row.req;
    SamplingRequestState st;
    st.params = &r.params;
    st.prompt_token_ids = std::span<const int32_t>(r.tokens.data(), static_cast<size_t>(r.num_prompt_tokens));
    st.output_token_ids = std::span<const int32_t>(r.tokens.data() + r.num_prompt_tokens,
                                                   r.tokens.size() - static_cast<size_t>(r.num_prompt_tokens));
    st.num_generated_tokens = static_cast<int>(st.output_token_ids.size());
    st.eos_token_ids = config_.eos_token_ids;
    st.rng_key = row.rng_key;
    if (row.num_drafts == 0) {
      states_.push_back(st);
      continue;
    }
    // The tokens end with the drafts: they are not output yet.
    DraftVerifyRequest v;
    v.state = st;
    v.state.num_generated_tokens -= row.num_drafts;
    v.num_drafts = row.num_drafts;
    append_verify_rows(v, &states_);
  }
  KVASIR_RETURN_IF_ERROR(collect_bitmask_rows(bitmask));
  if (bitmask_) {
    const size_t vocab = static_cast<size_t>(model_.config().vocab_size);
    const size_t w = static_cast<size_t>(bitmask_->words_per_row);
    for (size_t i = 0; i < bitmask_logits_rows_.size(); ++i) {
      const int r = bitmask_logits_rows_[i];
      if (r < 0) continue;
      apply_token_bitmask(std::span<float>(sample_logits_.data() + static_cast<size_t>(r) * vocab, vocab),
                          std::span<const int32_t>(bitmask_->words.data() + i * w, w));
    }
  }
  if (!states_.empty()) sampler_.sample(sample_logits_, states_, &sampler_out_);
  if (std::any_of(rows_.begin(), rows_.end(), [](const ScheduledRow& r) { return r.num_drafts > 0; })) {
    ++verify_steps_[kVerifyHost];
  }

  result.outputs.reserve(rows_.size());
  for (const auto& row : rows_) {
    RunnerRequestOutput out;
    out.req_id = *row.req_id;
    if (row.num_prompt_rows > 0) {
      out.prompt_logprobs = to_lists(prompt_lp_, row.prompt_row_begin, row.num_prompt_rows);
    }
    if (row.logits_row >= 0 && row.num_drafts > 0) {
      const std::span<const int32_t> samples(sampler_out_.sampled_token_ids.data() + row.logits_row,
                                             static_cast<size_t>(row.num_drafts) + 1);
      const std::span<const int32_t> drafts(row.req->tokens.data() + row.req->tokens.size() - row.num_drafts,
                                            static_cast<size_t>(row.num_drafts));
      const int emitted = num_emitted_tokens(drafts, samples);
      out.sampled_token_ids.assign(samples.begin(), samples.begin() + emitted);
      InputBatch::finish_verify(*row.req, row.num_drafts, samples.first(static_cast<size_t>(emitted)));
      if (row.req->params.logprobs.has_value()) out.logprobs = to_lists(sampler_out_.logprobs, row.logits_row, emitted);
    } else if (row.logits_row >= 0) {
      const int32_t tok = sampler_out_.sampled_token_ids[static_cast<size_t>(row.logits_row)];
      out.sampled_token_ids.push_back(tok);
      InputBatch::append_sampled(*row.req, tok);
      if (row.req->params.logprobs.has_value()) out.logprobs = to_lists(sampler_out_.logprobs, row.logits_row, 1);
    }
    result.outputs.push_back(std::move(out));
  }
  propose_drafts(result, so.num_drafts_to_propose);
  return Status();
}

}  // namespace kvasir
