#!/usr/bin/env python3
"""Writes a random-weight Llama-3.1-8B-shaped GGUF (F16 weights, F32 norms, a synthetic SPM vocab
of 128,256 tokens) for side-by-side speed runs of kvasir and llama.cpp on the GPU machine
(scripts/cuda_device_run.sh, stage `gguf`). Runs there: needs numpy and the PyPI `gguf` package
(carried as a wheel); uses torch's CUDA generator when present (seconds instead of a minute).
Weights are N(0, 0.02): not zeros, which time faster than real data. No llama3 rope-scaling
tensor: both engines then run plain RoPE (theta 500,000), the same work.

--type q4_k_m writes llama.cpp's Q4_K_M mix instead: Q6_K for output.weight and for attn_v /
ffn_down of the layers llama.cpp's use_more_bits() picks (the first and last eighth, every third
between), Q4_K for every other matrix (token_embd included), F32 norms. Blocks are random bytes
with fp16 scales set so the weights are O(0.02) (random scale bytes would give huge or NaN
weights): Q4_K d = dmin = 1e-4 (6-bit sub-scales up to 63), Q6_K d = 6e-5 with sub-scales in
[-32, 31].

    python3 scripts/cuda_random_gguf.py OUT.gguf [--layers 32] [--type f16|q4_k_m]
"""
import argparse
import sys
import time

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--type", choices=["f16", "q4_k_m"], default="f16")
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
    q4km = args.type == "q4_k_m"
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M if q4km else gguf.LlamaFileType.MOSTLY_F16)
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

    brng = np.random.default_rng(1)
    Q = gguf.GGMLQuantizationType

    def blocks(rows, cols, qtype):
        # Random block bytes, then every block's fp16 scale fields set (see the docstring).
        size = 144 if qtype == Q.Q4_K else 210
        nb = rows * (cols // 256)
        raw = np.frombuffer(brng.bytes(nb * size), dtype=np.uint8).reshape(nb, size).copy()
        if qtype == Q.Q4_K:
            raw[:, 0:4] = np.array([1e-4, 1e-4], dtype=np.float16).view(np.uint8)
        else:
            scales = (raw[:, 192:208].astype(np.int16) & 63) - 32
            raw[:, 192:208] = scales.astype(np.int8).view(np.uint8)
            raw[:, 208:210] = np.array([6e-5], dtype=np.float16).view(np.uint8)
        return raw.reshape(rows, (cols // 256) * size), qtype

    def matrix(name, rows, cols, qtype=None):
        if not q4km:
            w.add_tensor(name, rand(rows, cols))
            return
        raw, qt = blocks(rows, cols, qtype or Q.Q4_K)
        w.add_tensor(name, raw, raw_dtype=qt)

    def more_bits(i, n):  # llama.cpp's use_more_bits (llama-quant.cpp) for attn_v / ffn_down
        return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2

    ones = np.ones(hidden, dtype=np.float32)
    matrix("token_embd.weight", vocab, hidden)
    for l in range(args.layers):
        p = f"blk.{l}."
        big = Q.Q6_K if more_bits(l, args.layers) else Q.Q4_K
        w.add_tensor(p + "attn_norm.weight", ones)
        matrix(p + "attn_q.weight", heads * hd, hidden)
        matrix(p + "attn_k.weight", kv_heads * hd, hidden)
        matrix(p + "attn_v.weight", kv_heads * hd, hidden, big)
        matrix(p + "attn_output.weight", hidden, heads * hd)
        w.add_tensor(p + "ffn_norm.weight", ones)
        matrix(p + "ffn_gate.weight", ffn, hidden)
        matrix(p + "ffn_up.weight", ffn, hidden)
        matrix(p + "ffn_down.weight", hidden, ffn, big)
    w.add_tensor("output_norm.weight", ones)
    matrix("output.weight", vocab, hidden, Q.Q6_K)
    t1 = time.time()
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=False)
    w.close()
    print(f"wrote {args.out}: {args.type}, {args.layers} layers, generate {t1 - t0:.1f} s, write {time.time() - t1:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
