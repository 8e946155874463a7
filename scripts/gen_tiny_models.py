#!/usr/bin/env python3
"""Build tiny random-weight models with HF transformers and record their golden logits.

    pip install torch transformers safetensors      # CPU is enough; takes seconds
    python3 scripts/gen_tiny_models.py [NAME ...]    # -> tests/data/tiny/<name>/ (all, or those named)

Each directory holds what an HF checkpoint holds (config.json, model.safetensors in float32) and
golden.json + logits_<i>.f32 (+ model.gguf for the families in GGUF_FAMILIES, when $LLAMA_CPP_DIR
names llama.cpp's source tree: see convert_to_gguf): for every prompt (fixed token ids, no tokenizer), the float32 logits
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
  gpt_oss       GptOssForCausalLM: 2 layers, sliding (window 6) then full attention,
                q/k/v/o biases, attention sinks, YaRN (factor 32, truncate false), a MoE of 8
                experts (top 4, router bias, expert biases, interleaved gate_up) with the clamped
                SwiGLU (swiglu_limit 7, the value llama.cpp hard-codes; gate_up weights large
                enough that the clamp acts).
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

    from transformers import GptOssConfig

    gpt_oss = {**BASE, "intermediate_size": 48}
    yield "gpt_oss", GptOssConfig(
        **gpt_oss,
        head_dim=16,
        max_position_embeddings=131072,  # = factor x original, as the released configs
        sliding_window=6,
        layer_types=["sliding_attention", "full_attention"],
        num_local_experts=8,
        num_experts_per_tok=4,
        rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0,
                         "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                         "original_max_position_embeddings": 4096},
    )


def init_weights(model) -> None:
    """transformers' init (std 0.02) leaves attention almost uniform, so RoPE and the window would
    hardly show in the logits. Larger weights make scores sharp: q/k/v rows of std 0.35 (scores
    of order 10), other matrices 1/sqrt(fan_in), random norms around 1, small biases; gpt-oss's
    sinks near the scores' own size and expert gate_up of std 5/sqrt(hidden) (gate and up of
    std ~5 against the SwiGLU clamp at 7), so both matter."""
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif n.endswith(("qkv_proj.weight", "q_proj.weight", "k_proj.weight", "v_proj.weight")):
                p.copy_(0.35 * torch.randn_like(p))
            elif n.endswith("embed_tokens.weight"):
                p.copy_(torch.randn_like(p))
            elif n.endswith("self_attn.sinks"):
                p.copy_(3.0 + 2.0 * torch.randn_like(p))
            elif n.endswith("bias"):
                p.copy_(0.2 * torch.randn_like(p))
            elif n.endswith("experts.gate_up_proj"):  # [E, hidden, 2I]: in-features first
                p.copy_(5.0 * torch.randn_like(p) / p.shape[1] ** 0.5)
            elif n.endswith("experts.down_proj"):  # [E, I, hidden]
                p.copy_(torch.randn_like(p) / p.shape[1] ** 0.5)
            else:
                p.copy_(torch.randn_like(p) / p.shape[1] ** 0.5)


# Families llama.cpp's converter writes from a non-quantized HF directory.
GGUF_FAMILIES = {"gpt_oss"}

# Runs llama.cpp's convert_hf_to_gguf.py as it is, with one replacement: a tiny model has no
# tokenizer, so set_vocab writes a gpt2-style vocabulary of vocab_size plain tokens instead of
# reading (and hashing) a real one. Tensors, their names, layouts and the metadata are the
# converter's own.
_GGUF_DRIVER = """
import sys
sys.path.insert(0, sys.argv[1])
import convert_hf_to_gguf, gguf

def set_vocab(self):
    n = self.hparams["vocab_size"]
    self.gguf_writer.add_tokenizer_model("gpt2")
    self.gguf_writer.add_tokenizer_pre("gpt-4o")
    self.gguf_writer.add_token_list([f"<t{i}>" for i in range(n)])
    self.gguf_writer.add_token_types([gguf.TokenType.NORMAL] * n)
    self.gguf_writer.add_token_merges([])

find_class = convert_hf_to_gguf.get_model_class

def get_model_class(*args, **kwargs):
    cls = find_class(*args, **kwargs)
    cls.set_vocab = set_vocab
    return cls

convert_hf_to_gguf.get_model_class = get_model_class
sys.argv = ["convert_hf_to_gguf.py", sys.argv[2], "--outfile", sys.argv[3], "--outtype", "f32"]
convert_hf_to_gguf.main()
"""


def convert_to_gguf(d: str) -> str | None:
    """d/model.gguf by llama.cpp's converter, float32 like the HF weights. $LLAMA_CPP_DIR: its
    source tree, e.g. vendor/llama.cpp of the llama-cpp-python sdist extracted outside the repo
    (pip download --no-deps --no-binary :all: llama-cpp-python). None when unset."""
    src = os.environ.get("LLAMA_CPP_DIR")
    if not src:
        print(f"{d}: LLAMA_CPP_DIR unset, no GGUF written", file=sys.stderr)
        return None
    import subprocess

    out = os.path.join(d, "model.gguf")
    subprocess.run([sys.executable, "-c", _GGUF_DRIVER, src, d, out], check=True,
                   stdout=subprocess.DEVNULL)
    return "model.gguf"


def main() -> int:
    from transformers import AutoModelForCausalLM

    wanted = set(sys.argv[1:])
    for name, config in configs():
        if wanted and name not in wanted:
            continue
        torch.manual_seed(1234)
        model = AutoModelForCausalLM.from_config(config).eval().float()
        init_weights(model)
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
        if name in GGUF_FAMILIES and (gguf := convert_to_gguf(d)):
            golden["gguf"] = gguf
        with open(os.path.join(d, "golden.json"), "w") as f:
            json.dump(golden, f, indent=1)
            f.write("\n")
        size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
        print(f"{d}: {size // 1024} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
