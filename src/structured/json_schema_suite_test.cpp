// No widening, measured on JSON-Schema-Test-Suite (shared/testdata/json_schema, draft 2020-12 and
// the optional format tests): for every test group whose schema compiles, the grammar must reject
// the JSON text of every instance the suite marks invalid. Rejecting a valid instance is a
// narrowing (XGrammar fixes property order, full-matches patterns, writes integers without a
// fraction...), which is allowed and only counted; the summary printed per file is the data behind
// docs/STRUCTURED_OUTPUTS.md. Most of the suite's schemas have no "type" (then their keywords only
// constrain one kind of value, which XGrammar cannot express), so each such group also runs as a
// typed variant: the schema plus the "type" its keywords are about, where an instance of another
// type is invalid and one of that type keeps the suite's verdict.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>

#include "common/json.h"
#include "structured/json_schema_suite_test_util.h"
#include "structured/structured_test_util.h"

namespace kvasir::structured {
namespace {

using testing::implied_type;
using testing::make_compiler;
using testing::shared_testdata;
using testing::slurp;
using testing::tiny_tokenizer;

bool all_finite(const Json& v) {
  if (v.type() == Json::Type::kDouble) return std::isfinite(v.as_double());
  if (v.is_array()) {
    for (const Json& e : v.as_array()) {
      if (!all_finite(e)) return false;
    }
  }
  if (v.is_object()) {
    for (const auto& [k, e] : v.as_object()) {
      if (!all_finite(e)) return false;
    }
  }
  return true;
}

bool has_type(const Json& v, const std::string& type) {
  if (type == "string") return v.is_string();
  if (type == "number") return v.is_number();
  if (type == "array") return v.is_array();
  return v.is_object();
}

struct FileStats {
  int groups = 0, compiled = 0, refused = 0, invalid = 0;
  int valid_accepted = 0, valid_rejected = 0, invalid_rejected = 0, widened = 0;
};

bool accepts(const CompiledGrammarPtr& g, const std::string& text) {
  GrammarMatcher m(g);
  return m.accept_string(text) && m.is_completed();
}

void run_group(GrammarCompiler& compiler, const std::filesystem::path& path, const Json& group, const Json* schema,
               const std::string& forced_type, FileStats* st) {
  const Json* tests = group.find("tests");
  ASSERT_TRUE(schema != nullptr && tests != nullptr);
  ++st->groups;
  StructuredOutputSpec spec;
  spec.kind = StructuredOutputSpec::Kind::kJsonSchema;
  spec.text = schema->dump();
  CompileResult r = compiler.compile(spec);
  if (!r.ok()) {
    if (std::getenv("KVASIR_SUITE_VERBOSE") != nullptr) {
      std::printf("  %s | %s\n    %s\n", path.filename().c_str(), group.get_string("description").c_str(),
                  r.status().to_string().c_str());
    }
    if (r.status().code() == StatusCode::kUnimplemented) {
      ++st->refused;
    } else {
      ++st->invalid;
    }
    return;
  }
  ++st->compiled;
  for (const Json& t : tests->as_array()) {
    const Json& data = *t.find("data");
    if (!all_finite(data)) continue;
    bool valid = t.find("valid")->as_bool();
    if (!forced_type.empty() && !has_type(data, forced_type)) valid = false;
    bool ok = accepts(*r, data.dump());
    if (valid) {
      ++(ok ? st->valid_accepted : st->valid_rejected);
    } else if (ok) {
      ++st->widened;
      ADD_FAILURE() << "widening: " << path.filename() << " group '" << group.get_string("description")
                    << "' accepts the invalid instance " << data.dump() << " (" << t.get_string("description")
                    << ")\n  schema: " << spec.text;
    } else {
      ++st->invalid_rejected;
    }
  }
}

void run_file(GrammarCompiler& compiler, const std::filesystem::path& path, FileStats* plain, FileStats* typed) {
  auto doc = parse_json(slurp(path.string()));
  ASSERT_TRUE(doc.ok()) << path;
  for (const Json& group : doc->as_array()) {
    const Json* schema = group.find("schema");
    run_group(compiler, path, group, schema, "", plain);
    std::string type = schema == nullptr ? "" : implied_type(*schema);
    if (type.empty()) continue;
    Json variant = *schema;
    variant.set("type", type);
    run_group(compiler, path, group, &variant, type, typed);
  }
}

TEST(JsonSchemaSuite, EveryCompiledSchemaRejectsEveryInvalidInstance) {
  const std::filesystem::path root = shared_testdata() + "/json_schema/draft2020-12";
  if (!std::filesystem::exists(root)) GTEST_SKIP() << "shared test data missing: " << root;
  auto compiler = make_compiler(tiny_tokenizer());
  ASSERT_NE(compiler, nullptr);
  std::map<std::string, FileStats> stats;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
    if (entry.path().extension() != ".json") continue;
    std::string name = std::filesystem::relative(entry.path(), root).string();
    run_file(*compiler, entry.path(), &stats[name], &stats[name + " (typed)"]);
  }
  ASSERT_GT(stats.size(), 20u);
  FileStats total;
  std::printf("%-32s %6s %8s %7s %7s | %9s %9s %9s\n", "file", "groups", "compiled", "refused", "invalid", "valid ok",
              "narrowed", "invalid x");
  for (const auto& [name, s] : stats) {
    if (s.groups == 0) continue;
    std::printf("%-32s %6d %8d %7d %7d | %9d %9d %9d\n", name.c_str(), s.groups, s.compiled, s.refused, s.invalid,
                s.valid_accepted, s.valid_rejected, s.invalid_rejected);
    total.groups += s.groups;
    total.compiled += s.compiled;
    total.refused += s.refused;
    total.invalid += s.invalid;
    total.valid_accepted += s.valid_accepted;
    total.valid_rejected += s.valid_rejected;
    total.invalid_rejected += s.invalid_rejected;
    total.widened += s.widened;
  }
  std::printf("%-32s %6d %8d %7d %7d | %9d %9d %9d\n", "total", total.groups, total.compiled, total.refused,
              total.invalid, total.valid_accepted, total.valid_rejected, total.invalid_rejected);
  EXPECT_EQ(total.widened, 0);
  EXPECT_GT(total.compiled, total.groups / 2);
}

}  // namespace
}  // namespace kvasir::structured

namespace kvasir::structured {
namespace {

// XGrammar writes numeric bounds as digit-range grammars: every number they accept must lie in
// the range (a narrowing, such as no exponent form, is allowed).
TEST(JsonSchemaNumbers, BoundedNumbersAcceptOnlyValuesInRange) {
  auto compiler = testing::make_compiler(testing::tiny_tokenizer());
  struct Range {
    const char* schema;
    double lo, hi;
    bool lo_excl, hi_excl;
  };
  const Range ranges[] = {
      {R"({"type":"number","minimum":-1.5,"maximum":2.25})", -1.5, 2.25, false, false},
      {R"({"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1})", 0, 1, true, true},
      {R"({"type":"number","minimum":0.1,"maximum":0.3})", 0.1, 0.3, false, false},
      {R"({"type":"number","exclusiveMinimum":-10.05,"maximum":99.5})", -10.05, 99.5, true, false},
      {R"({"type":"integer","minimum":-7,"exclusiveMaximum":120})", -7, 120, false, true},
      {R"({"type":"integer","exclusiveMinimum":-1000,"maximum":-3})", -1000, -3, true, false},
  };
  std::mt19937 rng(7);
  for (const Range& r : ranges) {
    CompileResult g = compiler->compile(testing::spec_of(StructuredOutputSpec::Kind::kJsonSchema, r.schema));
    ASSERT_TRUE(g.ok()) << r.schema << ": " << g.status().to_string();
    int accepted = 0;
    for (int i = 0; i < 3000; ++i) {
      int whole = std::uniform_int_distribution<int>(-1100, 1100)(rng) / (i % 3 == 0 ? 1 : 100);
      int digits = std::uniform_int_distribution<int>(0, 4)(rng);
      std::string text = std::to_string(whole);
      if (whole == 0 && i % 2 == 0) text = "-0";
      if (digits > 0) {
        text += '.';
        for (int d = 0; d < digits; ++d) text += static_cast<char>('0' + rng() % 10);
      }
      double v = std::strtod(text.c_str(), nullptr);
      bool in = (r.lo_excl ? v > r.lo : v >= r.lo) && (r.hi_excl ? v < r.hi : v <= r.hi);
      if (accepts(*g, text)) {
        ++accepted;
        EXPECT_TRUE(in) << r.schema << " accepts " << text;
      }
    }
    EXPECT_GT(accepted, 10) << r.schema;
  }
}

}  // namespace
}  // namespace kvasir::structured
