// grammar_bench: grammar compile time and per-token mask-fill time on a real vocabulary.
// Schemas: every test-group schema of the shared JSON-Schema-Test-Suite copy that the keyword
// policy accepts (as is, and with the "type" its keywords imply, as json_schema_suite_test does)
// plus the realistic vLLM benchmark schema. Token walks: each accepted valid instance of a group,
// tokenized with the model's tokenizer, is fed token by token (fill_bitmask, then accept_token),
// then the stop token; the realistic schema gets a hand-written two-character instance.
// Times are this thread's CPU time (the build machine is shared); compiles use one thread.
// Usage: grammar_bench [model.gguf] [json_schema dir]
//   defaults: models/SmolLM2-135M-Instruct.Q4_1.gguf, $KVASIR_SHARED_TESTDATA/json_schema or
//   ../shared/testdata/json_schema
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/json.h"
#include "loader/gguf_file.h"
#include "structured/grammar_compiler.h"
#include "structured/grammar_matcher.h"
#include "structured/json_schema_suite_test_util.h"
#include "tokenizer/gguf_vocab.h"

namespace {

using namespace kvasir;
using namespace kvasir::structured;
using kvasir::structured::testing::implied_type;

double cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Series {
  std::vector<double> v;
  double pct(double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
    return v[std::min(i, v.size() - 1)];
  }
};

struct Case {
  std::string schema;
  std::vector<std::string> instances;  // JSON texts the schema accepts
};

std::vector<Case> load_cases(const std::string& dir) {
  std::vector<Case> cases;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir + "/draft2020-12")) {
    if (e.path().extension() != ".json") continue;
    auto doc = parse_json(slurp(e.path().string()));
    if (!doc.ok() || !doc->is_array()) continue;
    for (const Json& group : doc->as_array()) {
      const Json* schema = group.find("schema");
      const Json* tests = group.find("tests");
      if (schema == nullptr || tests == nullptr) continue;
      std::vector<Json> variants = {*schema};
      if (std::string t = implied_type(*schema); !t.empty()) {
        Json typed = *schema;
        typed.set("type", t);
        variants.push_back(std::move(typed));
      }
      for (const Json& s : variants) {
        Case c;
        c.schema = s.dump();
        for (const Json& t : tests->as_array()) {
          if (t.find("valid")->as_bool()) c.instances.push_back(t.find("data")->dump());
        }
        cases.push_back(std::move(c));
      }
    }
  }
  Case realistic;
  realistic.schema = slurp(dir + "/realistic/vllm-structured_schema_1.json");
  realistic.instances.push_back(
      R"([{"name": "Aria Stormwind", "race": "Half-Elf", "class": "Ranger", "level": 7, )"
      R"("background": "Outlander", "alignment": "Chaotic Good", "backstory": "Raised by wolves on the )"
      R"(edge of the Whispering Woods, Aria learned to track before she could read. A ranger's band )"
      R"(found her at twelve and taught her the bow."}, {"name": "Borin Ironhand", "race": "Dwarf", )"
      R"("class": "Cleric", "level": 5, "background": "Acolyte", "alignment": "Lawful Good", )"
      R"("backstory": "Borin served thirty years at the Temple of the Forge before a vision sent him )"
      R"(into the world to find the hammer of his ancestors."}])");
  cases.push_back(std::move(realistic));
  return cases;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = argc > 1 ? argv[1] : std::string(KVASIR_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  std::string dir;
  if (argc > 2) {
    dir = argv[2];
  } else if (const char* env = std::getenv("KVASIR_SHARED_TESTDATA"); env != nullptr && *env) {
    dir = std::string(env) + "/json_schema";
  } else {
    dir = std::string(KVASIR_SOURCE_DIR) + "/../shared/testdata/json_schema";
  }
  auto gguf = GgufFile::open(model);
  if (!gguf.ok()) {
    std::fprintf(stderr, "%s\n", gguf.status().to_string().c_str());
    return 1;
  }
  auto tok = tokenizer_from_gguf(**gguf);
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", tok.status().to_string().c_str());
    return 1;
  }
  double t0 = cpu_ms();
  GrammarCompilerOptions options;
  options.num_threads = 1;
  auto compiler = GrammarCompiler::create(*tok, static_cast<int32_t>(tok->vocab_size()), {tok->eos_id()}, options);
  if (!compiler.ok()) {
    std::fprintf(stderr, "%s\n", compiler.status().to_string().c_str());
    return 1;
  }
  std::printf("vocabulary: %zu tokens, compiler set up in %.1f ms\n", tok->vocab_size(), cpu_ms() - t0);

  std::vector<Case> cases = load_cases(dir);
  Series compile_ms, cached_ms, fill_us, accept_us;
  int compiled = 0, refused = 0, invalid = 0, walks = 0, rejected_walks = 0, masked = 0;
  double realistic_compile = 0, worst_fill = 0, worst_compile = 0;
  std::string worst_fill_schema, worst_compile_schema;
  Series realistic_fill;
  std::vector<int32_t> row(bitmask_words((*compiler)->model_vocab_size()));
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    StructuredOutputSpec spec;
    spec.kind = StructuredOutputSpec::Kind::kJsonSchema;
    spec.text = c.schema;
    double a = cpu_ms();
    CompileResult r = (*compiler)->compile(spec);
    double b = cpu_ms();
    if (!r.ok()) {
      ++(r.status().code() == StatusCode::kUnimplemented ? refused : invalid);
      continue;
    }
    ++compiled;
    compile_ms.v.push_back(b - a);
    if (b - a > worst_compile) {
      worst_compile = b - a;
      worst_compile_schema = c.schema;
    }
    (void)(*compiler)->compile(spec);
    cached_ms.v.push_back(cpu_ms() - b);
    bool realistic = ci + 1 == cases.size();
    if (realistic) realistic_compile = b - a;
    for (const std::string& instance : c.instances) {
      GrammarMatcher m(*r);
      if (!m.accept_string(instance) || !m.is_completed()) continue;  // a narrowing: not generated
      m.reset();
      ++walks;
      std::vector<int32_t> ids = tok->encode(instance, false);
      ids.push_back(tok->eos_id());
      for (int32_t id : ids) {
        double f0 = cpu_ms();
        masked += m.fill_bitmask(row);
        double f1 = cpu_ms();
        bool ok = m.accept_token(id);
        double f2 = cpu_ms();
        fill_us.v.push_back((f1 - f0) * 1e3);
        if (f1 - f0 > worst_fill) {
          worst_fill = f1 - f0;
          worst_fill_schema = c.schema;
        }
        accept_us.v.push_back((f2 - f1) * 1e3);
        if (realistic) realistic_fill.v.push_back((f1 - f0) * 1e3);
        if (!ok) {  // the model's tokenization needs a token boundary the grammar does not allow
          ++rejected_walks;
          break;
        }
      }
    }
  }
  std::printf("schemas: %zu (compiled %d, refused by the keyword policy %d, invalid %d)\n", cases.size(), compiled,
              refused, invalid);
  std::printf("compile (ms):            median %.2f  p99 %.2f  max %.2f\n", compile_ms.pct(0.5), compile_ms.pct(0.99),
              compile_ms.pct(1.0));
  std::printf("compile, cache hit (ms): median %.4f  p99 %.4f\n", cached_ms.pct(0.5), cached_ms.pct(0.99));
  std::printf(
      "realistic schema (vLLM structured_schema_1): compile %.2f ms, mask fill median %.1f us  p99 %.1f us over %zu "
      "tokens\n",
      realistic_compile, realistic_fill.pct(0.5), realistic_fill.pct(0.99), realistic_fill.v.size());
  std::printf("token walks: %d instances, %zu tokens (%d rejected a tokenizer boundary), %d masks not all-allowed\n",
              walks, fill_us.v.size(), rejected_walks, masked);
  std::printf("mask fill (us/token):    median %.1f  p99 %.1f  max %.1f\n", fill_us.pct(0.5), fill_us.pct(0.99),
              fill_us.pct(1.0));
  std::printf("slowest compile: %s\nslowest mask fill: %s\n", worst_compile_schema.substr(0, 160).c_str(),
              worst_fill_schema.substr(0, 160).c_str());
  std::printf("accept (us/token):       median %.1f  p99 %.1f\n", accept_us.pct(0.5), accept_us.pct(0.99));
  return 0;
}
