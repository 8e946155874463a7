#!/usr/bin/env python3
"""Build a tiny random-weight EAGLE-3 head, a tiny random-weight EAGLE-1 head, the tiny Llama
target both draft for, and float32 numpy references of the heads' forward passes, whose outputs
are committed as golden data.

    python3 scripts/gen_eagle_heads.py        # -> tests/data/eagle3/{tiny_target,tiny_head}/
                                              #    tests/data/eagle/tiny_head/

numpy only (no torch): the files are what vLLM / SGLang load for an EAGLE-3 head
(llama_eagle3.py), written by a small safetensors writer below:
  tiny_target/  LlamaForCausalLM, 3 layers, hidden 64, 4 heads / 2 KV heads of 16, MLP 96,
                vocab 256, float32 (the head's aux layers need three distinct target layers).
  tiny_head/    LlamaForCausalLMEagle3: config.json (draft_vocab_size 64, aux layers listed out of
                order as [2, 0, 1] since vLLM fuses them in layer order), model.safetensors with
                midlayer.* (q/k/v over 2 x hidden, input_layernorm, hidden_norm,
                post_attention_layernorm, gate/up/down), fc.weight [64, 192], norm.weight,
                lm_head.weight [64, 64], d2t (int64, draft id -> target id offset), t2d (bool);
                no embed_tokens, so the head embeds with the target's table.
                golden.json + *.f32: the head's two passes as the runner runs them (reference
                below): pass 1 over 6 positions with given fused hidden states (fc's [6, 192]
                input), pass 2 one draft step at position 6 fed its own pass-1 output at position 5;
                and pass 1 again with norm_before_residual (the residual is the normed state).
src/model/draft_heads/eagle3_head_test.cpp loads both and compares Kvasir's logits (rel L2 < 1e-3).

  eagle/tiny_head/  EagleLlamaForCausalLM (EAGLE-1/2, vLLM's llama_eagle.py): config.json with
                "bias": true, model.safetensors with fc.weight [64, 128] + fc.bias, layers.0.*
                (no input_layernorm: EAGLE's first layer has none; post_attention_layernorm,
                q/k/v/o over hidden, gate/up/down), and an embed_tokens.weight that vLLM and SGLang
                leave unread (both embed with the target's table; so does the reference).
                golden.json + *.f32: the target (numpy, below) over 7 prompt tokens, its
                final-normed hidden states (what vLLM hands the "eagle" drafter), then the head's
                pass 1 over positions 0..5 (token p + 1 with the target's state at p) and pass 2, one
                draft step at position 6 fed its own pass-1 output at position 5; logits are the
                target's lm_head over the head's output, no norm before it.
src/model/draft_heads/eagle_head_test.cpp compares Kvasir's (rel L2 < 1e-3).
Seeded: rerunning reproduces the same bytes (the EAGLE-1 part draws from its own generator, so
the EAGLE-3 files did not change when it was added).
"""
import json
import os
import struct

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "eagle3")
EAGLE1_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "eagle")
H, HEADS, KV_HEADS, HD, FFN, VOCAB, DRAFT_VOCAB = 64, 4, 2, 64, 96, 256, 64  # head_dim 64: one the CUDA attention takes
EPS, THETA = 1e-5, 10000.0
AUX_LAYERS = [2, 0, 1]


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, arr in tensors.items():
        dtype = {np.float32: "F32", np.int64: "I64", np.bool_: "BOOL"}[arr.dtype.type]
        b = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def llama_config(**extra):
    c = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H,
         "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HD,
         "intermediate_size": FFN, "vocab_size": VOCAB, "rms_norm_eps": EPS, "rope_theta": THETA,
         "max_position_embeddings": 128, "hidden_act": "silu", "tie_word_embeddings": False,
         "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}
    c.update(extra)
    return c


def rand(rng, *shape, scale=None):
    scale = scale if scale is not None else 1.0 / np.sqrt(shape[-1])
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def rms_norm(x, w):
    x = x.astype(np.float64)
    return (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS) * w).astype(np.float32)


def rope(x, positions):  # x [T, heads, HD], HF rotate_half (neox) pairing
    inv = 1.0 / (THETA ** (np.arange(0, HD, 2, dtype=np.float64) / HD))
    ang = np.outer(positions, inv)  # [T, HD/2]
    cos = np.concatenate([np.cos(ang)] * 2, axis=-1)[:, None, :]
    sin = np.concatenate([np.sin(ang)] * 2, axis=-1)[:, None, :]
    x1, x2 = x[..., : HD // 2], x[..., HD // 2:]
    rot = np.concatenate([-x2, x1], axis=-1)
    return (x * cos + rot * sin).astype(np.float32)


class HeadReference:
    """The head's forward (vLLM llama_eagle3.py), float32, with its KV cache as a list."""

    def __init__(self, w, embed, norm_before_residual=False):
        self.w, self.embed, self.norm_before_residual = w, embed, norm_before_residual
        self.keys, self.values = [], []  # per cached position: [KV_HEADS, HD]

    def forward(self, ids, positions, hidden):  # hidden [T, H]: fc output or the head's own
        w = self.w
        residual = hidden
        e = rms_norm(self.embed[ids], w["midlayer.input_layernorm.weight"])
        hn = rms_norm(hidden, w["midlayer.hidden_norm.weight"])
        if self.norm_before_residual:  # vLLM's config flag: the residual is the normed state
            residual = hn
        x = np.concatenate([e, hn], axis=-1)  # [T, 2H]
        T = len(ids)
        q = (x @ w["midlayer.self_attn.q_proj.weight"].T).reshape(T, HEADS, HD)
        k = (x @ w["midlayer.self_attn.k_proj.weight"].T).reshape(T, KV_HEADS, HD)
        v = (x @ w["midlayer.self_attn.v_proj.weight"].T).reshape(T, KV_HEADS, HD)
        q, k = rope(q, positions), rope(k, positions)
        base = len(self.keys)
        self.keys += list(k)
        self.values += list(v)
        K, V = np.stack(self.keys), np.stack(self.values)  # [S, KV, HD]
        out = np.zeros((T, HEADS, HD), np.float64)
        for t in range(T):
            ctx = base + t + 1  # causal over the cache
            for hh in range(HEADS):
                kv = hh // (HEADS // KV_HEADS)
                s = K[:ctx, kv] @ q[t, hh] / np.sqrt(HD)
                p = np.exp(s - s.max())
                p /= p.sum()
                out[t, hh] = p @ V[:ctx, kv]
        attn = out.reshape(T, HEADS * HD).astype(np.float32) @ w["midlayer.self_attn.o_proj.weight"].T
        residual = residual + attn
        h = rms_norm(residual, w["midlayer.post_attention_layernorm.weight"])
        g = h @ w["midlayer.mlp.gate_proj.weight"].T
        u = h @ w["midlayer.mlp.up_proj.weight"].T
        m = (g / (1.0 + np.exp(-g)) * u) @ w["midlayer.mlp.down_proj.weight"].T
        prenorm = (residual + m).astype(np.float32)
        logits = rms_norm(prenorm, w["norm.weight"]) @ w["lm_head.weight"].T
        return prenorm, logits.astype(np.float32)


def attention(q, k, v, keys, values):
    """Causal attention of q [T, HEADS, HD] over a cache list that k, v [T, KV_HEADS, HD] extend."""
    base = len(keys)
    keys += list(k)
    values += list(v)
    K, V = np.stack(keys), np.stack(values)
    T = q.shape[0]
    out = np.zeros((T, HEADS, HD), np.float64)
    for t in range(T):
        ctx = base + t + 1
        for hh in range(HEADS):
            kv = hh // (HEADS // KV_HEADS)
            s = K[:ctx, kv] @ q[t, hh] / np.sqrt(HD)
            p = np.exp(s - s.max())
            p /= p.sum()
            out[t, hh] = p @ V[:ctx, kv]
    return out.reshape(T, HEADS * HD).astype(np.float32)


def llama_layer(x, w, prefix, positions, keys, values, input_norm=True):
    """One HF Llama decoder layer, float32: x [T, H] -> [T, H]; input_norm False skips
    input_layernorm (EAGLE's first layer)."""
    T = x.shape[0]
    h = rms_norm(x, w[prefix + "input_layernorm.weight"]) if input_norm else x
    q = (h @ w[prefix + "self_attn.q_proj.weight"].T).reshape(T, HEADS, HD)
    k = (h @ w[prefix + "self_attn.k_proj.weight"].T).reshape(T, KV_HEADS, HD)
    v = (h @ w[prefix + "self_attn.v_proj.weight"].T).reshape(T, KV_HEADS, HD)
    q, k = rope(q, positions), rope(k, positions)
    x = x + attention(q, k, v, keys, values) @ w[prefix + "self_attn.o_proj.weight"].T
    h = rms_norm(x, w[prefix + "post_attention_layernorm.weight"])
    g = h @ w[prefix + "mlp.gate_proj.weight"].T
    u = h @ w[prefix + "mlp.up_proj.weight"].T
    return (x + (g / (1.0 + np.exp(-g)) * u) @ w[prefix + "mlp.down_proj.weight"].T).astype(np.float32)


def target_final_hidden(t, ids, positions):
    """The tiny target's final-normed hidden states [T, H] (one prefill, fresh caches)."""
    x = t["model.embed_tokens.weight"][ids]
    for i in range(3):
        x = llama_layer(x, t, f"model.layers.{i}.", positions, [], [])
    return rms_norm(x, t["model.norm.weight"])


class EagleReference:
    """An EAGLE-1/2 head's forward (vLLM llama_eagle.py), float32, its KV cache as lists:
    x = fc(cat(embed(token), hidden)) + fc.bias; layer 0 without input_layernorm; logits are the
    target's lm_head over the output, no norm."""

    def __init__(self, w, target):
        self.w, self.t = w, target
        self.keys, self.values = [], []

    def forward(self, ids, positions, hidden):
        e = self.t["model.embed_tokens.weight"][ids]  # the target's table, not the head's copy
        x = np.concatenate([e, hidden], axis=-1) @ self.w["fc.weight"].T + self.w["fc.bias"]
        out = llama_layer(x.astype(np.float32), self.w, "layers.0.", positions, self.keys, self.values,
                          input_norm=False)
        return out, (out @ self.t["lm_head.weight"].T).astype(np.float32)


def build_eagle1_head(t):
    rng = np.random.default_rng(20261204)
    hdir = os.path.join(EAGLE1_ROOT, "tiny_head")
    os.makedirs(hdir, exist_ok=True)
    w = {"fc.weight": rand(rng, H, 2 * H),
         "fc.bias": (0.1 * rng.standard_normal(H)).astype(np.float32),
         "layers.0.post_attention_layernorm.weight": (1 + 0.1 * rng.standard_normal(H)).astype(np.float32),
         "layers.0.self_attn.q_proj.weight": rand(rng, HEADS * HD, H),
         "layers.0.self_attn.k_proj.weight": rand(rng, KV_HEADS * HD, H),
         "layers.0.self_attn.v_proj.weight": rand(rng, KV_HEADS * HD, H),
         "layers.0.self_attn.o_proj.weight": rand(rng, H, HEADS * HD),
         "layers.0.mlp.gate_proj.weight": rand(rng, FFN, H),
         "layers.0.mlp.up_proj.weight": rand(rng, FFN, H),
         "layers.0.mlp.down_proj.weight": rand(rng, H, FFN),
         # A stale copy of an embedding: vLLM and SGLang use the target's instead.
         "embed_tokens.weight": rand(rng, VOCAB, H, scale=1.0)}
    cfg = llama_config(architectures=["EagleLlamaForCausalLM"], num_hidden_layers=1, bias=True)
    with open(os.path.join(hdir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_safetensors(os.path.join(hdir, "model.safetensors"), w)
    # The target over a 7-token prompt; the head's pass 1 over positions 0..5 (token p + 1, the
    # target's state at p), then one draft step at position 6 fed its own output at position 5.
    prompt = [int(x) for x in rng.integers(3, VOCAB, 7)]
    hidden = target_final_hidden(t, np.array(prompt), np.arange(7))
    ref = EagleReference(w, t)
    ids1, pos1 = prompt[1:], list(range(6))
    out1, logits1 = ref.forward(np.array(ids1), np.array(pos1), hidden[:6])
    draft1 = int(np.argmax(logits1[-1]))
    _, logits2 = ref.forward(np.array([draft1]), np.array([6]), out1[-1:])
    draft2 = int(np.argmax(logits2[-1]))
    hidden.tofile(os.path.join(hdir, "target_hidden.f32"))
    logits1.tofile(os.path.join(hdir, "logits_pass1.f32"))
    logits2.tofile(os.path.join(hdir, "logits_pass2.f32"))
    golden = {"prompt": prompt,
              "pass1": {"input_ids": ids1, "positions": pos1, "draft": draft1},
              "pass2": {"input_ids": [draft1], "positions": [6], "hidden_from_pass1_row": 5, "draft": draft2},
              "vocab_size": VOCAB, "hidden_size": H}
    with open(os.path.join(hdir, "golden.json"), "w") as f:
        json.dump(golden, f, indent=2)
    print("wrote", hdir)


def main():
    rng = np.random.default_rng(20261203)
    # The target: a plain tiny Llama (Kvasir's own golden tests cover the decoder itself).
    tdir = os.path.join(ROOT, "tiny_target")
    os.makedirs(tdir, exist_ok=True)
    t = {"model.embed_tokens.weight": rand(rng, VOCAB, H, scale=1.0), "model.norm.weight": np.ones(H, np.float32),
         "lm_head.weight": rand(rng, VOCAB, H)}
    for i in range(3):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = (1 + 0.1 * rng.standard_normal(H)).astype(np.float32)
        t[p + "post_attention_layernorm.weight"] = (1 + 0.1 * rng.standard_normal(H)).astype(np.float32)
        t[p + "self_attn.q_proj.weight"] = rand(rng, HEADS * HD, H)
        t[p + "self_attn.k_proj.weight"] = rand(rng, KV_HEADS * HD, H)
        t[p + "self_attn.v_proj.weight"] = rand(rng, KV_HEADS * HD, H)
        t[p + "self_attn.o_proj.weight"] = rand(rng, H, HEADS * HD)
        t[p + "mlp.gate_proj.weight"] = rand(rng, FFN, H)
        t[p + "mlp.up_proj.weight"] = rand(rng, FFN, H)
        t[p + "mlp.down_proj.weight"] = rand(rng, H, FFN)
    with open(os.path.join(tdir, "config.json"), "w") as f:
        json.dump(llama_config(num_hidden_layers=3), f, indent=2)
    write_safetensors(os.path.join(tdir, "model.safetensors"), t)

    # The head.
    hdir = os.path.join(ROOT, "tiny_head")
    os.makedirs(hdir, exist_ok=True)
    draft_to_target = np.sort(rng.choice(VOCAB, DRAFT_VOCAB, replace=False)).astype(np.int64)
    t2d = np.zeros(VOCAB, np.bool_)
    t2d[draft_to_target] = True
    w = {"fc.weight": rand(rng, H, 3 * H),
         "norm.weight": (1 + 0.1 * rng.standard_normal(H)).astype(np.float32),
         "lm_head.weight": rand(rng, DRAFT_VOCAB, H),
         "midlayer.input_layernorm.weight": (1 + 0.1 * rng.standard_normal(H)).astype(np.float32),
         "midlayer.hidden_norm.weight": (1 + 0.1 * rng.standard_normal(H)).astype(np.float32),
         "midlayer.post_attention_layernorm.weight": (1 + 0.1 * rng.standard_normal(H)).astype(np.float32),
         "midlayer.self_attn.q_proj.weight": rand(rng, HEADS * HD, 2 * H),
         "midlayer.self_attn.k_proj.weight": rand(rng, KV_HEADS * HD, 2 * H),
         "midlayer.self_attn.v_proj.weight": rand(rng, KV_HEADS * HD, 2 * H),
         "midlayer.self_attn.o_proj.weight": rand(rng, H, HEADS * HD),
         "midlayer.mlp.gate_proj.weight": rand(rng, FFN, H),
         "midlayer.mlp.up_proj.weight": rand(rng, FFN, H),
         "midlayer.mlp.down_proj.weight": rand(rng, H, FFN),
         "d2t": draft_to_target - np.arange(DRAFT_VOCAB, dtype=np.int64),
         "t2d": t2d}
    cfg = llama_config(architectures=["LlamaForCausalLMEagle3"], num_hidden_layers=1, draft_vocab_size=DRAFT_VOCAB,
                       eagle_config={"eagle_aux_hidden_state_layer_ids": AUX_LAYERS})
    with open(os.path.join(hdir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_safetensors(os.path.join(hdir, "model.safetensors"), w)

    # Golden: pass 1 = 6 accepted positions with the target's fused states (given here: fc's
    # input, the three aux layers side by side in layer order); pass 2 = draft 2's step.
    ref = HeadReference(w, t["model.embed_tokens.weight"])
    ids1 = [int(x) for x in rng.integers(3, VOCAB, 6)]
    pos1 = list(range(6))
    fused = rng.standard_normal((6, 3 * H)).astype(np.float32)
    prenorm1, logits1 = ref.forward(np.array(ids1), np.array(pos1), fused @ w["fc.weight"].T)
    draft1 = int(draft_to_target[int(np.argmax(logits1[-1]))])
    _, logits2 = ref.forward(np.array([draft1]), np.array([6]), prenorm1[-1:])
    draft2 = int(draft_to_target[int(np.argmax(logits2[-1]))])
    # The norm_before_residual variant (a config flag vLLM reads), pass 1 only.
    nbr = HeadReference(w, t["model.embed_tokens.weight"], norm_before_residual=True)
    _, logits_nbr = nbr.forward(np.array(ids1), np.array(pos1), fused @ w["fc.weight"].T)
    logits_nbr.tofile(os.path.join(hdir, "logits_pass1_norm_before_residual.f32"))
    fused.tofile(os.path.join(hdir, "fused_hidden_pass1.f32"))
    logits1.tofile(os.path.join(hdir, "logits_pass1.f32"))
    logits2.tofile(os.path.join(hdir, "logits_pass2.f32"))
    golden = {"pass1": {"input_ids": ids1, "positions": pos1, "draft": draft1},
              "pass2": {"input_ids": [draft1], "positions": [6], "hidden_from_pass1_row": 5, "draft": draft2},
              "draft_vocab_size": DRAFT_VOCAB, "hidden_size": H}
    with open(os.path.join(hdir, "golden.json"), "w") as f:
        json.dump(golden, f, indent=2)
    print("wrote", tdir, hdir)
    build_eagle1_head(t)


if __name__ == "__main__":
    main()
