#!/usr/bin/env python3
"""Writes a random-weight Llama-3.1-8B-shaped GGUF (F16 weights, F32 norms, a synthetic SPM vocab
of 128,256 tokens) for side-by-side speed runs of kvasir and llama.cpp on the GPU machine
(scripts/cuda_device_run.sh, stage `gguf`). Runs there: needs numpy and the PyPI `gguf` package
(carried as a wheel); uses torch's CUDA generator when present (seconds instead of a minute).
Weights are N(0, 0.02): not zeros, which time faster than real data. No llama3 rope-scaling
tensor: both engines then run plain RoPE (theta 500,000), the same work.

    python3 scripts/cuda_random_gguf.py OUT.gguf [--layers 32]
"""
import argparse
import sys
import time

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=32)
    args = ap.parse_args()
    import gguf

    hidden, ffn, heads, kv_heads, vocab, hd = 4096, 14336, 32, 8, 128256, 128
    t0 = time.time()
    try:
        import torch

        gen = torch.Generator(device="cuda")
        gen.manual_seed(0)

        def rand(*shape):
            return (torch.randn(*shape, generator=gen, device="cuda", dtype=torch.float32) * 0.02).half().cpu().numpy()
    except Exception:  # no torch / no GPU: numpy
        rng = np.random.default_rng(0)

        def rand(*shape):
            return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)

    w = gguf.GGUFWriter(args.out, "llama")
    w.add_name("random-llama-3.1-8b-shape")
    w.add_context_length(131072)
    w.add_embedding_length(hidden)
    w.add_block_count(args.layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_freq_base(500000.0)
    w.add_rope_dimension_count(hd)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    # Synthetic SentencePiece vocab: <unk> <s> </s>, the 256 byte tokens, then unique pieces.
    tokens, scores, types = ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [2, 3, 3]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        scores.append(0.0)
        types.append(6)
    i = 0
    while len(tokens) < vocab:
        tokens.append(f"\u2581t{i}")
        scores.append(-float(i))
        types.append(1)
        i += 1
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)

    ones = np.ones(hidden, dtype=np.float32)
    w.add_tensor("token_embd.weight", rand(vocab, hidden))
    for l in range(args.layers):
        p = f"blk.{l}."
        w.add_tensor(p + "attn_norm.weight", ones)
        w.add_tensor(p + "attn_q.weight", rand(heads * hd, hidden))
        w.add_tensor(p + "attn_k.weight", rand(kv_heads * hd, hidden))
        w.add_tensor(p + "attn_v.weight", rand(kv_heads * hd, hidden))
        w.add_tensor(p + "attn_output.weight", rand(hidden, heads * hd))
        w.add_tensor(p + "ffn_norm.weight", ones)
        w.add_tensor(p + "ffn_gate.weight", rand(ffn, hidden))
        w.add_tensor(p + "ffn_up.weight", rand(ffn, hidden))
        w.add_tensor(p + "ffn_down.weight", rand(hidden, ffn))
    w.add_tensor("output_norm.weight", ones)
    w.add_tensor("output.weight", rand(vocab, hidden))
    t1 = time.time()
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=False)
    w.close()
    print(f"wrote {args.out}: {args.layers} layers, generate {t1 - t0:.1f} s, write {time.time() - t1:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
