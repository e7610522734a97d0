#!/usr/bin/env python3
"""Prints how much of a PNG screenshot is not background: `png_stats.py FILE` -> JSON with width, height,
non_white_fraction and distinct_colors. Standard library only (zlib), 8-bit RGB/RGBA, non-interlaced."""
import json, struct, sys, zlib

def pixels(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit(f"{path}: not a PNG")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    if depth != 8 or color not in (2, 6) or interlace:
        sys.exit(f"{path}: unsupported PNG (depth {depth}, color type {color}, interlace {interlace})")
    bpp = 3 if color == 2 else 4
    raw, stride, prev, rows, i = zlib.decompress(idat), width * bpp, bytearray(width * bpp), [], 0
    for _ in range(height):
        f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], prev[x - bpp] if x >= bpp else 0
            if f == 1: line[x] = (line[x] + a) & 255
            elif f == 2: line[x] = (line[x] + b) & 255
            elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return width, height, bpp, rows

width, height, bpp, rows = pixels(sys.argv[1])
non_white, colors = 0, set()
for line in rows[::2]:
    for x in range(0, len(line), bpp * 2):
        rgb = bytes(line[x:x + 3])
        colors.add(rgb)
        non_white += rgb != b"\xff\xff\xff"
sampled = ((height + 1) // 2) * ((width + 1) // 2)
print(json.dumps({"width": width, "height": height, "non_white_fraction": non_white / sampled, "distinct_colors": len(colors)}))
