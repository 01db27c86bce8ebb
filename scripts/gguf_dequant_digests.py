#!/usr/bin/env python3
"""Reference digests for bit-exact dequantization tests.

For every tensor of each GGUF file given, dequantizes it with the `gguf` package
(`gguf.quants.dequantize`, pip install gguf numpy) and records the sha256 of the row-major
float32 little-endian bytes. Output: JSON {file_name: {tensor_name: {"type", "n", "sha256"}}}.

usage: scripts/gguf_dequant_digests.py OUT.json MODEL.gguf [MODEL.gguf ...]
"""
import hashlib
import json
import os
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def digests(path):
    out = {}
    for t in GGUFReader(path).tensors:
        x = np.ascontiguousarray(dequantize(t.data, t.tensor_type), dtype="<f4")
        out[t.name] = {
            "type": t.tensor_type.name,
            "n": int(x.size),
            "sha256": hashlib.sha256(x.tobytes()).hexdigest(),
        }
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    result = {os.path.basename(p): digests(p) for p in sys.argv[2:]}
    with open(sys.argv[1], "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
