#include "setup/eagle_head_setup.h"

#include "common/log.h"
#include "common/mapped_file.h"
#include "loader/dummy_weights.h"
#include "model/draft_heads/eagle3_head.h"
#include "model/draft_heads/eagle_head.h"
#include "setup/draft_model.h"

#include <sys/stat.h>

namespace kvasir {
namespace {

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The weights: the checkpoint's, or with --load-format dummy random ones after `manifest`.
StatusOr<std::unique_ptr<WeightSource>> head_weights(const EngineArgs& args, const LoadedModel& target,
                                                     const WeightManifest& manifest, const ModelConfig& layer,
                                                     uint64_t dummy_seed, const std::string& what) {
  const std::string& path = args.speculative.draft_model;
  if (args.load_format == "dummy") {
    const bool on_device = target.backend->device() != Device::kCpu;
    return open_dummy_weights(dummy_weight_specs(manifest, layer, on_device), dummy_seed, path);
  }
  auto w = open_weights(path);
  if (!w.ok()) return invalid_argument("--speculative-config: " + what + " " + path + ": " + w.status().message());
  return std::move(*w);
}

Status head_status(const Status& s, const std::string& what, const std::string& path) {
  return Status(s.code(), "--speculative-config: " + what + " " + path + ": " + s.message());
}

}  // namespace

StatusOr<LoadedEagleHead> load_eagle_head(const EngineArgs& args, LoadedModel& target, int target_kv_blocks) {
  const std::string& path = args.speculative.draft_model;
  const bool eagle3 = args.speculative.method == "eagle3";
  if (!eagle3 && args.speculative.method != "eagle") {
    return invalid_argument("speculative method \"" + args.speculative.method + "\" has no EAGLE head");
  }
  const std::string what = eagle3 ? "EAGLE-3 head" : "EAGLE head";
  const bool dummy = args.load_format == "dummy";
  const bool dir = is_dir(path);
  if (!dir && !dummy) {
    return invalid_argument("--speculative-config: the " + what + " " + path +
                            " must be an HF directory (config.json + model.safetensors); a config.json alone "
                            "needs --load-format dummy");
  }
  const std::string config_file = dir ? path + "/config.json" : path;
  auto text = read_text_file(config_file, 16u << 20);
  if (!text.ok()) return invalid_argument("--speculative-config: " + what + ": " + text.status().message());
  // The head's passes are never larger than the target's: its workspace is the target's.
  const int max_tokens = target.model->max_num_tokens(), max_rows = target.model->max_num_logits();
  LoadedEagleHead h;
  std::string detail;
  if (eagle3) {
    auto config = parse_eagle3_head_config(*text, target.config, path);
    if (!config.ok()) return invalid_argument("--speculative-config: " + config.status().message());
    KVASIR_ASSIGN_OR_RETURN(h.weights, head_weights(args, target, eagle3_head_manifest(*config), config->layer,
                                                    0x65613363, what));
    auto head = Eagle3Head::create(*config, *h.weights, *target.model, max_tokens, max_rows);
    if (!head.ok()) return head_status(head.status(), what, path);
    h.head = std::move(*head);
    std::string layers;
    for (int id : config->aux_layer_ids) layers += (layers.empty() ? "" : ", ") + std::to_string(id);
    detail = "fuses target layers (" + layers + "), draft vocabulary " + std::to_string(config->draft_vocab_size);
  } else {
    auto config = parse_eagle_head_config(*text, target.config, path);
    if (!config.ok()) return invalid_argument("--speculative-config: " + config.status().message());
    KVASIR_ASSIGN_OR_RETURN(h.weights, head_weights(args, target, eagle_head_manifest(*config), config->layer,
                                                    0x65616731, what));
    auto head = EagleHead::create(*config, *h.weights, *target.model, max_tokens, max_rows);
    if (!head.ok()) return head_status(head.status(), what, path);
    detail = std::string("reads the target's last hidden state, fc ") +
             ((*head)->has_fc_bias() ? "with" : "without") + " bias, the target's embedding and lm_head";
    h.head = std::move(*head);
  }
  const int blocks = num_draft_kv_blocks(target_kv_blocks, args.block_size, args.max_num_seqs,
                                         args.speculative.num_speculative_tokens);
  h.cache = std::make_unique<KvCache>();
  KVASIR_ASSIGN_OR_RETURN(*h.cache, h.head->allocate_kv_cache(blocks, args.block_size));
  KVASIR_LOG_INFO("%s %s%s: %s, %d KV blocks of %d tokens (%.1f MiB)", what.c_str(), path.c_str(),
                  dummy ? " (dummy weights)" : "", detail.c_str(), blocks, args.block_size,
                  static_cast<double>(h.head->kv_cache_bytes_per_block(args.block_size)) * blocks / (1 << 20));
  return h;
}

}  // namespace kvasir
