#!/usr/bin/env python3
"""Write a small-but-not-trivial random-weight Qwen3-MoE GGUF to benchmark the CPU MoE path.

    bash scripts/llamacpp.sh build                        # llama.cpp source + binaries, outside the repo
    python3 scripts/make_moe_bench_gguf.py --out /tmp/moe-bench --type q8_0
    python3 scripts/make_moe_bench_gguf.py --out /tmp/moe-bench --type q4_0   # needs llama-quantize

The shape is a scaled-down Qwen3-30B-A3B: hidden 1024, 16 layers, 32 experts of width 512, top-4
(renormalized), GQA 16/4 heads of 64, vocab 32000 -- 0.91 B parameters, 0.18 B active per token,
so a decode step reads the chosen experts (not all 32) and the lm_head dominates less than in a
toy. Weights are transformers' own random init (seeded), saved as bf16, converted by llama.cpp's
convert_hf_to_gguf.py (the tree in the llama-cpp-python sdist that scripts/llamacpp.sh unpacks)
with the vocabulary of a throwaway 40-piece SentencePiece model (Qwen3-MoE's converter only reads
a real BPE tokenizer; the benchmarks feed token ids, never text); q8_0 / f16 / bf16 come straight from the converter, other types (q4_0, q4_k_m, ...)
from llama-quantize applied to an f16 file, which is then removed. Nothing here is committed: the
GGUF (~0.5-0.95 GB) goes to --out. Random weights make routing near uniform, which is the fair case
for a benchmark (no expert stays hot in cache by accident of training).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_tiny_models import spm_tokenizer_model  # noqa: E402

# llama.cpp's converter as it is, except that Qwen3-MoE's vocabulary comes from the throwaway
# SentencePiece model (padded to vocab_size) instead of a real BPE tokenizer.json. Not
# gen_tiny_models' plain-vocab driver: its empty merge list is dropped by the GGUF writer and
# llama.cpp then refuses the file ("cannot find tokenizer merges"). Tensors and metadata are the
# converter's own.
_SPM_VOCAB_DRIVER = """
import sys
sys.path.insert(0, sys.argv[1])
import convert_hf_to_gguf

find_class = convert_hf_to_gguf.get_model_class

def get_model_class(*args, **kwargs):
    cls = find_class(*args, **kwargs)
    cls.set_vocab = lambda self: self._set_vocab_sentencepiece()
    return cls

convert_hf_to_gguf.get_model_class = get_model_class
sys.argv = ["convert_hf_to_gguf.py"] + sys.argv[2:]
convert_hf_to_gguf.main()
"""

LLAMACPP_ROOT = os.environ.get("KVASIR_LLAMACPP_DIR", os.path.expanduser("~/.cache/kvasir/llama.cpp"))
CONVERTER_TYPES = {"q8_0", "f16", "bf16"}

SHAPE = dict(
    vocab_size=32000,
    hidden_size=1024,
    num_hidden_layers=16,
    num_attention_heads=16,
    num_key_value_heads=4,
    head_dim=64,
    num_experts=32,
    num_experts_per_tok=4,
    moe_intermediate_size=512,
    intermediate_size=2048,  # unused: every layer is sparse (no mlp_only_layers)
    norm_topk_prob=True,
    max_position_embeddings=4096,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
    bos_token_id=1,
    eos_token_id=2,
)


def write_hf(hf_dir: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, Qwen3MoeConfig

    torch.manual_seed(1234)
    config = Qwen3MoeConfig(**SHAPE)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
    n = sum(p.numel() for p in model.parameters())
    print(f"Qwen3-MoE bench model: {n / 1e9:.3f} B parameters", flush=True)
    model.save_pretrained(hf_dir, safe_serialization=True, max_shard_size="64GB")


def convert(hf_dir: str, llama_cpp: str, outtype: str, outfile: str) -> None:
    """llama.cpp's converter on hf_dir plus a throwaway tokenizer.model, linked, not copied."""
    with tempfile.TemporaryDirectory() as tmp:
        for f in os.listdir(hf_dir):
            os.symlink(os.path.join(hf_dir, f), os.path.join(tmp, f))
        spm_tokenizer_model(os.path.join(tmp, "tokenizer.model"))
        cmd = [sys.executable, "-c", _SPM_VOCAB_DRIVER, llama_cpp, tmp, "--outtype", outtype, "--outfile", outfile]
        r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"convert_hf_to_gguf.py failed:\n{r.stderr[-3000:]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="/tmp/moe-bench", help="directory for the HF model and the GGUF")
    ap.add_argument("--type", default="q8_0", help="GGUF weight type: q8_0, f16, bf16, or any llama-quantize type")
    ap.add_argument("--llama-cpp", default=os.environ.get("LLAMA_CPP_DIR", os.path.join(LLAMACPP_ROOT, "src")),
                    help="llama.cpp tree with convert_hf_to_gguf.py")
    ap.add_argument("--llama-quantize", default=os.path.join(LLAMACPP_ROOT, "build", "bin", "llama-quantize"),
                    help="llama-quantize binary (types the converter does not write)")
    args = ap.parse_args()
    qtype = args.type.lower()
    if not os.path.isfile(os.path.join(args.llama_cpp, "convert_hf_to_gguf.py")):
        sys.exit(f"no convert_hf_to_gguf.py in {args.llama_cpp}: run `bash scripts/llamacpp.sh build` or pass --llama-cpp")
    if qtype not in CONVERTER_TYPES and not os.access(args.llama_quantize, os.X_OK):
        sys.exit(f"--type {qtype} needs llama-quantize (not found at {args.llama_quantize}); "
                 f"the converter alone writes {sorted(CONVERTER_TYPES)}")

    hf_dir = os.path.join(args.out, "hf")
    os.makedirs(args.out, exist_ok=True)
    if not os.path.isfile(os.path.join(hf_dir, "model.safetensors")):
        write_hf(hf_dir)
    gguf = os.path.join(args.out, f"qwen3moe-bench-{qtype}.gguf")
    if qtype in CONVERTER_TYPES:
        convert(hf_dir, args.llama_cpp, qtype, gguf)
    else:
        f16 = os.path.join(args.out, "qwen3moe-bench-f16.tmp.gguf")
        convert(hf_dir, args.llama_cpp, "f16", f16)
        try:
            r = subprocess.run([args.llama_quantize, f16, gguf, qtype], capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"llama-quantize failed:\n{r.stderr[-3000:]}")
        finally:
            os.remove(f16)
    print(f"{gguf}: {os.path.getsize(gguf) / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
