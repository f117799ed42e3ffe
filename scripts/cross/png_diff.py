#!/usr/bin/env python3
"""Compares two 8-bit PNGs pixel by pixel (the decoded samples, not the compressed bytes, which any encoder change
alters): prints "equal", or the largest difference of one sample and how many samples differ. Exit 0 when the sizes
match, 1 otherwise. Standard library only (zlib): non-interlaced 8-bit gray, gray+alpha, RGB and RGBA."""
import struct
import sys
import zlib


def decode(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit(f"{path}: not a PNG")
    pos, idat, head = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            head = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, color, _, _, interlace = head
    channels = {0: 1, 2: 3, 4: 2, 6: 4}.get(color)
    if depth != 8 or channels is None or interlace:
        sys.exit(f"{path}: only 8-bit non-interlaced gray/RGB(A) PNGs")
    raw, bpp, stride = zlib.decompress(idat), channels, w * channels
    out, prev = bytearray(), bytearray(stride)
    for y in range(h):
        f, row = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):  # the PNG filters: none, sub, up, average, Paeth
            a = row[i - bpp] if i >= bpp else 0
            b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
            if f == 1:
                row[i] = (row[i] + a) & 255
            elif f == 2:
                row[i] = (row[i] + b) & 255
            elif f == 3:
                row[i] = (row[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                row[i] = (row[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out += row
        prev = row
    return (w, h, channels), out


(sa, a), (sb, b) = decode(sys.argv[1]), decode(sys.argv[2])
if sa != sb:
    print(f"different sizes: {sa} and {sb}")
    sys.exit(1)
diffs = [abs(x - y) for x, y in zip(a, b) if x != y]
print("equal" if not diffs else f"largest difference {max(diffs)} of 255 in one sample; {len(diffs)} of {len(a)} samples differ")
