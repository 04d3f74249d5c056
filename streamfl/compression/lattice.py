"""2-D hexagonal lattice vector quantizer with subtractive dither (2^{2b} codewords per pair)."""

from __future__ import annotations

import math

import numpy as np

from .base import Compressor, dither_rng
from .bitpack import pack_codes, unpack_codes
from .scalar import check_bits, check_range

SQRT3 = math.sqrt(3.0)


def nearest_hex_point(P: np.ndarray, a: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Nearest point of the hexagonal lattice A₂ = {i·g₁ + j·g₂} to each row of ``P``.

    The lattice has generators g₁ = a·(1, 0), g₂ = a·(1/2, √3/2) (minimum
    distance a). It is the union of two rectangular lattices,
    R₀ = a·ℤ × a√3·ℤ and R₀ + a·(1/2, √3/2); the nearest point of each is found
    by rounding coordinates, and the closer of the two is the nearest point of
    A₂ (Conway & Sloane, *Sphere Packings*, ch. 20 §2). Ties go to R₀.

    Parameters
    ----------
    P : ndarray (..., 2)
    a : float
        Lattice scale (> 0).

    Returns
    -------
    (i, j) : int64 ndarrays of shape (...)
        The nearest point in *row form*: x = a·(i + (j mod 2)/2),
        y = a·(√3/2)·j, i.e. j is the row and i the position in it (odd rows
        shifted by a/2). See :func:`hex_point`.

    Examples
    --------
    >>> nearest_hex_point(np.array([[0.4, 0.0], [0.5, 0.8], [-0.1, -0.9]]))
    (array([ 0,  0, -1]), array([ 0,  1, -1]))
    """
    P = np.asarray(P, dtype=np.float64)
    x, y = P[..., 0] / a, P[..., 1] / (a * SQRT3)
    # coset R0: (k, l) -> (k, √3 l); coset R1: (k + 1/2, √3 (l + 1/2))
    k0, l0 = np.rint(x), np.rint(y)
    k1, l1 = np.rint(x - 0.5), np.rint(y - 0.5)
    d0 = (x - k0) ** 2 + 3.0 * (y - l0) ** 2
    d1 = (x - k1 - 0.5) ** 2 + 3.0 * (y - l1 - 0.5) ** 2
    use1 = d1 < d0
    i = np.where(use1, k1, k0).astype(np.int64)
    j = np.where(use1, 2 * l1 + 1, 2 * l0).astype(np.int64)
    return i, j


def hex_point(i: np.ndarray, j: np.ndarray, a: float = 1.0) -> np.ndarray:
    """Coordinates of the lattice point in row form (row j, position i): shape (..., 2)."""
    i, j = np.asarray(i), np.asarray(j)
    return np.stack([a * (i + 0.5 * np.mod(j, 2)), a * (SQRT3 / 2) * j], axis=-1)


class HexagonalLatticeQuantizer(Compressor):
    """Pairs of components to a finite set of 2^{2b} hexagonal-lattice points, with subtractive dither.

    C-VFL's 2-D vector quantizer (Castiglia et al., 2022, §4–5; lattice
    quantization with subtractive dither after Zamir & Feder 1996 and
    Shlezinger et al. 2021). Components are taken in pairs (x₂ₖ, x₂ₖ₊₁) of the
    flattened array; an odd count is padded with one component at the range's
    centre (its code is sent and counted, and dropped on decode).

    **Codebook.** L = 2^b rows of L points of the hexagonal lattice of scale a
    (row spacing a√3/2, odd rows shifted by a/2): exactly L² = 2^{2b}
    codewords, index j·L + i sent in 2b bits. The codebook is centred on the
    square [lo, hi]², and a is the smallest scale for which the Voronoi cells
    of the codewords cover the square grown by one lattice cell
    (a = (hi − lo) / min(L − 3/2, (L − 1)√3/2 − 1/√3)). Hence, for inputs in the
    square, the nearest *lattice* point of the dithered input is always a
    codeword: no overload, and nearest codeword = nearest lattice point.

    **Range handling** as :class:`UniformScalarQuantizer`: ``range=(lo, hi)``
    clips each component to [lo, hi] (saturation, never wrap-around);
    ``range=None`` scales by s = max |x| (float32 s in the payload, counted).

    **Dither.** u uniform on the lattice's Voronoi cell V (a hexagon, drawn
    from the shared key), Q(x) = c(x + u) − u. For x in the square the error
    Q(x) − x is uniform on −V, independent of x: E[Q(x)] = x, per-component
    error variance G(A₂)·vol(V) = (5/(36√3))·(√3/2)a² = 5a²/72.

    **Error bound.** ‖Q(x) − clip(x)‖₂ ≤ a/√3 per pair (the circumradius of V),
    with or without dither; per component |Δx| ≤ a/2, |Δy| ≤ a/√3.

    **Payload.** Header, then (``range=None`` only) the float32 scale, then
    ⌈n/2⌉ codes of 2b bits: ⌈⌈n/2⌉·2b/8⌉ bytes.

    Parameters
    ----------
    bits : int
        b in [1, 8] (2b bits per pair).
    range : (float, float) or None
    dither : bool

    Examples
    --------
    >>> q = HexagonalLatticeQuantizer(bits=2, range=(-1.0, 1.0), dither=False)
    >>> len(q.codebook()), round(q.scale(), 4)
    (16, 0.9897)
    >>> x = np.array([0.1, -0.2, 0.9, 0.7, -0.4])
    >>> y = q.decode(q.encode(x))
    >>> bool(np.all(np.hypot(*(np.append(y - x, 0).reshape(-1, 2).T)) <= q.scale() / np.sqrt(3)))
    True
    """

    kind = 2
    name = "lattice"

    def __init__(self, bits: int, range: tuple[float, float] | None = (-1.0, 1.0), dither: bool = True):
        self.bits = check_bits(bits, 1, 8, "lattice quantizer")
        self.range = check_range(range)
        self.dither = bool(dither)
        self.dithered = self.dither
        self.scaled = self.range is None
        self.side = 2 ** self.bits
        L = self.side
        self._unit = 1.0 / min(L - 1.5, (L - 1) * SQRT3 / 2 - 1 / SQRT3)   # a for a square of side 1

    def scale(self, width: float | None = None) -> float:
        """a, the lattice scale, for the fixed range (or for a range of the given width)."""
        if width is None:
            if self.range is None:
                raise ValueError("range=None: give the width 2·max|x| of the payload")
            width = self.range[1] - self.range[0]
        return width * self._unit

    def origin(self, lo, hi):
        """Position of codeword (0, 0), chosen so the codebook is centred on the square [lo, hi]²."""
        L, a = self.side, (hi - lo) * self._unit
        c = (lo + hi) / 2
        return c - (L - 0.5) * a / 2, c - (L - 1) * (SQRT3 / 2) * a / 2

    def codebook(self, lo: float | None = None, hi: float | None = None) -> np.ndarray:
        """All 2^{2b} codewords, shape (2^{2b}, 2), in index order j·L + i."""
        lo, hi = (lo, hi) if lo is not None else self.range
        L, a = self.side, (hi - lo) * self._unit
        j, i = np.divmod(np.arange(L * L), L)
        ox, oy = self.origin(lo, hi)
        return hex_point(i, j, a) + np.array([ox, oy])

    def _bounds(self, scales, m):
        if self.range is not None:
            return np.full((m, 1, 1), self.range[0]), np.full((m, 1, 1), self.range[1])
        s = np.asarray(scales, dtype=np.float64).reshape(m, 1, 1)
        return -s, s

    def _dither(self, keys, pairs: int) -> np.ndarray:
        """Dither in lattice units (a = 1): uniform on the Voronoi hexagon, shape (M, pairs, 2)."""
        out = np.empty((len(keys), pairs, 2))
        for r, k in enumerate(keys):
            c = dither_rng(k).random((pairs, 2))
            p = np.stack([c[:, 0] + 0.5 * c[:, 1], (SQRT3 / 2) * c[:, 1]], axis=-1)   # fundamental cell
            out[r] = p - hex_point(*nearest_hex_point(p))
        return out

    def _pairs(self, X, lo, hi):
        m, n = X.shape
        pairs = (n + 1) // 2
        P = np.empty((m, 2 * pairs))
        P[:, :n] = np.clip(X, lo[:, :, 0], hi[:, :, 0])
        if n % 2:
            P[:, n] = ((lo + hi) / 2)[:, 0, 0]
        return P.reshape(m, pairs, 2)

    def _encode_body(self, X, shape, keys, scales):
        m, n = X.shape
        lo, hi = self._bounds(scales, m)
        width = hi - lo
        a = np.where(width > 0, width * self._unit, 1.0)
        ox, oy = self.origin(lo, hi)
        P = self._pairs(X, lo, hi)
        Z = np.stack([(P[..., 0] - ox[..., 0]) / a[..., 0], (P[..., 1] - oy[..., 0]) / a[..., 0]], axis=-1)
        if self.dither:
            Z = Z + self._dither(keys, P.shape[1])
        i, j = nearest_hex_point(Z)
        L = self.side
        codes = np.clip(j, 0, L - 1) * L + np.clip(i, 0, L - 1)
        return [pack_codes(row, 2 * self.bits) for row in codes]

    def _decode_body(self, bodies, shape, n, keys, scales):
        m, pairs, L = len(bodies), (n + 1) // 2, self.side
        codes = np.stack([unpack_codes(b, pairs, 2 * self.bits) for b in bodies])
        j, i = np.divmod(codes, L)
        Z = hex_point(i, j)
        if self.dither:
            Z = Z - self._dither(keys, pairs)
        lo, hi = self._bounds(scales, m)
        width = hi - lo
        a = width * self._unit
        ox, oy = self.origin(lo, hi)
        Y = np.stack([ox[..., 0] + a[..., 0] * Z[..., 0], oy[..., 0] + a[..., 0] * Z[..., 1]], axis=-1)
        Y = np.where(width > 0, Y, 0.0)
        return Y.reshape(m, 2 * pairs)[:, :n]

    def _params(self) -> str:
        return f"bits={self.bits}, range={self.range}, dither={self.dither}"
