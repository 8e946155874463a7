#!/usr/bin/env python3
"""Golden logits and greedy continuations of HF transformers running the FP8 checkpoints that
scripts/make_quantized_checkpoints.py makes, for tests/quant_golden_test.cpp.

    pip install compressed-tensors accelerate   # transformers reads compressed-tensors / fp8 with them
    python3 scripts/make_quantized_checkpoints.py --check-hf
    python3 scripts/gen_quant_golden.py          # -> tests/data/golden/smollm2-<format>/

Same manifest and prompts as scripts/gen_golden_logits.py (whose run_model this calls), one full
logit row (the last position) for the first few prompts. What transformers computes, per format:
  ct-fp8-*      the checkpoint as compressed-tensors runs it on the CPU: weights decompressed to
                codes x scales, each Linear's input fake-quantized to float8_e4m3fn (per token
                with scale max|x| / 448, or by the stored static input_scale).
  fp8-block64   transformers dequantizes fp8 checkpoints on the CPU and leaves activations in
                float; the hooks here add what vLLM's block-FP8 GEMM does on the GPU: each token's
                input quantized per group of 64 columns (scale max|group| / 448).
--quantization fp8 needs no golden of its own: it makes exactly the weights and activation
scheme of ct-fp8-channel-dynamic (quant_golden_test checks that weight for weight).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_golden_logits  # noqa: E402
import make_quantized_checkpoints as mqc  # noqa: E402

REPO = gen_golden_logits.REPO
FP8_MAX = 448.0


def fake_quant(x, scale):
    q = (x / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).to(torch.float32) * scale
    return torch.where(scale == 0, torch.zeros_like(q), q)


def per_token_group(x, group):
    g = x.unflatten(-1, (x.shape[-1] // group, group))
    return fake_quant(g, g.abs().amax(dim=-1, keepdim=True) / FP8_MAX).flatten(-2)


def hook_linears(model, fn):
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and name != "lm_head":
            mod.register_forward_pre_hook(lambda m, args: (fn(args[0]),))


def expect_compressed_tensors_activations(model):
    q = model.model.layers[0].self_attn.q_proj
    if getattr(q, "quantization_scheme", None) is None or q.quantization_scheme.input_activations is None:
        raise SystemExit("transformers did not attach compressed-tensors' activation quantization")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models-dir", default=mqc.default_out())
    ap.add_argument("--formats", default=",".join(mqc.FORMATS))
    ap.add_argument("--full-logits-prompts", type=int, default=5)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    with open(os.path.join(REPO, "tests/data/prompts/prompts.json"), encoding="utf-8") as fh:
        prompts = json.load(fh)["prompts"]
    for fmt in args.formats.split(","):
        if fmt.startswith("ct-"):
            hf_dir, prepare = os.path.join(args.models_dir, f"smollm2-{fmt}"), expect_compressed_tensors_activations
        elif fmt == "fp8-block64":
            hf_dir = os.path.join(args.models_dir, f"smollm2-{fmt}")
            prepare = lambda m: hook_linears(m, lambda x: per_token_group(x, mqc.BLOCK[1]))  # noqa: E731
        else:
            raise SystemExit(f"unknown format {fmt}")
        gen_golden_logits.run_model(f"smollm2-{fmt}", hf_dir, os.path.join(REPO, "models/SmolLM2-135M-Instruct.Q4_1.gguf"),
                                    1, prompts, os.path.join(REPO, "tests/data/golden"), args.full_logits_prompts, 64,
                                    torch, prepare=prepare)
    return 0


if __name__ == "__main__":
    sys.exit(main())
