#!/usr/bin/env python3
"""Compares the tensors of two safetensors files (F32) without third-party packages.

usage: compare_weights.py A B [--rtol R] [--skip TEXT]
Prints how many tensors are bit-identical and the largest difference relative to each tensor's largest magnitude;
exits 1 when a tensor is missing or differs by more than R of its scale (default 0: bit-identical). Tensors whose name
holds TEXT are left out of the comparison (and said so).
"""
import json
import struct
import sys
from array import array


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            sys.exit(f"{path}: {name} is {info['dtype']}, not F32")
        b, e = info["data_offsets"]
        values = array("f")
        values.frombytes(data[base + b:base + e])
        if sys.byteorder != "little":
            values.byteswap()
        out[name] = values
    return out


def main():
    args = sys.argv[1:]
    rtol = 0.0
    if "--rtol" in args:
        i = args.index("--rtol")
        rtol = float(args[i + 1])
        del args[i:i + 2]
    skip = None
    if "--skip" in args:
        i = args.index("--skip")
        skip = args[i + 1]
        del args[i:i + 2]
    a, b = read(args[0]), read(args[1])
    if a.keys() != b.keys():
        sys.exit(f"different tensors: {sorted(a.keys() ^ b.keys())[:5]}")
    identical, worst, worst_name, skipped = 0, 0.0, "", 0
    for name in sorted(a):
        if skip and skip in name:
            skipped += 1
            continue
        x, y = a[name], b[name]
        if len(x) != len(y):
            sys.exit(f"{name}: {len(x)} against {len(y)} elements")
        if x == y:
            identical += 1
            continue
        scale = max(abs(v) for v in x) or 1.0
        diff = max(abs(p - q) for p, q in zip(x, y)) / scale
        if diff > worst:
            worst, worst_name = diff, name
    print(f"{identical} of {len(a) - skipped} tensors bit-identical"
          + (f" ({skipped} holding '{skip}' left out)" if skipped else "")
          + f"; largest difference {worst:.3g} of the tensor's scale" + (f" ({worst_name})" if worst_name else ""))
    if worst > rtol:
        sys.exit(1)


main()
