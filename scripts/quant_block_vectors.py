#!/usr/bin/env python3
"""Test vectors for every block format gguf-py can dequantize.

Random blocks (fixed seed) whose f16 scale fields are set to finite values, ordinary and extreme
(f16 max, subnormal, negative, zero); records the block bytes (hex) and the sha256 of
`gguf.quants.dequantize` output as float32 little-endian. pip install gguf numpy.

usage: scripts/quant_block_vectors.py OUT.json
"""
import hashlib
import json
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

# Byte offsets of f16 fields inside one block (ggml-common.h).
F16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
    T.IQ4_NL: [0], T.IQ4_XS: [0], T.MXFP4: [],
}
SCALES = [65504.0, -65504.0, 6e-8, -6e-8, 0.0, 1.0, -0.5, 3.1e-5]
N_BLOCKS = 12


def main():
    rng = np.random.default_rng(1234)
    out = {}
    for ty, fields in F16_FIELDS.items():
        bs, ts = GGML_QUANT_SIZES[ty]
        blocks = rng.integers(0, 256, size=(N_BLOCKS, ts), dtype=np.uint8)
        for i in range(N_BLOCKS):
            for f in fields:
                v = SCALES[(i + f) % len(SCALES)] if i % 2 else rng.normal() * 0.05
                blocks[i, f:f + 2] = np.array([v], dtype="<f2").view(np.uint8)
        out[ty.name] = blocks.tobytes()
    vals = rng.normal(size=N_BLOCKS * 32).astype(np.float32)
    vals[:4] = [65504.0, -6e-8, 0.0, -0.0]
    out["F16"] = vals.astype("<f2").tobytes()
    out["BF16"] = (vals.view(np.uint32) >> 16).astype("<u2").tobytes()

    result = {}
    for name, raw in out.items():
        ty = T[name]
        data = np.frombuffer(raw, dtype=np.uint8)
        if ty == T.F16:
            y = dequantize(data.view(np.float16), ty)
        elif ty == T.BF16:
            y = dequantize(data.reshape(1, -1), ty)
        else:
            y = dequantize(data.reshape(1, -1), ty)
        y = np.ascontiguousarray(y, dtype="<f4").ravel()
        result[name] = {
            "bytes": raw.hex(),
            "n": int(y.size),
            "sha256": hashlib.sha256(y.tobytes()).hexdigest(),
        }
    with open(sys.argv[1], "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
