#!/usr/bin/env python3
"""Build tiny random-weight models with HF transformers and record their golden logits.

    pip install torch transformers safetensors      # CPU is enough; takes seconds
    python3 scripts/gen_tiny_models.py               # -> tests/data/tiny/<name>/
    python3 scripts/gen_tiny_models.py --only deepseek_v3   # only the models named

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
Dense families (dense_configs()). These and the two phi3 models are also written as model.gguf
by llama.cpp's convert_hf_to_gguf.py with --outtype f32 (found with --llama-cpp DIR or
$LLAMA_CPP_DIR: the llama.cpp tree inside the llama-cpp-python sdist, extracted outside the
repository):
  llama3        LlamaForCausalLM with rope_type "llama3" (factor 8, original 16 positions, so the
                frequency bands all show within the prompts).
  qwen25_yarn   Qwen2ForCausalLM (q/k/v biases) with rope_scaling yarn (factor 4, original 16).
  qwen3         Qwen3ForCausalLM (QK-norm).
  mistral       MistralForCausalLM (no sliding window, as from v0.2 on).
  gemma2        Gemma2ForCausalLM: sandwich norms, GELU-tanh, sliding/global layers alternating
                (window 6), attention and final logit soft-capping set low enough to bind.
  gemma3        Gemma3ForCausalLM: QK-norm, sliding layers with their own RoPE base, window 6, its
                5:1 sliding/global pattern over 6 (smaller) layers.
Mixture-of-experts families (moe_configs()): 8 experts, top-2, experts of 32, as hub checkpoints
name them (transformers 5 keeps experts fused in memory, mlp.experts.gate_up_proj [E, 2I, H], but
save_pretrained writes the per-expert names real checkpoints use: experts.<e>.w1/w2/w3 for
Mixtral, experts.<e>.gate_proj/up_proj/down_proj for Qwen; checked after saving). GGUF forms as
above (llama.cpp stacks the experts into blk.N.ffn_{gate,up,down}_exps), and mixtral also as
model-q8_0.gguf (--outtype q8_0: the quantized-expert path):
  mixtral       MixtralForCausalLM (softmax top-2, renormalized); its GGUF says "llama".
  qwen3_moe     Qwen3MoeForCausalLM, norm_topk_prob true (as released checkpoints and llama.cpp).
  qwen3_moe_mlp_only  Qwen3MoeForCausalLM with mlp_only_layers [1]: layer 1 keeps a dense MLP
                (HF only: llama.cpp's qwen3moe has no dense layers).
  qwen2_moe     Qwen2MoeForCausalLM: q/k/v biases, norm_topk_prob false, a shared expert of 48
                scaled by sigmoid(shared_expert_gate . x).
  gpt_oss       GptOssForCausalLM: 2 layers, sliding (window 6) then full attention, q/k/v/o
                biases, attention sinks, YaRN (factor 32, truncate false), 8 experts (top 4,
                router bias, expert biases, interleaved gate_up, stored [E, in, out]) with the
                clamped SwiGLU at swiglu_limit 7 (the value llama.cpp hard-codes; gate_up weights
                large enough that the clamp acts). hidden 64 != 2 * intermediate 96, so a
                transposition slip shows.
DeepSeek (deepseek_configs()), also as model.gguf (llama.cpp's "deepseek2"): multi-head latent
attention (hidden 32, latent 16, rope 8 interleaved, nope 16, v 16), layer 0 dense and the others
mixture-of-experts (8 routed experts of 16, top-2, shared experts added unscaled):
  deepseek_v2_lite  DeepseekV2ForCausalLM like V2-Lite: q_proj (q_lora_rank null), YaRN (factor 4,
                mscale = mscale_all_dim, so the softmax scale changes); softmax greedy routing, 2
                shared experts.
  deepseek_v2   the same with q_lora_rank 16 (q_a_proj -> q_a_layernorm -> q_b_proj), no scaling;
                group_limited_greedy routing (2 groups ranked by their best expert, 1 kept),
                routed_scaling_factor 1.5.
  deepseek_v3   DeepseekV3ForCausalLM, q_lora_rank 16, rope_interleave, YaRN, three layers; noaux_tc
                routing: sigmoid, a random e_score_correction_bias, 2 groups ranked by their top-2
                sum (1 kept), renormalized, routed_scaling_factor 2.5; 1 shared expert.
The converter needs a tokenizer; a 40-piece SentencePiece model is made for it in a temporary
copy (the GGUF's vocabulary is padded to vocab_size), and not kept. Families whose converter
reads only a byte-level BPE tokenizer.json (and recognizes it by hash: Qwen-MoE, GPT-OSS,
DeepSeek) get a plain vocabulary of vocab_size tokens written in its place (PLAIN_VOCAB);
tensors and metadata are the converter's own either way.
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


def dense_configs():
    """The dense families beyond Phi-3, each with the config fields that make it itself."""
    from transformers import Gemma2Config, Gemma3TextConfig, LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

    yield "llama3", LlamaConfig(**BASE, max_position_embeddings=64, rope_scaling={
        "rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 16})
    qwen = dict(BASE, tie_word_embeddings=False)
    yield "qwen25_yarn", Qwen2Config(**qwen, max_position_embeddings=64, rope_scaling={
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16})
    yield "qwen3", Qwen3Config(**qwen, head_dim=16, max_position_embeddings=64, rope_theta=10000.0)
    # Mistral v0.2 on (and Nemo, Small 3) set no sliding window; llama.cpp's converter would drop
    # one anyway (its GGUF "llama" has no such key), and phi3 covers every-layer windows.
    yield "mistral", MistralConfig(**BASE, max_position_embeddings=64, rope_theta=10000.0, sliding_window=None)
    gemma = dict(BASE, hidden_act="gelu_pytorch_tanh", hidden_activation="gelu_pytorch_tanh", head_dim=16,
                 tie_word_embeddings=True, query_pre_attn_scalar=16, sliding_window=6, max_position_embeddings=64)
    yield "gemma2", Gemma2Config(**gemma, rope_theta=10000.0, attn_logit_softcapping=5.0,
                                 final_logit_softcapping=3.0,
                                 layer_types=["sliding_attention", "full_attention"])
    # Gemma 3's own 5:1 pattern (its GGUF stores no pattern: llama.cpp fixes it at 6), so six
    # layers, kept small.
    small = dict(gemma, hidden_size=32, intermediate_size=32, num_attention_heads=2, num_key_value_heads=1,
                 num_hidden_layers=6)
    yield "gemma3", Gemma3TextConfig(**small, layer_types=["sliding_attention"] * 5 + ["full_attention"], rope_parameters={
        "full_attention": {"rope_type": "default", "rope_theta": 100000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})


def moe_configs():
    """Mixtral, Qwen3-MoE, Qwen2-MoE and GPT-OSS with their real routing and config fields."""
    from transformers import GptOssConfig, MixtralConfig, Qwen2MoeConfig, Qwen3MoeConfig

    moe = dict(BASE, max_position_embeddings=64, rope_theta=10000.0, num_experts_per_tok=2)
    yield "mixtral", MixtralConfig(**dict(moe, intermediate_size=32), num_local_experts=8, sliding_window=None)
    qwen3 = dict(moe, head_dim=16, num_experts=8, moe_intermediate_size=32, norm_topk_prob=True)
    yield "qwen3_moe", Qwen3MoeConfig(**qwen3)
    yield "qwen3_moe_mlp_only", Qwen3MoeConfig(**dict(qwen3, num_hidden_layers=3), mlp_only_layers=[1])
    yield "qwen2_moe", Qwen2MoeConfig(**moe, num_experts=8, moe_intermediate_size=32,
                                      shared_expert_intermediate_size=48, norm_topk_prob=False)
    yield "gpt_oss", GptOssConfig(
        **dict(BASE, intermediate_size=48),
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


# DeepSeek: hidden 32, 4 heads, MLA latent 16, rope 8, nope 16, v 16 (HF's num_key_value_heads
# is the head count; llama.cpp's converter relies on it); layer 0 dense (intermediate 64), the
# others MoE: 8 routed experts of 16, top-2, shared experts of 16 each.
DEEPSEEK = dict(
    BASE,
    hidden_size=32,
    intermediate_size=64,
    num_key_value_heads=4,
    kv_lora_rank=16,
    qk_rope_head_dim=8,
    qk_nope_head_dim=16,
    v_head_dim=16,
    max_position_embeddings=64,
    first_k_dense_replace=1,
    moe_layer_freq=1,
    n_routed_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=16,
)
DEEPSEEK_YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                 "original_max_position_embeddings": 16, "beta_fast": 32, "beta_slow": 1,
                 "mscale": 0.707, "mscale_all_dim": 0.707}


def deepseek_configs():
    """DeepSeek-V2-Lite, V2 and V3 shapes: MLA, and their routers (scoring_func and topk_method
    are written for llama.cpp's converter and DeepSeek's own code; transformers' routers are fixed
    per model_type)."""
    from transformers import DeepseekV2Config, DeepseekV3Config

    yield "deepseek_v2_lite", DeepseekV2Config(**DEEPSEEK, q_lora_rank=None, n_shared_experts=2,
                                               scoring_func="softmax", topk_method="greedy",
                                               n_group=1, topk_group=1, norm_topk_prob=False,
                                               routed_scaling_factor=1.0,
                                               rope_parameters=DEEPSEEK_YARN)
    yield "deepseek_v2", DeepseekV2Config(**DEEPSEEK, q_lora_rank=16, n_shared_experts=2,
                                          scoring_func="softmax", topk_method="group_limited_greedy",
                                          n_group=2, topk_group=1, norm_topk_prob=False,
                                          routed_scaling_factor=1.5, rope_theta=10000.0)
    v3 = dict(DEEPSEEK, num_hidden_layers=3)
    yield "deepseek_v3", DeepseekV3Config(**v3, q_lora_rank=16, n_shared_experts=1,
                                          scoring_func="sigmoid", topk_method="noaux_tc",
                                          n_group=2, topk_group=1, norm_topk_prob=True,
                                          routed_scaling_factor=2.5, rope_interleave=True,
                                          rope_parameters=dict(DEEPSEEK_YARN, factor=2.0))


# Attention matrices: scaled up from transformers' init (std 0.02), which leaves attention almost
# uniform, so that RoPE, the window and the softmax scale show in the logits (scores of order 10).
ATTENTION_WEIGHTS = ("qkv_proj.weight", "q_proj.weight", "k_proj.weight", "v_proj.weight",
                     "q_b_proj.weight", "kv_b_proj.weight")


# A per-expert tensor name each MoE model must have on disk.
MOE_HUB_NAMES = {
    "mixtral": "model.layers.0.block_sparse_moe.experts.0.w1.weight",
    "qwen3_moe": "model.layers.0.mlp.experts.0.gate_proj.weight",
    "qwen3_moe_mlp_only": "model.layers.0.mlp.experts.0.gate_proj.weight",
    "qwen2_moe": "model.layers.0.mlp.experts.0.down_proj.weight",
    "deepseek_v2_lite": "model.layers.1.mlp.experts.0.gate_proj.weight",
    "deepseek_v2": "model.layers.1.mlp.experts.0.up_proj.weight",
    "deepseek_v3": "model.layers.2.mlp.experts.7.down_proj.weight",
}


def check_hub_names(d, name):
    from safetensors import safe_open
    with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    if MOE_HUB_NAMES[name] not in keys:
        raise SystemExit(f"{d}: transformers did not save per-expert hub names ({sorted(keys)[:8]}...)")


def spm_tokenizer_model(path):
    """A 40-piece SentencePiece model, only so convert_hf_to_gguf.py can write a vocabulary."""
    import sentencepiece as spm
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "t.txt")
        with open(src, "w") as f:
            f.write("the quick brown fox jumps over the lazy dog\n" * 50)
        spm.SentencePieceTrainer.train(input=src, model_prefix=os.path.join(tmp, "m"), model_type="bpe",
                                       vocab_size=40, minloglevel=2, hard_vocab_limit=False)
        with open(os.path.join(tmp, "m.model"), "rb") as f, open(path, "wb") as out:
            out.write(f.read())


# llama.cpp's converter as it is, with one replacement, for families whose converter reads only a
# gpt2-style BPE tokenizer and identifies it by hashing a real one (Qwen2-MoE, Qwen3-MoE, GPT-OSS,
# DeepSeek): set_vocab writes vocab_size plain tokens. Tensors, their names and layouts and the metadata are the
# converter's own.
_PLAIN_VOCAB_DRIVER = """
import sys
sys.path.insert(0, sys.argv[1])
PRE = sys.argv[2]
import convert_hf_to_gguf, gguf

def set_vocab(self):
    n = self.hparams["vocab_size"]
    self.gguf_writer.add_tokenizer_model("gpt2")
    self.gguf_writer.add_tokenizer_pre(PRE)
    self.gguf_writer.add_token_list([f"<t{i}>" for i in range(n)])
    self.gguf_writer.add_token_types([gguf.TokenType.NORMAL] * n)
    self.gguf_writer.add_token_merges([])

find_class = convert_hf_to_gguf.get_model_class

def get_model_class(*args, **kwargs):
    cls = find_class(*args, **kwargs)
    cls.set_vocab = set_vocab
    return cls

convert_hf_to_gguf.get_model_class = get_model_class
sys.argv = ["convert_hf_to_gguf.py"] + sys.argv[3:]
convert_hf_to_gguf.main()
"""
# Model -> the tokenizer pre-name its plain vocabulary is written with.
PLAIN_VOCAB = {"qwen3_moe": "default", "qwen2_moe": "default", "gpt_oss": "gpt-4o",
               "deepseek_v2_lite": "default", "deepseek_v2": "default", "deepseek_v3": "default"}


def write_gguf(d, llama_cpp, outtype="f32", outfile="model.gguf", plain_vocab_pre=None):
    """<d>/<outfile> from llama.cpp's converter; False where it does not take the family.
    plain_vocab_pre: write a plain vocabulary with this pre-tokenizer name (PLAIN_VOCAB)."""
    import shutil
    import subprocess
    import tempfile
    script = os.path.join(llama_cpp, "convert_hf_to_gguf.py")
    with tempfile.TemporaryDirectory() as parent:
        # The converter names the model (general.name) after its directory: the model's name,
        # not the temporary one, so that a rerun writes the same file.
        tmp = os.path.join(parent, os.path.basename(d))
        os.mkdir(tmp)
        for f in ("config.json", "model.safetensors"):
            shutil.copy(os.path.join(d, f), tmp)
        spm_tokenizer_model(os.path.join(tmp, "tokenizer.model"))
        args = [tmp, "--outtype", outtype, "--outfile", os.path.join(d, outfile)]
        cmd = ([sys.executable, "-c", _PLAIN_VOCAB_DRIVER, llama_cpp, plain_vocab_pre] if plain_vocab_pre
               else [sys.executable, script])
        r = subprocess.run(cmd + args, capture_output=True, text=True)
    if r.returncode != 0:
        print(f"{d}: convert_hf_to_gguf.py failed:\n{r.stderr[-2000:]}", file=sys.stderr)
        return False
    return True


def main() -> int:
    import argparse
    from transformers import AutoModelForCausalLM

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-cpp", default=os.environ.get("LLAMA_CPP_DIR"),
                    help="llama.cpp tree with convert_hf_to_gguf.py (GGUF forms are skipped without it)")
    ap.add_argument("--only", nargs="*", help="names of the models to write")
    args = ap.parse_args()
    gguf_families = {"phi3", "phi3_longrope", "llama3", "qwen25_yarn", "qwen3", "mistral", "gemma2", "gemma3",
                     "mixtral", "qwen3_moe", "qwen2_moe", "gpt_oss", "deepseek_v2_lite", "deepseek_v2", "deepseek_v3"}
    q8_families = {"mixtral"}

    for name, config in list(configs()) + list(dense_configs()) + list(moe_configs()) + list(deepseek_configs()):
        if args.only and name not in args.only:
            continue
        torch.manual_seed(1234)
        model = AutoModelForCausalLM.from_config(config).eval().float()
        # transformers' init (std 0.02) leaves attention almost uniform, so RoPE and the window
        # would hardly show in the logits. Larger weights make scores sharp: q/k/v rows of std
        # 0.35 (ATTENTION_WEIGHTS: scores of order 10), other matrices 1/sqrt(fan_in), random
        # norms around 1; gpt-oss's sinks near the scores' own size and its expert gate_up of std
        # 5/sqrt(hidden) (gate and up of std ~5 against the SwiGLU clamp at 7), so both show.
        # Fan-in is the last dimension, also of stacked experts [E, out, in], except gpt-oss's
        # experts, stored [E, in, out].
        fan_in_dim = 1 if name == "gpt_oss" else -1
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n.endswith("norm.weight"):
                    p.copy_(1.0 + 0.2 * torch.randn_like(p))
                elif n.endswith(ATTENTION_WEIGHTS):
                    p.copy_(0.35 * torch.randn_like(p))
                elif n.endswith("embed_tokens.weight"):
                    p.copy_(torch.randn_like(p))
                elif n.endswith("self_attn.sinks"):
                    p.copy_(3.0 + 2.0 * torch.randn_like(p))
                elif name == "gpt_oss" and n.endswith("experts.gate_up_proj"):
                    p.copy_(5.0 * torch.randn_like(p) / p.shape[fan_in_dim] ** 0.5)
                elif p.dim() == 1:  # q/k/v biases
                    p.copy_(0.5 * torch.randn_like(p))
                else:
                    p.copy_(torch.randn_like(p) / p.shape[fan_in_dim] ** 0.5)
            # DeepSeek-V3's routing bias (a buffer, zero at init): large enough beside the
            # sigmoid scores (spread ~0.2) to change which experts are chosen.
            for n, b in model.named_buffers():
                if n.endswith("e_score_correction_bias"):
                    b.copy_(0.25 * torch.randn_like(b))
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
        if name in MOE_HUB_NAMES:
            check_hub_names(d, name)
        if name in gguf_families and args.llama_cpp:
            write_gguf(d, args.llama_cpp, plain_vocab_pre=PLAIN_VOCAB.get(name))
        if name in q8_families and args.llama_cpp:
            write_gguf(d, args.llama_cpp, "q8_0", "model-q8_0.gguf", plain_vocab_pre=PLAIN_VOCAB.get(name))
        size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
        print(f"{d}: {size // 1024} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
