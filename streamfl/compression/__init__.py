"""Compressors with exact bytes-on-the-wire accounting (C-VFL embeddings, horizontal model updates).

One interface (:class:`Compressor`): ``encode(x, key) -> bytes`` returns the
payload that goes on the wire and ``decode(payload, key) -> ndarray`` inverts
it; a payload's cost is ``len(payload) * 8`` bits, header included.
``encode_batch`` encodes M senders' arrays in one vectorised pass.

* :class:`NoCompression` — raw float32 (b = 32) or float64
* :class:`UniformScalarQuantizer` — 2^b levels, subtractive dither
* :class:`HexagonalLatticeQuantizer` — 2-D hexagonal lattice, 2^{2b} codewords per pair, subtractive dither
* :class:`TopK` — the k = P·b/32 largest magnitudes: indices + float32 values
* :class:`ErrorFeedback` — sender memory e ← (x + e) − sent around any compressor

Horizontal model updates of M clients at once, each client's own payload and dither key:

>>> import numpy as np
>>> W = np.random.default_rng(0).normal(size=(8, 10, 1))          # (M, d, K) client updates
>>> q = UniformScalarQuantizer(bits=4, range=None)                 # scale by max |x|: 4 bytes of scale
>>> keys = [dither_key(0, m, 3) for m in range(8)]                 # (run seed, client, round)
>>> payloads = q.encode_batch(W, keys)
>>> len(payloads), len(payloads[0]), q.decode_batch(payloads, keys).shape   # 6 header + 4 + 10·4/8 bytes
(8, 15, (8, 10, 1))

Source: Castiglia, Das, Wang, Patterson, *Compressed-VFL* (ICML 2022), §4–5.
"""

from .base import Compressor, dither_key
from .build import make_compressor
from .feedback import ErrorFeedback
from .identity import NoCompression
from .lattice import HexagonalLatticeQuantizer, nearest_hex_point
from .scalar import UniformScalarQuantizer
from .topk import TopK

__all__ = ["Compressor", "ErrorFeedback", "HexagonalLatticeQuantizer", "NoCompression", "TopK",
           "UniformScalarQuantizer", "dither_key", "make_compressor", "nearest_hex_point"]
