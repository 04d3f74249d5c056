"""Compressors by name, for configs and command lines."""

from __future__ import annotations

from .base import Compressor
from .identity import NoCompression
from .lattice import HexagonalLatticeQuantizer
from .scalar import UniformScalarQuantizer
from .topk import TopK

KINDS = ("none", "scalar", "lattice", "topk")


def make_compressor(kind: str, bits: int = 32, *, range=(-1.0, 1.0), dither: bool = True,
                    axis: int | None = None) -> Compressor:
    """The compressor named ``kind`` with b = ``bits``.

    ``kind="none"`` or ``bits=32`` gives :class:`NoCompression` (float32), the
    b = 32 baseline, whatever the kind. ``range`` and ``dither`` apply to the
    quantizers (``range=None``: scale by max |x|), ``axis`` to top-k.

    Raises
    ------
    ValueError
        If ``kind`` is not one of ``none``, ``scalar``, ``lattice``, ``topk``.

    >>> make_compressor("lattice", 3)
    HexagonalLatticeQuantizer(bits=3, range=(-1.0, 1.0), dither=True)
    >>> make_compressor("topk", 32)
    NoCompression(dtype='float32')
    """
    if kind not in KINDS:
        raise ValueError(f"compressor must be one of {', '.join(KINDS)}; got {kind!r}")
    if kind == "none" or bits == 32:
        return NoCompression("float32")
    if kind == "scalar":
        return UniformScalarQuantizer(bits, range=range, dither=dither)
    if kind == "lattice":
        return HexagonalLatticeQuantizer(bits, range=range, dither=dither)
    return TopK(bits, axis=axis)
