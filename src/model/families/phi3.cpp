// Phi-3 (HF Phi3ForCausalLM, model_type "phi3"; also Phi-3.5-mini and Phi-4-mini): the llama
// decoder with q/k/v fused into one qkv_proj [q_dim + 2 * kv_dim, hidden] and gate/up fused into
// gate_up_proj [2 * intermediate, hidden] (gate rows first, as transformers' chunk(2) reads
// them). The fused matrices are bound as row-slice views (weight_manifest.h), so every backend
// runs the generic blocks unchanged. RoPE: default or longrope (the long-context checkpoints),
// possibly partial; sliding_window, when set, applies to every layer.
// GGUF "phi3" (llama.cpp's converter) keeps the fused tensors as attn_qkv and ffn_up (gate rows
// first), and stores longrope's factors as the tensors rope_factors_long/short.weight with the
// magnitude scaling in rope.scaling.attn_factor. llama.cpp picks one factor set per context size;
// here, as for HF files, each sequence picks by its own length (transformers' rule), so a GGUF and
// its HF checkpoint give the same results.
#include <cmath>
#include <cstring>

#include "model/model_family.h"

namespace kvasir {

namespace {

class Phi3Family final : public ModelFamily {
 public:
  Phi3Family()
      : ModelFamily(
            ConfigTraits{
                .family = "phi3",
                .sliding = SlidingLayers::kAll,
            },
            {"phi3"}, {"phi3"}, {"Phi3ForCausalLM"}) {}

  Status read_gguf_extras(const GgufKeys& k, ModelConfig& c) const override {
    const GgufFile& f = k.file();
    const bool has_long = f.find_tensor(kLongFactors) != nullptr;
    const bool has_short = f.find_tensor(kShortFactors) != nullptr;
    if (!has_long && !has_short) return Status();
    if (has_long != has_short) {
      return data_loss("GGUF phi3: " + std::string(has_long ? kShortFactors : kLongFactors) +
                       " is missing (longrope needs both factor tensors)");
    }
    RopeScaling& rs = c.rope_scaling;
    if (rs.type != RopeScalingType::kNone) {
      return invalid_argument("GGUF phi3: longrope factor tensors together with rope.scaling.type");
    }
    rs.type = RopeScalingType::kLongrope;
    KVASIR_ASSIGN_OR_RETURN(rs.long_factor, factors(f, kLongFactors, c.rotary_dim));
    KVASIR_ASSIGN_OR_RETURN(rs.short_factor, factors(f, kShortFactors, c.rotary_dim));
    if (rs.original_max_position_embeddings <= 0 ||
        rs.original_max_position_embeddings > c.max_position_embeddings) {
      return invalid_argument("GGUF phi3: rope.scaling.original_context_length must be in [1, context_length]");
    }
    // What the converter computed attn_factor from; derived again when the key is absent.
    rs.factor = static_cast<double>(c.max_position_embeddings) /
                static_cast<double>(rs.original_max_position_embeddings);
    return Status();
  }

  Status read_hf_extras(const HfKeys& k, ModelConfig& c) const override {
    RopeScaling& rs = c.rope_scaling;
    if (rs.type == RopeScalingType::kYarn) {
      // Phi3Config renames "yarn" to longrope; such a config carries no yarn parameters.
      return unimplemented(k.where() + ": phi3 rope type 'yarn' (longrope to transformers) is not "
                                       "supported; write it as \"longrope\"");
    }
    if (rs.type == RopeScalingType::kLongrope && !has_original_length(k)) {
      // Phi3Config's own default for original_max_position_embeddings, where the generic reader
      // fell back to max_position_embeddings.
      constexpr int64_t kPhi3OriginalLength = 4096;
      rs.original_max_position_embeddings = kPhi3OriginalLength;
      // The derived factor and magnitude scaling used the wrong length: derive them again unless
      // the file gave them.
      const Json* dict = rope_dict(k);
      if (dict == nullptr || dict->find("factor") == nullptr) {
        rs.factor = static_cast<double>(c.max_position_embeddings) / kPhi3OriginalLength;
      }
      if (dict == nullptr || dict->find("attention_factor") == nullptr) {
        rs.attention_factor =
            rs.factor <= 1.0 ? 1.0
                             : std::sqrt(1.0 + std::log(rs.factor) / std::log(kPhi3OriginalLength));
      }
    }
    return Status();
  }

  WeightManifest manifest(const ModelConfig& c) const override {
    WeightManifest m = dense_decoder_manifest(c);
    const int64_t qd = c.num_heads * c.head_dim, kvd = c.num_kv_heads * c.head_dim;
    const int64_t ffn = c.intermediate_size;
    for (size_t i = 0; i < m.layers.size(); ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      auto fuse = [&](const char* role, const std::string& fused, int64_t begin, int64_t rows) {
        for (WeightSpec& s : m.layers[i]) {
          if (s.role != role) continue;
          s.hf = WeightName{p + fused, begin, rows};
        }
      };
      fuse("attn_q.weight", "self_attn.qkv_proj.weight", 0, qd + 2 * kvd);
      fuse("attn_k.weight", "self_attn.qkv_proj.weight", qd, qd + 2 * kvd);
      fuse("attn_v.weight", "self_attn.qkv_proj.weight", qd + kvd, qd + 2 * kvd);
      fuse("ffn_gate.weight", "mlp.gate_up_proj.weight", 0, 2 * ffn);
      fuse("ffn_up.weight", "mlp.gate_up_proj.weight", ffn, 2 * ffn);
      const std::string g = "blk." + std::to_string(i) + ".";
      auto fuse_gguf = [&](const char* role, const std::string& fused, int64_t begin, int64_t rows) {
        for (WeightSpec& s : m.layers[i]) {
          if (s.role == role) s.gguf = WeightName{g + fused, begin, rows};
        }
      };
      fuse_gguf("attn_q.weight", "attn_qkv.weight", 0, qd + 2 * kvd);
      fuse_gguf("attn_k.weight", "attn_qkv.weight", qd, qd + 2 * kvd);
      fuse_gguf("attn_v.weight", "attn_qkv.weight", qd + kvd, qd + 2 * kvd);
      fuse_gguf("ffn_gate.weight", "ffn_up.weight", 0, 2 * ffn);
      fuse_gguf("ffn_up.weight", "ffn_up.weight", ffn, 2 * ffn);
    }
    return m;
  }

 private:
  static constexpr const char* kLongFactors = "rope_factors_long.weight";
  static constexpr const char* kShortFactors = "rope_factors_short.weight";

  // One longrope factor tensor: f32 [rotary_dim / 2], every factor positive and finite.
  static StatusOr<std::vector<double>> factors(const GgufFile& f, const char* name, int64_t rotary_dim) {
    KVASIR_ASSIGN_OR_RETURN(WeightTensor t, f.tensor(name));
    if (t.dtype != DType::kF32 || t.num_elements() != rotary_dim / 2) {
      return data_loss("GGUF phi3: " + std::string(name) + " must be f32 [" + std::to_string(rotary_dim / 2) + "]");
    }
    std::vector<double> out(static_cast<size_t>(t.num_elements()));
    for (size_t i = 0; i < out.size(); ++i) {
      float v;
      std::memcpy(&v, t.data + i * sizeof(float), sizeof(float));
      if (!std::isfinite(v) || v <= 0) return data_loss("GGUF phi3: " + std::string(name) + " holds a factor <= 0");
      out[i] = v;
    }
    return out;
  }

  static const Json* rope_dict(const HfKeys& k) {
    if (const Json* rp = k.find("rope_parameters"); rp != nullptr && rp->is_object()) return rp;
    if (const Json* rs = k.find("rope_scaling"); rs != nullptr && rs->is_object()) return rs;
    return nullptr;
  }
  static bool has_original_length(const HfKeys& k) {
    if (k.find("original_max_position_embeddings") != nullptr) return true;
    const Json* dict = rope_dict(k);
    if (dict == nullptr) return false;
    const Json* v = dict->find("original_max_position_embeddings");
    return v != nullptr && !v->is_null();
  }
};

}  // namespace

const ModelFamily& phi3_family() {
  static const Phi3Family kFamily;
  return kFamily;
}

}  // namespace kvasir
