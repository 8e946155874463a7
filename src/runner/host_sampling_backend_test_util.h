// HostSamplingBackend: the CPU backend (one thread, exact matmuls) behind a device's sampling
// capabilities, for tests of the runner's device paths without a GPU: it says it samples on the
// device (its sample() is the host Sampler with each row's knobs, key and position: what the CUDA
// kernel computes), applies token bitmasks to "device" logits and, optionally, that decode batches
// are padded to buckets. It counts verify steps and attention calls by shape, so tests can check
// which layout a step took.
#pragma once

#include <algorithm>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "sample/sampler.h"
#include "sample/token_bitmask.h"

namespace kvasir {

class HostSamplingBackend final : public Backend {
 public:
  // pad_decode_batches: what capabilities().decode_batch_buckets says (a graph-replaying device's
  // padded decode shapes, or not). feedback: it also keeps sample_async's tokens "on the device"
  // until collected, and embeds tokens from there (overlapped steps).
  explicit HostSamplingBackend(int32_t vocab, bool pad_decode_batches = true, bool feedback = false)
      : vocab_(vocab), pad_decode_batches_(pad_decode_batches), feedback_(feedback), sampler_(vocab) {
    CpuBackendOptions o;
    o.num_threads = 1;
    o.precision = MatmulPrecision::kExact;
    cpu_ = std::make_unique<CpuBackend>(o);
  }
  Device device() const override { return cpu_->device(); }
  std::string name() const override { return "host-sampling(" + cpu_->name() + ")"; }
  DType activation_dtype() const override { return cpu_->activation_dtype(); }
  DType kv_cache_dtype() const override { return cpu_->kv_cache_dtype(); }
  StatusOr<std::unique_ptr<Buffer>> allocate(size_t bytes) override { return cpu_->allocate(bytes); }
  StatusOr<Tensor> upload_weight(const Tensor& w, std::unique_ptr<Buffer>* owner) override {
    return cpu_->upload_weight(w, owner);
  }
  StatusOr<Tensor> upload_vocab_table(const Tensor& w, std::unique_ptr<Buffer>* owner) override {
    return cpu_->upload_vocab_table(w, owner);
  }
  void copy_to_host(const Tensor& src, void* dst) override { cpu_->copy_to_host(src, dst); }
  void synchronize() override { cpu_->synchronize(); }
  void embedding(const Tensor& t, const int32_t* ids, int n, float scale, Tensor& out) override {
    cpu_->embedding(t, ids, n, scale, out);
  }
  void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) override { cpu_->linear(x, w, bias, out); }
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) override { cpu_->rms_norm(x, w, eps, out); }
  void add_rms_norm(Tensor& r, const Tensor& x, const Tensor& w, float eps, Tensor& out) override {
    cpu_->add_rms_norm(r, x, w, eps, out);
  }
  void add(Tensor& a, const Tensor& b) override { cpu_->add(a, b); }
  void rope(Tensor& q, Tensor& k, const int32_t* positions, const RopeParams& p) override { cpu_->rope(q, k, positions, p); }
  void write_kv(const Tensor& k, const Tensor& v, Tensor& kc, Tensor& vc, const AttentionMetadata& m) override {
    cpu_->write_kv(k, v, kc, vc, m);
  }
  void attention(const Tensor& q, const Tensor& kc, const Tensor& vc, const AttentionMetadata& m,
                 const AttentionParams& p, Tensor& out) override {
    last_step_pure_decode_ = m.num_tokens == m.num_seqs;
    ++(last_step_pure_decode_ ? pure_decode_attention_calls_ : other_attention_calls_);
    cpu_->attention(q, kc, vc, m, p, out);
  }
  void gated_activation(const Tensor& g, const Tensor& u, GateActivation act, Tensor& out) override {
    cpu_->gated_activation(g, u, act, out);
  }
  void softcap(Tensor& x, float cap) override { cpu_->softcap(x, cap); }
  void gather_rows(const Tensor& src, const int32_t* rows, int k, Tensor& out) override { cpu_->gather_rows(src, rows, k, out); }

  bool supports_device_sampling() const override { return true; }
  bool supports_device_token_bitmask() const override { return true; }
  Status apply_token_bitmask(Tensor& logits, const int32_t* words, int words_per_row, const int32_t* logits_rows,
                             int num_rows) override {
    const size_t vocab = static_cast<size_t>(logits.cols());
    for (int i = 0; i < num_rows; ++i) {
      ::kvasir::apply_token_bitmask(
          std::span<float>(static_cast<float*>(logits.data) + static_cast<size_t>(logits_rows[i]) * vocab, vocab),
          std::span<const int32_t>(words + static_cast<size_t>(i) * static_cast<size_t>(words_per_row),
                                   static_cast<size_t>(words_per_row)));
    }
    return Status();
  }
  BackendCapabilities capabilities() const override {
    BackendCapabilities c = Backend::capabilities();
    c.decode_batch_buckets = pad_decode_batches_;
    return c;
  }
  // The host Sampler with each row's knobs, key and position: what the CUDA kernel computes.
  Status sample(const Tensor& logits, const DeviceSamplingRow* rows, int num_rows, int32_t* out_tokens) override {
    params_.assign(static_cast<size_t>(num_rows), SamplingParams{});
    states_.assign(static_cast<size_t>(num_rows), SamplingRequestState{});
    for (int i = 0; i < num_rows; ++i) {
      SamplingParams& p = params_[static_cast<size_t>(i)];
      p.temperature = rows[i].temperature, p.top_p = rows[i].top_p, p.min_p = rows[i].min_p, p.top_k = rows[i].top_k;
      SamplingRequestState& s = states_[static_cast<size_t>(i)];
      s.params = &p;
      s.num_generated_tokens = static_cast<int>(rows[i].position);
      s.rng_key = rows[i].rng_key;
    }
    const size_t vocab = static_cast<size_t>(logits.cols());
    // Logits of another width (an EAGLE-3 head's draft vocabulary) get a sampler of their own,
    // as a device's sampling kernel takes the width from the tensor.
    Sampler* sampler = &sampler_;
    if (static_cast<int32_t>(vocab) != vocab_) {
      if (!other_ || other_vocab_ != vocab) other_ = std::make_unique<Sampler>(static_cast<int32_t>(vocab)), other_vocab_ = vocab;
      sampler = other_.get();
    }
    sampler->sample(std::span<float>(static_cast<float*>(logits.data), static_cast<size_t>(num_rows) * vocab), states_, &out_);
    std::copy(out_.sampled_token_ids.begin(), out_.sampled_token_ids.begin() + num_rows, out_tokens);
    return Status();
  }
  bool supports_sampled_token_feedback() const override { return feedback_; }
  // The tokens are drawn now but reach the caller only through collect_sampled; until then the
  // latest step's stay where embedding_fed reads them.
  Status sample_async(const Tensor& logits, const DeviceSamplingRow* rows, int num_rows) override {
    if (!feedback_) return Backend::sample_async(logits, rows, num_rows);
    if (uncollected_.size() >= 2) return internal_error("a third step left its tokens on the device");
    std::vector<int32_t> tokens(static_cast<size_t>(num_rows));
    KVASIR_RETURN_IF_ERROR(sample(logits, rows, num_rows, tokens.data()));
    device_tokens_ = tokens;
    uncollected_.push_back(std::move(tokens));
    ++async_samples_;
    return Status();
  }
  Status collect_sampled(int32_t* out_tokens) override {
    if (uncollected_.empty()) return internal_error("nothing to collect");
    std::copy(uncollected_.front().begin(), uncollected_.front().end(), out_tokens);
    uncollected_.pop_front();
    return Status();
  }
  void embedding_fed(const Tensor& t, const int32_t* ids, const int32_t* sources, int n, float scale,
                     Tensor& out) override {
    KVASIR_CHECK(feedback_);
    fed_ids_.assign(ids, ids + n);
    for (int i = 0; i < n; ++i) {
      if (sources[i] < 0) continue;
      KVASIR_CHECK_MSG(static_cast<size_t>(sources[i]) < device_tokens_.size(), "fed from a row the last step did not sample");
      fed_ids_[static_cast<size_t>(i)] = device_tokens_[static_cast<size_t>(sources[i])];
      ++fed_tokens_;
    }
    cpu_->embedding(t, fed_ids_.data(), n, scale, out);
  }
  Status sample_and_verify(const Tensor& logits, const DeviceSamplingRow* rows, int num_rows,
                           const DraftVerifyRow* requests, int num_requests, const int32_t* drafts, int num_draft_tokens,
                           int32_t* out_tokens, int32_t* out_num_emitted) override {
    ++verify_steps_;
    if (last_step_pure_decode_) ++pure_decode_verify_steps_;
    return Backend::sample_and_verify(logits, rows, num_rows, requests, num_requests, drafts, num_draft_tokens,
                                      out_tokens, out_num_emitted);
  }

  int verify_steps_ = 0, pure_decode_verify_steps_ = 0;
  int64_t async_samples_ = 0, fed_tokens_ = 0;  // feedback: steps left on the "device", ids fed from it
  int64_t pure_decode_attention_calls_ = 0, other_attention_calls_ = 0;

 private:
  std::unique_ptr<CpuBackend> cpu_;
  int32_t vocab_;
  bool pad_decode_batches_;
  bool feedback_;
  std::deque<std::vector<int32_t>> uncollected_;
  std::vector<int32_t> device_tokens_, fed_ids_;
  Sampler sampler_;
  std::unique_ptr<Sampler> other_;
  size_t other_vocab_ = 0;
  std::vector<SamplingParams> params_;
  std::vector<SamplingRequestState> states_;
  SamplerOutput out_;
  bool last_step_pure_decode_ = false;
};

}  // namespace kvasir
