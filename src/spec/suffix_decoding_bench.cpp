// suffix_decoding_bench: what SuffixDecoding costs on the host per token and per proposal, on a
// synthetic agentic history (tool calls from a few templates, tool results quoting a few files,
// short free-form thoughts) of 32k prompt tokens, then a simulated exact-verification decode loop
// over more turns of the same kind. Prints timings; asserts nothing (timings are not tests).
//   suffix_decoding_bench [prompt_tokens=32768] [output_tokens=4096] [max_tree_depth=24]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "spec/suffix_decoding.h"

namespace kvasir {
namespace {

using Clock = std::chrono::steady_clock;
using Tokens = std::vector<TokenId>;

// CPU time of this thread: the machine may be shared, and waiting for a core is not our cost.
double thread_cpu_us() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// "mean / median / p99 / max" of per-call microseconds: the mean carries the occasional rehash of
// the child index and vector growth, the median what a typical step pays.
std::string summary(std::vector<double> us, double per) {
  std::sort(us.begin(), us.end());
  double sum = 0;
  for (double u : us) sum += u;
  char buf[160];
  std::snprintf(buf, sizeof(buf), "mean %.2f / median %.2f / p99 %.2f / max %.0f us",
                sum / static_cast<double>(us.size()) / per, us[us.size() / 2] / per,
                us[us.size() * 99 / 100] / per, us.back() / per);
  return buf;
}

// Produces turns of an agent transcript: repeated structure with varying arguments and quotes.
class AgenticHistory {
 public:
  explicit AgenticHistory(uint32_t seed) : rng_(seed) {
    for (int t = 0; t < 20; ++t) templates_.push_back(random_tokens(30 + rng_() % 50));
    for (int f = 0; f < 10; ++f) files_.push_back(random_tokens(2000));
    for (int a = 0; a < 50; ++a) args_.push_back(random_tokens(3 + rng_() % 8));
  }

  void append_turn(Tokens& out) {
    const Tokens& tmpl = templates_[rng_() % templates_.size()];
    // The call: its template with an argument (often one seen before) spliced in at two places.
    const size_t cut1 = tmpl.size() / 3, cut2 = 2 * tmpl.size() / 3;
    auto arg = [&]() -> Tokens {
      return rng_() % 2 ? args_[rng_() % args_.size()] : random_tokens(3 + rng_() % 8);
    };
    out.insert(out.end(), tmpl.begin(), tmpl.begin() + static_cast<std::ptrdiff_t>(cut1));
    Tokens a = arg();
    out.insert(out.end(), a.begin(), a.end());
    out.insert(out.end(), tmpl.begin() + static_cast<std::ptrdiff_t>(cut1),
               tmpl.begin() + static_cast<std::ptrdiff_t>(cut2));
    a = arg();
    out.insert(out.end(), a.begin(), a.end());
    out.insert(out.end(), tmpl.begin() + static_cast<std::ptrdiff_t>(cut2), tmpl.end());
    // The result: a slice of a file.
    const Tokens& file = files_[rng_() % files_.size()];
    const size_t len = 100 + rng_() % 500, start = rng_() % (file.size() - len);
    out.insert(out.end(), file.begin() + static_cast<std::ptrdiff_t>(start),
               file.begin() + static_cast<std::ptrdiff_t>(start + len));
    // A thought: new text.
    Tokens thought = random_tokens(20 + rng_() % 40);
    out.insert(out.end(), thought.begin(), thought.end());
  }

  Tokens random_tokens(size_t n) {
    Tokens t(n);
    for (auto& x : t) x = static_cast<TokenId>(rng_() % 32000);
    return t;
  }

 private:
  std::mt19937 rng_;
  std::vector<Tokens> templates_, files_, args_;
};

int run(int prompt_tokens, int output_tokens, int depth) {
  SuffixDecodingConfig config;
  config.max_tree_depth = depth;
  config.num_speculative_tokens = 5;
  config.max_cached_requests = 64;
  if (Status s = config.validate(); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.to_string().c_str());
    return 2;
  }
  SuffixDecoding sd(config);
  AgenticHistory gen(1234);

  // Fill the global cache first, so proposals and evictions run against a full one.
  Tokens warm;
  auto t0 = Clock::now();
  for (RequestIdx r = 0; r < 70; ++r) {
    warm.clear();
    while (warm.size() < 512) gen.append_turn(warm);
    (void)sd.start_request(r, Tokens{});
    (void)sd.add_output(r, warm);
    (void)sd.stop_request(r);
  }
  std::printf(
      "global cache: %d requests x 512+ tokens, %lld nodes, filled in %.1f ms (with %d evictions), %.1f MB\n",
      sd.num_cached_requests(), static_cast<long long>(sd.num_global_tree_nodes()), us_since(t0) / 1e3,
      70 - sd.num_cached_requests(), static_cast<double>(sd.memory_bytes()) / 1e6);
  const int64_t global_bytes = sd.memory_bytes();

  Tokens prompt;
  while (static_cast<int>(prompt.size()) < prompt_tokens) gen.append_turn(prompt);
  prompt.resize(static_cast<size_t>(prompt_tokens));
  Tokens truth;  // what the "model" will generate
  while (static_cast<int>(truth.size()) < output_tokens) gen.append_turn(truth);
  truth.resize(static_cast<size_t>(output_tokens));

  const RequestIdx req = 1000;
  t0 = Clock::now();
  (void)sd.start_request(req, prompt);
  double start_us = us_since(t0);
  std::printf(
      "start_request: %d prompt tokens in %.1f ms (%.3f us/token), %lld nodes (%.1f per token, depth %d), "
      "%.1f MB\n",
      prompt_tokens, start_us / 1e3, start_us / prompt_tokens,
      static_cast<long long>(sd.num_request_tree_nodes(req)),
      static_cast<double>(sd.num_request_tree_nodes(req)) / prompt_tokens, depth,
      static_cast<double>(sd.memory_bytes() - global_bytes) / 1e6);

  // Exact verification, simulated: the proposal's longest prefix equal to the truth is accepted,
  // plus the one token the target samples itself.
  std::vector<double> propose_us, add_us_per_token;
  SuffixDraft draft;  // reused, as the step loop would
  int64_t steps = 0, proposed = 0, accepted = 0;
  size_t pos = 0;
  const double cpu0 = thread_cpu_us();
  const auto wall0 = Clock::now();
  while (pos < truth.size()) {
    t0 = Clock::now();
    (void)sd.propose(req, 5, &draft);
    propose_us.push_back(us_since(t0));
    size_t n = 0;
    while (n < draft.token_ids.size() && pos + n < truth.size() && draft.token_ids[n] == truth[pos + n]) ++n;
    proposed += static_cast<int64_t>(draft.token_ids.size());
    accepted += static_cast<int64_t>(n);
    const size_t take = std::min(n + 1, truth.size() - pos);
    t0 = Clock::now();
    (void)sd.add_output(req, std::span<const TokenId>(truth).subspan(pos, take));
    add_us_per_token.push_back(us_since(t0) / static_cast<double>(take));
    pos += take;
    ++steps;
  }
  const double cpu_us = thread_cpu_us() - cpu0, wall_us = us_since(wall0);
  std::printf(
      "decode: %zu tokens in %lld steps, %.2f us CPU per step (%.2f us wall) for propose + add_output\n",
      truth.size(), static_cast<long long>(steps), cpu_us / static_cast<double>(steps),
      wall_us / static_cast<double>(steps));
  std::printf("  propose per call:             %s\n", summary(propose_us, 1).c_str());
  std::printf("  add_output per token (a step): %s\n", summary(add_us_per_token, 1).c_str());
  std::printf("  %lld drafted, %lld accepted (%.1f%%), mean acceptance length %.2f tokens/step\n",
              static_cast<long long>(proposed), static_cast<long long>(accepted),
              proposed ? 100.0 * static_cast<double>(accepted) / static_cast<double>(proposed) : 0.0,
              static_cast<double>(truth.size()) / static_cast<double>(steps));

  t0 = Clock::now();
  (void)sd.stop_request(req);
  std::printf("stop_request: %d output tokens into a full global cache (one eviction) in %.1f ms\n",
              output_tokens, us_since(t0) / 1e3);
  return 0;
}

}  // namespace
}  // namespace kvasir

int main(int argc, char** argv) {
  int prompt_tokens = argc > 1 ? std::atoi(argv[1]) : 32768;
  int output_tokens = argc > 2 ? std::atoi(argv[2]) : 4096;
  int depth = argc > 3 ? std::atoi(argv[3]) : 24;
  if (prompt_tokens < 1 || output_tokens < 1) {
    std::fprintf(stderr,
                 "usage: suffix_decoding_bench [prompt_tokens>=1] [output_tokens>=1] [max_tree_depth]\n");
    return 2;
  }
  return kvasir::run(prompt_tokens, output_tokens, depth);
}
