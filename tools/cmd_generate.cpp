// `kvasir generate`: one prompt (--prompt) printed to stdout, or a JSONL file of prompts
// (--input/--output) run through the offline LLM API with continuous batching.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "server/sampling_json.h"
#include "server/structured_outputs_json.h"
#include "api/remote_replica.h"
#include "api/tensor_parallel_group.h"
#include "args.h"
#include "commands.h"
#include "common/check.h"
#include "common/json.h"
#include "common/mapped_file.h"
#include "engine_flags.h"
#include "kvasir/llm.h"
#include "setup/loaded_model.h"

namespace kvasir {
namespace {

void print_usage() {
  std::fprintf(stderr,
               "usage: kvasir generate [--model PATH] (--prompt TEXT | --input prompts.jsonl --output out.jsonl)\n"
               "  --max-tokens N (default 64)  --temperature T (default 0 = greedy)  --top-p P  --top-k K\n"
               "  --min-p P  --request-seed N  --ignore-eos  --logprobs N\n"
               "An HF model's generation_config.json replaces those defaults (temperature, top_p, top_k, min_p,\n"
               "repetition_penalty; max_new_tokens for --max-tokens), as kvasir serve does; flags given win.\n"
               "Each input line: {\"prompt\": \"...\"} or {\"prompt_token_ids\": [...]} with optional sampling\n"
               "fields (temperature, top_p, top_k, min_p, max_tokens, seed, n, stop, stop_token_ids, logprobs, ...),\n"
               "which win over both.\n"
               "Engine options:\n%s",
               engine_flags_help().c_str());
}

// The sampling defaults of every prompt, in rising precedence: kvasir generate's own (greedy, 64
// tokens), the model's generation_config.json (vLLM's --generation-config auto, as kvasir serve
// applies it), the flags given. A JSONL line's own fields win over all three.
Status sampling_from_flags(const Args& a, const GenerationDefaults& model, SamplingParams* p) {
  p->max_tokens = 64;
  p->temperature = 0.0f;
  model.apply_to(p);
  if (model.max_new_tokens) p->max_tokens = *model.max_new_tokens;
  KVASIR_ASSIGN_OR_RETURN(int64_t max_tokens, a.get_int("max-tokens", p->max_tokens));
  KVASIR_ASSIGN_OR_RETURN(double temperature, a.get_double("temperature", p->temperature));
  KVASIR_ASSIGN_OR_RETURN(double top_p, a.get_double("top-p", p->top_p));
  KVASIR_ASSIGN_OR_RETURN(int64_t top_k, a.get_int("top-k", p->top_k));
  KVASIR_ASSIGN_OR_RETURN(double min_p, a.get_double("min-p", p->min_p));
  if (max_tokens < 1 || max_tokens > 1 << 24 || top_k < -1 || top_k > 1 << 24) return invalid_argument("--max-tokens/--top-k out of range");
  p->max_tokens = static_cast<int>(max_tokens);
  p->temperature = static_cast<float>(temperature);
  p->top_p = static_cast<float>(top_p);
  p->top_k = static_cast<int>(top_k);
  p->min_p = static_cast<float>(min_p);
  p->ignore_eos = a.get_bool("ignore-eos", false);
  if (a.has("request-seed")) {
    KVASIR_ASSIGN_OR_RETURN(int64_t s, a.get_int("request-seed", 0));
    p->seed = static_cast<uint64_t>(s);
  }
  if (a.has("logprobs")) {
    KVASIR_ASSIGN_OR_RETURN(int64_t lp, a.get_int("logprobs", 0));
    if (lp < 0 || lp > 1 << 20) return invalid_argument("--logprobs out of range");
    p->logprobs = static_cast<int>(lp);
  }
  return Status();
}

Json logprobs_json(const std::vector<PositionLogprobs>& lps) {
  Json arr = Json::array();
  for (const auto& p : lps) {
    Json o = Json::object();
    o.set("token_id", p.chosen.token_id);
    o.set("logprob", static_cast<double>(p.chosen.logprob));
    o.set("rank", p.chosen.rank);
    Json top = Json::array();
    for (const auto& t : p.top) {
      Json e = Json::object();
      e.set("token_id", t.token_id);
      e.set("logprob", static_cast<double>(t.logprob));
      top.push_back(std::move(e));
    }
    o.set("top_logprobs", std::move(top));
    arr.push_back(std::move(o));
  }
  return arr;
}

Json completion_json(const CompletionResult& c) {
  Json o = Json::object();
  o.set("text", c.text);
  Json ids = Json::array();
  for (int32_t t : c.token_ids) ids.push_back(t);
  o.set("token_ids", std::move(ids));
  o.set("finish_reason", c.finish_reason);
  if (!c.logprobs.empty()) o.set("logprobs", logprobs_json(c.logprobs));
  return o;
}

int run_jsonl(LLM& llm, const Args& a, const SamplingParams& defaults) {
  auto text = read_text_file(a.get("input"), size_t{4} << 30);
  if (!text.ok()) {
    std::fprintf(stderr, "kvasir generate: %s\n", text.status().message().c_str());
    return 1;
  }
  std::vector<PromptInput> prompts;
  std::vector<Json> lines;
  size_t line_no = 0, start = 0;
  const std::string& s = *text;
  while (start < s.size()) {
    size_t end = s.find('\n', start);
    if (end == std::string::npos) end = s.size();
    std::string_view line(s.data() + start, end - start);
    start = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    auto j = parse_json(line);
    const std::string where = a.get("input") + ":" + std::to_string(line_no) + ": ";
    if (!j.ok()) {
      std::fprintf(stderr, "kvasir generate: %s%s\n", where.c_str(), j.status().message().c_str());
      return 2;
    }
    PromptInput p;
    const Json* prompt = j->find("prompt");
    const Json* ids = j->find("prompt_token_ids");
    if (prompt && prompt->is_string()) {
      p.text = prompt->as_string();
    } else if (ids && ids->is_array() && ids->size() > 0) {
      for (const Json& t : ids->as_array()) {
        if (!t.is_int() || t.as_int() < 0 || t.as_int() > 0x7fffffff) {
          std::fprintf(stderr, "kvasir generate: %s'prompt_token_ids' must be non-negative integers\n", where.c_str());
          return 2;
        }
        p.token_ids.push_back(static_cast<int32_t>(t.as_int()));
      }
    } else {
      std::fprintf(stderr, "kvasir generate: %sneeds \"prompt\" (string) or \"prompt_token_ids\" (list)\n", where.c_str());
      return 2;
    }
    SamplingParams sp = defaults;
    Status st = apply_sampling_json(*j, &sp);
    if (st.ok()) st = apply_structured_outputs_json(*j, &sp);  // vLLM's structured_outputs / guided_*
    if (!st.ok()) {
      std::fprintf(stderr, "kvasir generate: %s%s\n", where.c_str(), st.message().c_str());
      return 2;
    }
    p.params = sp;
    prompts.push_back(std::move(p));
    lines.push_back(std::move(*j));
  }
  const bool tty = isatty(STDERR_FILENO);
  auto progress = [&](size_t done, size_t total) {
    if (!tty) return;
    const int width = 40;
    int filled = total ? static_cast<int>(width * done / total) : width;
    std::fprintf(stderr, "\r[%s%s] %zu/%zu", std::string(static_cast<size_t>(filled), '#').c_str(),
                 std::string(static_cast<size_t>(width - filled), ' ').c_str(), done, total);
    if (done == total) std::fprintf(stderr, "\n");
  };
  auto results = llm.generate(prompts, defaults, progress);
  if (!results.ok()) {
    std::fprintf(stderr, "kvasir generate: %s\n", results.status().message().c_str());
    return 1;
  }
  std::ofstream out(a.get("output"), std::ios::binary);
  if (!out) {
    std::fprintf(stderr, "kvasir generate: cannot write %s\n", a.get("output").c_str());
    return 1;
  }
  int failures = 0;
  for (size_t i = 0; i < results->size(); ++i) {
    const GenerationResult& r = (*results)[i];
    Json o = Json::object();
    if (const Json* p = lines[i].find("prompt")) o.set("prompt", *p);
    Json pids = Json::array();
    for (int32_t t : r.prompt_token_ids) pids.push_back(t);
    o.set("prompt_token_ids", std::move(pids));
    if (!r.error.empty()) {
      o.set("error", r.error);
      ++failures;
    } else {
      Json first = completion_json(r.outputs[0]);
      for (auto& [k, v] : first.as_object()) o.set(k, v);
      if (r.outputs.size() > 1) {
        Json all = Json::array();
        for (const auto& c : r.outputs) all.push_back(completion_json(c));
        o.set("outputs", std::move(all));
      }
      if (!r.prompt_logprobs.empty()) o.set("prompt_logprobs", logprobs_json(r.prompt_logprobs));
    }
    out << o.dump() << "\n";
  }
  if (failures) std::fprintf(stderr, "kvasir generate: %d of %zu prompts failed (see \"error\" in the output)\n", failures, results->size());
  return 0;
}

}  // namespace

int cmd_generate(int argc, char** argv) {
  std::set<std::string> value_flags = {"prompt", "input", "output", "max-tokens", "temperature", "top-p",
                                       "top-k", "min-p", "request-seed", "logprobs"};
  std::set<std::string> bool_flags = {"ignore-eos", "help"};
  add_engine_flags(value_flags, bool_flags);
  auto args = Args::parse(argc, argv, value_flags, bool_flags);
  if (!args.ok()) {
    std::fprintf(stderr, "kvasir generate: %s\n", args.status().message().c_str());
    print_usage();
    return 2;
  }
  if (args->get_bool("help", false)) {
    print_usage();
    return 0;
  }
  const bool jsonl = args->has("input");
  if (!jsonl && !args->has("prompt")) {
    std::fprintf(stderr, "kvasir generate: give --prompt TEXT or --input FILE --output FILE\n");
    return 2;
  }
  if (jsonl && !args->has("output")) {
    std::fprintf(stderr, "kvasir generate: --input needs --output\n");
    return 2;
  }
  // The flags are checked before the model loads (a typo costs no load); the model's defaults
  // are only known after.
  SamplingParams sp;
  Status st = sampling_from_flags(*args, GenerationDefaults(), &sp);
  if (!st.ok()) {
    std::fprintf(stderr, "kvasir generate: %s\n", st.message().c_str());
    return 2;
  }
  auto ea = engine_args_from(*args);
  if (!ea.ok()) {
    std::fprintf(stderr, "kvasir generate: %s\n", ea.status().message().c_str());
    return 2;
  }
  // A tensor-parallel worker (started by its node's launcher, another node's rank, an mpirun
  // rank past 0): only steps.
  // A --headless node of data-parallel replicas (node 0 runs this command without it): only steps.
  if (ea->launch.headless && ea->data_parallel_size > 1) return run_headless_replicas(*ea);
  auto plan = plan_launch(*ea);
  if (!plan.ok()) {
    std::fprintf(stderr, "kvasir generate: %s\n", plan.status().message().c_str());
    return 2;
  }
  if (plan->is_worker()) return run_tensor_parallel_worker(*ea, *plan);
  auto llm = LLM::create(*ea);
  if (!llm.ok()) {
    std::fprintf(stderr, "kvasir generate: %s\n", llm.status().message().c_str());
    return 1;
  }
  st = sampling_from_flags(*args, (*llm)->model().generation_defaults, &sp);
  KVASIR_CHECK_MSG(st.ok(), "flags that parsed once parse again");
  if (jsonl) return run_jsonl(**llm, *args, sp);
  PromptInput p;
  p.text = args->get("prompt");
  auto r = (*llm)->generate({p}, sp);
  if (!r.ok() || !(*r)[0].error.empty()) {
    std::fprintf(stderr, "kvasir generate: %s\n", r.ok() ? (*r)[0].error.c_str() : r.status().message().c_str());
    return 1;
  }
  const std::string& text = (*r)[0].outputs[0].text;
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::printf("\n");
  return 0;
}

}  // namespace kvasir
