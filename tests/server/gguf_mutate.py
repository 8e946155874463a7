"""Malformed GGUF files for the startup tests: a minimal reader of the GGUF v3 layout (header,
metadata key/values, tensor infos) that records where each field lies, and mutations that
rewrite one field of a copy of a valid model. Test helper only (no dependency on `gguf`)."""
import os
import shutil
import struct

_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9


class Layout:
    """Offsets of the fields of a GGUF file (read from its first bytes)."""

    def __init__(self, path):
        with open(path, "rb") as f:
            self.data = f.read(64 << 20)
        self.pos = 0
        assert self._read(4) == b"GGUF"
        self.version_at = self.pos
        self.version = self._u32()
        self.tensor_count_at = self.pos
        self.tensor_count = self._u64()
        self.kv_count_at = self.pos
        self.kv_count = self._u64()
        self.kvs = {}  # key -> dict(key_len_at, type_at, value_at, type)
        for _ in range(self.kv_count):
            key_len_at = self.pos
            key = self._string()
            type_at = self.pos
            vtype = self._u32()
            value_at = self.pos
            entry = {"key_len_at": key_len_at, "type_at": type_at, "value_at": value_at, "type": vtype}
            if vtype == ARRAY:
                entry["elem_type"] = struct.unpack_from("<I", self.data, self.pos)[0]
                entry["count_at"] = self.pos + 4
            self._skip_value(vtype)
            self.kvs[key] = entry
        self.tensors = []  # dict(name, n_dims_at, dims_at, type_at, offset_at)
        # (the tensor infos end where the aligned data section begins: head_bytes below)
        for _ in range(self.tensor_count):
            name = self._string()
            n_dims_at = self.pos
            n_dims = self._u32()
            dims_at = self.pos
            dims = [self._u64() for _ in range(n_dims)]
            type_at = self.pos
            self._u32()
            offset_at = self.pos
            self._u64()
            self.tensors.append({"name": name, "n_dims_at": n_dims_at, "dims": dims, "dims_at": dims_at,
                                 "type_at": type_at, "offset_at": offset_at})
        self.head_bytes = self.pos

    def _read(self, n):
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def _u32(self):
        return struct.unpack("<I", self._read(4))[0]

    def _u64(self):
        return struct.unpack("<Q", self._read(8))[0]

    def _string(self):
        return self._read(self._u64()).decode("utf-8", errors="replace")

    def _skip_value(self, vtype):
        if vtype == STRING:
            self._string()
        elif vtype == ARRAY:
            et = self._u32()
            n = self._u64()
            for _ in range(n):
                self._skip_value(et)
        else:
            self.pos += struct.calcsize(_SCALAR[vtype])


def write_mutated(src, dst, patches, head_bytes=None):
    """Copies src to dst and writes each (offset, bytes) patch over the copy. With head_bytes,
    only that prefix is copied and the rest is a hole of zeros (same size, sparse): enough for
    every check made before tensor data is read, and ~100x faster than a full copy."""
    if head_bytes is None:
        shutil.copyfile(src, dst)
    else:
        with open(src, "rb") as f, open(dst, "wb") as g:
            g.write(f.read(head_bytes))
            g.truncate(os.path.getsize(src))
    with open(dst, "r+b") as f:
        for off, b in patches:
            f.seek(off)
            f.write(b)


def u32(v):
    return struct.pack("<I", v)


def u64(v):
    return struct.pack("<Q", v)


def scalar(entry, v):
    """v packed as the entry's own integer type."""
    return struct.pack(_SCALAR[entry["type"]], v)


def mutations(layout):
    """name -> list of (offset, bytes) patches; each makes a file the loader must refuse."""
    kv = layout.kvs
    first_key = next(iter(kv.values()))
    t0 = layout.tensors[0]
    arch = kv["general.architecture"]
    tokens = kv["tokenizer.ggml.tokens"]
    out = {
        "bad_magic": [(0, b"GGUX")],
        "version_1": [(layout.version_at, u32(1))],
        "version_999": [(layout.version_at, u32(999))],
        "tensor_count_huge": [(layout.tensor_count_at, u64(1 << 62))],
        "kv_count_huge": [(layout.kv_count_at, u64(1 << 62))],
        "key_length_huge": [(first_key["key_len_at"], u64(1 << 62))],
        "value_type_unknown": [(first_key["type_at"], u32(99))],
        "architecture_string_length_huge": [(arch["value_at"], u64(1 << 62))],
        "architecture_unknown": [(arch["value_at"] + 8, b"zzzzz"[:min(5, 8)])],
        "token_array_count_huge": [(tokens["count_at"], u64(1 << 61))],
        "token_array_elem_type_bad": [(tokens["count_at"] - 4, u32(77))],
        "tensor_n_dims_huge": [(t0["n_dims_at"], u32(1000))],
        "tensor_dim_overflow": [(t0["dims_at"], u64((1 << 63) + 1))],
        "tensor_dim_zero": [(t0["dims_at"], u64(0))],
        "tensor_type_unknown": [(t0["type_at"], u32(250))],
        "tensor_offset_past_end": [(t0["offset_at"], u64(1 << 40))],
        "tensor_offset_misaligned": [(t0["offset_at"], u64(3))],
        "tensor_shape_wrong": [(t0["dims_at"], u64(t0["dims"][0] // 2))],
    }
    if "general.alignment" in kv:
        out["alignment_zero"] = [(kv["general.alignment"]["value_at"], scalar(kv["general.alignment"], 0))]
        out["alignment_not_power_of_two"] = [(kv["general.alignment"]["value_at"], scalar(kv["general.alignment"], 24))]
    blk = next((k for k in kv if k.endswith(".block_count")), None)
    if blk is not None:
        out["block_count_huge"] = [(kv[blk]["value_at"], scalar(kv[blk], 1 << 30))]
        out["block_count_zero"] = [(kv[blk]["value_at"], scalar(kv[blk], 0))]
    emb = next((k for k in kv if k.endswith(".embedding_length")), None)
    if emb is not None:
        out["embedding_length_mismatch"] = [(kv[emb]["value_at"], scalar(kv[emb], 1000))]
    heads = next((k for k in kv if k.endswith(".attention.head_count")), None)
    if heads is not None:
        out["head_count_zero"] = [(kv[heads]["value_at"], scalar(kv[heads], 0))]
    if "tokenizer.ggml.eos_token_id" in kv:
        e = kv["tokenizer.ggml.eos_token_id"]
        out["eos_token_id_out_of_vocab"] = [(e["value_at"], scalar(e, 1 << 30))]
    voc = next((k for k in kv if k.endswith(".vocab_size")), None)
    if voc is not None:
        out["vocab_size_mismatch"] = [(kv[voc]["value_at"], scalar(kv[voc], 10))]
    if "tokenizer.ggml.model" in kv:
        out["tokenizer_model_unknown"] = [(kv["tokenizer.ggml.model"]["value_at"] + 8, b"zz")]
    # File bytes quoted in the error must come out escaped: a CR and an ANSI escape in the name.
    out["architecture_with_control_bytes"] = [(arch["value_at"] + 8, b"l\r\x1b[m"[:5])]
    if blk is not None:  # fewer layers than the file holds: the extra layer's weights name it
        out["block_count_below_the_weights"] = [(kv[blk]["value_at"], scalar(kv[blk], 1))]
    out.update(role_type_mutations(layout))
    return out


# Bytes per element of the GGML types a model file holds, and of the integer types (for the
# role sweep below: a mutation that fits the tensor's own bytes reaches the loader's role check,
# not its range or overlap checks).
_BYTES_PER_ELEMENT = {0: 4, 1: 2, 2: 18 / 32, 3: 20 / 32, 6: 22 / 32, 7: 24 / 32, 8: 34 / 32, 10: 84 / 256,
                      11: 110 / 256, 12: 144 / 256, 13: 176 / 256, 14: 210 / 256, 30: 2}
INTEGER_TYPES = {"i8": (24, 1), "i16": (25, 2), "i32": (26, 4)}


def role_type_mutations(layout):
    """"type_<t>_<tensor>" -> patches giving one tensor of every role in layer 0 (and the model's
    own tensors) an integer type, where it fits in the tensor's bytes. No weight may have one:
    each must be refused at load naming the tensor (issue 14: a norm or embedding of these
    types loaded and then aborted the server in dequantization)."""
    out = {}
    for t in layout.tensors:
        if t["name"].startswith("blk.") and not t["name"].startswith("blk.0."):
            continue
        old = struct.unpack_from("<I", layout.data, t["type_at"])[0]
        if old not in _BYTES_PER_ELEMENT:
            continue
        for tname, (tid, size) in INTEGER_TYPES.items():
            if size <= _BYTES_PER_ELEMENT[old]:
                out[f"type_{tname}_{t['name']}"] = [(t["type_at"], u32(tid))]
    return out


def size_of(path):
    return os.path.getsize(path)
