#include "model/draft_heads/eagle3_head_config.h"

#include <algorithm>

#include "common/json.h"
#include "model/draft_heads/head_config_keys.h"

namespace kvasir {
namespace {

Status head_error(const std::string& where, const std::string& m) {
  return invalid_argument("EAGLE-3 head " + where + ": " + m);
}

}  // namespace

StatusOr<Eagle3HeadConfig> parse_eagle3_head_config(const std::string& json_text, const ModelConfig& target,
                                                    const std::string& where) {
  auto parsed = parse_json(json_text);
  if (!parsed.ok() || !parsed->is_object()) return head_error(where, "config.json is not a JSON object");
  Json j = *parsed;
  // The architecture: vLLM and SGLang register the head as LlamaForCausalLMEagle3 (vLLM also
  // as Eagle3LlamaForCausalLM); an EAGLE-1/2 head (LlamaForCausalLMEagle) has no fc over three
  // layers and no hidden_norm, so it is refused rather than run as something it is not.
  const std::string* arch = single_architecture(j);
  if (arch == nullptr) {
    return head_error(where, "config.json needs 'architectures': [\"LlamaForCausalLMEagle3\"]");
  }
  const std::string& a = *arch;
  if (a != "LlamaForCausalLMEagle3" && a != "Eagle3LlamaForCausalLM") {
    return head_error(where, "architecture \"" + a +
                                 "\" is not an EAGLE-3 head (LlamaForCausalLMEagle3); an EAGLE-1/2 head is speculative "
                                 "method \"eagle\"");
  }
  KVASIR_RETURN_IF_ERROR(check_head_config_keys(j,
                                                {"draft_vocab_size", "target_hidden_size", "eagle_config",
                                                 "eagle_aux_hidden_state_layer_ids", "norm_before_residual",
                                                 "tie_word_embeddings"},
                                                "EAGLE-3 head " + where));
  // lm_head is the head's own [draft_vocab, H] matrix (vLLM's Eagle3LlamaForCausalLM); tied to
  // an embedding it would be another head.
  if (const Json* tie = j.find("tie_word_embeddings"); tie != nullptr && !tie->is_null()) {
    if (!tie->is_bool()) return head_error(where, "'tie_word_embeddings' must be true or false");
    if (tie->as_bool()) return head_error(where, "'tie_word_embeddings': true is not supported (an EAGLE-3 head has its own lm_head)");
  }
  const std::string what = "EAGLE-3 head " + where;
  KVASIR_ASSIGN_OR_RETURN(const int64_t vocab, check_head_sizes(j, target, what));
  KVASIR_ASSIGN_OR_RETURN(const int64_t target_hidden,
                          head_positive_int(j, "target_hidden_size", false, target.hidden_size, what));
  if (target_hidden != target.hidden_size) {
    return head_error(where, "target_hidden_size " + std::to_string(target_hidden) + " differs from the target's " +
                                 std::to_string(target.hidden_size));
  }
  KVASIR_ASSIGN_OR_RETURN(const int64_t draft_vocab, head_positive_int(j, "draft_vocab_size", false, vocab, what));
  if (draft_vocab > vocab) {
    return head_error(where, "draft_vocab_size " + std::to_string(draft_vocab) + " exceeds vocab_size " +
                                 std::to_string(vocab));
  }
  KVASIR_ASSIGN_OR_RETURN(const int64_t num_layers, head_positive_int(j, "num_hidden_layers", false, 1, what));
  if (num_layers != 1) {
    return head_error(where, "num_hidden_layers " + std::to_string(num_layers) +
                                 ": only single-layer EAGLE-3 heads (one midlayer) are supported");
  }
  // Aux layer ids: eagle_config.eagle_aux_hidden_state_layer_ids (vLLM) or the same key at the top.
  const Json* ids = nullptr;
  if (const Json* ec = j.find("eagle_config"); ec != nullptr && !ec->is_null()) {
    if (!ec->is_object()) return head_error(where, "'eagle_config' must be an object");
    for (const auto& [key, v] : ec->as_object()) {
      if (key == "eagle_aux_hidden_state_layer_ids") continue;
      // vLLM reads use_aux_hidden_state (default true): false would feed the last hidden state,
      // which is not this head's computation.
      if (key == "use_aux_hidden_state" && v.is_bool() && v.as_bool()) continue;
      return head_error(where, "eagle_config." + key + " " + v.dump() + " is not supported (eagle_aux_hidden_state_layer_ids, "
                               "use_aux_hidden_state true)");
    }
    ids = ec->find("eagle_aux_hidden_state_layer_ids");
  }
  if (ids == nullptr) ids = j.find("eagle_aux_hidden_state_layer_ids");
  const int64_t L = target.num_layers;
  Eagle3HeadConfig c;
  if (ids != nullptr && !ids->is_null()) {
    if (!ids->is_array()) return head_error(where, "'eagle_aux_hidden_state_layer_ids' must be a list of layer ids");
    for (const Json& v : ids->as_array()) {
      if (!v.is_int()) return head_error(where, "'eagle_aux_hidden_state_layer_ids' must hold integers");
      c.aux_layer_ids.push_back(static_cast<int>(std::clamp<int64_t>(v.as_int(), -1, L)));
      if (v.as_int() < 0 || v.as_int() >= L) {
        return head_error(where, "aux hidden-state layer " + std::to_string(v.as_int()) + " is outside the target's " +
                                     std::to_string(L) + " layers [0, " + std::to_string(L) + ")");
      }
    }
  } else {
    c.aux_layer_ids = {2, static_cast<int>(L / 2), static_cast<int>(L - 3)};
    for (int id : c.aux_layer_ids) {
      if (id < 0 || id >= L) {
        return head_error(where, "the target has " + std::to_string(L) +
                                     " layers, too few for the default aux hidden-state layers (2, L/2, L-3); name "
                                     "them in eagle_config.eagle_aux_hidden_state_layer_ids");
      }
    }
  }
  std::sort(c.aux_layer_ids.begin(), c.aux_layer_ids.end());
  if (c.aux_layer_ids.size() != 3 ||
      std::adjacent_find(c.aux_layer_ids.begin(), c.aux_layer_ids.end()) != c.aux_layer_ids.end()) {
    return head_error(where, "an EAGLE-3 head fuses exactly three distinct target layers (fc is [hidden, 3 x hidden])");
  }
  if (const Json* nbr = j.find("norm_before_residual"); nbr != nullptr && !nbr->is_null()) {
    if (!nbr->is_bool()) return head_error(where, "'norm_before_residual' must be true or false");
    c.norm_before_residual = nbr->as_bool();
  }
  KVASIR_ASSIGN_OR_RETURN(c.layer, head_layer_config(j, vocab, what, "EAGLE-3 head"));
  c.draft_vocab_size = draft_vocab;
  return c;
}

WeightManifest eagle3_head_manifest(const Eagle3HeadConfig& c) {
  const ModelConfig& m = c.layer;
  const int64_t h = m.hidden_size, qd = m.num_heads * m.head_dim, kvd = m.num_kv_heads * m.head_dim;
  const int64_t ffn = m.intermediate_size;
  WeightManifest w;
  auto add = [](std::vector<WeightSpec>& list, const std::string& role, const std::string& hf, WeightKind kind,
                std::vector<int64_t> shape) -> WeightSpec& {
    WeightSpec s;
    s.role = role;
    s.hf.name = hf;
    s.kind = kind;
    s.shape = std::move(shape);
    list.push_back(std::move(s));
    return list.back();
  };
  // Optional: a head without it embeds with the target's table (vLLM shares it then). Not made
  // by --load-format dummy, so dummy heads share the target's too.
  WeightSpec& embed = add(w.model, "token_embd.weight", "embed_tokens.weight", WeightKind::kMatrix, {m.vocab_size, h});
  embed.optional = true;
  embed.expected = false;
  add(w.model, "fc.weight", "fc.weight", WeightKind::kMatrix, {h, 3 * h});
  add(w.model, "output_norm.weight", "norm.weight", WeightKind::kNorm, {h});
  add(w.model, "output.weight", "lm_head.weight", WeightKind::kMatrix, {c.draft_vocab_size, h});
  w.layers.resize(1);
  std::vector<WeightSpec>& L = w.layers[0];
  add(L, "attn_norm.weight", "midlayer.input_layernorm.weight", WeightKind::kNorm, {h});
  add(L, "hidden_norm.weight", "midlayer.hidden_norm.weight", WeightKind::kNorm, {h});
  add(L, "attn_q.weight", "midlayer.self_attn.q_proj.weight", WeightKind::kMatrix, {qd, 2 * h});
  add(L, "attn_k.weight", "midlayer.self_attn.k_proj.weight", WeightKind::kMatrix, {kvd, 2 * h});
  add(L, "attn_v.weight", "midlayer.self_attn.v_proj.weight", WeightKind::kMatrix, {kvd, 2 * h});
  add(L, "attn_output.weight", "midlayer.self_attn.o_proj.weight", WeightKind::kMatrix, {h, qd});
  add(L, "ffn_norm.weight", "midlayer.post_attention_layernorm.weight", WeightKind::kNorm, {h});
  add(L, "ffn_gate.weight", "midlayer.mlp.gate_proj.weight", WeightKind::kMatrix, {ffn, h});
  add(L, "ffn_up.weight", "midlayer.mlp.up_proj.weight", WeightKind::kMatrix, {ffn, h});
  add(L, "ffn_down.weight", "midlayer.mlp.down_proj.weight", WeightKind::kMatrix, {h, ffn});
  return w;
}

}  // namespace kvasir
