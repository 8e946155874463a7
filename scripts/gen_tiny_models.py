#!/usr/bin/env python3
"""Build tiny random-weight models with HF transformers and record their golden logits.

    pip install torch transformers safetensors      # CPU is enough; takes seconds
    python3 scripts/gen_tiny_models.py               # -> tests/data/tiny/<name>/
    python3 scripts/gen_tiny_models.py deepseek_v3   # only the models named

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
  deepseek_v2_lite  DeepseekV2ForCausalLM like V2-Lite: multi-head latent attention with q_proj
                (q_lora_rank null), kv_lora_rank 32, rope dims 16 (interleaved pairs), nope 32,
                v 32, YaRN (factor 4, mscale = mscale_all_dim, so the softmax scale changes);
                every layer dense (first_k_dense_replace = num_hidden_layers).
  deepseek_v2   the same with q_lora_rank 24 (q_a_proj -> q_a_layernorm -> q_b_proj), no scaling.
  deepseek_v3   DeepseekV3ForCausalLM, q_lora_rank 24, rope_interleave, YaRN, three dense layers.

With LLAMA_CPP=<llama.cpp source dir> (vendor/llama.cpp of the llama-cpp-python sdist:
`pip download --no-deps --no-binary :all: llama-cpp-python`, extracted outside the repo), the
models llama.cpp's converter supports are also written as model.gguf (float32, no vocabulary:
the golden prompts are token ids), which the test runs against the same logits.
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


# DeepSeek MLA: 4 heads, latent 32, rope 16, nope 32, v 32 (HF's num_key_value_heads is the
# head count; llama.cpp's converter relies on it).
DEEPSEEK = dict(
    BASE,
    num_key_value_heads=4,
    kv_lora_rank=32,
    qk_rope_head_dim=16,
    qk_nope_head_dim=32,
    v_head_dim=32,
    max_position_embeddings=64,
)
DEEPSEEK_YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                 "original_max_position_embeddings": 16, "beta_fast": 32, "beta_slow": 1,
                 "mscale": 0.707, "mscale_all_dim": 0.707}


def deepseek_configs():
    from transformers import DeepseekV2Config, DeepseekV3Config

    yield "deepseek_v2_lite", DeepseekV2Config(**DEEPSEEK, q_lora_rank=None,
                                               first_k_dense_replace=2,
                                               rope_parameters=DEEPSEEK_YARN)
    yield "deepseek_v2", DeepseekV2Config(**DEEPSEEK, q_lora_rank=24, first_k_dense_replace=2,
                                          rope_theta=10000.0)
    v3 = dict(DEEPSEEK, num_hidden_layers=3)
    yield "deepseek_v3", DeepseekV3Config(**v3, q_lora_rank=24, first_k_dense_replace=3,
                                          rope_interleave=True,
                                          rope_parameters=dict(DEEPSEEK_YARN, factor=2.0))


# Attention matrices: scaled up from transformers' init (std 0.02), which leaves attention almost
# uniform, so that RoPE, the window and the softmax scale show in the logits (scores of order 10).
ATTENTION_STD = {"qkv_proj.weight": 0.35, "q_proj.weight": 0.35, "q_b_proj.weight": 0.35,
                 "kv_b_proj.weight": 0.35}

# GGUF conversion, in a child process: the converter's own gguf-py comes first on its path, and
# its vocabulary step is skipped (the tiny models have no tokenizer).
CONVERT = r"""
import sys
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/gguf-py"]
import conversion.base as base
base.TextModel.set_vocab = lambda self: None
from conversion.deepseek import DeepseekV2Model
DeepseekV2Model.set_vocab = lambda self: None
sys.argv = ["convert_hf_to_gguf.py", sys.argv[2], "--outfile", sys.argv[3], "--outtype", "f32"]
import convert_hf_to_gguf
convert_hf_to_gguf.main()
"""
GGUF_MODELS = {"deepseek_v2_lite", "deepseek_v2", "deepseek_v3"}


def write_gguf(name: str, d: str) -> None:
    llama_cpp = os.environ.get("LLAMA_CPP")
    if not llama_cpp or name not in GGUF_MODELS:
        return
    import subprocess

    out = os.path.join(d, "model.gguf")
    subprocess.run([sys.executable, "-c", CONVERT, llama_cpp, d, out], check=True,
                   stdout=subprocess.DEVNULL)


def main() -> int:
    from transformers import AutoModelForCausalLM

    only = set(sys.argv[1:])  # model names to (re)write; all when empty
    for name, config in list(configs()) + list(deepseek_configs()):
        if only and name not in only:
            continue
        torch.manual_seed(1234)
        model = AutoModelForCausalLM.from_config(config).eval().float()
        # Larger weights than transformers' init (see ATTENTION_STD), other matrices
        # 1/sqrt(fan_in), random norms around 1.
        with torch.no_grad():
            for n, p in model.named_parameters():
                std = next((v for k, v in ATTENTION_STD.items() if n.endswith(k)), None)
                if n.endswith("norm.weight"):
                    p.copy_(1.0 + 0.2 * torch.randn_like(p))
                elif std is not None:
                    p.copy_(std * torch.randn_like(p))
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
        write_gguf(name, d)
        size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
        print(f"{d}: {size // 1024} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
