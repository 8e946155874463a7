#!/usr/bin/env python3
"""Quantize an HF checkpoint (default models/smollm2-hf) into the FP8 formats Kvasir reads, for
the accuracy tests (tests/quant_golden_test.cpp) and by hand.

    python3 scripts/make_quantized_checkpoints.py                 # -> $KVASIR_QUANT_MODELS or models/quantized
    python3 scripts/make_quantized_checkpoints.py --check-hf      # also load each back with HF transformers
    python3 scripts/make_quantized_checkpoints.py --calibrate     # measure activation ranges again (torch)

Needs numpy and safetensors only (what scripts/test.sh installs); the static activation and KV
scales come from tests/data/quant/smollm2_calibration.json, measured once with torch (--calibrate).

Formats (one directory each, tokenizer and generation config copied):
  ct-fp8-channel-dynamic  compressed-tensors "float-quantized": float8_e4m3fn weights with a
                          per-channel weight_scale [out, 1], activations dynamic per token
                          (llm-compressor's FP8_DYNAMIC preset).
  ct-fp8-tensor-static    compressed-tensors "float-quantized": per-tensor weight_scale [1] and a
                          static per-tensor input_scale [1] calibrated on a fixed text (llm-
                          compressor's FP8 preset), plus a kv_cache_scheme with k_scale / v_scale
                          per attention module.
  fp8-block64             quant_method "fp8" as DeepSeek-V3 ships (weight_scale_inv per block,
                          activation_scheme "dynamic"), in 64x64 blocks: DeepSeek's 128x128 do not
                          tile SmolLM2's 576 columns, and transformers' CPU dequantizer refuses
                          partial blocks (Kvasir reads them: quant_weights_test).

The writer follows the formats exactly as llm-compressor / compressed-tensors and DeepSeek write
them (scale = max|w| / 448 over the group, code = float8_e4m3fn(w / scale), lm_head / embeddings
left as they are); --check-hf proves it by loading each directory with transformers (the
compressed-tensors package decompresses the first two) and comparing the weights it ends with
to codes x scales. The output is a pure function of the input checkpoint (no randomness), so the
committed golden logits (scripts/gen_quant_golden.py) stay valid; a stamp file skips the work
when the directory is already made from the same input.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FP8_MAX = 448.0
FORMATS = ("ct-fp8-channel-dynamic", "ct-fp8-tensor-static", "fp8-block64")
BLOCK = (64, 64)
VERSION = 1  # bump when the output of a format changes
# Calibration text for the static activation and KV scales (not one of the golden prompts).
CALIBRATION = (
    "The history of mathematics deals with the origin of discoveries in mathematics and the mathematical "
    "methods and notation of the past. Before the modern age, written examples of new mathematics came "
    "to light only in a few locales. def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
)


def default_out() -> str:
    return os.environ.get("KVASIR_QUANT_MODELS") or os.path.join(REPO, "models", "quantized")


def is_quantized_linear(name: str, t) -> bool:
    return name.endswith(".weight") and t.ndim == 2 and "embed" not in name and not name.startswith("lm_head")


def e4m3_codes(x):
    """float32 array -> float8_e4m3fn codes (uint8): round to nearest even, saturating at 448 (the
    inputs are clamped to +-448 first, as every quantizer does, so this is torch's cast; checked
    against it in quant_fp8_test through src/quant/fp8.cpp, which computes the same way)."""
    import numpy as np

    x = np.asarray(x, dtype=np.float32)
    sign = np.signbit(x).astype(np.uint8) << 7
    a = np.minimum(np.abs(x), np.float32(FP8_MAX))
    _, e2 = np.frexp(a)
    unbiased = e2.astype(np.int32) - 1
    normal = (a != 0) & (unbiased >= -6)
    sub_steps = np.rint(np.ldexp(a, np.full(a.shape, 3 + 6, dtype=np.int32))).astype(np.int32)
    q = np.rint(np.ldexp(a, (3 - unbiased).astype(np.int32))).astype(np.int32)
    norm_code = ((unbiased + 7) << 3) + (q - 8)
    code = np.where(normal, norm_code, sub_steps)
    code = np.minimum(code, 0x7E).astype(np.uint8)
    return code | sign


def fp8_quantize(w, scale):
    """codes of w / scale (float32), scale broadcast over w."""
    import numpy as np

    return e4m3_codes(np.clip(w / scale, -FP8_MAX, FP8_MAX))


def safe_scale(s):
    import numpy as np

    return np.where(s == 0, np.float32(1.0), s).astype(np.float32)


def per_channel(w):
    import numpy as np

    scale = safe_scale(np.abs(w).max(axis=1, keepdims=True) / np.float32(FP8_MAX))
    return fp8_quantize(w, scale), scale


def per_tensor(w):
    import numpy as np

    scale = safe_scale(np.array([np.abs(w).max() / np.float32(FP8_MAX)], dtype=np.float32))
    return fp8_quantize(w, scale), scale


def per_block(w, block=BLOCK):
    import numpy as np

    out, inn = w.shape
    br, bc = block
    nbr, nbc = -(-out // br), -(-inn // bc)
    scale = np.empty((nbr, nbc), dtype=np.float32)
    q = np.empty((out, inn), dtype=np.uint8)
    for i in range(nbr):
        for j in range(nbc):
            blk = w[i * br : (i + 1) * br, j * bc : (j + 1) * bc]
            s = safe_scale(np.float32(np.abs(blk).max() / np.float32(FP8_MAX)))
            scale[i, j] = s
            q[i * br : (i + 1) * br, j * bc : (j + 1) * bc] = fp8_quantize(blk, s)
    return q, scale


def ct_args(strategy: str, dynamic: bool) -> dict:
    # Every field compressed-tensors 0.x writes for QuantizationArgs.
    return {
        "actorder": None, "block_structure": None, "dynamic": dynamic, "group_size": None, "num_bits": 8,
        "observer": None if dynamic else "minmax", "observer_kwargs": {}, "strategy": strategy,
        "symmetric": True, "type": "float",
    }


def ct_config(weight_strategy: str, act: dict | None, kv: dict | None) -> dict:
    return {
        "config_groups": {"group_0": {
            "input_activations": act, "output_activations": None, "targets": ["Linear"],
            "weights": ct_args(weight_strategy, False), "format": "float-quantized",
        }},
        "format": "float-quantized", "global_compression_ratio": None, "ignore": ["lm_head"],
        "kv_cache_scheme": kv, "quant_method": "compressed-tensors", "quantization_status": "compressed",
        "sparsity_config": {}, "transform_config": {}, "version": "0.12.2",
    }


def calibrate(src: str) -> dict:
    """max|x| of each linear's input and of each attention module's K (after RoPE) and V over the
    calibration text: {"inputs": {module: amax}, "kv": {attention module: [k, v]}}. Needs torch."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(src)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    amax: dict[str, float] = {}
    hooks = []
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and name != "lm_head":
            def hook(m, args, name=name):
                amax[name] = max(amax.get(name, 0.0), float(args[0].abs().max()))
            hooks.append(mod.register_forward_pre_hook(hook))
    ids = tok(CALIBRATION, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
    for h in hooks:
        h.remove()
    kv = {}
    for i in range(model.config.num_hidden_layers):
        layer = out.past_key_values.layers[i]
        kv[f"model.layers.{i}.self_attn"] = [float(layer.keys.abs().max()), float(layer.values.abs().max())]
    return {"inputs": amax, "kv": kv}


def read_safetensors(path: str) -> dict:
    from safetensors.numpy import load_file

    return load_file(path)


def write_safetensors(path: str, tensors: dict) -> None:
    """safetensors with FP8 tensors (numpy has no float8 type: uint8 arrays are the e4m3 codes)."""
    import numpy as np

    names = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.uint8): "F8_E4M3"}
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name in sorted(tensors):
        a = np.asarray(tensors[name])
        b = a.tobytes(order="C")  # (ascontiguousarray would make a 0-d scale 1-d)
        header[name] = {"dtype": names[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as fh:
        fh.write(len(h).to_bytes(8, "little"))
        fh.write(h)
        for b in blobs:
            fh.write(b)


def write_format(fmt: str, src: str, dst: str, calibration: dict) -> None:
    import numpy as np

    tensors = read_safetensors(os.path.join(src, "model.safetensors"))
    with open(os.path.join(src, "config.json")) as fh:
        config = json.load(fh)
    out = {}
    for name, t in sorted(tensors.items()):
        if not is_quantized_linear(name, t):
            out[name] = t
            continue
        if t.dtype != np.float32:
            raise SystemExit(f"{name}: {t.dtype} weights; this writer reads float32 checkpoints")
        module = name[: -len(".weight")]
        if fmt == "ct-fp8-channel-dynamic":
            q, s = per_channel(t)
            out[module + ".weight_scale"] = s
        elif fmt == "ct-fp8-tensor-static":
            q, s = per_tensor(t)
            out[module + ".weight_scale"] = s
            out[module + ".input_scale"] = np.array([calibration["inputs"][module] / FP8_MAX], dtype=np.float32)
        else:
            q, s = per_block(t)
            out[module + ".weight_scale_inv"] = s
        out[name] = q
    if fmt == "ct-fp8-channel-dynamic":
        config["quantization_config"] = ct_config("channel", ct_args("token", True), None)
    elif fmt == "ct-fp8-tensor-static":
        for attn, (k, v) in calibration["kv"].items():
            out[attn + ".k_scale"] = np.array(k / FP8_MAX, dtype=np.float32)
            out[attn + ".v_scale"] = np.array(v / FP8_MAX, dtype=np.float32)
        config["quantization_config"] = ct_config("tensor", ct_args("tensor", False), ct_args("tensor", False))
    else:
        config["quantization_config"] = {
            "activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": list(BLOCK),
        }
    os.makedirs(dst, exist_ok=True)
    write_safetensors(os.path.join(dst, "model.safetensors"), out)
    with open(os.path.join(dst, "config.json"), "w") as fh:
        json.dump(config, fh, indent=2)
        fh.write("\n")
    for f in os.listdir(src):
        if f not in ("model.safetensors", "config.json", "model.safetensors.index.json") and os.path.isfile(os.path.join(src, f)):
            shutil.copy(os.path.join(src, f), os.path.join(dst, f))


def dequantized_reference(dst: str, torch) -> dict:
    """codes x scales, what every reader of the format must compute."""
    from safetensors.torch import load_file

    t = load_file(os.path.join(dst, "model.safetensors"))
    ref = {}
    for name, w in t.items():
        if w.dtype != torch.float8_e4m3fn:
            continue
        module = name[: -len(".weight")]
        q = w.to(torch.float32)
        if module + ".weight_scale_inv" in t:
            s = t[module + ".weight_scale_inv"].to(torch.float32)
            s = s.repeat_interleave(BLOCK[0], 0)[: q.shape[0]].repeat_interleave(BLOCK[1], 1)[:, : q.shape[1]]
        else:
            s = t[module + ".weight_scale"].to(torch.float32)
        ref[name] = q * s
    return ref


def check_with_hf(fmt: str, dst: str, torch) -> None:
    """Load the directory with transformers and compare its linear weights with codes x scales."""
    from transformers import AutoModelForCausalLM

    ref = dequantized_reference(dst, torch)
    model = AutoModelForCausalLM.from_pretrained(dst, dtype=torch.float32, attn_implementation="eager")
    params = dict(model.named_parameters())
    worst = 0.0
    for name, r in ref.items():
        p = params[name]
        if p.dtype == torch.float8_e4m3fn:  # kept compressed: apply the scale as the format says
            scale_name = name[: -len(".weight")] + ".weight_scale"
            s = params.get(scale_name, params.get(scale_name + "_inv"))
            got = p.to(torch.float32)
            got = got * (s.to(torch.float32) if s.dim() <= 1 or s.shape[-1] == 1 else
                         s.to(torch.float32).repeat_interleave(BLOCK[0], 0)[: got.shape[0]].repeat_interleave(BLOCK[1], 1)[:, : got.shape[1]])
        else:
            got = p.detach().to(torch.float32)
        worst = max(worst, float((got - r).abs().max() / r.abs().max().clamp_min(1e-30)))
    if worst > 1e-6:
        raise SystemExit(f"{fmt}: transformers read the weights differently (worst relative difference {worst:.3g})")
    print(f"  {fmt}: transformers loads it ({type(model).__name__}, {len(ref)} FP8 linears equal codes x scales)")


def stamp_of_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def stamp_of(src: str) -> str:
    return f"v{VERSION} {stamp_of_file(os.path.join(src, 'model.safetensors'))}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", default=os.path.join(REPO, "models", "smollm2-hf"))
    ap.add_argument("--out", default=default_out())
    ap.add_argument("--name", default="smollm2")
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--calibration", default=os.path.join(REPO, "tests", "data", "quant", "smollm2_calibration.json"))
    ap.add_argument("--calibrate", action="store_true", help="measure the activation ranges again (needs torch)")
    ap.add_argument("--check-hf", action="store_true",
                    help="load each result with transformers (needs torch, compressed-tensors, accelerate)")
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args()
    if args.calibrate:
        with open(args.calibration, "w") as fh:
            json.dump(calibrate(args.src), fh, indent=0, sort_keys=True)
            fh.write("\n")
    with open(args.calibration) as fh:
        calibration = json.load(fh)
    stamp = stamp_of(args.src) + " " + stamp_of_file(args.calibration)
    for fmt in args.formats.split(","):
        if fmt not in FORMATS:
            raise SystemExit(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")
        dst = os.path.join(args.out, f"{args.name}-{fmt}")
        stamp_file = os.path.join(dst, ".kvasir_stamp")
        if not args.force and os.path.exists(stamp_file) and open(stamp_file).read() == stamp:
            print(f"  {fmt}: {dst} is up to date")
        else:
            write_format(fmt, args.src, dst, calibration)
            with open(stamp_file, "w") as fh:
                fh.write(stamp)
            print(f"  {fmt}: wrote {dst}")
        if args.check_hf:
            import torch

            check_with_hf(fmt, dst, torch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
