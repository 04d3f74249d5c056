"""The compressor interface: ``encode`` returns the bytes that go on the wire, ``decode`` inverts it.

Every payload starts with the same small header, so a payload is
self-describing and its length *is* its cost (bits on the wire =
``len(payload) * 8``, header included):

====== ======================================================================
bytes  content
====== ======================================================================
1      format version (1)
1      compressor kind (low 7 bits; see each class's ``kind``) | 0x80 when a
       scale travels in the body (``range=None`` quantizers)
1      b, the compressor's bits per component
1      ndim of the encoded array
varint each dimension (unsigned LEB128: one byte per dimension below 128)
====== ======================================================================

The body that follows is compressor-specific (see each class). Protocol
parameters that are not in the payload — a fixed quantization range, top-k's
axis — are configuration that sender and receiver share (the same
config file), exactly as the run seed is.

**Decoded arrays** have the encoded shape and dtype float64 (lossless for
float32 inputs sent by :class:`~streamfl.compression.NoCompression`).

**Dither keys.** Subtractive dither needs the *same* pseudo-random dither at
the encoder and the decoder, and it is never sent. Both sides derive it from a
key both know: a tuple of non-negative integers, by convention
``(run seed, sender id, round)`` (:func:`dither_key`), fed to numpy's
``SeedSequence``. A key must be used for one payload only: reusing it makes
the quantization errors of two payloads equal instead of independent.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, Sequence

import numpy as np

from .bitpack import decode_varint, encode_varint

FORMAT_VERSION = 1
SCALED_FLAG = 0x80

Key = tuple[int, ...] | None


def dither_key(seed: int, sender: int, round: int, *extra: int) -> tuple[int, ...]:
    """The dither key ``(seed, sender, round, *extra)`` shared by a payload's encoder and decoder.

    ``seed`` is the run seed (in the config both sides read), ``sender`` the
    sender's id (C-VFL: 0 = server, 1..M = parties), ``round`` the
    communication round; ``extra`` distinguishes several payloads of one sender
    in one round. All must be non-negative integers.

    >>> dither_key(7, 2, 15)
    (7, 2, 15)
    """
    return check_key((seed, sender, round, *extra))


def check_key(key) -> tuple[int, ...]:
    """``key`` as a tuple of non-negative ints (any length ≥ 1), or ValueError."""
    if not isinstance(key, (tuple, list)) or not key or any(
            not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 0 for k in key):
        raise ValueError(f"a dither key is a tuple of non-negative integers, got {key!r}")
    return tuple(int(k) for k in key)


def dither_rng(key: Key) -> np.random.Generator:
    """The generator both sides build from ``key`` (numpy ``SeedSequence``; PCG64)."""
    if key is None:
        raise ValueError("this compressor uses subtractive dither and needs a dither key "
                         "(e.g. dither_key(seed, sender, round)) on both encode and decode")
    return np.random.default_rng(np.random.SeedSequence(list(check_key(key))))


def write_header(kind: int, bits: int, shape: tuple[int, ...], scaled: bool) -> bytes:
    """The common payload header (see the module docstring)."""
    if len(shape) > 255:
        raise ValueError(f"arrays of more than 255 dimensions cannot be encoded (got {len(shape)})")
    head = bytes([FORMAT_VERSION, kind | (SCALED_FLAG if scaled else 0), bits, len(shape)])
    return head + b"".join(encode_varint(int(d)) for d in shape)


def read_header(payload: bytes | memoryview) -> tuple[int, int, tuple[int, ...], bool, int]:
    """Parse the header: (kind, bits, shape, scaled, body offset).

    Raises
    ------
    ValueError
        If the payload is too short or of another format version.
    """
    if len(payload) < 4:
        raise ValueError(f"payload of {len(payload)} bytes is shorter than the 4-byte header")
    if payload[0] != FORMAT_VERSION:
        raise ValueError(f"payload format version {payload[0]} is not supported (expected {FORMAT_VERSION})")
    kind, bits, ndim = payload[1] & ~SCALED_FLAG & 0xFF, payload[2], payload[3]
    pos, shape = 4, []
    for _ in range(ndim):
        d, pos = decode_varint(payload, pos)
        shape.append(d)
    return kind, bits, tuple(shape), bool(payload[1] & SCALED_FLAG), pos


def as_rows(x, name: str = "x") -> tuple[np.ndarray, tuple[int, ...]]:
    """``x`` as float64 with its shape; refuses non-finite values (they cannot be quantized)."""
    arr = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise ValueError(f"{name} holds {bad} non-finite value(s) (NaN or inf); compressors need finite values")
    return arr, arr.shape


class Compressor(ABC):
    """One compressor C(·): ``encode(x, key) -> bytes`` and ``decode(payload, key) -> array``.

    Subclasses implement the vectorised core over a batch of M arrays of equal
    shape (clients, parties): :meth:`_encode_body` and :meth:`_decode_body`.
    :meth:`encode` is the batch of one; :meth:`encode_batch` encodes M arrays
    in one vectorised pass and still returns one payload per sender (each with
    its own header and dither key), since each sender sends its own message.

    Attributes
    ----------
    bits : int
        b, bits per component (top-k: k = P·b/32 values are kept).
    kind : int
        Compressor id written in the header; :meth:`decode` refuses a payload
        of another kind or another b.
    dithered : bool
        Whether encode/decode need a dither key.
    """

    kind: ClassVar[int]
    name: ClassVar[str]
    bits: int
    dithered: bool = False
    scaled: bool = False

    # -- public API -------------------------------------------------------
    def encode(self, x, key: Key = None) -> bytes:
        """The payload for the array ``x`` (any shape, finite floats); ``key`` seeds the dither.

        Raises
        ------
        ValueError
            If ``x`` holds NaN or inf, or a dithered compressor gets no key.
        """
        arr, shape = as_rows(x)
        return self._payloads(arr.reshape(1, -1), shape, [key])[0]

    def decode(self, payload: bytes, key: Key = None) -> np.ndarray:
        """The array that ``payload`` carries (float64, the encoded shape); ``key`` must equal the encoder's.

        Raises
        ------
        ValueError
            If the payload is malformed, truncated, made by another kind of compressor or another b,
            or carries a scale that is not a finite number ≥ 0.
        """
        return self.decode_batch([payload], [key])[0]

    def encode_batch(self, X, keys: Sequence[Key] | None = None) -> list[bytes]:
        """One payload per row of ``X`` (shape (M, ...)): M senders' arrays encoded in one vectorised pass.

        ``keys`` holds one dither key per sender (None for undithered compressors).
        """
        arr, shape = as_rows(X, "X")
        if arr.ndim < 1:
            raise ValueError("encode_batch needs an array of shape (M, ...)")
        keys = [None] * arr.shape[0] if keys is None else list(keys)
        if len(keys) != arr.shape[0]:
            raise ValueError(f"encode_batch got {len(keys)} keys for {arr.shape[0]} arrays")
        return self._payloads(arr.reshape(arr.shape[0], -1), shape[1:], keys)

    def decode_batch(self, payloads: Sequence[bytes], keys: Sequence[Key] | None = None) -> np.ndarray:
        """Decode M payloads of equal shape at once; returns shape (M, ...)."""
        keys = [None] * len(payloads) if keys is None else list(keys)
        if len(keys) != len(payloads):
            raise ValueError(f"decode_batch got {len(keys)} keys for {len(payloads)} payloads")
        shape, bodies, scales = None, [], []
        for p in payloads:
            kind, bits, shp, scaled, pos = read_header(p)
            if kind != self.kind or bits != self.bits:
                raise ValueError(f"payload was encoded by compressor kind {kind} with b={bits}; "
                                 f"this decoder is {self.name} (kind {self.kind}) with b={self.bits}")
            if scaled != self.scaled:
                raise ValueError(f"payload {'carries' if scaled else 'lacks'} a scale; this decoder's "
                                 f"range setting expects {'one' if self.scaled else 'none'}")
            if shape is not None and shp != shape:
                raise ValueError(f"decode_batch needs payloads of one shape, got {shape} and {shp}")
            shape = shp
            body = memoryview(p)[pos:]
            if scaled:
                if len(body) < 4:
                    raise ValueError("payload truncated before its scale")
                scale = float(np.frombuffer(body[:4], dtype="<f4")[0])
                if not (np.isfinite(scale) and scale >= 0):       # an encoder only writes max |x| ≥ 0
                    raise ValueError(f"payload carries the scale {scale}; a scale is a finite max |x| ≥ 0")
                scales.append(scale)
                body = body[4:]
            bodies.append(body)
        if shape is None:
            return np.zeros((0,))
        n = int(np.prod(shape, dtype=np.int64))
        out = self._decode_body(bodies, shape, n, keys, np.array(scales) if self.scaled else None)
        return out.reshape((len(payloads),) + shape)

    # -- for subclasses ---------------------------------------------------
    def _payloads(self, X: np.ndarray, shape: tuple[int, ...], keys: list[Key]) -> list[bytes]:
        header = write_header(self.kind, self.bits, shape, self.scaled)
        scales = None
        if self.scaled:
            scales = _scale_of(X)
        bodies = self._encode_body(X, shape, keys, scales)
        if scales is None:
            return [header + b for b in bodies]
        return [header + np.float32(s).astype("<f4").tobytes() + b for s, b in zip(scales, bodies)]

    @abstractmethod
    def _encode_body(self, X: np.ndarray, shape: tuple[int, ...], keys: list[Key],
                     scales: np.ndarray | None) -> list[bytes]:
        """Bodies for the M rows of ``X`` (shape (M, n)); ``scales`` (M,) float32 values when scaled."""

    @abstractmethod
    def _decode_body(self, bodies: list, shape: tuple[int, ...], n: int, keys: list[Key],
                     scales: np.ndarray | None) -> np.ndarray:
        """The decoded rows, shape (M, n)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._params()})"

    def _params(self) -> str:
        return f"bits={self.bits}"


def _scale_of(X: np.ndarray) -> np.ndarray:
    """Per-row max |x|, rounded *up* to float32 so the float32 scale in the payload covers every value."""
    s = np.abs(X).max(axis=1) if X.shape[1] else np.zeros(X.shape[0])
    s32 = s.astype(np.float32)
    low = s32.astype(np.float64) < s
    s32[low] = np.nextafter(s32[low], np.float32(np.inf))
    return s32
