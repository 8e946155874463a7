#!/usr/bin/env python3
"""Build tiny random-weight models with HF transformers and record their golden logits.

    pip install torch transformers safetensors      # CPU is enough; takes seconds
    python3 scripts/gen_tiny_models.py               # -> tests/data/tiny/<name>/

Each directory holds what an HF checkpoint holds (config.json, model.safetensors in float32) and
golden.json + logits_<i>.f32: for every prompt (fixed token ids, no tokenizer), the float32 logits
at EVERY position of one forward pass over the whole prompt (raw little-endian, row-major
[len(ids), vocab_size]), computed by transformers in float32 with eager attention.
src/model/tiny_model_golden_test.cpp loads each directory through the normal loader and compares.

The models are seeded, so rerunning reproduces the same files (up to the torch version's
float rounding); commit what it writes.

Models:
  phi3          Phi3ForCausalLM, fused qkv_proj / gate_up_proj, GQA, sliding window 6 (prompts of
                up to 24 tokens, so the window matters).
  phi3_longrope Phi3ForCausalLM with rope_scaling "longrope" (short/long factors, magnitude
                scaling from max/original positions), partial_rotary_factor 0.75, and
                original_max_position_embeddings 16: one prompt is shorter (short factors), the
                others longer (long factors), as transformers picks by the sequence's length.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "tests", "data", "tiny")

# Fixed prompts (token ids). Lengths straddle the longrope threshold of 16 tokens.
PROMPTS = [
    [1, 17, 200, 45, 3, 99, 128, 7, 64, 250],                       # 10 tokens
    [1] + [(i * 37 + 11) % 256 for i in range(23)],                   # 24 tokens
    [5, 5, 5, 5] + [(i * 101 + 3) % 256 for i in range(16)],          # 20 tokens
]

BASE = dict(
    vocab_size=256,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    rms_norm_eps=1e-5,
    hidden_act="silu",
    tie_word_embeddings=False,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
    attn_implementation="eager",
)


def configs():
    from transformers import Phi3Config

    yield "phi3", Phi3Config(**BASE, max_position_embeddings=64, rope_theta=10000.0,
                             sliding_window=6)
    rotary_half = int(16 * 0.75) // 2  # head_dim 16, partial_rotary_factor 0.75 -> 6 pairs
    rng = np.random.default_rng(3)
    short = [round(float(x), 4) for x in 1.0 + rng.random(rotary_half)]
    long = [round(float(x), 4) for x in 1.0 + 7.0 * rng.random(rotary_half)]
    yield "phi3_longrope", Phi3Config(
        **BASE,
        max_position_embeddings=64,
        original_max_position_embeddings=16,
        partial_rotary_factor=0.75,
        rope_scaling={"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": short,
                      "long_factor": long, "partial_rotary_factor": 0.75},
    )


def main() -> int:
    from transformers import Phi3ForCausalLM

    for name, config in configs():
        torch.manual_seed(1234)
        model = Phi3ForCausalLM(config).eval().float()
        # transformers' init (std 0.02) leaves attention almost uniform, so RoPE and the window
        # would hardly show in the logits. Larger weights make scores sharp: q/k/v rows of std
        # 0.35 (scores of order 10), other matrices 1/sqrt(fan_in), random norms around 1.
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n.endswith("norm.weight"):
                    p.copy_(1.0 + 0.2 * torch.randn_like(p))
                elif n.endswith("qkv_proj.weight"):
                    p.copy_(0.35 * torch.randn_like(p))
                elif n.endswith("embed_tokens.weight"):
                    p.copy_(torch.randn_like(p))
                else:
                    p.copy_(torch.randn_like(p) / p.shape[1] ** 0.5)
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        model.save_pretrained(d, safe_serialization=True)
        for extra in ("generation_config.json",):
            path = os.path.join(d, extra)
            if os.path.exists(path):
                os.remove(path)
        golden = {"model": name, "vocab_size": config.vocab_size,
                  "transformers": __import__("transformers").__version__,
                  "torch": torch.__version__, "prompts": []}
        for i, ids in enumerate(PROMPTS):
            with torch.no_grad():
                logits = model(torch.tensor([ids])).logits[0].float().numpy()
            logits.astype("<f4").tofile(os.path.join(d, f"logits_{i}.f32"))
            golden["prompts"].append({"ids": ids, "logits": f"logits_{i}.f32"})
        with open(os.path.join(d, "golden.json"), "w") as f:
            json.dump(golden, f, indent=1)
            f.write("\n")
        size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
        print(f"{d}: {size // 1024} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
