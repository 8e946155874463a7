// Every config under configs/ (the GPU benchmarks' --load-format dummy models) goes through the
// registry, and its dummy weights add up to the published parameter count: a family that dropped
// or doubled a tensor (an expert, a bias) would benchmark a different model.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "common/json.h"
#include "common/mapped_file.h"
#include "model/registry.h"

namespace kvasir {
namespace {

struct Published {
  const char* file;
  double params;  // the checkpoint's parameter count (safetensors total)
};

TEST(DummyConfigs, ParseAndHaveThePublishedParameterCounts) {
  for (const Published p : {Published{"llama-3.1-8b.json", 8.030261248e9}, {"qwen2.5-7b.json", 7.615616512e9},
                            {"qwen3-30b-a3b.json", 30.532122624e9}, {"mixtral-8x7b.json", 46.702792704e9}}) {
    const std::string path = std::string(KVASIR_SOURCE_DIR) + "/configs/" + p.file;
    auto text = read_text_file(path);
    ASSERT_TRUE(text.ok()) << path;
    auto json = parse_json(*text);
    ASSERT_TRUE(json.ok()) << path;
    auto config = model_config_from_hf_json(*json, nullptr);
    ASSERT_TRUE(config.ok()) << p.file << ": " << config.status().to_string();
    auto specs = dummy_weight_specs_for(*config, /*matrices_on_device=*/true);
    ASSERT_TRUE(specs.ok()) << p.file;
    double total = 0;
    for (const DummyTensorSpec& s : *specs) {
      double n = 1;
      for (int64_t d : s.shape) n *= static_cast<double>(d);
      total += n;
    }
    EXPECT_LT(std::fabs(total - p.params) / p.params, 1e-3) << p.file << ": " << total << " parameters";
  }
}

}  // namespace
}  // namespace kvasir
