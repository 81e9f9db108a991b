#!/usr/bin/env python3
"""Checks that a PNG is a picture, not a blank page: decodes it with the standard library
(zlib + struct; 8-bit grey, RGB, grey+alpha or RGBA, not interlaced: what Chromium's
--screenshot writes) and requires at least MIN_COLOURS distinct colours and MIN_INK of the
pixels not white.

    scripts/check-png.py FILE.png [MIN_COLOURS [MIN_INK]]    defaults 16 and 0.02

Exit 0 with a one-line summary when it passes; 1 with the reason when it does not."""

import struct
import sys
import zlib

CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}  # colour type -> samples per pixel


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def decode(path):
    """(width, height, channels, rows of bytes)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG (bad signature)")
    pos, idat, header = 8, [], None
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    if header is None:
        raise ValueError("no IHDR chunk")
    width, height, depth, ctype, _, _, interlace = header
    if depth != 8 or ctype not in CHANNELS or interlace != 0:
        raise ValueError(f"unsupported PNG: depth {depth}, colour type {ctype}, interlace {interlace}")
    ch = CHANNELS[ctype]
    raw = zlib.decompress(b"".join(idat))
    stride = width * ch
    rows, prev = [], bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        ftype, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            a = line[i - ch] if i >= ch else 0
            b = prev[i]
            c = prev[i - ch] if i >= ch else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 0xFF
            elif ftype == 2:
                line[i] = (line[i] + b) & 0xFF
            elif ftype == 3:
                line[i] = (line[i] + ((a + b) >> 1)) & 0xFF
            elif ftype == 4:
                line[i] = (line[i] + paeth(a, b, c)) & 0xFF
            elif ftype != 0:
                raise ValueError(f"bad filter type {ftype} in row {y}")
        rows.append(bytes(line))
        prev = line
    return width, height, ch, rows


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    path = sys.argv[1]
    min_colours = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    min_ink = float(sys.argv[3]) if len(sys.argv) > 3 else 0.02
    try:
        width, height, ch, rows = decode(path)
    except (OSError, ValueError, zlib.error) as e:
        print(f"{path}: {e}")
        return 1
    colour_ch = 1 if ch <= 2 else 3
    white = b"\xff" * colour_ch
    colours, ink = set(), 0
    for row in rows:
        for x in range(0, len(row), ch):
            px = row[x : x + colour_ch]
            colours.add(px)
            if px != white:
                ink += 1
    share = ink / max(1, width * height)
    summary = f"{path}: {width}x{height}, {len(colours)} colours, {share:.1%} not white"
    if len(colours) < min_colours or share < min_ink:
        print(f"{summary}: looks blank (need {min_colours} colours and {min_ink:.0%} not white)")
        return 1
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
