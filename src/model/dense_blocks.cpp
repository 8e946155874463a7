// The generic attention and MLP blocks (blocks.h). The op sequence is the decoder's as it was
// before blocks existed, op for op, so results are bit-identical.
#include <cmath>

#include "model/blocks.h"

namespace kvasir {

Tensor LayerWeights::get(const std::string& role) const {
  auto it = tensors.find(role);
  return it == tensors.end() ? Tensor{} : it->second;
}

namespace {

StatusOr<Tensor> required(const BlockInit& init, const char* role) {
  Tensor t = init.weights.get(role);
  if (t.data == nullptr) {
    return data_loss("layer " + std::to_string(init.layer) + ": weight " + role + " is not bound");
  }
  return t;
}

class DecoderAttention final : public AttentionBlock {
 public:
  static StatusOr<std::unique_ptr<AttentionBlock>> create(const BlockInit& init) {
    std::unique_ptr<DecoderAttention> a(new DecoderAttention(init));
    KVASIR_ASSIGN_OR_RETURN(a->wq_, required(init, "attn_q.weight"));
    KVASIR_ASSIGN_OR_RETURN(a->wk_, required(init, "attn_k.weight"));
    KVASIR_ASSIGN_OR_RETURN(a->wv_, required(init, "attn_v.weight"));
    KVASIR_ASSIGN_OR_RETURN(a->wo_, required(init, "attn_output.weight"));
    a->bq_ = init.weights.get("attn_q.bias");
    a->bk_ = init.weights.get("attn_k.bias");
    a->bv_ = init.weights.get("attn_v.bias");
    a->bo_ = init.weights.get("attn_output.bias");  // gpt-oss
    // gpt-oss: a learned logit per query head that joins the softmax (AttentionParams::sinks).
    a->ap_.sinks = init.weights.get("attn_sinks.weight");
    if (init.config.qk_norm) {
      KVASIR_ASSIGN_OR_RETURN(a->q_norm_, required(init, "attn_q_norm.weight"));
      KVASIR_ASSIGN_OR_RETURN(a->k_norm_, required(init, "attn_k_norm.weight"));
    }
    return std::unique_ptr<AttentionBlock>(std::move(a));
  }

  KvCacheShape cache_shape() const override { return {kv_heads_, hd_, kv_heads_, hd_}; }

  void forward(Backend& b, const Tensor& h, const ForwardBatch& batch, Tensor& k_cache,
               Tensor& v_cache, BlockScratch& s, Tensor& out) override {
    const int64_t T = h.rows();
    const Backend::LinearTarget qkv[] = {{&wq_, bq_.data ? &bq_ : nullptr, &s.q},
                                         {&wk_, bk_.data ? &bk_ : nullptr, &s.k},
                                         {&wv_, bv_.data ? &bv_ : nullptr, &s.v}};
    b.linears(h, qkv, 3);
    if (q_norm_.data != nullptr) {
      Tensor qh = s.q.reshape({T * heads_, hd_}), kh = s.k.reshape({T * kv_heads_, hd_});
      b.rms_norm(qh, q_norm_, eps_, qh);
      b.rms_norm(kh, k_norm_, eps_, kh);
    }
    Tensor q3 = s.q.reshape({T, heads_, hd_}), k3 = s.k.reshape({T, kv_heads_, hd_});
    Tensor v3 = s.v.reshape({T, kv_heads_, hd_}), attn3 = s.attn.reshape({T, heads_, hd_});
    if (rope_->long_inv_freq.empty()) {
      RopeParams rp{rotary_dim_, neox_, rope_->inv_freq.data(), rope_->attention_factor};
      b.rope(q3, k3, batch.positions, rp);
    } else {
      rope_per_sequence(b, batch, s);
    }
    b.write_kv(k3, v3, k_cache, v_cache, batch.attn);
    b.attention(q3, k_cache, v_cache, batch.attn, ap_, attn3);
    b.linear(s.attn, wo_, bo_.data ? &bo_ : nullptr, out);
  }

 private:
  explicit DecoderAttention(const BlockInit& init)
      : heads_(init.config.num_heads),
        kv_heads_(init.config.num_kv_heads),
        hd_(init.config.head_dim),
        rotary_dim_(static_cast<int>(init.config.rotary_dim)),
        neox_(init.config.rope_style == RopeStyle::kNeox),
        eps_(static_cast<float>(init.config.rms_norm_eps)),
        rope_(init.sliding ? &init.rope->sliding : &init.rope->global) {
    ap_ = AttentionParams{static_cast<float>(init.config.attention_scale()),
                          init.sliding ? static_cast<int>(init.config.sliding_window) : 0,
                          static_cast<float>(init.config.attn_logit_softcapping.value_or(0.0))};
  }

  // longrope: each sequence's table depends on its own length (never on the batch), so runs of
  // consecutive sequences that agree share one rope call.
  void rope_per_sequence(Backend& b, const ForwardBatch& batch, BlockScratch& s) {
    const AttentionMetadata& m = batch.attn;
    int seq = 0;
    while (seq < m.num_seqs) {
      const std::vector<float>& table = rope_->inv_freq_for(m.seq_lens[seq]);
      int end = seq + 1;
      while (end < m.num_seqs && &rope_->inv_freq_for(m.seq_lens[end]) == &table) ++end;
      const int begin_row = m.query_start_loc[seq], num_rows = m.query_start_loc[end] - begin_row;
      seq = end;
      if (num_rows == 0) continue;
      Tensor q = s.q.slice_rows(begin_row, num_rows).reshape({num_rows, heads_, hd_});
      Tensor k = s.k.slice_rows(begin_row, num_rows).reshape({num_rows, kv_heads_, hd_});
      RopeParams rp{rotary_dim_, neox_, table.data(), rope_->attention_factor};
      b.rope(q, k, batch.positions + begin_row, rp);
    }
  }

  int64_t heads_, kv_heads_, hd_;
  int rotary_dim_;
  bool neox_;
  float eps_;
  const RopeTable* rope_;
  AttentionParams ap_;
  Tensor wq_, wk_, wv_, wo_, bq_, bk_, bv_, bo_, q_norm_, k_norm_;
};

class GatedMlp final : public MlpBlock {
 public:
  static StatusOr<std::unique_ptr<MlpBlock>> create(const BlockInit& init) {
    std::unique_ptr<GatedMlp> m(new GatedMlp());
    KVASIR_ASSIGN_OR_RETURN(m->w_gate_, required(init, "ffn_gate.weight"));
    KVASIR_ASSIGN_OR_RETURN(m->w_up_, required(init, "ffn_up.weight"));
    KVASIR_ASSIGN_OR_RETURN(m->w_down_, required(init, "ffn_down.weight"));
    m->act_ = init.config.activation == Activation::kSilu ? GateActivation::kSilu
                                                          : GateActivation::kGeluTanh;
    return std::unique_ptr<MlpBlock>(std::move(m));
  }

  void forward(Backend& b, const Tensor& h, BlockScratch& s, Tensor& out) override {
    const Backend::LinearTarget gate_up[] = {{&w_gate_, nullptr, &s.gate}, {&w_up_, nullptr, &s.up}};
    b.linears(h, gate_up, 2);
    b.gated_activation(s.gate, s.up, act_, s.gate);
    b.linear(s.gate, w_down_, nullptr, out);
  }

 private:
  Tensor w_gate_, w_up_, w_down_;
  GateActivation act_ = GateActivation::kSilu;
};

}  // namespace

StatusOr<std::unique_ptr<AttentionBlock>> make_decoder_attention(const BlockInit& init) {
  return DecoderAttention::create(init);
}

StatusOr<std::unique_ptr<MlpBlock>> make_gated_mlp(const BlockInit& init) {
  return GatedMlp::create(init);
}

}  // namespace kvasir
