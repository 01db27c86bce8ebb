#!/usr/bin/env python3
"""Test vectors for every block format gguf-py can dequantize.

Random blocks (fixed seed) whose f16 scale fields are set to finite values, ordinary and extreme
(f16 max, subnormal, negative, zero); records the block bytes (hex) and the sha256 of
`gguf.quants.dequantize` output as float32 little-endian. pip install gguf numpy.

Given quantized GGUF files (llama-quantize output), also records real blocks: for each IQ1 /
IQ2 / IQ3 / TQ type found, blocks from the start and the middle of its first tensor, under
the key "real:TYPE".

usage: scripts/quant_block_vectors.py OUT.json [QUANTIZED.gguf ...]
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
# Drawn after the types above, so their vectors stay as they were.
NEW_F16_FIELDS = {
    T.IQ2_XXS: [0], T.IQ2_XS: [0], T.IQ2_S: [0], T.IQ3_XXS: [0], T.IQ3_S: [0], T.IQ1_S: [0],
    T.IQ1_M: [], T.TQ1_0: [52], T.TQ2_0: [64],
}
REAL_TYPES = list(NEW_F16_FIELDS)
REAL_BLOCKS = 6
SCALES = [65504.0, -65504.0, 6e-8, -6e-8, 0.0, 1.0, -0.5, 3.1e-5]
N_BLOCKS = 12


def random_blocks(rng, ty, fields):
    bs, ts = GGML_QUANT_SIZES[ty]
    blocks = rng.integers(0, 256, size=(N_BLOCKS, ts), dtype=np.uint8)
    for i in range(N_BLOCKS):
        v = SCALES[i % len(SCALES)] if i % 2 else rng.normal() * 0.05
        d = np.array([v], dtype="<f2").view(np.uint16)[0]
        for f in fields:
            blocks[i, f:f + 2] = np.array([d], dtype="<u2").view(np.uint8)
        if ty == T.IQ1_M:
            # The f16 scale is the top nibbles of the four u16 scale words.
            sc = blocks[i, 48:56].copy().view("<u2")
            sc = (sc & 0x0FFF) | (((d >> np.array([0, 4, 8, 12])) & 0xF) << 12).astype("<u2")
            blocks[i, 48:56] = sc.astype("<u2").view(np.uint8)
    return blocks.tobytes()


def real_blocks(path):
    """REAL_BLOCKS blocks from the start and from the middle of the first tensor of each type."""
    from gguf import GGUFReader
    out = {}
    for t in GGUFReader(path).tensors:
        ty = t.tensor_type
        if ty not in REAL_TYPES or f"real:{ty.name}" in out:
            continue
        ts = GGML_QUANT_SIZES[ty][1]
        raw = np.asarray(t.data, dtype=np.uint8).reshape(-1, ts)
        mid = raw.shape[0] // 2
        out[f"real:{ty.name}"] = np.concatenate([raw[:REAL_BLOCKS], raw[mid:mid + REAL_BLOCKS]]).tobytes()
    return out


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
    for ty, fields in NEW_F16_FIELDS.items():
        out[ty.name] = random_blocks(rng, ty, fields)
    for path in sys.argv[2:]:
        out.update(real_blocks(path))

    result = {}
    for name, raw in out.items():
        ty = T[name.removeprefix("real:")]
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
