#!/usr/bin/env python3
"""Write tests/data/quant/fp8_golden.json: PyTorch's float8_e4m3fn and float8_e5m2 casts, the
oracle of src/quant/fp8.cpp (quant_fp8_test).

    python3 scripts/gen_fp8_golden.py

Per format: the float32 bit pattern of all 256 codes (torch's FP8 -> float32), and torch's code
for a set of float32 inputs inside the finite range (every code's value, every midpoint between
neighbouring codes, i.e. the ties that round to even, points just either side of each midpoint,
and random values over all binades). Inputs beyond the largest finite value are left out: there
torch's cast overflows (NaN / inf) where Kvasir's quantizers saturate, documented in fp8.h.
"""

import json
import os

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "tests", "data", "quant", "fp8_golden.json")


def bits(t: torch.Tensor) -> list[int]:
    return [int(v) for v in t.to(torch.float32).contiguous().view(torch.int32).numpy().astype(np.uint32)]


def one_format(dtype: torch.dtype, max_finite: float) -> dict:
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype)
    values = codes.to(torch.float32)
    finite = values[torch.isfinite(values)]
    pos = torch.unique(finite[finite >= 0]).sort().values
    mids = (pos[1:] + pos[:-1]) / 2  # exact in float32: neighbours differ in few bits
    inputs = [pos, mids, torch.nextafter(mids, torch.full_like(mids, 1e9)), torch.nextafter(mids, torch.zeros_like(mids))]
    gen = torch.Generator().manual_seed(0)
    rnd = torch.exp2(torch.rand(2000, generator=gen) * 40 - 25) * (1 + torch.rand(2000, generator=gen))
    inputs.append(rnd[rnd < max_finite])
    x = torch.cat(inputs)
    x = torch.cat([x, -x])
    x = x[x.abs() <= max_finite]
    encoded = x.to(dtype).view(torch.uint8).to(torch.int32)
    return {
        "decode_f32_bits": bits(values),
        "encode_inputs_f32_bits": bits(x),
        "encode_codes": [int(c) for c in encoded],
    }


def main() -> None:
    out = {
        "torch_version": torch.__version__,
        "e4m3fn": one_format(torch.float8_e4m3fn, 448.0),
        "e5m2": one_format(torch.float8_e5m2, 57344.0),
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as fh:
        json.dump(out, fh, separators=(",", ":"))
        fh.write("\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
