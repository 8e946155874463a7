#include "setup/eagle3_head_setup.h"

#include "common/log.h"
#include "common/mapped_file.h"
#include "loader/dummy_weights.h"
#include "setup/draft_model.h"

#include <sys/stat.h>

namespace kvasir {
namespace {

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

StatusOr<LoadedEagle3Head> load_eagle3_head(const EngineArgs& args, LoadedModel& target, int target_kv_blocks) {
  const std::string& path = args.speculative.draft_model;
  const bool dummy = args.load_format == "dummy";
  const bool dir = is_dir(path);
  if (!dir && !dummy) {
    return invalid_argument("--speculative-config: the EAGLE-3 head " + path +
                            " must be an HF directory (config.json + model.safetensors); a config.json alone "
                            "needs --load-format dummy");
  }
  const std::string config_file = dir ? path + "/config.json" : path;
  auto text = read_text_file(config_file, 16u << 20);
  if (!text.ok()) return invalid_argument("--speculative-config: EAGLE-3 head: " + text.status().message());
  auto config = parse_eagle3_head_config(*text, target.config, path);
  if (!config.ok()) return invalid_argument("--speculative-config: " + config.status().message());
  LoadedEagle3Head h;
  if (dummy) {
    const bool on_device = target.backend->device() != Device::kCpu;
    KVASIR_ASSIGN_OR_RETURN(h.weights, open_dummy_weights(dummy_weight_specs(eagle3_head_manifest(*config), config->layer, on_device),
                                                          0x65613363, path));
  } else {
    auto w = open_weights(path);
    if (!w.ok()) return invalid_argument("--speculative-config: EAGLE-3 head " + path + ": " + w.status().message());
    h.weights = std::move(*w);
  }
  // The head's passes are never larger than the target's: its workspace is the target's.
  auto head = Eagle3Head::create(*config, *h.weights, *target.model, target.model->max_num_tokens(),
                                 target.model->max_num_logits());
  if (!head.ok()) {
    return Status(head.status().code(), "--speculative-config: EAGLE-3 head " + path + ": " + head.status().message());
  }
  h.head = std::move(*head);
  const int blocks = num_draft_kv_blocks(target_kv_blocks, args.block_size, args.max_num_seqs,
                                         args.speculative.num_speculative_tokens);
  h.cache = std::make_unique<KvCache>();
  KVASIR_ASSIGN_OR_RETURN(*h.cache, h.head->allocate_kv_cache(blocks, args.block_size));
  std::string layers;
  for (int id : config->aux_layer_ids) layers += (layers.empty() ? "" : ", ") + std::to_string(id);
  KVASIR_LOG_INFO("EAGLE-3 head %s%s: fuses target layers (%s), draft vocabulary %lld, %d KV blocks of %d tokens (%.1f MiB)",
                  path.c_str(), dummy ? " (dummy weights)" : "", layers.c_str(),
                  static_cast<long long>(config->draft_vocab_size), blocks, args.block_size,
                  static_cast<double>(h.head->kv_cache_bytes_per_block(args.block_size)) * blocks / (1 << 20));
  return h;
}

}  // namespace kvasir
