// `kvasir bench latency` (model forward speed: prefill and decode tokens/s for a batch, as
// llama-bench's pp/tg measure it) and `kvasir bench throughput` (offline continuous batching
// through the LLM API, as vLLM's benchmark_throughput). Medians over iterations; --output-json.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "setup/draft_model.h"
#include "setup/eagle_head_setup.h"
#include "setup/loaded_model.h"
#include "api/remote_replica.h"
#include "api/tensor_parallel_group.h"
#include "args.h"
#include "bench_draft_model.h"
#include "bench_eagle_head.h"
#include "bench_forced_verify.h"
#include "commands.h"
#include "common/json.h"
#include "common/mapped_file.h"
#include "engine/engine.h"
#include "engine/engine_group.h"
#include "engine_flags.h"
#include "kvasir/llm.h"
#include "runner/contiguous_batch.h"

namespace kvasir {
namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : (v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]));
}

std::vector<int32_t> random_tokens(std::mt19937& rng, int n, int vocab) {
  std::uniform_int_distribution<int32_t> d(100, std::max(101, vocab - 1));
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& t : v) t = d(rng);
  return v;
}

int write_json(const Args& a, const Json& j) {
  if (!a.has("output-json")) return 0;
  std::ofstream out(a.get("output-json"));
  out << j.dump(Json::DumpOptions{2, false, ",", ": ", false}) << "\n";
  return out ? 0 : 1;
}

StatusOr<std::vector<std::string>> read_prompt_texts(const std::string& path) {
  KVASIR_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  std::vector<std::string> out;
  size_t line_no = 0, start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto j = parse_json(line);
    if (!j.ok() || !j->is_object() || j->find("prompt") == nullptr || !j->find("prompt")->is_string()) {
      return invalid_argument(path + ":" + std::to_string(line_no) + ": expected {\"prompt\": \"...\"}");
    }
    out.push_back(j->find("prompt")->as_string());
  }
  if (out.empty()) return invalid_argument(path + ": no prompts");
  return out;
}

int bench_latency(const Args& a, const EngineArgs& ea) {
  // The latency bench drives the model step by step without the engine loop, so a flag of the
  // engine loop would be accepted and do nothing: refuse it instead.
  // eagle, eagle3 and draft_model are the speculative methods timed here (bench_drafter.h): the
  // drafting model's cost per step.
  const std::string& method = ea.speculative.method;
  const bool eagle_head = method == "eagle" || method == "eagle3";
  const bool draft_model = method == "draft_model";
  if (ea.async_scheduling.value_or(false) || ea.disable_async_output_proc ||
      (ea.speculative.enabled() && !eagle_head && !draft_model)) {
    std::fprintf(stderr, "kvasir bench latency: %s is not supported here (this bench runs the model without the "
                         "engine loop); use bench throughput\n",
                 ea.async_scheduling.value_or(false) ? "--async-scheduling"
                 : ea.disable_async_output_proc ? "--disable-async-output-proc"
                                                 : "--speculative-config other than method eagle / eagle3 / draft_model");
    return 2;
  }
  auto in_len = a.get_int("input-len", 128), out_len = a.get_int("output-len", 128);
  auto batch = a.get_int("batch-size", 1), iters = a.get_int("num-iters", 5), warm = a.get_int("num-iters-warmup", 1);
  auto forced = a.get_int("num-speculative-tokens-forced", 0);
  for (auto* v : {&in_len, &out_len, &batch, &iters, &warm, &forced}) {
    if (!v->ok() || **v < 0 || **v > 1 << 20) {
      std::fprintf(stderr, "kvasir bench latency: bad numeric flag\n");
      return 2;
    }
  }
  const int B = static_cast<int>(*batch), I = static_cast<int>(std::max<int64_t>(1, *in_len)), O = static_cast<int>(*out_len);
  // --num-speculative-tokens-forced K: every decode step a K-draft verify (bench_forced_verify.h).
  const int K = static_cast<int>(*forced);
  if (K > 64) {
    std::fprintf(stderr, "kvasir bench latency: --num-speculative-tokens-forced must be in [0, 64]\n");
    return 2;
  }
  const int rows_per_step = B * (1 + K);
  LoadOptions lo = LoadOptions::from(ea);
  lo.model.max_num_tokens = std::max(rows_per_step, std::min(B * I, ea.max_num_batched_tokens));
  lo.model.max_num_logits = rows_per_step;
  auto m = load_model(ea.model.empty() ? default_model_path() : ea.model, lo);
  if (!m.ok()) {
    std::fprintf(stderr, "kvasir bench latency: %s\n", m.status().message().c_str());
    return 1;
  }
  LoadedModel& lm = **m;
  const int vocab = lm.config.vocab_size;
  const int bs = ea.block_size;
  // Forced verify steps cover the same output length in fewer steps (1 + K positions each), so
  // they attend over the same contexts as the plain steps they are compared with.
  const int steps = K > 0 ? (O + K) / (1 + K) : O;
  const int max_seq_len = I + steps * (1 + K) + 1;
  ContiguousBatch layout(B, max_seq_len, bs);
  auto cache = lm.model->allocate_kv_cache(layout.num_blocks_needed(), bs);
  if (!cache.ok()) {
    std::fprintf(stderr, "kvasir bench latency: %s\n", cache.status().message().c_str());
    return 1;
  }
  std::unique_ptr<BenchDrafter> head_bench;
  LoadedEagleHead head;
  LoadedDraftModel draft;
  if (eagle_head) {
    auto h = load_eagle_head(ea, lm, layout.num_blocks_needed());
    if (!h.ok()) {
      std::fprintf(stderr, "kvasir bench latency: %s\n", h.status().message().c_str());
      return 1;
    }
    head = std::move(*h);
    head_bench = std::make_unique<BenchEagleHead>(*head.head, *head.cache, B, ea.speculative.num_speculative_tokens);
  } else if (draft_model) {
    auto d = load_draft_model(ea, lm, layout.num_blocks_needed());
    if (!d.ok()) {
      std::fprintf(stderr, "kvasir bench latency: %s\n", d.status().message().c_str());
      return 1;
    }
    draft = std::move(*d);
    head_bench = std::make_unique<BenchDraftModel>(*draft.model->model, *draft.cache, lo.model.max_num_tokens, B,
                                                   ea.speculative.num_speculative_tokens, I);
  }
  double decode_head_s_total = 0;
  std::vector<double> decode_target_s;
  std::mt19937 rng(1234);
  std::vector<float> logits(static_cast<size_t>(B) * vocab);
  std::vector<double> prefill_s, decode_s;
  ForcedVerifyResult forced_total;
  bool device_greedy = lm.backend->name() != "cpu" && std::getenv("KVASIR_BENCH_HOST_ARGMAX") == nullptr;
  std::vector<DeviceSamplingRow> greedy_rows(static_cast<size_t>(B));  // temperature 0: argmax
  std::vector<int32_t> next_ids(static_cast<size_t>(B));
  for (int it = 0; it < *warm + *iters; ++it) {
    ContiguousBatch cb(B, max_seq_len, bs);
    std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(B));
    for (auto& p : prompts) p = random_tokens(rng, I, vocab);
    // Prefill in chunks of max_num_tokens, one sequence's chunk at a time when B * I is larger.
    auto t0 = Clock::now();
    const int chunk = std::max(1, lo.model.max_num_tokens / B);
    for (int off = 0; off < I; off += chunk) {
      std::vector<std::vector<int32_t>> step(static_cast<size_t>(B));
      for (int s = 0; s < B; ++s) {
        auto& p = prompts[static_cast<size_t>(s)];
        step[static_cast<size_t>(s)].assign(p.begin() + off, p.begin() + std::min(I, off + chunk));
      }
      Status st = lm.model->forward(cb.build(step), *cache, logits.data());
      if (!st.ok()) {
        std::fprintf(stderr, "kvasir bench latency: %s\n", st.message().c_str());
        return 1;
      }
      cb.commit();
      if (head_bench && off + chunk < I) head_bench->after_pass(prompts, off, chunk, false, false);
    }
    std::vector<std::vector<int32_t>> next(static_cast<size_t>(B));
    for (int s = 0; s < B; ++s) {
      const float* row = logits.data() + static_cast<size_t>(s) * vocab;
      next[static_cast<size_t>(s)] = {static_cast<int32_t>(std::max_element(row, row + vocab) - row)};
    }
    // eagle / eagle3: the histories so far (prompt, then each greedy token); the head drafts after the
    // last prefill chunk and after every decode step.
    std::vector<std::vector<int32_t>> histories;
    if (head_bench) {
      histories = prompts;
      for (int s = 0; s < B; ++s) histories[static_cast<size_t>(s)].push_back(next[static_cast<size_t>(s)][0]);
      const int last_off = (I - 1) / chunk * chunk;
      head_bench->after_pass(histories, last_off, I - last_off, true, false);
    }
    const double head_s_before = head_bench ? head_bench->decode_s() : 0.0;
    auto t1 = Clock::now();
    if (K > 0) {
      std::vector<int32_t> last(static_cast<size_t>(B)), first(static_cast<size_t>(B));
      for (int s = 0; s < B; ++s) {
        last[static_cast<size_t>(s)] = prompts[static_cast<size_t>(s)].back();
        first[static_cast<size_t>(s)] = next[static_cast<size_t>(s)][0];
      }
      // With a head: after each verify step it drafts from the step's 1 + K committed positions
      // (an EAGLE step at full acceptance: its first pass is 1 + K tokens per sequence).
      int position = I;
      ForcedVerifyStepFn after_step;
      if (head_bench) {
        after_step = [&](const std::vector<std::vector<int32_t>>& committed, const std::vector<int32_t>& after) {
          for (int s = 0; s < B; ++s) {
            auto& h = histories[static_cast<size_t>(s)];
            const auto& c = committed[static_cast<size_t>(s)];
            h.insert(h.end(), c.begin() + 1, c.end());  // c[0] is already the history's last token
            h.push_back(after[static_cast<size_t>(s)]);
          }
          head_bench->after_pass(histories, position, 1 + K, true, true);
          position += 1 + K;
          return Status();
        };
      }
      auto r = run_forced_verify_decode(*lm.model, *cache, cb, last, first, steps, K,
                                        device_greedy && lm.backend->supports_device_sampling(), after_step);
      if (!r.ok()) {
        std::fprintf(stderr, "kvasir bench latency: %s\n", r.status().message().c_str());
        return 1;
      }
      if (it >= *warm) forced_total.draft_tokens += r->draft_tokens, forced_total.accepted_tokens += r->accepted_tokens;
    }
    for (int g = 0; g < (K > 0 ? 0 : O); ++g) {
      // Greedy next tokens: on the device when the backend samples there (only token ids come
      // back, as in the engine), else a host argmax over the read-back logits.
      const ForwardBatch& fb = cb.build(next);
      Status st;
      if (device_greedy) {
        st = lm.model->run_layers(fb, *cache);
        StatusOr<Tensor> dl = st.ok() ? lm.model->compute_logits_on_device(fb.logits_indices, fb.num_logits)
                                      : StatusOr<Tensor>(st);
        if (dl.ok()) st = lm.backend->sample(*dl, greedy_rows.data(), fb.num_logits, next_ids.data());
        else st = dl.status();
        if (st.ok()) {
          for (int s = 0; s < B; ++s) next[static_cast<size_t>(s)] = {next_ids[static_cast<size_t>(s)]};
        } else if (g == 0 && it == 0 && fb.num_logits == B) {
          device_greedy = false;  // no device sampling here: redo this step on the host path
          st = lm.model->compute_logits(fb.logits_indices, fb.num_logits, logits.data());
        }
      } else {
        st = lm.model->forward(fb, *cache, logits.data());
      }
      if (st.ok() && !device_greedy) {
        for (int s = 0; s < B; ++s) {
          const float* row = logits.data() + static_cast<size_t>(s) * vocab;
          next[static_cast<size_t>(s)] = {static_cast<int32_t>(std::max_element(row, row + vocab) - row)};
        }
      }
      if (!st.ok()) {
        std::fprintf(stderr, "kvasir bench latency: %s\n", st.message().c_str());
        return 1;
      }
      cb.commit();
      if (head_bench) {
        for (int s = 0; s < B; ++s) histories[static_cast<size_t>(s)].push_back(next[static_cast<size_t>(s)][0]);
        head_bench->after_pass(histories, I + g, 1, true, true);
      }
    }
    auto t2 = Clock::now();
    if (head_bench) head_bench->finish_all();
    if (it >= *warm) {
      const double head_s = head_bench ? head_bench->decode_s() - head_s_before : 0.0;
      prefill_s.push_back(std::chrono::duration<double>(t1 - t0).count());
      decode_s.push_back(std::chrono::duration<double>(t2 - t1).count());
      decode_target_s.push_back(decode_s.back() - head_s);
      decode_head_s_total += head_s;
    }
  }
  const double p = median(prefill_s), d = median(decode_s);
  // Forced verify steps commit 1 + K positions per sequence.
  const double prefill_tps = B * I / p, decode_tps = steps > 0 ? static_cast<double>(B) * steps * (1 + K) / d : 0;
  std::printf("model: %s (%s)\nbackend: %s\nbatch %d, input %d, output %d, %lld iterations (median)\n",
              lm.path.c_str(), lm.config.architecture.c_str(), lm.backend->name().c_str(), B, I, O,
              static_cast<long long>(*iters));
  std::printf("prefill: %.3f s  %.1f tokens/s\n", p, prefill_tps);
  std::printf("decode:  %.3f s  %.1f tokens/s  (%.2f ms per step)\n", d, decode_tps, steps > 0 ? d / steps * 1e3 : 0.0);
  const double acceptance = forced_total.draft_tokens > 0 ? static_cast<double>(forced_total.accepted_tokens) /
                                                                static_cast<double>(forced_total.draft_tokens)
                                                          : 0.0;
  if (K > 0) {
    std::printf("forced verify: %d steps, each verifying %d drafts per sequence (%d rows a step) and committing them "
                "all; the verify kept %.1f%% of the drafts (all of them when the drafts, the last two tokens repeated, "
                "are the target's greedy tokens: dummy weights' 2-cycle)\n",
                steps, K, rows_per_step, 100.0 * acceptance);
  }
  double head_ms_per_step = 0, target_ms_per_step = 0;
  if (head_bench && O > 0 && !decode_target_s.empty()) {
    // The decode line above is target plus head (the steps a speculating engine runs); this one
    // splits it. Without speculation a step costs what the target part costs.
    const int k = ea.speculative.num_speculative_tokens;
    head_ms_per_step = decode_head_s_total / static_cast<double>(decode_target_s.size()) / steps * 1e3;
    target_ms_per_step = median(decode_target_s) / steps * 1e3;
    std::printf("%s %s: %.3f ms per decode step (k = %d: 1 pass over the step's %d tokens + %d one-token draft "
                "passes, %.3f ms per draft token) beside %.3f ms for the target's step; %s / target %.2f\n",
                method.c_str(), draft_model ? "model" : "head", head_ms_per_step, k, B * (1 + K), k - 1,
                head_ms_per_step / k, target_ms_per_step, draft_model ? "draft" : "head",
                target_ms_per_step > 0 ? head_ms_per_step / target_ms_per_step : 0.0);
  }
  if (const std::string st = lm.backend->stats(); !st.empty()) std::printf("%s\n", st.c_str());
  Json j = Json::object();
  if (head_bench) {
    j.set(method + "_head_ms_per_decode_step", head_ms_per_step);
    j.set(method + "_target_ms_per_decode_step", target_ms_per_step);
  }
  j.set("model", lm.path);
  j.set("backend", lm.backend->name());
  j.set("batch_size", B);
  j.set("input_len", I);
  j.set("output_len", O);
  j.set("prefill_s_median", p);
  j.set("decode_s_median", d);
  j.set("prefill_tokens_per_s", prefill_tps);
  j.set("decode_tokens_per_s", decode_tps);
  j.set("decode_ms_per_step", steps > 0 ? d / steps * 1e3 : 0.0);
  j.set("decode_steps", steps);
  j.set("num_speculative_tokens_forced", K);
  if (K > 0) j.set("forced_verify_draft_acceptance", acceptance);
  return write_json(a, j);
}

int bench_throughput(const Args& a, EngineArgs ea) {
  if (a.has("num-speculative-tokens-forced")) {
    std::fprintf(stderr, "kvasir bench throughput: --num-speculative-tokens-forced is a bench latency flag (use "
                         "--speculative-config here)\n");
    return 2;
  }
  auto num = a.get_int("num-prompts", 64), in_len = a.get_int("input-len", 128), out_len = a.get_int("output-len", 128);
  for (auto* v : {&num, &in_len, &out_len}) {
    if (!v->ok() || **v < 1 || **v > 1 << 20) {
      std::fprintf(stderr, "kvasir bench throughput: bad numeric flag\n");
      return 2;
    }
  }
  auto llm = LLM::create(ea);
  if (!llm.ok()) {
    std::fprintf(stderr, "kvasir bench throughput: %s\n", llm.status().message().c_str());
    return 1;
  }
  const int vocab = (*llm)->model().config.vocab_size;
  std::mt19937 rng(4321);
  std::vector<PromptInput> prompts(static_cast<size_t>(*num));
  if (a.has("prompts-file")) {
    // JSONL of {"prompt": text}, cycled to --num-prompts: real text (e.g. input-grounded prompts
    // for speculative decoding) instead of random token ids; --input-len is then unused.
    auto texts = read_prompt_texts(a.get("prompts-file"));
    if (!texts.ok()) {
      std::fprintf(stderr, "kvasir bench throughput: %s\n", texts.status().message().c_str());
      return 2;
    }
    for (size_t i = 0; i < prompts.size(); ++i) prompts[i].text = (*texts)[i % texts->size()];
  } else {
    for (auto& p : prompts) p.token_ids = random_tokens(rng, static_cast<int>(*in_len), vocab);
  }
  SamplingParams sp;
  sp.temperature = 0.0f;
  // Every request makes --output-len tokens, as vLLM's bench throughput; --no-ignore-eos lets real
  // prompts end where the model ends them (speculation on input-grounded prompts, where the text
  // after the answer's EOS is not what a user would be served).
  sp.ignore_eos = a.get_bool("ignore-eos", true);
  sp.max_tokens = static_cast<int>(*out_len);
  auto t0 = Clock::now();
  auto res = (*llm)->generate(prompts, sp);
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!res.ok()) {
    std::fprintf(stderr, "kvasir bench throughput: %s\n", res.status().message().c_str());
    return 1;
  }
  int64_t in_tok = 0, out_tok = 0;
  for (const auto& r : *res) {
    if (!r.error.empty()) {
      std::fprintf(stderr, "kvasir bench throughput: request failed: %s\n", r.error.c_str());
      return 1;
    }
    in_tok += static_cast<int64_t>(r.prompt_token_ids.size());
    for (const auto& c : r.outputs) out_tok += static_cast<int64_t>(c.token_ids.size());
  }
  // Summed over the data-parallel replicas (one unless --data-parallel-size > 1).
  int64_t steps = 0, preemptions = 0, drafts = 0, draft_tokens = 0, accepted = 0;
  double out_proc_s = 0;
  EngineGroup& engines = (*llm)->engines();
  for (size_t i = 0; i < engines.size(); ++i) {
    const EngineMetrics& mt = engines.replica(i).metrics();
    steps += mt.num_steps.load();
    preemptions += mt.num_preemptions.load();
    drafts += mt.spec_decode_num_drafts.load();
    draft_tokens += mt.spec_decode_num_draft_tokens.load();
    accepted += mt.spec_decode_num_accepted_tokens.load();
    out_proc_s += engines.replica(i).output_processing_s();
  }
  // With --distributed-executor-backend mp the device is in the worker processes (no backend here).
  if ((*llm)->model().backend) {
    if (const std::string st = (*llm)->model().backend->stats(); !st.empty()) std::printf("%s\n", st.c_str());
  }
  std::printf("Throughput: %.2f requests/s, %.1f total tokens/s, %.1f output tokens/s\n", *num / secs,
              (in_tok + out_tok) / secs, out_tok / secs);
  std::printf("requests %lld, input tokens %lld, output tokens %lld, elapsed %.2f s, engine steps %lld, preemptions %lld\n",
              static_cast<long long>(*num), static_cast<long long>(in_tok), static_cast<long long>(out_tok), secs,
              static_cast<long long>(steps), static_cast<long long>(preemptions));
  // Detokenization and stop-string work of the OutputProcessor: overlapped with the forward
  // passes by default, on the engine's critical path with --disable-async-output-proc.
  if (ea.speculative.enabled()) {
    std::printf("speculative decoding (%s, k=%d): %lld drafts, %lld draft tokens, %lld accepted, mean acceptance length %.2f\n",
                ea.speculative.method.c_str(), ea.speculative.num_speculative_tokens,
                static_cast<long long>(drafts), static_cast<long long>(draft_tokens), static_cast<long long>(accepted),
                drafts == 0 ? 0.0 : 1.0 + static_cast<double>(accepted) / static_cast<double>(drafts));
  }
  std::printf("output processing: %.3f s (%.2f%% of elapsed), %s\n", out_proc_s, 100.0 * out_proc_s / secs,
              ea.disable_async_output_proc ? "in lock step with the engine" : "overlapped with the forward passes");
  Json j = Json::object();
  j.set("num_requests", *num);
  j.set("output_processing_s", out_proc_s);
  j.set("async_output_proc", !ea.disable_async_output_proc);
  j.set("async_scheduling", (*llm)->async_scheduling());
  j.set("elapsed_time", secs);
  j.set("requests_per_second", *num / secs);
  j.set("tokens_per_second", (in_tok + out_tok) / secs);
  j.set("output_tokens_per_second", out_tok / secs);
  j.set("input_tokens", in_tok);
  j.set("output_tokens", out_tok);
  j.set("num_preemptions", preemptions);
  j.set("data_parallel_size", static_cast<int64_t>(engines.size()));
  if (ea.speculative.enabled()) {
    j.set("spec_decode_num_drafts", drafts);
    j.set("spec_decode_num_draft_tokens", draft_tokens);
    j.set("spec_decode_num_accepted_tokens", accepted);
    j.set("spec_decode_mean_acceptance_length", drafts == 0 ? 0.0 : 1.0 + static_cast<double>(accepted) / static_cast<double>(drafts));
  }
  return write_json(a, j);
}

void usage() {
  std::fprintf(stderr,
               "usage: kvasir bench latency [--input-len 128] [--output-len 128] [--batch-size 1] [--num-iters 5]\n"
               "                            [--num-iters-warmup 1] [--output-json F] [engine options]\n"
               "                            [--num-speculative-tokens-forced K]  (test only: every decode step\n"
               "                            verifies K drafts and commits them all, to time a K-draft verify step)\n"
               "                            [--speculative-config '{\"method\": \"eagle3\"|\"eagle\", ...}']  (times the\n"
               "                            EAGLE head's drafting per decode step beside the target's step; with\n"
               "                            --num-speculative-tokens-forced, its drafting from each step's 1 + K\n"
               "                            committed tokens, as at full acceptance)\n"
               "       kvasir bench throughput [--num-prompts 64] [--input-len 128] [--output-len 128]\n"
               "                            [--prompts-file F.jsonl] [--output-json F] [--no-ignore-eos]\n"
               "                            [engine options]  (--no-ignore-eos: requests end at EOS or --output-len)\n"
               "       kvasir bench serve [options]   (load-test an OpenAI-compatible server; see --help)\n"
               "Engine options:\n%s",
               engine_flags_help().c_str());
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  if (argc < 1) {
    usage();
    return 2;
  }
  const std::string which = argv[0];
  if (which == "serve") return cmd_bench_serve(argc - 1, argv + 1);  // a client: no engine flags
  std::set<std::string> value_flags = {"input-len", "output-len", "batch-size", "num-iters", "num-iters-warmup",
                                       "output-json", "num-prompts", "prompts-file",
                                       "num-speculative-tokens-forced"};
  std::set<std::string> bool_flags = {"help", "ignore-eos"};
  add_engine_flags(value_flags, bool_flags);
  auto args = Args::parse(argc - 1, argv + 1, value_flags, bool_flags);
  if (!args.ok() || args->get_bool("help", false)) {
    if (!args.ok()) std::fprintf(stderr, "kvasir bench: %s\n", args.status().message().c_str());
    usage();
    return args.ok() ? 0 : 2;
  }
  auto ea = engine_args_from(*args);
  if (!ea.ok()) {
    std::fprintf(stderr, "kvasir bench: %s\n", ea.status().message().c_str());
    return 2;
  }
  // A tensor-parallel worker (started by its node's launcher, another node's rank, an mpirun
  // rank past 0), or a multiprocess executor's model rank: only steps.
  // A --headless node of data-parallel replicas (node 0 runs this command without it): only steps.
  if (ea->launch.headless && ea->data_parallel_size > 1) return run_headless_replicas(*ea);
  auto plan = plan_launch(*ea);
  if (!plan.ok()) {
    std::fprintf(stderr, "kvasir bench: %s\n", plan.status().message().c_str());
    return 2;
  }
  if (plan->is_worker()) return run_tensor_parallel_worker(*ea, *plan);
  if (which == "latency" && ea->data_parallel_size > 1) {
    std::fprintf(stderr, "kvasir bench latency: --data-parallel-size is not supported (it drives one model without "
                         "the engine loop); use bench throughput or bench serve\n");
    return 2;
  }
  if (which == "latency" && (ea->parallel_layout().world_size() > 1 || ea->distributed_executor_backend == "mp")) {
    // It drives one model directly, without the engine that the workers follow.
    std::fprintf(stderr, "kvasir bench latency: %s is not supported; use bench throughput (--num-prompts 1 for "
                         "one request's latency)\n",
                 ea->parallel_layout().world_size() > 1 ? "--tensor-parallel-size or --pipeline-parallel-size"
                                                        : "--distributed-executor-backend mp");
    return 2;
  }
  if (which == "latency") return bench_latency(*args, *ea);
  if (which == "throughput") return bench_throughput(*args, *ea);
  usage();
  return 2;
}

}  // namespace kvasir
