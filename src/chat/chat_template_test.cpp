// Golden tests: every shared chat template x conversations, and engine snippets, must render
// byte-identically to Python jinja2 under HF's settings (tests/data/chat/golden.json, made by
// scripts/gen_chat_golden.py), and must fail where Python failed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>

#include "chat/chat_template.h"
#include "chat/jinja_template.h"
#include "common/check.h"

namespace kvasir {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const Json& golden() {
  static const Json g = [] {
    std::string text = read_file(std::string(KVASIR_SOURCE_DIR) + "/tests/data/chat/golden.json");
    auto j = parse_json(text);
    KVASIR_CHECK_MSG(j.ok(), "tests/data/chat/golden.json is missing or invalid");
    return *j;
  }();
  return g;
}

std::string templates_dir() {
  const char* env = std::getenv("KVASIR_CHAT_TEMPLATES");
  return env ? env : std::string(KVASIR_SOURCE_DIR) + "/../shared/testdata/chat_templates";  // shared/ beside the checkout
}

// The generator's FIXED_NOW: 2025-01-15 10:30:00, a Wednesday.
std::tm fixed_now() {
  std::tm t{};
  t.tm_year = 125;
  t.tm_mon = 0;
  t.tm_mday = 15;
  t.tm_hour = 10;
  t.tm_min = 30;
  std::time_t secs = timegm(&t);
  gmtime_r(&secs, &t);
  return t;
}

// First differing position, with a little context, for readable failures.
std::string diff(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  size_t from = i > 40 ? i - 40 : 0;
  std::ostringstream os;
  os << "first difference at byte " << i << "\n  want: …" << Json(want.substr(from, 100)).dump()
     << "\n  got:  …" << Json(got.substr(from, 100)).dump();
  return os.str();
}

TEST(ChatTemplateGolden, EveryTemplateRendersLikePython) {
  const Json& g = golden();
  const std::string dir = templates_dir();
  if (!std::ifstream(dir + "/MANIFEST.md")) GTEST_SKIP() << "shared chat templates not found at " << dir;
  std::map<std::string, std::string> texts;
  std::map<std::string, std::pair<int, int>> per_template;  // passed, total
  ChatTemplateOptions opts;
  opts.now = fixed_now();
  int failures = 0;
  for (const Json& c : g.find("chat_cases")->as_array()) {
    const std::string name = c.get_string("template");
    if (!texts.count(name)) texts[name] = read_file(dir + "/" + name);
    const Json& messages = *g.find("conversations")->find(c.get_string("conversation"));
    const Json* toolset = c.find("toolset");
    Json tools = (toolset && toolset->is_string()) ? *g.find("toolsets")->find(toolset->as_string()) : Json();
    bool agp = c.get_bool("add_generation_prompt", false);
    opts.continue_final_message = c.get_bool("continue_final_message", false);
    auto got = render_chat_template(texts[name], messages, tools, agp, *c.find("extra_vars"), opts);
    std::string label = name + " / " + c.get_string("conversation") + (agp ? " / gen" : " / no-gen") +
                        (opts.continue_final_message ? " / continue" : "");
    bool ok = true;
    if (const Json* err = c.find("error")) {
      if (got.ok()) {
        ok = false;
        ADD_FAILURE() << label << ": Python raised " << c.get_string("error_type") << " (" << err->as_string()
                      << ") but we rendered:\n" << *got;
      } else if (c.get_string("error_type") == "TemplateError" &&
                 got.status().message().find(err->as_string()) == std::string::npos) {
        ok = false;
        ADD_FAILURE() << label << ": raise_exception message differs: want '" << err->as_string() << "', got '"
                      << got.status().message() << "'";
      }
    } else if (!got.ok()) {
      ok = false;
      ADD_FAILURE() << label << ": unexpected error: " << got.status().to_string();
    } else if (*got != c.get_string("expected")) {
      ok = false;
      ADD_FAILURE() << label << ": output differs, " << diff(c.get_string("expected"), *got);
    }
    failures += !ok;
    per_template[name].first += ok;
    per_template[name].second += 1;
  }
  for (const auto& [name, pt] : per_template) {
    std::printf("  %-55s %3d/%d\n", name.c_str(), pt.first, pt.second);
  }
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(per_template.size(), 16u);
}

TEST(ChatTemplateGolden, SnippetsRenderLikePython) {
  const Json& g = golden();
  jinja::RenderOptions opts;
  opts.now = fixed_now();
  int failures = 0, n = 0;
  for (const Json& c : g.find("snippet_cases")->as_array()) {
    ++n;
    const std::string text = c.get_string("template");
    auto t = jinja::Template::parse(text);
    StatusOr<std::string> got = t.ok() ? t->render(*c.find("context"), opts) : StatusOr<std::string>(t.status());
    const std::string label = Json(text).dump();
    if (const Json* err = c.find("error")) {
      if (got.ok()) {
        ++failures;
        ADD_FAILURE() << label << ": Python raised " << c.get_string("error_type") << " (" << err->as_string()
                      << ") but we rendered " << Json(*got).dump();
      } else if (c.get_string("error_type") == "TemplateError" &&
                 got.status().message().find(err->as_string()) == std::string::npos) {
        ++failures;
        ADD_FAILURE() << label << ": message differs: want '" << err->as_string() << "', got '"
                      << got.status().message() << "'";
      }
    } else if (!got.ok()) {
      ++failures;
      ADD_FAILURE() << label << ": unexpected error: " << got.status().to_string() << "\n  want "
                    << Json(c.get_string("expected")).dump();
    } else if (*got != c.get_string("expected")) {
      ++failures;
      ADD_FAILURE() << label << ": want " << Json(c.get_string("expected")).dump() << "\n  got  "
                    << Json(*got).dump();
    }
  }
  std::printf("  snippets: %d/%d match\n", n - failures, n);
  EXPECT_EQ(failures, 0);
}

TEST(ChatTemplate, ExtraVarsCannotRedefineInputs) {
  Json extra = Json::object();
  extra.set("messages", Json::array());
  auto r = render_chat_template("{{ 1 }}", Json::array(), Json(), false, extra);
  EXPECT_FALSE(r.ok());
}

TEST(ChatTemplate, NormalizationDropsNullsAndAliasesReasoning) {
  auto msgs = parse_json(R"([{"role":"assistant","content":null,"reasoning_content":"r","x":1}])");
  ASSERT_TRUE(msgs.ok());
  auto n = normalize_chat_messages(*msgs);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->dump(), R"([{"thinking":"r","role":"assistant","reasoning_content":"r","x":1}])");
}

TEST(ChatTemplate, ContinueFinalMessageCutsAtTheFinalText) {
  auto msgs = parse_json(R"([{"role":"user","content":"Hi"},{"role":"assistant","content":"Sure, "}])");
  ASSERT_TRUE(msgs.ok());
  ChatTemplateOptions opts;
  opts.continue_final_message = true;
  const char* chatml =
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
  auto r = render_chat_template(chatml, *msgs, Json(), false, Json(), opts);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nSure, ");
  EXPECT_FALSE(render_chat_template(chatml, *msgs, Json(), true, Json(), opts).ok());
  EXPECT_FALSE(render_chat_template("{{ 'x' }}", *msgs, Json(), false, Json(), opts).ok());
}

TEST(ChatTemplate, RaiseExceptionBecomesInvalidArgumentWithLine) {
  auto r = render_chat_template("line1\n{{ raise_exception('no system role') }}", Json::array(), Json(), false, Json());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "line 2: no system role");
}

}  // namespace
}  // namespace kvasir
