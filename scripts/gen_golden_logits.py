#!/usr/bin/env python3
"""Generate golden reference logits with Hugging Face transformers (float32, CPU, eager attention).

    python3 scripts/convert_gguf_to_hf.py models/SmolLM2-135M-Instruct.Q4_1.gguf models/smollm2-hf
    python3 scripts/convert_gguf_to_hf.py models/gemma-3-270m-q4_k_m.gguf models/gemma3-hf
    python3 scripts/gen_golden_logits.py            # both models -> tests/data/golden/<model>/

The HF dirs hold the *dequantized* GGUF weights, so these logits are what an exact float32
implementation of the quantized model should produce (up to float accumulation order).

For every prompt in tests/data/prompts/prompts.json this records, in
tests/data/golden/<model>/manifest.json:
  * token_ids: the exact input ids (plain prompts: tokenizer(text) with the tokenizer's default
    add_special_tokens=True; chat prompts: tokenizer.apply_chat_template(messages,
    add_generation_prompt=True), which already contains any BOS). The C++ test feeds these ids,
    so tokenizer differences do not matter for the logit comparison.
  * per position p (logits predict token p+1): top1 id, top1-top2 logit margin, logsumexp.
  * greedy continuation: 64 tokens of pure argmax decoding (model.generate(do_sample=False,
    max_new_tokens=64) with eos_token_id=None, i.e. EOS is NOT a stop and NOT masked; decoding
    simply continues past it). first_eos_index says where an EOS id first appeared (or null).
  * a few full float32 logit rows in logits/<prompt_id>.f32 (raw little-endian, row-major
    [len(positions), vocab_size]) for the first N prompts.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name -> (HF dir, source gguf, logit positions per prompt: "3" = first/middle/last, "1" = last)
DEFAULT_MODELS = {
    "smollm2": ("models/smollm2-hf", "models/SmolLM2-135M-Instruct.Q4_1.gguf", 3),
    "gemma3": ("models/gemma3-hf", "models/gemma-3-270m-q4_k_m.gguf", 1),
}


def sha256_of(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def rnd(x, nd=6):
    return [round(float(v), nd) for v in x]


def pick_positions(n_tokens: int, how_many: int) -> list[int]:
    last = n_tokens - 1
    if how_many == 1:
        return [last]
    return sorted({0, n_tokens // 2, last})


def encode(tok, prompt: dict) -> tuple[list[int], str]:
    if "messages" in prompt:
        text = tok.apply_chat_template(prompt["messages"], add_generation_prompt=True, tokenize=False)
        ids = tok.apply_chat_template(prompt["messages"], add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):  # BatchEncoding in newer transformers
            ids = ids["input_ids"]
        return [int(i) for i in ids], text
    ids = tok(prompt["text"]).input_ids  # default add_special_tokens=True
    return [int(i) for i in ids], prompt["text"]


def eos_ids(model, tok) -> list[int]:
    e = model.generation_config.eos_token_id
    if e is None:
        e = model.config.eos_token_id
    if e is None:
        e = tok.eos_token_id
    if e is None:
        return []
    return [int(x) for x in (e if isinstance(e, (list, tuple)) else [e])]


def run_model(name, hf_dir, gguf, n_pos, prompts, out_root, n_full, gen_tokens, torch, prepare=None):
    """prepare(model), when given, changes the loaded model before it runs (quantization
    emulation: scripts/gen_quant_golden.py)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    import transformers

    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(hf_dir)
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    if prepare is not None:
        prepare(model)
    vocab = int(model.config.vocab_size)
    out_dir = os.path.join(out_root, name)
    logit_dir = os.path.join(out_dir, "logits")
    os.makedirs(logit_dir, exist_ok=True)
    for f in os.listdir(logit_dir):
        if f.endswith(".f32"):
            os.remove(os.path.join(logit_dir, f))
    eos = eos_ids(model, tok)
    pad = model.config.pad_token_id
    gen_cfg = GenerationConfig(
        do_sample=False,
        max_new_tokens=gen_tokens,
        min_new_tokens=0,
        eos_token_id=None,  # never stop, never mask: pure argmax for exactly gen_tokens steps
        pad_token_id=pad if pad is not None else 0,
        bos_token_id=model.config.bos_token_id,
        num_beams=1,
        repetition_penalty=1.0,
        temperature=None,
        top_k=None,
        top_p=None,
        use_cache=True,
    )
    # generate() fills every None in a passed generation_config from model.generation_config, so
    # eos_token_id=None only sticks when it is the model's own generation config.
    model.generation_config = gen_cfg

    manifest = {
        "format_version": 1,
        "model": name,
        "hf_dir": os.path.relpath(hf_dir, REPO),
        "source_gguf": os.path.basename(gguf),
        "source_gguf_sha256": sha256_of(gguf) if os.path.exists(gguf) else None,
        "model_type": model.config.model_type,
        "vocab_size": vocab,
        "eos_token_ids": eos,
        "bos_token_id": model.config.bos_token_id,
        "dtype": "float32",
        "device": "cpu",
        "attn_implementation": "eager",
        "versions": {
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "numpy": np.__version__,
            "python": platform.python_version(),
        },
        "torch_threads": torch.get_num_threads(),
        "tokenization": "plain prompts: tokenizer(text) with add_special_tokens=True (HF default); "
        "chat prompts: apply_chat_template(messages, add_generation_prompt=True, tokenize=True)",
        "position_semantics": "entry p is computed from the logits at input position p, i.e. the "
        "distribution over the token following token_ids[p]",
        "generation": {
            "method": "model.generate(do_sample=False, num_beams=1, max_new_tokens=%d, eos_token_id=None)"
            % gen_tokens,
            "new_tokens": gen_tokens,
            "eos_handling": "none: EOS neither stops nor is masked; argmax continues past it",
            "gen_margins": "top1-top2 margin at each generated step, recomputed by one full forward "
            "over prompt+continuation (no KV cache)",
        },
        "logits_files": "logits/<prompt_id>.f32: raw little-endian float32, row-major "
        "[len(logits_positions), vocab_size]",
        "prompts": [],
    }

    for idx, p in enumerate(prompts):
        ids, text = encode(tok, p)
        input_ids = torch.tensor([ids], dtype=torch.long)
        with torch.no_grad():
            logits = model(input_ids=input_ids, use_cache=False).logits[0].to(torch.float32)
        top2 = torch.topk(logits, 2, dim=-1)
        top1 = top2.indices[:, 0]
        margin = top2.values[:, 0] - top2.values[:, 1]
        lse = torch.logsumexp(logits, dim=-1)

        entry = {
            "id": p["id"],
            "kind": p.get("kind"),
            "chat": "messages" in p,
            "text": text,
            "n_tokens": len(ids),
            "token_ids": ids,
            "top1": [int(x) for x in top1.tolist()],
            "margin": rnd(margin.tolist()),
            "logsumexp": rnd(lse.tolist()),
        }

        if idx < n_full:
            pos = pick_positions(len(ids), n_pos)
            rows = logits[pos].numpy().astype("<f4", copy=False)
            fname = f"{p['id']}.f32"
            path = os.path.join(logit_dir, fname)
            rows.tofile(path)
            entry["logits_file"] = f"logits/{fname}"
            entry["logits_positions"] = pos
            entry["logits_sha256"] = sha256_of(path)

        torch.manual_seed(0)
        with torch.no_grad():
            out = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids))
        gen = [int(x) for x in out[0, len(ids):].tolist()]
        if len(gen) != gen_tokens:
            raise RuntimeError(f"{name}/{p['id']}: generated {len(gen)} tokens, want {gen_tokens}")
        # Teacher-forced check: one full forward over prompt+continuation must reproduce each
        # greedy pick (up to exact ties); also gives the per-step margins.
        with torch.no_grad():
            full = model(input_ids=out, use_cache=False).logits[0, len(ids) - 1 : -1].to(torch.float32)
        ft = torch.topk(full, 2, dim=-1)
        tf_top1 = [int(x) for x in ft.indices[:, 0].tolist()]
        gmargin = (ft.values[:, 0] - ft.values[:, 1]).tolist()
        mism = [i for i, (a, b) in enumerate(zip(gen, tf_top1)) if a != b]
        first_eos = next((i for i, t in enumerate(gen) if t in eos), None)
        entry["generated"] = gen
        entry["gen_margins"] = rnd(gmargin)
        entry["first_eos_index"] = first_eos
        entry["gen_teacher_forced_mismatches"] = mism
        entry["generated_text"] = tok.decode(gen)
        if mism:
            print(f"  WARNING {p['id']}: cached vs full-forward argmax differ at steps {mism} "
                  f"(margins {[round(gmargin[i], 5) for i in mism]})", flush=True)
        manifest["prompts"].append(entry)
        print(f"  [{name}] {p['id']:<12} {len(ids):5d} tok  min margin {float(margin.min()):.4f}  "
              f"eos@{first_eos}  {time.time() - t0:6.1f}s", flush=True)

    with open(os.path.join(out_dir, "manifest.json"), "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=1, ensure_ascii=False)
        fh.write("\n")
    print(f"[{name}] done in {time.time() - t0:.1f}s -> {out_dir}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="smollm2,gemma3", help="comma list of: " + ",".join(DEFAULT_MODELS))
    ap.add_argument("--prompts", default=os.path.join(REPO, "tests/data/prompts/prompts.json"))
    ap.add_argument("--out", default=os.path.join(REPO, "tests/data/golden"))
    ap.add_argument("--full-logits-prompts", type=int, default=10, help="store full logit rows for the first N")
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 = deterministic and fastest on a shared box)")
    args = ap.parse_args()

    import torch

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)

    with open(args.prompts, encoding="utf-8") as fh:
        prompts = json.load(fh)["prompts"]

    for name in args.models.split(","):
        hf_dir, gguf, n_pos = DEFAULT_MODELS[name]
        run_model(name, os.path.join(REPO, hf_dir), os.path.join(REPO, gguf), n_pos, prompts, args.out,
                  args.full_logits_prompts, args.gen_tokens, torch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
