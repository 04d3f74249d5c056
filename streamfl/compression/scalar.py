"""Uniform scalar quantizer with 2^b levels and subtractive dither."""

from __future__ import annotations

import numpy as np

from .base import Compressor, dither_rng
from .bitpack import pack_codes, unpack_codes


def check_range(range_) -> tuple[float, float] | None:
    """Validate a quantizer's ``range`` argument: (lo, hi) with lo < hi, both finite, or None."""
    if range_ is None:
        return None
    try:
        lo, hi = (float(v) for v in range_)
    except (TypeError, ValueError):
        raise ValueError(f"range must be (lo, hi) or None (scale by max |x|), got {range_!r}") from None
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise ValueError(f"range must satisfy lo < hi with finite bounds, got {range_!r}")
    return lo, hi


def check_bits(bits, low: int, high: int, name: str) -> int:
    """``bits`` as an int in [low, high], or ValueError naming the compressor (``name``) and the value."""
    if not isinstance(bits, (int, np.integer)) or not low <= bits <= high:
        raise ValueError(f"{name} bits must be an integer in [{low}, {high}], got {bits!r}")
    return int(bits)


class UniformScalarQuantizer(Compressor):
    """Each component to one of L = 2^b evenly spaced levels, with optional subtractive dither.

    Levels are lo + i·Δ, i = 0..L−1, with Δ = (hi − lo)/(L − 1): both ends of
    the range are levels, so the range's own maximum maps to the top level.

    **Range handling.**

    * ``range=(lo, hi)`` (fixed; not sent): values are first *clipped* to
      [lo, hi]; outside values saturate at the end levels, they never wrap.
      Suits bounded embeddings (tanh: (−1, 1); sigmoid: (0, 1)).
    * ``range=None`` (scale by max): per payload s = max |x| (rounded up to
      float32) and the range is [−s, s]; s travels in the payload as 4 bytes
      and counts in its length. Suits unbounded arrays (model parameters,
      updates).

    **Dither** (``dither=True``; Wannamaker 1997, as C-VFL §5 uses it): the
    encoder adds u ~ U[−Δ/2, Δ/2) to each component before rounding, the
    decoder subtracts the same u (drawn from the shared key; see
    :func:`~streamfl.compression.dither_key`). Then, for every x in [lo, hi],
    Q(x) − x is uniform on [−Δ/2, Δ/2] and independent of x: E[Q(x)] = x
    (unbiased), and Var = Δ²/12. No level is ever overloaded: x + u stays
    within half a step of [lo, hi].

    **Error bound.** |Q(x) − clip(x, lo, hi)| ≤ Δ/2 for every component, with
    or without dither.

    **Payload.** Header, then (``range=None`` only) the float32 scale, then n
    codes of b bits packed MSB first: ⌈n·b/8⌉ bytes.

    Parameters
    ----------
    bits : int
        b in [1, 16].
    range : (float, float) or None
        (lo, hi), or None to scale each payload by its max |x|.
    dither : bool
        Subtractive dither (needs a key on encode and decode).

    Raises
    ------
    ValueError
        On bad parameters; on encode, on NaN/inf input or a missing dither key.

    Examples
    --------
    >>> q = UniformScalarQuantizer(bits=2, range=(-1.0, 1.0), dither=False)
    >>> q.decode(q.encode([1.5, -3.0, 1.0, 0.3]))          # levels −1, −1/3, 1/3, 1
    array([ 1.        , -1.        ,  1.        ,  0.33333333])
    >>> len(q.encode(np.zeros(100)))                        # 5 header bytes + 100·2/8
    30
    """

    kind = 1
    name = "scalar"

    def __init__(self, bits: int, range: tuple[float, float] | None = (-1.0, 1.0), dither: bool = True):
        self.bits = check_bits(bits, 1, 16, "scalar quantizer")
        self.range = check_range(range)
        self.dither = bool(dither)
        self.dithered = self.dither
        self.scaled = self.range is None
        self.levels = 2 ** self.bits

    def bounds(self, scales: np.ndarray | None, m: int) -> tuple[np.ndarray, np.ndarray]:
        """lo and hi per row, shape (m, 1)."""
        if self.range is not None:
            return np.full((m, 1), self.range[0]), np.full((m, 1), self.range[1])
        s = np.asarray(scales, dtype=np.float64).reshape(m, 1)
        return -s, s

    def _dither(self, keys, n: int) -> np.ndarray:
        """u/Δ ∈ [−1/2, 1/2), shape (M, n): one generator per sender key."""
        return np.stack([dither_rng(k).random(n) - 0.5 for k in keys]) if keys else np.zeros((0, n))

    def _encode_body(self, X, shape, keys, scales):
        m, n = X.shape
        lo, hi = self.bounds(scales, m)
        step = (hi - lo) / (self.levels - 1)
        safe = np.where(step > 0, step, 1.0)
        v = (np.clip(X, lo, hi) - lo) / safe
        if self.dither:
            v = v + self._dither(keys, n)
        codes = np.clip(np.floor(v + 0.5), 0, self.levels - 1).astype(np.int64)
        return [pack_codes(row, self.bits) for row in codes]

    def _decode_body(self, bodies, shape, n, keys, scales):
        m = len(bodies)
        codes = np.stack([unpack_codes(b, n, self.bits) for b in bodies]).astype(np.float64)
        lo, hi = self.bounds(scales, m)
        step = (hi - lo) / (self.levels - 1)
        if self.dither:
            codes = codes - self._dither(keys, n)
        return np.where(step > 0, lo + codes * step, 0.0)

    def step(self, scale: float | None = None) -> float:
        """Δ, the distance between levels (for ``range=None``, of a payload with max |x| = ``scale``)."""
        lo, hi = self.range if self.range is not None else (-scale, scale)
        return (hi - lo) / (self.levels - 1)

    def _params(self) -> str:
        return f"bits={self.bits}, range={self.range}, dither={self.dither}"
