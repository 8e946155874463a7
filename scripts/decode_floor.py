#!/usr/bin/env python3
"""Batch-1 decode floor of an HF config: the weight bytes one decode step must read / 4.32 TB/s.

Usage: decode_floor.py CONFIG.json [--bytes-per-param 2] [--bandwidth 4.32e12]
Prints one line: "<floor ms> <GB per token> <what was counted>".

Counted per token, in bf16 (2 bytes a parameter) unless told otherwise: every layer's attention
projections (q, k, v, o, their biases) and norms; every MoE layer's router and its top_k experts'
gate, up and down (only the chosen experts are read at batch 1), plus its shared expert where the
family has one; dense MLP layers whole; one embedding row; the LM head (the embedding again when
tied). Not counted: the KV cache (a few MB at the benchmark's 128-256 tokens of context) and
activations. 4.32 TB/s is the H200's measured device-to-device copy rate (GPU.md), so the floor is
what a perfect kernel sequence streaming each byte once at that rate would take. Norm weights are
float32 on the CUDA backend; at a few KB a layer they are counted at 2 bytes like the rest.
"""
import argparse
import json


def floor_bytes(c, bpp):
    h = c["hidden_size"]
    layers = c["num_hidden_layers"]
    heads = c["num_attention_heads"]
    kv_heads = c.get("num_key_value_heads", heads)
    hd = c.get("head_dim") or h // heads
    vocab = c["vocab_size"]
    mt = c.get("model_type", "")
    experts = c.get("num_experts") or c.get("num_local_experts") or 0
    top_k = c.get("num_experts_per_tok", 0)
    moe_inter = c.get("moe_intermediate_size") or c.get("intermediate_size")
    dense_inter = c.get("intermediate_size")
    shared = c.get("shared_expert_intermediate_size", 0) or 0
    mlp_only = set(c.get("mlp_only_layers") or [])
    sparse_step = c.get("decoder_sparse_step", 1) or 1

    attn = h * heads * hd + 2 * h * kv_heads * hd + heads * hd * h
    if c.get("attention_bias") or c.get("qkv_bias") or mt in ("qwen2", "qwen2_moe"):
        attn += heads * hd + 2 * kv_heads * hd
    norms = 2 * h + (2 * hd if mt.startswith("qwen3") else 0)
    params = 0
    moe_layers = 0
    for i in range(layers):
        params += attn + norms
        is_moe = experts > 0 and i not in mlp_only and (i + 1) % sparse_step == 0
        if is_moe:
            moe_layers += 1
            params += experts * h  # router
            params += top_k * 3 * h * moe_inter
            if shared:
                params += 3 * h * shared + h  # shared expert and its gate
        else:
            params += 3 * h * dense_inter
    params += h  # final norm
    params += h  # the embedding row
    params += vocab * h  # LM head (or the tied embedding)
    what = f"{layers} layers ({moe_layers} MoE, top {top_k} of {experts}), vocab {vocab}"
    return params * bpp, what


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--bytes-per-param", type=float, default=2.0)
    ap.add_argument("--bandwidth", type=float, default=4.32e12)
    a = ap.parse_args()
    with open(a.config) as f:
        c = json.load(f)
    b, what = floor_bytes(c, a.bytes_per_param)
    print(f"{b / a.bandwidth * 1e3:.3f} {b / 1e9:.3f} {what}")


if __name__ == "__main__":
    main()
