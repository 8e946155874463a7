#include "golden.h"

#include <sys/stat.h>

#include <cmath>
#include <cstring>

#include "common/json.h"
#include "common/mapped_file.h"

namespace kvasir::testing {

std::string repo_path(const std::string& rel) { return std::string(KVASIR_SOURCE_DIR) + "/" + rel; }

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

static std::vector<int32_t> ints(const Json* j) {
  std::vector<int32_t> v;
  if (j && j->is_array()) {
    for (const Json& x : j->as_array()) v.push_back(static_cast<int32_t>(x.as_int()));
  }
  return v;
}

StatusOr<Golden> load_golden(const std::string& model_name) {
  const std::string dir = repo_path("tests/data/golden/" + model_name);
  KVASIR_ASSIGN_OR_RETURN(std::string text, read_text_file(dir + "/manifest.json"));
  KVASIR_ASSIGN_OR_RETURN(Json m, parse_json(text));
  Golden g;
  g.model = model_name;
  g.vocab_size = static_cast<int>(m.get_int("vocab_size", 0));
  const Json* prompts = m.find("prompts");
  if (!prompts || !prompts->is_array()) return data_loss("manifest has no prompts");
  for (const Json& p : prompts->as_array()) {
    GoldenPrompt gp;
    gp.id = p.get_string("id");
    gp.text = p.get_string("text");
    gp.token_ids = ints(p.find("token_ids"));
    gp.top1 = ints(p.find("top1"));
    if (const Json* mg = p.find("margin")) {
      for (const Json& x : mg->as_array()) gp.margin.push_back(x.as_double());
    }
    gp.generated = ints(p.find("generated"));
    if (const Json* gm = p.find("gen_margins")) {
      for (const Json& x : gm->as_array()) gp.gen_margins.push_back(x.as_double());
    }
    gp.logits_positions = ints(p.find("logits_positions"));
    if (!gp.logits_positions.empty()) {
      KVASIR_ASSIGN_OR_RETURN(std::string raw, read_text_file(dir + "/" + p.get_string("logits_file"), size_t{1} << 30));
      const size_t want = gp.logits_positions.size() * static_cast<size_t>(g.vocab_size) * sizeof(float);
      if (raw.size() != want) return data_loss("logits file of " + gp.id + " has the wrong size");
      gp.logits.resize(raw.size() / sizeof(float));
      std::memcpy(gp.logits.data(), raw.data(), raw.size());
    }
    g.prompts.push_back(std::move(gp));
  }
  return g;
}

double rel_l2(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace kvasir::testing
