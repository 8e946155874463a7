#include "spec/suffix_decoding.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/check.h"

namespace kvasir {

namespace {

Status check_token_ids(std::span<const TokenId> token_ids, const char* what) {
  for (size_t i = 0; i < token_ids.size(); ++i) {
    if (token_ids[i] < 0) {
      return invalid_argument(std::string("suffix decoding: ") + what + " token " + std::to_string(i) +
                              " is negative (" + std::to_string(token_ids[i]) + ")");
    }
  }
  return Status::ok_status();
}

}  // namespace

Status SuffixDecodingConfig::validate() const {
  auto bad = [](const std::string& m) { return invalid_argument("speculative_config: " + m); };
  if (num_speculative_tokens < 1 || num_speculative_tokens > kMaxSuffixSpeculativeTokens) {
    return bad("num_speculative_tokens must be in [1, " + std::to_string(kMaxSuffixSpeculativeTokens) +
               "], got " + std::to_string(num_speculative_tokens));
  }
  if (max_tree_depth < 1 || max_tree_depth > kMaxSuffixTreeDepth) {
    return bad("suffix_decoding_max_tree_depth must be in [1, " + std::to_string(kMaxSuffixTreeDepth) +
               "], got " + std::to_string(max_tree_depth));
  }
  if (max_cached_requests < 0) {
    return bad("suffix_decoding_max_cached_requests must be >= 0 (0 turns the global cache off), got " +
               std::to_string(max_cached_requests));
  }
  if (max_cached_tokens < 1) {
    return bad("suffix_decoding_max_cached_tokens must be >= 1, got " + std::to_string(max_cached_tokens));
  }
  if (!std::isfinite(max_spec_factor) || max_spec_factor < 0) {
    return bad("suffix_decoding_max_spec_factor must be a finite number >= 0");
  }
  if (!std::isfinite(max_spec_offset)) return bad("suffix_decoding_max_spec_offset must be finite");
  if (!(min_token_prob >= 0 && min_token_prob <= 1)) {
    return bad("suffix_decoding_min_token_prob must be in [0, 1]");
  }
  return Status::ok_status();
}

SuffixDecoding::SuffixDecoding(const SuffixDecodingConfig& config)
    : config_(config), global_tree_(std::clamp(config.max_tree_depth, 1, kMaxSuffixTreeDepth)) {
  KVASIR_CHECK_MSG(config.validate().ok(), "SuffixDecoding built from an unchecked config");
}

Status SuffixDecoding::start_request(RequestIdx request, std::span<const TokenId> prompt_token_ids) {
  if (requests_.count(request) != 0) {
    return invalid_argument("suffix decoding: request " + std::to_string(request) + " is already started");
  }
  if (Status s = check_token_ids(prompt_token_ids, "prompt"); !s.ok()) return s;
  auto [it, inserted] = requests_.try_emplace(request, config_.max_tree_depth);
  append_tokens(it->second, prompt_token_ids);
  return Status::ok_status();
}

Status SuffixDecoding::add_output(RequestIdx request, std::span<const TokenId> token_ids) {
  auto it = requests_.find(request);
  if (it == requests_.end()) {
    return not_found("suffix decoding: no running request " + std::to_string(request));
  }
  if (Status s = check_token_ids(token_ids, "output"); !s.ok()) return s;
  RequestState& state = it->second;
  append_tokens(state, token_ids);
  state.output.insert(state.output.end(), token_ids.begin(), token_ids.end());
  return Status::ok_status();
}

Status SuffixDecoding::stop_request(RequestIdx request) {
  auto it = requests_.find(request);
  if (it == requests_.end()) {
    return not_found("suffix decoding: no running request " + std::to_string(request));
  }
  std::vector<TokenId> output = std::move(it->second.output);
  requests_.erase(it);
  // An empty output would take a cache slot and teach the global tree nothing; one past the token
  // bound would evict everything and then itself.
  if (config_.max_cached_requests == 0 || output.empty() ||
      static_cast<int64_t>(output.size()) > config_.max_cached_tokens) {
    return Status::ok_status();
  }
  global_tree_.insert_sequence(output);
  num_cached_tokens_ += static_cast<int64_t>(output.size());
  cached_outputs_.push_back(std::move(output));
  while (static_cast<int>(cached_outputs_.size()) > config_.max_cached_requests ||
         num_cached_tokens_ > config_.max_cached_tokens) {
    global_tree_.remove_sequence(cached_outputs_.front());
    num_cached_tokens_ -= static_cast<int64_t>(cached_outputs_.front().size());
    cached_outputs_.pop_front();
  }
  return Status::ok_status();
}

Status SuffixDecoding::propose(RequestIdx request, int max_tokens, SuffixDraft* out) const {
  auto it = requests_.find(request);
  if (it == requests_.end()) {
    return not_found("suffix decoding: no running request " + std::to_string(request));
  }
  if (max_tokens < 0) {
    return invalid_argument("suffix decoding: max_tokens must be >= 0, got " + std::to_string(max_tokens));
  }
  const RequestState& state = it->second;
  SuffixSpeculateParams params;
  params.max_tokens = std::min(max_tokens, config_.num_speculative_tokens);
  params.max_spec_factor = config_.max_spec_factor;
  params.max_spec_offset = config_.max_spec_offset;
  params.min_token_prob = config_.min_token_prob;
  std::span<const TokenId> context(state.tail);
  if (context.size() > static_cast<size_t>(config_.max_tree_depth)) {
    context = context.last(static_cast<size_t>(config_.max_tree_depth));
  }
  SuffixTree::Candidate local = state.tree.best_candidate(context, params);
  SuffixTree::Candidate global;
  if (global_tree_.num_tokens() > 0) global = global_tree_.best_candidate(context, params);
  // The request's own history wins ties: it is the more specific evidence.
  const bool use_global = global.score > local.score;
  const SuffixTree::Candidate& best = use_global ? global : local;
  out->token_ids.clear();
  (use_global ? global_tree_ : state.tree).append_draft(best, params.min_token_prob, &out->token_ids);
  out->score = best.score;
  out->match_len = best.match_len;
  return Status::ok_status();
}

StatusOr<SuffixDraft> SuffixDecoding::propose(RequestIdx request, int max_tokens) const {
  SuffixDraft draft;
  if (Status s = propose(request, max_tokens, &draft); !s.ok()) return s;
  return draft;
}

int64_t SuffixDecoding::num_request_tree_nodes(RequestIdx request) const {
  auto it = requests_.find(request);
  return it == requests_.end() ? -1 : it->second.tree.num_nodes();
}

int64_t SuffixDecoding::memory_bytes() const {
  int64_t total = global_tree_.memory_bytes();
  for (const auto& output : cached_outputs_)
    total += static_cast<int64_t>(output.capacity() * sizeof(TokenId));
  for (const auto& [idx, state] : requests_) {
    total += state.tree.memory_bytes() + static_cast<int64_t>(state.output.capacity() * sizeof(TokenId));
  }
  return total;
}

void SuffixDecoding::append_tokens(RequestState& state, std::span<const TokenId> token_ids) const {
  state.tree.append(state.cursor, token_ids);
  // Keep between max_tree_depth and twice that many tail tokens: trimming only when the buffer is
  // full makes the trim O(1) per token, amortized.
  const size_t depth = static_cast<size_t>(config_.max_tree_depth);
  if (token_ids.size() >= depth) {
    state.tail.assign(token_ids.end() - static_cast<std::ptrdiff_t>(depth), token_ids.end());
    return;
  }
  state.tail.insert(state.tail.end(), token_ids.begin(), token_ids.end());
  if (state.tail.size() >= 2 * depth) {
    state.tail.erase(state.tail.begin(), state.tail.end() - static_cast<std::ptrdiff_t>(depth));
  }
}

void SuffixDecoding::check_invariants() const {
  KVASIR_CHECK(static_cast<int>(cached_outputs_.size()) <= config_.max_cached_requests);
  int64_t cached_tokens = 0;
  for (const auto& output : cached_outputs_) cached_tokens += static_cast<int64_t>(output.size());
  KVASIR_CHECK(global_tree_.num_tokens() == cached_tokens && cached_tokens == num_cached_tokens_);
  KVASIR_CHECK(num_cached_tokens_ <= config_.max_cached_tokens);
  global_tree_.check_invariants();
  for (const auto& [idx, state] : requests_) {
    KVASIR_CHECK(state.tail.size() <= 2 * static_cast<size_t>(config_.max_tree_depth));
    KVASIR_CHECK(state.tree.num_tokens() >= static_cast<int64_t>(state.output.size()));
    state.tree.check_invariants();
  }
}

}  // namespace kvasir
