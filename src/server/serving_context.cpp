#include "server/serving_context.h"

#include <algorithm>

#include "server/serving_job.h"

namespace kvasir::server {
namespace {

// The most text one token stands for: its vocabulary string is at least as long as the bytes it
// covers (byte-level and metaspace alphabets only lengthen text, <0xNN> stands for one byte).
size_t longest_token_bytes(const Tokenizer& tok) {
  size_t longest = 1;
  for (size_t id = 0; id < tok.vocab_size(); ++id) {
    if (auto t = tok.id_to_token(static_cast<int32_t>(id))) longest = std::max(longest, t->size());
  }
  return longest;
}

}  // namespace

ServingContext::ServingContext(EngineGroup& engine, const Tokenizer& tokenizer, int32_t vocab_size, int max_model_len,
                               std::optional<ChatTemplate> chat_template, std::string chat_template_error,
                               ServingOptions opts)
    : engine_(engine),
      tokenizer_(tokenizer),
      vocab_size_(vocab_size),
      max_model_len_(max_model_len),
      max_prompt_bytes_(static_cast<size_t>(std::max(1, max_model_len)) * longest_token_bytes(tokenizer)),
      chat_template_(std::move(chat_template)),
      chat_template_error_(std::move(chat_template_error)),
      opts_(std::move(opts)),
      admission_(opts_.max_num_queued_reqs),
      response_store_(opts_.max_stored_responses, opts_.max_stored_response_bytes),
      pump_(opts_.num_pump_threads) {
  if (opts_.served_model_names.empty()) opts_.served_model_names.push_back(opts_.model_root);
}

ServingContext::~ServingContext() {
  pump_.stop();
  std::lock_guard<std::mutex> lock(jobs_mu_);
  jobs_.clear();
}

Status ServingContext::check_prompt_bytes(size_t num_bytes) const {
  if (num_bytes <= max_prompt_bytes_) return Status();
  return invalid_argument("The prompt is " + std::to_string(num_bytes) + " bytes long; at most " +
                          std::to_string(max_prompt_bytes_) + " bytes can fit in this model's context of " +
                          std::to_string(max_model_len_) + " tokens.");
}

StatusOr<std::vector<int32_t>> ServingContext::tokenize_prompt(std::string_view text, bool add_special_tokens) const {
  KVASIR_RETURN_IF_ERROR(check_prompt_bytes(text.size()));
  return tokenizer_.encode(text, add_special_tokens);
}

Status ServingContext::check_model(const std::string& name) const {
  if (name.empty()) return Status();
  const auto& names = opts_.served_model_names;
  if (std::find(names.begin(), names.end(), name) != names.end()) return Status();
  return not_found("The model `" + name + "` does not exist.");
}

Status ServingContext::try_admit(int64_t num_sequences) {
  Status st = admission_.try_admit(num_sequences);
  if (st.code() == StatusCode::kResourceExhausted) num_rejected_queue_full.fetch_add(1);
  return st;
}

void ServingContext::start_job(std::shared_ptr<GenerationJob> job) {
  {
    std::lock_guard<std::mutex> lock(jobs_mu_);
    jobs_[job.get()] = job;
  }
  pump_.add(std::move(job));
}

void ServingContext::finish_job(GenerationJob* job) {
  bool idle = false;
  {
    std::lock_guard<std::mutex> lock(jobs_mu_);
    jobs_.erase(job);
    idle = jobs_.empty();
  }
  if (idle) idle_cv_.notify_all();
}

bool ServingContext::wait_idle_until(std::chrono::steady_clock::time_point until) const {
  std::unique_lock<std::mutex> lock(jobs_mu_);
  return idle_cv_.wait_until(lock, until, [&] { return jobs_.empty(); });
}

size_t ServingContext::num_inflight() const {
  std::lock_guard<std::mutex> lock(jobs_mu_);
  return jobs_.size();
}

void ServingContext::abort_all() {
  std::vector<std::shared_ptr<GenerationJob>> jobs;
  {
    std::lock_guard<std::mutex> lock(jobs_mu_);
    for (auto& [ptr, job] : jobs_) jobs.push_back(job);
  }
  for (auto& j : jobs) j->abort_engine_requests();
}

}  // namespace kvasir::server
