"""Bit packing of fixed-width integer codes and unsigned varints (the payload's building blocks).

A compressor that sends ``n`` codes of ``b`` bits each writes exactly
⌈n·b/8⌉ bytes: codes are concatenated most-significant bit first and the last
byte is padded with zero bits. Shapes travel as unsigned LEB128 varints (one
byte per 7 bits of the value), so a dimension below 128 costs one byte.

>>> pack_codes(np.array([3, 0, 2]), 2).hex()      # 11 00 10 + 00 padding
'c8'
>>> unpack_codes(pack_codes(np.array([5, 1, 7]), 3), 3, 3)
array([5, 1, 7])
>>> encode_varint(300).hex(), decode_varint(encode_varint(300), 0)
('ac02', (300, 2))
"""

from __future__ import annotations

import numpy as np


def packed_size(n: int, bits: int) -> int:
    """Bytes taken by ``n`` codes of ``bits`` bits: ⌈n·bits/8⌉."""
    return (n * bits + 7) // 8


def pack_codes(codes: np.ndarray, bits: int) -> bytes:
    """Concatenate ``codes`` (shape (n,), integers in [0, 2**bits)) as ``bits``-bit words, MSB first.

    ``bits`` may be 0 (nothing is written: a single possible value needs no bits).
    Cost O(n·bits) time and memory.
    """
    codes = np.asarray(codes).ravel()
    if bits == 0 or codes.size == 0:
        return b""
    if bits == 8:
        return codes.astype(np.uint8).tobytes()
    shifts = np.arange(bits - 1, -1, -1, dtype=np.int64)
    planes = ((codes.astype(np.int64)[:, None] >> shifts) & 1).astype(np.uint8)
    return np.packbits(planes.ravel()).tobytes()


def unpack_codes(buf: bytes | memoryview, n: int, bits: int) -> np.ndarray:
    """Inverse of :func:`pack_codes`: ``n`` codes of ``bits`` bits, as int64 of shape (n,).

    Raises
    ------
    ValueError
        If ``buf`` does not hold exactly ⌈n·bits/8⌉ bytes.
    """
    need = packed_size(n, bits)
    if len(buf) != need:
        raise ValueError(f"payload body holds {len(buf)} bytes where {n} codes of {bits} bits need {need}")
    if bits == 0 or n == 0:
        return np.zeros(n, dtype=np.int64)
    raw = np.frombuffer(buf, dtype=np.uint8)
    if bits == 8:
        return raw.astype(np.int64)
    planes = np.unpackbits(raw, count=n * bits).reshape(n, bits).astype(np.int64)
    return planes @ (np.int64(1) << np.arange(bits - 1, -1, -1, dtype=np.int64))


def encode_varint(value: int) -> bytes:
    """Unsigned LEB128 encoding of a non-negative integer."""
    if value < 0:
        raise ValueError(f"varint must be non-negative, got {value}")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def decode_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Read one unsigned LEB128 integer at ``pos``; returns (value, next position).

    Raises
    ------
    ValueError
        If the buffer ends inside the varint.
    """
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("payload truncated inside its shape header")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
