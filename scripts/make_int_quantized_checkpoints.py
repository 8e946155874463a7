#!/usr/bin/env python3
"""Integer weight-only test checkpoints of models/smollm2-hf: GPTQ, AWQ (GEMM) and compressed-tensors
pack-quantized (W4A16 / W8A16), written by a writer of our own that follows each format exactly
(round-to-nearest quantization: the point is the format, not the calibration), then read back by a
reference unpacker that follows HF / optimum / AutoAWQ / compressed-tensors semantics and compared with
the original weights. Where the `compressed-tensors` package imports, its own pack-quantized
decompressor is run on every compressed-tensors layer too; where `gptqmodel` is installed (even
without its dependencies: `pip install --no-deps gptqmodel`), its AWQ / ExLlama packers re-pack every
GPTQ and AWQ layer into the same words and its AWQ dequantize_gemm gives the same weights.

    python3 scripts/make_int_quantized_checkpoints.py            # write (and verify) what is missing
    python3 scripts/make_int_quantized_checkpoints.py --verify   # verify the cached ones too
    python3 scripts/make_int_quantized_checkpoints.py --golden   # + tests/data/golden/smollm2_<variant>

Outputs go to models/quantized-int/<variant>/ (never committed) with a stamp of this script and the
source weights, so a re-run rewrites only what changed. Needs numpy only; --golden also needs torch
and transformers (it runs HF transformers on the dequantized weights through gen_golden_logits.py).

Formats, for the variant names below (K = in_features, N = out_features, pack = 32 / bits):
  gptq  qweight int32 [K/pack, N]: input column k in bits (k % pack) * bits of row k // pack;
        qzeros int32 [G, N/pack], same packing along N, v1 ("checkpoint_format": "gptq") storing
        zero - 1; scales fp16 [G, N]; g_idx int32 [K] (desc_act: groups in descending column-norm
        order). w[n, k] = (q - zero[g_idx[k], n]) * scale[g_idx[k], n].
  awq   qweight int32 [K, N/8]: word j of row k holds column 8j + order[i] in nibble i,
        order = 0 2 4 6 1 3 5 7; qzeros int32 [G, N/8] the same, no offset; scales fp16 [G, N].
  ct    weight_packed int32 [N, ceil(K/pack)]: (q + 2^(bits-1)) packed along K, low bits first;
        weight_scale bf16 [N, G]; weight_shape int64 [2]; weight_zero_point (asymmetric) int32
        [ceil(N/pack), G], (zp + 2^(bits-1)) packed along N. w = (q - zp) * scale.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import struct
import sys
import tempfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(REPO, "models/smollm2-hf")
OUT = os.path.join(REPO, "models/quantized-int")
# Bump when the writer's output changes: the cached checkpoints are rewritten when it differs.
WRITER_VERSION = 1
LINEAR_SUFFIXES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]          # AutoAWQ's packer: nibble i holds column order[i]
AWQ_REVERSE_ORDER = [0, 4, 1, 5, 2, 6, 3, 7]  # its unpacker: column c is in nibble reverse[c]

# name -> format and scheme. group None = one group per row (GPTQ group_size -1, ct "channel").
VARIANTS = {
    # SmolLM2's 576 input columns leave GPTQ's last group of 128 ragged (64 columns), as AutoGPTQ allows;
    # AWQ and compressed-tensors require whole groups, so theirs are 64 or 32.
    "gptq_w4_g128": dict(fmt="gptq", bits=4, group=128, desc_act=False, sym=True),
    "gptq_w4_g32_act": dict(fmt="gptq", bits=4, group=32, desc_act=True, sym=False),
    "gptq_w4_g64_act": dict(fmt="gptq", bits=4, group=64, desc_act=True, sym=True),
    "gptq_w8_g64": dict(fmt="gptq", bits=8, group=64, desc_act=False, sym=False),
    "gptq_w8_g128_act": dict(fmt="gptq", bits=8, group=128, desc_act=True, sym=True),
    "gptq_w4_channel": dict(fmt="gptq", bits=4, group=None, desc_act=False, sym=False),
    "awq_w4_g64": dict(fmt="awq", bits=4, group=64),
    "awq_w4_g32": dict(fmt="awq", bits=4, group=32),
    "ct_w4a16_g64": dict(fmt="ct", bits=4, group=64, sym=True),
    "ct_w4a16_g32_asym": dict(fmt="ct", bits=4, group=32, sym=False),
    "ct_w8a16_channel_asym": dict(fmt="ct", bits=8, group=None, sym=False),
}

# ---------------------------------------------------------------- safetensors (numpy only)

ST_DTYPES = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64, "BF16": np.uint16}


def read_safetensors(path: str) -> dict[str, tuple[str, np.ndarray]]:
    with open(path, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        header = json.loads(fh.read(n))
        data = fh.read()
    out = {}
    for name, d in header.items():
        if name == "__metadata__":
            continue
        a, b = d["data_offsets"]
        arr = np.frombuffer(data[a:b], dtype=ST_DTYPES[d["dtype"]]).reshape(d["shape"])
        out[name] = (d["dtype"], arr)
    return out


def write_safetensors(path: str, tensors: dict[str, tuple[str, np.ndarray]]) -> None:
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        dtype, arr = tensors[name]
        raw = np.ascontiguousarray(arr).astype(np.dtype(ST_DTYPES[dtype]).newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)))
        fh.write(text)
        for raw in blobs:
            fh.write(raw)


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, round to nearest even (no NaNs here)."""
    u = x.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16_bits(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


# ---------------------------------------------------------------- bit packing

def pack_along_rows(v: np.ndarray, bits: int) -> np.ndarray:
    """[R, C] unsigned values -> int32 [R / pack, C]: row r in bits (r % pack) * bits of row r // pack."""
    pack = 32 // bits
    r, c = v.shape
    assert r % pack == 0
    v = v.astype(np.uint32).reshape(r // pack, pack, c)
    out = np.zeros((r // pack, c), dtype=np.uint32)
    for j in range(pack):
        out |= v[:, j, :] << np.uint32(bits * j)
    return out.view(np.int32)


def pack_along_cols(v: np.ndarray, bits: int) -> np.ndarray:
    """[R, C] unsigned values -> int32 [R, ceil(C / pack)], padding the last word with zeros."""
    pack = 32 // bits
    r, c = v.shape
    words = -(-c // pack)
    padded = np.zeros((r, words * pack), dtype=np.uint32)
    padded[:, :c] = v
    return pack_along_rows(padded.T, bits).T.copy()


def unpack_words(words: np.ndarray, bits: int, axis: int) -> np.ndarray:
    """int32 words -> unsigned values, `pack` per word, low bits first, expanded along `axis`."""
    pack = 32 // bits
    shifts = np.arange(0, 32, bits, dtype=np.uint32)
    u = words.view(np.uint32)
    if axis == 0:
        vals = (u[:, None, :] >> shifts[None, :, None]) & np.uint32((1 << bits) - 1)
        return vals.reshape(u.shape[0] * pack, u.shape[1]).astype(np.int32)
    vals = (u[:, :, None] >> shifts[None, None, :]) & np.uint32((1 << bits) - 1)
    return vals.reshape(u.shape[0], u.shape[1] * pack).astype(np.int32)


# ---------------------------------------------------------------- writers

def groups_of(k: int, group: int | None, order: np.ndarray | None) -> np.ndarray:
    """g_idx: the group of every input column (act-order: groups follow `order`)."""
    size = k if group is None else group
    if order is None:
        return (np.arange(k) // size).astype(np.int32)
    g_idx = np.empty(k, dtype=np.int32)
    g_idx[order] = np.arange(k) // size
    return g_idx


def minmax_per_group(w: np.ndarray, g_idx: np.ndarray, num_groups: int):
    """Per (row, group) min and max of w [N, K] -> two [N, G] arrays."""
    lo = np.zeros((w.shape[0], num_groups), dtype=np.float32)
    hi = np.zeros_like(lo)
    for g in range(num_groups):
        cols = w[:, g_idx == g]
        lo[:, g] = cols.min(axis=1)
        hi[:, g] = cols.max(axis=1)
    return lo, hi


def quantize_gptq(w: np.ndarray, bits: int, group: int | None, desc_act: bool, sym: bool):
    """GPTQ's Quantizer rule (range widened to include 0), round to nearest; scales rounded to fp16
    before the integers are chosen, as a packed layer stores them."""
    n, k = w.shape
    maxq = (1 << bits) - 1
    order = np.argsort(-np.linalg.norm(w, axis=0), kind="stable") if desc_act else None
    g_idx = groups_of(k, group, order)
    num_groups = int(g_idx.max()) + 1
    lo, hi = minmax_per_group(w, g_idx, num_groups)
    lo, hi = np.minimum(lo, 0), np.maximum(hi, 0)
    if sym:
        hi = np.maximum(-lo, hi)
        lo = np.where(lo < 0, -hi, lo)
    span = np.where(hi - lo == 0, 1.0, hi - lo)
    scale = (span / maxq).astype(np.float16)
    scale = np.where(scale == 0, np.float16(2.0**-24), scale)
    if sym:
        zero = np.full((n, num_groups), (maxq + 1) // 2, dtype=np.int32)
    else:
        # v1 stores zero - 1: a zero of 0 would wrap (the historical GPTQ-for-LLaMa bug), so >= 1.
        zero = np.clip(np.round(-lo / scale.astype(np.float32)), 1, maxq).astype(np.int32)
    s_col = scale.astype(np.float32)[:, g_idx]
    z_col = zero[:, g_idx]
    q = np.clip(np.round(w / s_col) + z_col, 0, maxq).astype(np.int32)
    deq = (q - z_col).astype(np.float32) * s_col
    tensors = {
        "qweight": ("I32", pack_along_rows(q.T, bits)),
        "qzeros": ("I32", pack_along_cols((zero.T - 1).astype(np.uint32), bits)),
        "scales": ("F16", scale.T.copy()),
        "g_idx": ("I32", g_idx),
    }
    return tensors, deq


def quantize_awq(w: np.ndarray, bits: int, group: int | None):
    """AutoAWQ's pseudo_quantize_tensor rule (zero point, scales clamped at 1e-5), fp16 scales."""
    n, k = w.shape
    assert group is None or k % group == 0, "AutoAWQ quantizes whole groups only"
    maxq = (1 << bits) - 1
    g_idx = groups_of(k, group, None)
    num_groups = int(g_idx.max()) + 1
    lo, hi = minmax_per_group(w, g_idx, num_groups)
    scale = (np.maximum(hi - lo, 1e-5) / maxq).astype(np.float16)
    zero = np.clip(-np.round(lo / scale.astype(np.float32)), 0, maxq).astype(np.int32)
    s_col = scale.astype(np.float32)[:, g_idx]
    z_col = zero[:, g_idx]
    q = np.clip(np.round(w / s_col) + z_col, 0, maxq).astype(np.int32)
    deq = (q - z_col).astype(np.float32) * s_col

    def awq_pack(v: np.ndarray) -> np.ndarray:  # [R, N] -> int32 [R, N / 8]
        r, c = v.shape
        v = v.astype(np.uint32).reshape(r, c // 8, 8)
        out = np.zeros((r, c // 8), dtype=np.uint32)
        for i in range(8):
            out |= v[:, :, AWQ_ORDER[i]] << np.uint32(4 * i)
        return out.view(np.int32)

    tensors = {
        "qweight": ("I32", awq_pack(q.T)),
        "qzeros": ("I32", awq_pack(zero.T)),
        "scales": ("F16", scale.T.copy()),
    }
    return tensors, deq


def quantize_ct(w: np.ndarray, bits: int, group: int | None, sym: bool):
    """compressed-tensors' minmax observer and quantize(): signed range [-2^(b-1), 2^(b-1) - 1],
    symmetric scale = absmax / (range / 2), asymmetric zp = qmin - round(min / scale); bf16 scales."""
    n, k = w.shape
    assert group is None or k % group == 0, "compressed-tensors quantizes whole groups only"
    qmin, qmax = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    g_idx = groups_of(k, group, None)
    num_groups = int(g_idx.max()) + 1
    lo, hi = minmax_per_group(w, g_idx, num_groups)
    lo, hi = np.minimum(lo, 0), np.maximum(hi, 0)
    if sym:
        scale32 = np.maximum(-lo, hi) / ((qmax - qmin) / 2)
    else:
        scale32 = (hi - lo) / (qmax - qmin)
    scale32 = np.where(scale32 == 0, np.float32(1e-8), scale32).astype(np.float32)
    scale_bits = to_bf16_bits(scale32)
    scale = from_bf16_bits(scale_bits)
    zp = np.zeros((n, num_groups), dtype=np.int32) if sym else np.clip(qmin - np.round(lo / scale), qmin, qmax).astype(np.int32)
    s_col, z_col = scale[:, g_idx], zp[:, g_idx]
    q = np.clip(np.round(w / s_col + z_col), qmin, qmax).astype(np.int32)
    deq = (q - z_col).astype(np.float32) * s_col
    off = 1 << (bits - 1)
    tensors = {
        "weight_packed": ("I32", pack_along_cols((q + off).astype(np.uint32), bits)),
        "weight_scale": ("BF16", scale_bits),
        "weight_shape": ("I64", np.array([n, k], dtype=np.int64)),
    }
    if not sym:
        tensors["weight_zero_point"] = ("I32", pack_along_cols((zp + off).astype(np.uint32).T, bits).T.copy())
    return tensors, deq


def quantization_config(v: dict) -> dict:
    if v["fmt"] == "gptq":
        return {"quant_method": "gptq", "bits": v["bits"], "group_size": v["group"] or -1, "desc_act": v["desc_act"],
                "sym": v["sym"], "checkpoint_format": "gptq", "damp_percent": 0.01, "static_groups": False,
                "true_sequential": True, "lm_head": False}
    if v["fmt"] == "awq":
        return {"quant_method": "awq", "bits": v["bits"], "group_size": v["group"], "zero_point": True,
                "version": "gemm", "modules_to_not_convert": None}
    weights = {"num_bits": v["bits"], "type": "int", "symmetric": v["sym"],
               "strategy": "channel" if v["group"] is None else "group", "group_size": v["group"],
               "dynamic": False, "actorder": None, "observer": "minmax", "block_structure": None}
    return {"quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "input_activations": None,
                                          "output_activations": None, "format": "pack-quantized"}},
            "ignore": ["lm_head"], "kv_cache_scheme": None, "sparsity_config": {}}


def is_linear(name: str) -> bool:
    return name.endswith(".weight") and name[: -len(".weight")].endswith(LINEAR_SUFFIXES)


def quantize_layer(v: dict, w: np.ndarray):
    if v["fmt"] == "gptq":
        return quantize_gptq(w, v["bits"], v["group"], v["desc_act"], v["sym"])
    if v["fmt"] == "awq":
        return quantize_awq(w, v["bits"], v["group"])
    return quantize_ct(w, v["bits"], v["group"], v["sym"])


# ---------------------------------------------------------------- reference unpackers

def dequantize_gptq(t: dict, bits: int, checkpoint_format: str) -> np.ndarray:
    """AutoGPTQ / optimum's dequantization: shifts and masks, zeros + 1 for v1, scales[g_idx]."""
    q = unpack_words(t["qweight"][1], bits, axis=0)            # [K, N]
    zeros = unpack_words(t["qzeros"][1], bits, axis=1)         # [G, N]
    if checkpoint_format == "gptq":
        zeros = zeros + 1
    scales = t["scales"][1].astype(np.float32)                 # [G, N]
    g = t["g_idx"][1]
    return ((q - zeros[g]).astype(np.float32) * scales[g]).T


def dequantize_awq(t: dict, group: int) -> np.ndarray:
    """AutoAWQ / transformers' unpack_awq + reverse_awq_order."""
    def unpack(words):
        vals = unpack_words(words, 4, axis=1)                  # nibble order
        r, c = vals.shape
        return vals.reshape(r, c // 8, 8)[:, :, AWQ_REVERSE_ORDER].reshape(r, c)
    q, zeros = unpack(t["qweight"][1]), unpack(t["qzeros"][1])  # [K, N], [G, N]
    scales = t["scales"][1].astype(np.float32)
    g = np.arange(q.shape[0]) // group
    return ((q - zeros[g]).astype(np.float32) * scales[g]).T


def dequantize_ct(t: dict, bits: int, group: int | None) -> np.ndarray:
    """compressed-tensors' unpack_from_int32 (minus the 2^(bits-1) offset) and dequantize()."""
    n, k = (int(x) for x in t["weight_shape"][1])
    off = 1 << (bits - 1)
    q = unpack_words(t["weight_packed"][1], bits, axis=1)[:, :k] - off
    scale = from_bf16_bits(t["weight_scale"][1])               # [N, G]
    if "weight_zero_point" in t:
        zp = unpack_words(t["weight_zero_point"][1], bits, axis=0)[:n] - off
    else:
        zp = np.zeros_like(scale, dtype=np.int32)
    g = np.arange(k) // (group or k)
    return (q - zp[:, g]).astype(np.float32) * scale[:, g]


def compressed_tensors_decompress(t: dict, v: dict) -> np.ndarray | None:
    """The package's own decompressor on one layer, when it imports (bf16 arithmetic, as it runs)."""
    try:
        import torch
        from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
        from compressed_tensors.quantization import QuantizationScheme
    except ImportError:
        return None
    scheme = QuantizationScheme(targets=["Linear"], weights=quantization_config(v)["config_groups"]["group_0"]["weights"])
    sd = {"weight_packed": torch.from_numpy(t["weight_packed"][1].copy()),
          "weight_scale": torch.from_numpy(t["weight_scale"][1].view(np.int16).copy()).view(torch.bfloat16),
          "weight_shape": torch.from_numpy(t["weight_shape"][1].copy())}
    if "weight_zero_point" in t:
        sd["weight_zero_point"] = torch.from_numpy(t["weight_zero_point"][1].copy())
    out = PackedQuantizationCompressor.decompress(sd, scheme)
    return out["weight"].to(torch.float32).numpy()


def gptqmodel_packing_utils():
    """GPTQModel's AWQ / ExLlama packing module, loaded from its file so the package's heavy
    __init__ (CUDA kernels, optional deps) is not needed; None when it is not installed."""
    try:
        import importlib.util

        spec = importlib.util.find_spec("gptqmodel")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "quantization/awq/utils/packing_utils.py")
    if not os.path.exists(path):
        return None
    mod_spec = importlib.util.spec_from_file_location("gptqmodel_packing_utils", path)
    mod = importlib.util.module_from_spec(mod_spec)
    try:
        mod_spec.loader.exec_module(mod)
    except ImportError:
        return None
    return mod


def gptqmodel_check(v: dict, t: dict, ours: np.ndarray, pu) -> None:
    """GPTQ: GPTQModel's ExLlama packer re-packs our unpacked codes into the same words. AWQ: its
    packer likewise, and its dequantize_gemm (fp16 arithmetic) gives our weights."""
    import torch

    if v["fmt"] == "gptq":
        q = unpack_words(t["qweight"][1], v["bits"], axis=0)
        z = unpack_words(t["qzeros"][1], v["bits"], axis=1)
        qw, qz = pu.pack_exllama(torch.from_numpy(q), torch.from_numpy(z), v["bits"])
        if not (np.array_equal(qw.numpy(), t["qweight"][1]) and np.array_equal(qz.numpy(), t["qzeros"][1])):
            raise SystemExit("GPTQModel's ExLlama packing disagrees with the written qweight / qzeros")
        return
    qweight = torch.from_numpy(t["qweight"][1].copy())
    qzeros = torch.from_numpy(t["qzeros"][1].copy())
    scales = torch.from_numpy(t["scales"][1].copy())
    iw, iz = pu.reverse_awq_order(*pu.unpack_awq(qweight, qzeros, 4, scales.shape[-1]), 4)
    qw, qz = pu.pack_awq(iw, iz, 4)
    if not (torch.equal(qw, qweight) and torch.equal(qz, qzeros)):
        raise SystemExit("GPTQModel's AWQ packing disagrees with the written qweight / qzeros")
    theirs = pu.dequantize_gemm(qweight, qzeros, scales, 4, v["group"]).to(torch.float32).numpy().T
    if not np.allclose(theirs, ours, rtol=2.0**-10, atol=2.0**-24):
        raise SystemExit("GPTQModel's AWQ dequantize_gemm disagrees")


def dequantize_layer(v: dict, t: dict) -> np.ndarray:
    if v["fmt"] == "gptq":
        return dequantize_gptq(t, v["bits"], "gptq")
    if v["fmt"] == "awq":
        return dequantize_awq(t, v["group"])
    return dequantize_ct(t, v["bits"], v["group"])


# ---------------------------------------------------------------- variants

def sha256_of(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def stamp_for(name: str, source_sha: str) -> str:
    return json.dumps({"variant": name, "scheme": VARIANTS[name], "writer": WRITER_VERSION, "source": source_sha},
                      sort_keys=True)


def copy_side_files(src: str, dst: str, qc: dict | None) -> None:
    for f in os.listdir(src):
        if f.endswith(".json") and f not in ("config.json", "model.safetensors.index.json"):
            shutil.copy(os.path.join(src, f), os.path.join(dst, f))
    with open(os.path.join(src, "config.json"), encoding="utf-8") as fh:
        config = json.load(fh)
    config.pop("quantization_config", None)
    if qc is not None:
        config["quantization_config"] = qc
    with open(os.path.join(dst, "config.json"), "w", encoding="utf-8") as fh:
        json.dump(config, fh, indent=2)
        fh.write("\n")


def write_variant(name: str, source: dict, out_dir: str, stamp: str) -> None:
    v = VARIANTS[name]
    tensors, worst = {}, 0.0
    for tname, (dtype, arr) in source.items():
        if not is_linear(tname):
            tensors[tname] = (dtype, arr)
            continue
        layer = tname[: -len(".weight")]
        packed, deq = quantize_layer(v, arr.astype(np.float32))
        for part, val in packed.items():
            tensors[f"{layer}.{part}"] = val
        # The reference unpacker must give back exactly what the writer meant.
        back = dequantize_layer(v, packed)
        if not np.array_equal(back, deq):
            raise SystemExit(f"{name}/{layer}: the reference unpacker disagrees with the writer")
        err = float(np.linalg.norm(back - arr) / np.linalg.norm(arr))
        worst = max(worst, err)
    tmp = out_dir + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    write_safetensors(os.path.join(tmp, "model.safetensors"), tensors)
    copy_side_files(SOURCE, tmp, quantization_config(v))
    with open(os.path.join(tmp, ".stamp"), "w", encoding="utf-8") as fh:
        fh.write(stamp)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.rename(tmp, out_dir)
    print(f"  {name}: written, worst per-layer relative error vs the original weights {worst:.4f}", flush=True)


def verify_variant(name: str, source: dict, out_dir: str) -> dict[str, np.ndarray]:
    """Loads the written file back with the reference unpacker (and compressed-tensors' decompressor);
    returns the dequantized linear weights."""
    v = VARIANTS[name]
    with open(os.path.join(out_dir, "config.json"), encoding="utf-8") as fh:
        qc = json.load(fh)["quantization_config"]
    assert qc == json.loads(json.dumps(quantization_config(v))), f"{name}: config.json quantization_config differs"
    written = read_safetensors(os.path.join(out_dir, "model.safetensors"))
    # Round-to-nearest of weights that were already 4-bit (the GGUF source): up to ~15% per layer at
    # 4 bits, ~1% at 8 bits with one scale per row.
    limit = 0.2 if v["bits"] == 4 else 0.02
    deq, worst, ct_checked, gm_checked = {}, 0.0, 0, 0
    pu = gptqmodel_packing_utils() if v["fmt"] in ("gptq", "awq") else None
    for tname, (_, arr) in source.items():
        if not is_linear(tname):
            assert np.array_equal(written[tname][1], arr), f"{name}: {tname} changed"
            continue
        layer = tname[: -len(".weight")]
        parts = {k[len(layer) + 1:]: val for k, val in written.items() if k.startswith(layer + ".") and k != tname}
        assert tname not in written, f"{name}: {tname} left dense"
        w = dequantize_layer(v, parts)
        assert w.shape == arr.shape, f"{name}/{layer}: shape {w.shape} vs {arr.shape}"
        err = float(np.linalg.norm(w - arr) / np.linalg.norm(arr))
        worst = max(worst, err)
        if err > limit:
            raise SystemExit(f"{name}/{layer}: relative error {err:.4f} over {limit}")
        if v["fmt"] == "ct":
            theirs = compressed_tensors_decompress(parts, v)
            if theirs is not None:
                # Theirs multiplies in bf16; ours is exact in f32: within one bf16 rounding.
                if not np.allclose(theirs, w, rtol=2.0**-8, atol=0):
                    raise SystemExit(f"{name}/{layer}: compressed-tensors' decompressor disagrees")
                ct_checked += 1
        if pu is not None:
            gptqmodel_check(v, parts, w, pu)
            gm_checked += 1
        deq[tname] = w
    extra = f", {ct_checked} layers equal compressed-tensors' own decompressor" if ct_checked else ""
    extra += f", {gm_checked} layers equal GPTQModel's packing{' and dequantize_gemm' if v['fmt'] == 'awq' else ''}" if gm_checked else ""
    print(f"  {name}: verified, worst per-layer relative error {worst:.4f} (limit {limit}){extra}", flush=True)
    return deq


def write_dequantized_dir(source: dict, deq: dict[str, np.ndarray], out_dir: str) -> None:
    """The dequantized weights as a plain float32 HF directory, for transformers."""
    os.makedirs(out_dir, exist_ok=True)
    tensors = {k: (d, deq.get(k, a)) for k, (d, a) in source.items()}
    write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors)
    copy_side_files(SOURCE, out_dir, None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma list of: " + ",".join(VARIANTS))
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--golden", action="store_true", help="also write tests/data/golden/smollm2_<variant> (torch)")
    ap.add_argument("--golden-variants", default=None, help="comma list (default: --variants)")
    ap.add_argument("--full-logits-prompts", type=int, default=2)
    ap.add_argument("--verify", action="store_true", help="verify cached checkpoints too (written ones always are)")
    args = ap.parse_args()

    src_file = os.path.join(SOURCE, "model.safetensors")
    if not os.path.exists(src_file):
        print(f"{src_file} missing: run scripts/setup.sh and scripts/convert_gguf_to_hf.py first", file=sys.stderr)
        return 1
    source_sha = sha256_of(src_file)
    source = read_safetensors(src_file)
    names = [n for n in args.variants.split(",") if n]
    for n in names:
        if n not in VARIANTS:
            print(f"unknown variant {n}", file=sys.stderr)
            return 2
    os.makedirs(args.out, exist_ok=True)
    golden_names = set((args.golden_variants or args.variants).split(",")) if args.golden else set()
    for name in names:
        out_dir = os.path.join(args.out, name)
        stamp = stamp_for(name, source_sha)
        stamp_path = os.path.join(out_dir, ".stamp")
        fresh = os.path.exists(stamp_path) and open(stamp_path, encoding="utf-8").read() == stamp
        if fresh and name not in golden_names and not args.verify:
            print(f"  {name}: cached", flush=True)
            continue
        if not fresh:
            write_variant(name, source, out_dir, stamp)
        deq = verify_variant(name, source, out_dir)
        if name in golden_names:
            sys.path.insert(0, os.path.join(REPO, "scripts"))
            import gen_golden_logits as golden
            import torch

            torch.manual_seed(0)
            torch.set_num_threads(1)
            torch.use_deterministic_algorithms(True)
            with open(os.path.join(REPO, "tests/data/prompts/prompts.json"), encoding="utf-8") as fh:
                prompts = json.load(fh)["prompts"]
            with tempfile.TemporaryDirectory() as tmp:
                write_dequantized_dir(source, deq, tmp)
                golden.run_model(f"smollm2_{name}", tmp, os.path.join(out_dir, "model.safetensors"), 1, prompts,
                                 os.path.join(REPO, "tests/data/golden"), args.full_logits_prompts, 64, torch)
            fix_golden_manifest(f"smollm2_{name}", name)
    return 0


def fix_golden_manifest(golden_name: str, variant: str) -> None:
    """gen_golden_logits records a temporary directory as hf_dir: name the checkpoint instead."""
    path = os.path.join(REPO, "tests/data/golden", golden_name, "manifest.json")
    with open(path, encoding="utf-8") as fh:
        m = json.load(fh)
    m["hf_dir"] = f"models/quantized-int/{variant} (dequantized to float32 by scripts/make_int_quantized_checkpoints.py)"
    m["source_gguf"] = None
    m["quantized_checkpoint"] = {"variant": variant, "scheme": VARIANTS[variant],
                                 "model_safetensors_sha256": m.pop("source_gguf_sha256")}
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(m, fh, indent=1, ensure_ascii=False)
        fh.write("\n")


if __name__ == "__main__":
    sys.exit(main())
