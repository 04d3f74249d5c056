"""No compression: raw little-endian floats (the b = 32 baseline)."""

from __future__ import annotations

import numpy as np

from .base import Compressor


class NoCompression(Compressor):
    """Sends every component as a raw little-endian float (b = 32 or 64 bits per component).

    Body: n values of ``dtype``, little-endian. With ``dtype="float32"`` this is
    C-VFL's b = 32 baseline (Castiglia et al., 2022, §5: "each embedding
    component is a 32-bit float"); float32 inputs round-trip exactly, float64
    inputs are rounded to the nearest float32. ``dtype="float64"`` is lossless.

    Parameters
    ----------
    dtype : {"float32", "float64"}

    Examples
    --------
    >>> c = NoCompression()
    >>> p = c.encode([[1.5, -2.0, 0.25]])
    >>> len(p), c.decode(p)                   # 6 header bytes + 3 × 4
    (18, array([[ 1.5 , -2.  ,  0.25]]))
    """

    kind = 0
    name = "none"

    def __init__(self, dtype: str = "float32"):
        if dtype not in ("float32", "float64"):
            raise ValueError(f"NoCompression dtype must be 'float32' or 'float64', got {dtype!r}")
        self.dtype = dtype
        self.bits = 32 if dtype == "float32" else 64
        self._wire = np.dtype("<f4" if dtype == "float32" else "<f8")

    def _encode_body(self, X, shape, keys, scales):
        raw = X.astype(self._wire)
        return [row.tobytes() for row in raw]

    def _decode_body(self, bodies, shape, n, keys, scales):
        out = np.empty((len(bodies), n))
        for i, body in enumerate(bodies):
            if len(body) != n * self._wire.itemsize:
                raise ValueError(f"payload body holds {len(body)} bytes where {n} {self.dtype} values "
                                 f"need {n * self._wire.itemsize}")
            out[i] = np.frombuffer(body, dtype=self._wire)
        return out

    def _params(self) -> str:
        return f"dtype={self.dtype!r}"
