"""Top-k sparsification with k = P·b/32 (and the error-feedback wrapper lives in feedback.py)."""

from __future__ import annotations

import numpy as np

from .base import Compressor
from .bitpack import pack_codes, packed_size, unpack_codes
from .scalar import check_bits


class TopK(Compressor):
    """Keeps the k largest-magnitude components (whatever their sign), sends their indices and float32 values.

    C-VFL's top-k sparsifier (Castiglia et al., 2022, §5, after Lin et al.
    2018): with 32-bit components and b bits per component, k = P·b/32, here
    k = max(1, ⌊P·b/32⌋) (at most P), where P is the number of components of
    one sparsified vector.

    **Vectors.** ``axis=None`` sparsifies the whole flattened array
    (P = its size; a model update). ``axis=-1`` sparsifies each vector along
    the last axis on its own (P = shape[-1]; a mini-batch of embeddings,
    one top-k per sample, as C-VFL's per-embedding compressor C_m).

    **Ties.** Among equal magnitudes the lower index is kept (stable sort on
    −|x|): k = 2 on [3, −5, 3, 3, 1] keeps −5 (index 1) and the 3 at index 0.

    **Payload.** Header, then for each vector its k indices in ascending order,
    ⌈log₂ P⌉ bits each (all vectors' indices packed together), then all kept
    values as little-endian float32: ⌈R·k·⌈log₂P⌉/8⌉ + 4·R·k bytes for R
    vectors. The indices are real cost, so top-k's bytes exceed P·b/8.

    Not dithered, not biased-corrected: the decoded array is the input with
    all but k components per vector set to 0 (values rounded to float32).

    Parameters
    ----------
    bits : int
        b in [1, 32].
    axis : None or -1

    Examples
    --------
    >>> t = TopK(bits=16)                       # k = ⌊5·16/32⌋ = 2
    >>> t.decode(t.encode([3.0, -5.0, 3.0, 3.0, 1.0]))
    array([ 3., -5.,  0.,  0.,  0.])
    >>> len(t.encode(np.ones(1000)))            # k = 500: 6 header + ⌈500·10/8⌉ + 4·500 bytes
    2631
    """

    kind = 3
    name = "topk"

    def __init__(self, bits: int, axis: int | None = None):
        self.bits = check_bits(bits, 1, 32, "top-k")
        if axis not in (None, -1):
            raise ValueError(f"top-k axis must be None (whole array) or -1 (each last-axis vector), got {axis!r}")
        self.axis = axis

    def k(self, p: int) -> int:
        """Components kept out of a vector of P = ``p`` components: max(1, ⌊P·b/32⌋), at most P."""
        return min(p, max(1, (p * self.bits) // 32))

    def _layout(self, shape, n):
        p = (shape[-1] if shape else 1) if self.axis == -1 else n
        rows = n // p if p else 0
        return rows, p, self.k(p) if p else 0

    def _encode_body(self, X, shape, keys, scales):
        m, n = X.shape
        rows, p, k = self._layout(shape, n)
        if k == 0:
            return [b""] * m
        V = X.reshape(m * rows, p)
        keep = np.sort(np.argsort(-np.abs(V), axis=1, kind="stable")[:, :k], axis=1)
        vals = np.take_along_axis(V, keep, axis=1).astype("<f4")
        keep, vals = keep.reshape(m, rows * k), vals.reshape(m, rows * k)
        ib = (p - 1).bit_length()
        return [pack_codes(keep[r], ib) + vals[r].tobytes() for r in range(m)]

    def _decode_body(self, bodies, shape, n, keys, scales):
        m = len(bodies)
        rows, p, k = self._layout(shape, n)
        out = np.zeros((m, rows, p))
        if k == 0:
            return out.reshape(m, n)
        ib = (p - 1).bit_length()
        head = packed_size(rows * k, ib)
        for r, body in enumerate(bodies):
            if len(body) != head + 4 * rows * k:
                raise ValueError(f"payload body holds {len(body)} bytes where {rows}×{k} indices and "
                                 f"values need {head + 4 * rows * k}")
            idx = unpack_codes(body[:head], rows * k, ib).reshape(rows, k)
            if idx.size and idx.max() >= p:
                raise ValueError(f"payload holds index {int(idx.max())} outside a vector of {p} components")
            vals = np.frombuffer(body[head:], dtype="<f4").reshape(rows, k)
            np.put_along_axis(out[r], idx, vals, axis=1)
        return out.reshape(m, n)

    def _params(self) -> str:
        return f"bits={self.bits}, axis={self.axis}"
