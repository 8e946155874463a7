#include "setup/draft_cost.h"

#include <sys/stat.h>

#include "common/log.h"
#include "common/mapped_file.h"
#include "model/draft_heads/eagle3_head_config.h"
#include "model/draft_heads/eagle_head_config.h"
#include "setup/loaded_model.h"

namespace kvasir {

namespace {

double layer_params(const ModelConfig& c) {
  const double h = static_cast<double>(c.hidden_size);
  const double q = static_cast<double>(c.num_heads * c.head_dim), kv = static_cast<double>(c.num_kv_heads * c.head_dim);
  return h * (q + 2 * kv) + q * h + 3.0 * h * static_cast<double>(c.intermediate_size);
}

}  // namespace

double decode_weight_params(const ModelConfig& c) {
  const double lm_head = static_cast<double>(c.vocab_size) * static_cast<double>(c.hidden_size);
  return static_cast<double>(c.num_layers) * layer_params(c) + lm_head;
}

double draft_cost_ratio(const EngineArgs& args, const ModelConfig& target) {
  const std::string& method = args.speculative.method;
  const std::string& path = args.speculative.draft_model;
  const double target_params = decode_weight_params(target);
  if (target_params <= 0) return 0;
  double draft = 0;
  if (method == "draft_model") {
    LoadOptions lo = LoadOptions::from(args);
    if (args.load_format != "dummy") lo.load_format = "auto", lo.tokenizer.clear();
    auto m = load_model_without_weights(path, lo);
    if (!m.ok()) return 0;
    draft = decode_weight_params((*m)->config);
  } else if (method == "eagle" || method == "eagle3") {
    struct stat st {};
    const bool dir = ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    auto text = read_text_file(dir ? path + "/config.json" : path, 16u << 20);
    if (!text.ok()) return 0;
    const double h = static_cast<double>(target.hidden_size);
    if (method == "eagle3") {
      auto c = parse_eagle3_head_config(*text, target, path);
      if (!c.ok()) return 0;
      // Its layer reads 2H-wide q/k/v inputs; fc fuses 3 hidden states; lm_head over the draft vocabulary.
      draft = layer_params(c->layer) + h * static_cast<double>(c->layer.num_heads * c->layer.head_dim +
                                                               2 * c->layer.num_kv_heads * c->layer.head_dim) +
              3.0 * h * h + static_cast<double>(c->draft_vocab_size) * h;
    } else {
      auto c = parse_eagle_head_config(*text, target, path);
      if (!c.ok()) return 0;
      // fc over [embedding | hidden]; the target's own lm_head over the whole vocabulary.
      draft = layer_params(c->layer) + 2.0 * h * h + static_cast<double>(target.vocab_size) * h;
    }
  } else {
    return 0;
  }
  return draft / target_params;
}

}  // namespace kvasir
