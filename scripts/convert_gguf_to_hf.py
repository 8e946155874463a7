#!/usr/bin/env python3
"""Convert a (quantized) GGUF checkpoint into a float32 Hugging Face model directory.

    python3 scripts/convert_gguf_to_hf.py models/SmolLM2-135M-Instruct.Q4_1.gguf models/smollm2-hf
    python3 scripts/convert_gguf_to_hf.py models/gemma-3-270m-q4_k_m.gguf models/gemma3-hf

Writes config.json, generation_config.json, model.safetensors (dequantized float32 weights under
HF tensor names), tokenizer.json, tokenizer_config.json (with chat_template) and
special_tokens_map.json.

Needs only light packages: numpy, gguf, safetensors, transformers, tokenizers (sentencepiece and
protobuf help the tokenizer). torch is NOT required: weights are dequantized with gguf-py and
written with safetensors.numpy; the config is rebuilt here from GGUF metadata; the tokenizer is
converted by transformers' own GGUF tokenizer converter (which is torch-free).

`--f32-gguf PATH` also writes a GGUF whose tensors are all dequantized to F32 (names, layout and
metadata unchanged), for running an engine at float32 on exactly the golden weights.

`--verify` (needs torch) loads the same GGUF with transformers
(`AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)`) and checks that every tensor and the
config match what this script wrote, bit for bit.

Supported architectures: llama (SmolLM2 etc.) and gemma3 (text-only). Transforms undone here,
exactly as transformers' GGUF loader does:
  * llama: llama.cpp's converter permutes the rows of attn_q / attn_k (interleaved rope -> HF
    half-split rope); we apply the inverse permutation.
  * gemma3: llama.cpp stores every `*norm.weight` as (1 + w); HF's Gemma RMSNorm computes
    x * (1 + w), so we subtract 1.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys

import numpy as np

# Gemma 3 chat format (our own Jinja rendering of the documented turn format): an optional system
# message is folded into the first user turn, "assistant" is spelled "model".
GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] | trim + '\n\n' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}"
    "{%- set first_user_prefix = '' -%}"
    "{%- set loop_messages = messages -%}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{%- endif -%}"
    "{%- if message['role'] == 'assistant' -%}{%- set role = 'model' -%}"
    "{%- else -%}{%- set role = message['role'] -%}{%- endif -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') }}"
    "{{ message['content'] | trim }}"
    "{{ '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)


# --------------------------------------------------------------------------------------------
# GGUF metadata helpers
# --------------------------------------------------------------------------------------------


def field_value(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def sha256_of(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --------------------------------------------------------------------------------------------
# Tensor names
# --------------------------------------------------------------------------------------------

_COMMON_GLOBAL = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}

_LLAMA_BLOCK = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}

_GEMMA3_BLOCK = {
    "attn_norm.weight": "input_layernorm.weight",
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "ffn_norm.weight": "pre_feedforward_layernorm.weight",
    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}

_BLOCK_MAPS = {"llama": _LLAMA_BLOCK, "gemma3": _GEMMA3_BLOCK}
_BLK_RE = re.compile(r"^blk\.(\d+)\.(.+)$")


def hf_tensor_name(arch: str, gguf_name: str) -> str:
    if gguf_name in _COMMON_GLOBAL:
        return _COMMON_GLOBAL[gguf_name]
    m = _BLK_RE.match(gguf_name)
    if m and m.group(2) in _BLOCK_MAPS[arch]:
        return f"model.layers.{m.group(1)}.{_BLOCK_MAPS[arch][m.group(2)]}"
    raise ValueError(f"no HF name for GGUF tensor {gguf_name!r} (arch {arch})")


def unpermute_rope_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of llama.cpp's Q/K row permutation.

    llama.cpp (convert_hf_to_gguf) reorders each head's rows from HF's [first half | second half]
    rope layout to interleaved pairs: reshape(n_head, 2, d/2, in).swapaxes(1, 2). Undo it.
    """
    rows = w.shape[0]
    d = rows // n_head
    return w.reshape(n_head, d // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def convert_weights(reader, arch: str, cfg: dict) -> dict[str, np.ndarray]:
    from gguf import dequantize

    out: dict[str, np.ndarray] = {}
    for t in reader.tensors:
        name = hf_tensor_name(arch, t.name)
        w = dequantize(t.data, t.tensor_type)
        # gguf-py gives numpy-order shape (reverse of GGUF ne[]); 1-D stays 1-D.
        shape = tuple(int(x) for x in reversed([int(s) for s in t.shape]))
        w = np.ascontiguousarray(np.asarray(w, dtype=np.float32).reshape(shape))
        if arch == "llama":
            if t.name.endswith("attn_q.weight") or t.name.endswith("attn_q.bias"):
                w = unpermute_rope_rows(w, cfg["num_attention_heads"])
            elif t.name.endswith("attn_k.weight") or t.name.endswith("attn_k.bias"):
                w = unpermute_rope_rows(w, cfg["num_key_value_heads"])
        elif arch == "gemma3":
            if t.name.endswith("norm.weight"):
                w = w - np.float32(1.0)
        out[name] = np.ascontiguousarray(w, dtype=np.float32)
    if cfg.get("tie_word_embeddings"):
        out.pop("lm_head.weight", None)
    return out


# --------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------


def build_config_dict(reader, arch: str) -> dict:
    a = arch
    tensor_names = {t.name for t in reader.tensors}
    cfg: dict = {}

    def put(key, gguf_key, cast=None):
        v = field_value(reader, gguf_key)
        if v is not None:
            cfg[key] = cast(v) if cast else v

    put("max_position_embeddings", f"{a}.context_length", int)
    put("num_hidden_layers", f"{a}.block_count", int)
    put("intermediate_size", f"{a}.feed_forward_length", int)
    put("hidden_size", f"{a}.embedding_length", int)
    put("num_attention_heads", f"{a}.attention.head_count", int)
    put("num_key_value_heads", f"{a}.attention.head_count_kv", int)
    put("rms_norm_eps", f"{a}.attention.layer_norm_rms_epsilon", float)
    put("bos_token_id", "tokenizer.ggml.bos_token_id", int)
    put("eos_token_id", "tokenizer.ggml.eos_token_id", int)
    put("pad_token_id", "tokenizer.ggml.padding_token_id", int)
    put("unk_token_id", "tokenizer.ggml.unknown_token_id", int)
    vocab = field_value(reader, f"{a}.vocab_size")
    if vocab is None:
        vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    cfg["vocab_size"] = int(vocab)
    cfg["tie_word_embeddings"] = "output.weight" not in tensor_names
    rope_theta = field_value(reader, f"{a}.rope.freq_base")

    if arch == "llama":
        cfg["model_type"] = "llama"
        cfg["architectures"] = ["LlamaForCausalLM"]
        head_dim = field_value(reader, f"{a}.rope.dimension_count")
        if head_dim is None:
            head_dim = cfg["hidden_size"] // cfg["num_attention_heads"]
        cfg["head_dim"] = int(head_dim)
        if rope_theta is not None:
            cfg["rope_theta"] = float(rope_theta)
        cfg["attention_bias"] = "blk.0.attn_q.bias" in tensor_names
        if field_value(reader, f"{a}.rope.scaling.type") is not None:
            raise ValueError("rope scaling in llama GGUF is not handled by this converter")
    elif arch == "gemma3":
        cfg["model_type"] = "gemma3_text"
        cfg["architectures"] = ["Gemma3ForCausalLM"]
        put("head_dim", f"{a}.attention.key_length", int)
        put("sliding_window", f"{a}.attention.sliding_window", int)
        if rope_theta is not None:
            cfg["rope_theta"] = float(rope_theta)
        if field_value(reader, f"{a}.rope.scaling.type") is not None:
            raise ValueError("rope scaling in gemma3 GGUF is not handled by this converter")
        # Everything else (query_pre_attn_scalar=256, local rope base 10000, 5:1 sliding/full
        # layer pattern, gelu_pytorch_tanh, no softcapping) is not in the GGUF; transformers'
        # Gemma3TextConfig defaults are what llama.cpp assumes too.
    else:
        raise ValueError(f"unsupported GGUF architecture {arch!r} (supported: llama, gemma3)")
    return cfg


def make_config(cfg: dict):
    from transformers import AutoConfig

    cfg = dict(cfg)
    model_type = cfg.pop("model_type")
    architectures = cfg.pop("architectures")
    rope_theta = cfg.pop("rope_theta", None)
    config = AutoConfig.for_model(model_type, **cfg)
    if rope_theta is not None:
        rp = getattr(config, "rope_parameters", None)
        if isinstance(rp, dict) and "full_attention" in rp:  # gemma3: per layer type
            rp["full_attention"]["rope_theta"] = rope_theta
        elif isinstance(rp, dict):
            rp["rope_theta"] = rope_theta
        else:  # older transformers
            config.rope_theta = rope_theta
    config.architectures = architectures
    return config


# --------------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------------

# llama.cpp pre-tokenizer names whose regex starts with "\p{N}" (each digit its own piece).
_DIGIT_SPLIT_PRE = {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"}


def gguf_tokenizer_dict(reader) -> tuple[dict, dict]:
    """Same (tokenizer_dict, tokenizer_config) as transformers' get_gguf_tokenizer(), but read with
    gguf-py: transformers' own GGUF reader imports torch."""
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_TOKENIZER_MAPPING

    def meta(key):
        v = field_value(reader, key)
        if isinstance(v, list) and v and isinstance(v[0], (np.integer, np.floating)):
            v = [x.item() for x in v]
        elif isinstance(v, (np.integer, np.floating, np.bool_)):
            v = v.item()
        return v

    grouped = {}
    for group, renames in GGUF_TOKENIZER_MAPPING.items():
        grouped[group] = {}
        for key, name in renames.items():
            v = meta(f"tokenizer.{key}")
            if v is not None:
                grouped[group][name] = v
    tokenizer, tokenizer_config = grouped["tokenizer"], grouped["tokenizer_config"]
    if tokenizer.get("tokenizer_type") == "llama":
        tokenizer_config.setdefault("add_bos_token", True)
    for name, key in {"bos_token": "bos_token_id", "eos_token": "eos_token_id",
                      "unk_token": "unknown_token_id", "pad_token": "padding_token_id"}.items():
        token_id = meta(f"tokenizer.ggml.{key}")
        tokenizer_config[name] = tokenizer["tokens"][token_id] if token_id is not None else None
    return tokenizer, tokenizer_config


def build_tokenizer(reader, arch: str):
    """Torch-free equivalent of AutoTokenizer.from_pretrained(dir, gguf_file=...)."""
    from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer

    tokenizer_dict, tokenizer_config = gguf_tokenizer_dict(reader)
    backend, extra = convert_gguf_tokenizer(arch, tokenizer_dict)
    tokenizer_config.update(extra)
    if arch == "gemma3":
        from transformers import GemmaTokenizer as cls
    else:
        from transformers import TokenizersBackend as cls
    return cls(tokenizer_object=backend, **tokenizer_config)


def convert_tokenizer(gguf_path: str, arch: str, reader, out_dir: str):
    tok = build_tokenizer(reader, arch)
    pre = field_value(reader, "tokenizer.ggml.pre")
    if pre in _DIGIT_SPLIT_PRE and field_value(reader, "tokenizer.ggml.model") == "gpt2":
        # transformers' GGUF converter knows no "smollm" pre-tokenizer and falls back to plain
        # GPT-2 ByteLevel; llama.cpp (and the original SmolLM2 tokenizer.json) first split every
        # digit on its own. Restore that so "2024" -> 2 0 2 4.
        from tokenizers import pre_tokenizers

        bt = tok.backend_tokenizer
        bt.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), bt.pre_tokenizer]
        )
    tmpl = field_value(reader, "tokenizer.chat_template")
    if tmpl:
        tok.chat_template = tmpl
    elif arch == "gemma3":
        tok.chat_template = GEMMA3_CHAT_TEMPLATE
    tok.save_pretrained(out_dir)
    tc_junk = ("is_local", "local_files_only")
    # Older/newer transformers differ in whether special_tokens_map.json is written; always
    # provide it (consumers outside Python read it).
    stm_path = os.path.join(out_dir, "special_tokens_map.json")
    if not os.path.exists(stm_path):
        stm = {}
        for k in ("bos_token", "eos_token", "unk_token", "pad_token"):
            v = getattr(tok, k, None)
            if v is not None:
                stm[k] = str(v)
        with open(stm_path, "w", encoding="utf-8") as fh:
            json.dump(stm, fh, indent=2, ensure_ascii=False)
            fh.write("\n")
    # Make sure chat_template lives in tokenizer_config.json (transformers >= 4.47 may put it in
    # chat_template.jinja instead).
    tc_path = os.path.join(out_dir, "tokenizer_config.json")
    with open(tc_path, encoding="utf-8") as fh:
        tc = json.load(fh)
    changed = any(k in tc for k in tc_junk)
    for k in tc_junk:
        tc.pop(k, None)
    if tok.chat_template and "chat_template" not in tc:
        tc["chat_template"] = tok.chat_template
        changed = True
    if changed:
        with open(tc_path, "w", encoding="utf-8") as fh:
            json.dump(tc, fh, indent=2, ensure_ascii=False)
            fh.write("\n")
    if "chat_template" in tc:
        jinja = os.path.join(out_dir, "chat_template.jinja")
        if os.path.exists(jinja):
            os.remove(jinja)
    return tok


# --------------------------------------------------------------------------------------------
# Float32 GGUF (same names/layout/metadata as the source, every tensor dequantized to F32)
# --------------------------------------------------------------------------------------------


def write_f32_gguf(reader, dst: str) -> None:
    """Write a copy of the GGUF with all tensors dequantized to F32 (llama.cpp layout kept: Q/K
    rows still permuted, Gemma norms still 1+w). Running it in llama.cpp (or any GGUF engine)
    gives float32 logits of the quantized model, directly comparable with the golden logits."""
    from gguf import GGUFValueType, GGUFWriter, LlamaFileType, dequantize

    arch = field_value(reader, "general.architecture")
    w = GGUFWriter(dst, arch)
    for k, f in reader.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        if k == "general.file_type":
            w.add_file_type(LlamaFileType.ALL_F32)
            continue
        t = f.types[0]
        if t == GGUFValueType.ARRAY:
            w.add_key_value(k, f.contents(), t, sub_type=f.types[-1])
        else:
            w.add_key_value(k, f.contents(), t)
    for t in reader.tensors:
        shape = tuple(int(x) for x in reversed([int(s) for s in t.shape]))
        a = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)
        w.add_tensor(t.name, np.ascontiguousarray(a))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# --------------------------------------------------------------------------------------------
# Verification against transformers' own GGUF loader (needs torch)
# --------------------------------------------------------------------------------------------


def verify(gguf_path: str, out_dir: str) -> bool:
    import torch
    from safetensors.numpy import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    d, f = os.path.split(os.path.abspath(gguf_path))
    ref = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    ref_sd = {k: v.detach().to(torch.float32).numpy() for k, v in ref.state_dict().items()}
    ours = load_file(os.path.join(out_dir, "model.safetensors"))
    ok = True
    tied = ref.config.tie_word_embeddings
    for k, v in ref_sd.items():
        if k == "lm_head.weight" and tied:
            continue
        if k not in ours:
            print(f"[verify] MISSING {k}")
            ok = False
            continue
        if ours[k].shape != v.shape or not np.array_equal(ours[k], v):
            diff = np.abs(ours[k].astype(np.float64) - v).max() if ours[k].shape == v.shape else "shape"
            print(f"[verify] MISMATCH {k}: ours {ours[k].shape} ref {v.shape} maxdiff {diff}")
            ok = False
    extra = set(ours) - set(ref_sd)
    if extra:
        print(f"[verify] EXTRA tensors: {sorted(extra)}")
        ok = False
    ref_cfg = AutoConfig.from_pretrained(d, gguf_file=f).to_dict()
    our_cfg = AutoConfig.from_pretrained(out_dir).to_dict()
    ignore = {"_name_or_path", "_model_name_or_path", "architectures", "transformers_version", "dtype",
              "torch_dtype", "_commit_hash", "_attn_implementation_autoset"}
    for k in sorted(set(ref_cfg) | set(our_cfg)):
        if k in ignore:
            continue
        if ref_cfg.get(k) != our_cfg.get(k):
            print(f"[verify] CONFIG {k}: ours {our_cfg.get(k)!r} ref {ref_cfg.get(k)!r}")
            ok = False
    print(f"[verify] {'OK' if ok else 'FAILED'}: {len(ref_sd)} tensors compared")
    return ok


# --------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gguf")
    ap.add_argument("out_dir")
    ap.add_argument("--verify", action="store_true", help="compare with transformers' GGUF loader (needs torch)")
    ap.add_argument("--skip-weights", action="store_true", help="only write config + tokenizer files")
    ap.add_argument("--f32-gguf", metavar="PATH",
                    help="also write a GGUF copy with every tensor dequantized to F32 (llama.cpp layout)")
    args = ap.parse_args()

    from gguf import GGUFReader

    reader = GGUFReader(args.gguf)
    arch = field_value(reader, "general.architecture")
    os.makedirs(args.out_dir, exist_ok=True)

    cfg_dict = build_config_dict(reader, arch)
    config = make_config(cfg_dict)
    config.save_pretrained(args.out_dir)

    from transformers import GenerationConfig

    gen = GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id
    )
    gen.save_pretrained(args.out_dir)
    print(f"[convert] config ({arch}) written", flush=True)

    convert_tokenizer(args.gguf, arch, reader, args.out_dir)
    print("[convert] tokenizer written", flush=True)

    if not args.skip_weights:
        from safetensors.numpy import save_file

        tensors = convert_weights(reader, arch, cfg_dict)
        save_file(tensors, os.path.join(args.out_dir, "model.safetensors"), metadata={"format": "pt"})
        n = sum(v.size for v in tensors.values())
        print(f"[convert] {len(tensors)} tensors, {n / 1e6:.1f}M params written", flush=True)

    with open(os.path.join(args.out_dir, "gguf_source.json"), "w") as fh:
        json.dump({"gguf": os.path.basename(args.gguf), "sha256": sha256_of(args.gguf), "architecture": arch},
                  fh, indent=2)
        fh.write("\n")

    if args.f32_gguf:
        write_f32_gguf(reader, args.f32_gguf)
        print(f"[convert] F32 GGUF written: {args.f32_gguf}", flush=True)

    if args.verify:
        return 0 if verify(args.gguf, args.out_dir) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
