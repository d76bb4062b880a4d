"""Small image files built byte by byte (no imaging library), in each format the API takes."""

from __future__ import annotations

import random
import struct
import zlib

# The well-known 1x1 transparent GIF.
GIF_1X1 = bytes.fromhex("47494638396101000100800000ffffff00000021f90401000000002c00000000010001000002024401003b")


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png(width: int = 2, height: int = 2, *, noise: bool = False, seed: int = 0) -> bytes:
    """A valid RGB PNG; with `noise`, random pixels stored uncompressed (large on purpose)."""
    rng = random.Random(seed)
    row = (lambda: rng.randbytes(3 * width)) if noise else (lambda: bytes(3 * width))
    raw = b"".join(b"\0" + row() for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(raw, 0 if noise else 9))
            + _chunk(b"IEND", b""))


def png_header(width: int, height: int) -> bytes:
    """A PNG whose header claims this size (the rest is a stub): for the pixel-limit rules."""
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + _chunk(b"IDAT", zlib.compress(b"\0")) + _chunk(b"IEND", b""))


def jpeg(width: int = 2, height: int = 2) -> bytes:
    """A baseline JPEG's segments: SOI, JFIF, a frame header with the size, a scan, EOI."""
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0"
    sof0 = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    sos = b"\xff\xda" + struct.pack(">H", 8) + b"\x01\x01\x00\x00\x3f\x00"
    return b"\xff\xd8" + app0 + sof0 + sos + b"\x12\x34\x56" + b"\xff\xd9"


def webp(width: int = 2, height: int = 2) -> bytes:
    """A lossless WebP header (VP8L) with the size."""
    bits = (width - 1) | (height - 1) << 14
    body = b"\x2f" + struct.pack("<I", bits) + b"\0\0\0"
    chunk = b"VP8L" + struct.pack("<I", len(body)) + body
    return b"RIFF" + struct.pack("<I", 4 + len(chunk)) + b"WEBP" + chunk
