#include "model/draft_heads/eagle_head_config.h"

#include "common/json.h"
#include "model/draft_heads/head_config_keys.h"

namespace kvasir {
namespace {

Status head_error(const std::string& where, const std::string& m) {
  return invalid_argument("EAGLE head " + where + ": " + m);
}

}  // namespace

StatusOr<EagleHeadConfig> parse_eagle_head_config(const std::string& json_text, const ModelConfig& target,
                                                  const std::string& where) {
  auto parsed = parse_json(json_text);
  if (!parsed.ok() || !parsed->is_object()) return head_error(where, "config.json is not a JSON object");
  Json j = *parsed;
  // The names an EAGLE-1/2 head goes by: the EAGLE checkpoints' own LlamaForCausalLM, vLLM's
  // EagleLlamaForCausalLM (and its older EAGLEModel), SGLang's LlamaForCausalLMEagle.
  const std::string* arch = single_architecture(j);
  if (arch == nullptr) {
    return head_error(where, "config.json needs 'architectures': [\"EagleLlamaForCausalLM\"] (or LlamaForCausalLM, "
                             "LlamaForCausalLMEagle, EAGLEModel)");
  }
  const std::string& a = *arch;
  if (a == "LlamaForCausalLMEagle3" || a == "Eagle3LlamaForCausalLM") {
    return head_error(where, "architecture \"" + a + "\" is an EAGLE-3 head: speculative method \"eagle3\"");
  }
  if (a != "EagleLlamaForCausalLM" && a != "LlamaForCausalLMEagle" && a != "EAGLEModel" && a != "LlamaForCausalLM") {
    return head_error(where, "architecture \"" + a +
                                 "\" is not an EAGLE-1/2 Llama head (EagleLlamaForCausalLM, LlamaForCausalLM, "
                                 "LlamaForCausalLMEagle, EAGLEModel)");
  }
  if (const Json* mt = j.find("model_type"); mt != nullptr && !mt->is_null()) {
    if (!mt->is_string() || (mt->as_string() != "llama" && mt->as_string() != "eagle")) {
      return head_error(where, "model_type " + mt->dump() + " is not supported (an EAGLE head's layer is llama's)");
    }
  }
  KVASIR_RETURN_IF_ERROR(check_head_config_keys(j, {"bias", "tie_word_embeddings", "add_para_norm", "logit_scale"},
                                                "EAGLE head " + where));
  EagleHeadConfig c;
  if (const Json* bias = j.find("bias"); bias != nullptr && !bias->is_null()) {
    if (!bias->is_bool()) return head_error(where, "'bias' (fc's bias) must be true or false");
    c.fc_bias = bias->as_bool();
  }
  // vLLM's HASS variant (add_para_norm) norms the embedding and the hidden state before fc: not
  // implemented here.
  if (const Json* para = j.find("add_para_norm"); para != nullptr && !para->is_null()) {
    if (!para->is_bool()) return head_error(where, "'add_para_norm' must be true or false");
    if (para->as_bool()) return head_error(where, "'add_para_norm': true (HASS's embedding and hidden-state norms) is not supported");
  }
  // vLLM scales the head's logits by logit_scale; drafting is greedy, which a positive scale does
  // not change, but any other value would.
  if (const Json* ls = j.find("logit_scale"); ls != nullptr && !ls->is_null()) {
    if (!ls->is_number() || ls->as_double() <= 0) return head_error(where, "'logit_scale' must be a positive number");
  }
  // tie_word_embeddings: irrelevant, the head's lm_head is the target's (vLLM's EagleProposer and
  // SGLang's EAGLE worker both hand it the target's), so it is only checked for type.
  if (const Json* tie = j.find("tie_word_embeddings"); tie != nullptr && !tie->is_null() && !tie->is_bool()) {
    return head_error(where, "'tie_word_embeddings' must be true or false");
  }
  const std::string what = "EAGLE head " + where;
  KVASIR_ASSIGN_OR_RETURN(const int64_t vocab, check_head_sizes(j, target, what));
  // vLLM runs N layers (the first without input_layernorm); the EAGLE-1/2 heads published have one.
  KVASIR_ASSIGN_OR_RETURN(const int64_t num_layers, head_positive_int(j, "num_hidden_layers", false, 1, what));
  if (num_layers != 1) {
    return head_error(where, "num_hidden_layers " + std::to_string(num_layers) +
                                 ": only single-layer EAGLE heads are supported");
  }
  KVASIR_ASSIGN_OR_RETURN(c.layer, head_layer_config(j, vocab, what, "EAGLE head"));
  return c;
}

WeightManifest eagle_head_manifest(const EagleHeadConfig& c) {
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
  // Checkpoint names without vLLM's "model." prefix (its load_weights adds it; SGLang's too).
  add(w.model, "fc.weight", "fc.weight", WeightKind::kMatrix, {h, 2 * h});
  WeightSpec& bias = add(w.model, "fc.bias", "fc.bias", WeightKind::kVector, {h});
  bias.optional = true;
  bias.expected = c.fc_bias.value_or(false);  // --load-format dummy makes it only when the config says so
  w.layers.resize(1);
  std::vector<WeightSpec>& L = w.layers[0];
  add(L, "attn_q.weight", "layers.0.self_attn.q_proj.weight", WeightKind::kMatrix, {qd, h});
  add(L, "attn_k.weight", "layers.0.self_attn.k_proj.weight", WeightKind::kMatrix, {kvd, h});
  add(L, "attn_v.weight", "layers.0.self_attn.v_proj.weight", WeightKind::kMatrix, {kvd, h});
  add(L, "attn_output.weight", "layers.0.self_attn.o_proj.weight", WeightKind::kMatrix, {h, qd});
  add(L, "ffn_norm.weight", "layers.0.post_attention_layernorm.weight", WeightKind::kNorm, {h});
  add(L, "ffn_gate.weight", "layers.0.mlp.gate_proj.weight", WeightKind::kMatrix, {ffn, h});
  add(L, "ffn_up.weight", "layers.0.mlp.up_proj.weight", WeightKind::kMatrix, {ffn, h});
  add(L, "ffn_down.weight", "layers.0.mlp.down_proj.weight", WeightKind::kMatrix, {h, ffn});
  return w;
}

}  // namespace kvasir
